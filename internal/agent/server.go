package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/agent/envdversion"
	"github.com/space-platform/space/internal/agent/gen/filesystempb/filesystempbconnect"
	"github.com/space-platform/space/internal/agent/gen/processpb/processpbconnect"
)

// tokenEnvVar passes the initial access token from the runtime to the agent.
// The agent removes it from its own environment so that children started
// later never inherit the secret.
const tokenEnvVar = "SPACE_AGENT_TOKEN"

// Agent is the in-sandbox daemon. Create it with New, serve it with Run or
// Serve, and release it with Close.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	settings *settings
	users    *userDB
	reaper   *reaper
	procs    *processTable
	watchers *watcherRegistry
	baseEnv  map[string]string
	mux      *http.ServeMux

	stop     context.CancelFunc
	bgDone   sync.WaitGroup
	closeOne sync.Once
}

// New builds an Agent and starts its background loops (child reaper,
// retention janitor). It reads SPACE_AGENT_TOKEN (or the descriptor
// HideInitialToken passed it on) as the initial access token when
// cfg.AccessToken is empty and unsets it from the process environment.
func New(cfg Config) (*Agent, error) {
	cfg = cfg.withDefaults()
	tok, ok, err := initialToken()
	if err != nil {
		return nil, err
	}
	if ok && cfg.AccessToken == "" {
		cfg.AccessToken = tok
	}

	ctx, stop := context.WithCancel(context.Background())
	a := &Agent{
		cfg:      cfg,
		log:      cfg.Logger,
		settings: newSettings(cfg),
		users:    newUserDB(cfg.RootDir),
		baseEnv:  environMap(os.Environ()),
		stop:     stop,
	}
	a.reaper = newReaper(cfg.ReapAllChildren, a.log)
	a.procs = newProcessTable(cfg.ExitedRetention, cfg.MaxExitedRetained)
	a.watchers = newWatcherRegistry()

	a.bgDone.Add(2)
	go func() { defer a.bgDone.Done(); a.reaper.run(ctx) }()
	go func() { defer a.bgDone.Done(); a.procs.runJanitor(ctx) }()

	a.mux = a.routes()
	return a, nil
}

func (a *Agent) routes() *http.ServeMux {
	mux := http.NewServeMux()
	opts := []connect.HandlerOption{connect.WithInterceptors(&authInterceptor{settings: a.settings})}
	mux.Handle(processpbconnect.NewProcessHandler(&processService{agent: a}, opts...))
	mux.Handle(filesystempbconnect.NewFilesystemHandler(&filesystemService{agent: a}, opts...))

	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		// The SDKs read only the status; the version header (a space
		// addition, envd sends it on /init alone) tells an operator or a
		// probe which agent answers without needing the token.
		w.Header().Set(envdversion.Header, envdversion.Version)
		if envdversion.Build != "" {
			w.Header().Set(envdversion.BuildHeader, envdversion.Build)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /files", a.handleFileDownload)
	mux.HandleFunc("POST /files", a.handleFileUpload)
	mux.HandleFunc("GET /list", a.handleList)
	mux.HandleFunc("POST /init", a.handleInit)
	mux.Handle("GET /envs", a.requireToken(http.HandlerFunc(a.handleEnvs)))
	mux.Handle("GET /metrics", a.requireToken(http.HandlerFunc(a.handleMetrics)))
	return mux
}

// Handler returns the agent's HTTP handler (all routes, auth included). To
// get h2c as well, serve it with an http.Server from NewHTTPServer.
func (a *Agent) Handler() http.Handler { return a.mux }

// NewHTTPServer returns a server for the agent's handler that speaks
// HTTP/1.1 and unencrypted HTTP/2 with prior knowledge (h2c) on the same
// port. The node keeps one h2c connection per sandbox and multiplexes every
// call, including long-lived streams, on it; hence the high stream limit and
// the pings that detect a dead peer.
func (a *Agent) NewHTTPServer() *http.Server {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           a.mux,
		Protocols:         protocols,
		ReadHeaderTimeout: 30 * time.Second,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: 4096,
			SendPingTimeout:      30 * time.Second,
			PingTimeout:          15 * time.Second,
		},
		ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelDebug),
	}
}

// Serve serves on ln until ctx is cancelled, then shuts the server down
// gracefully (bounded by Config.ShutdownGrace).
func (a *Agent) Serve(ctx context.Context, ln net.Listener) error {
	srv := a.NewHTTPServer()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		// Streams (process output, watches) may be long-lived; cut them.
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// Run listens on Config.ListenAddr (or serves Config.Listener) until ctx
// is cancelled or a termination signal arrives (when Config.ForwardSignals
// is set; the signal is forwarded to all started process groups first,
// and with Config.OutlivesSignals it only is forwarded).
func (a *Agent) Run(ctx context.Context) error {
	ln := a.cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", a.cfg.ListenAddr); err != nil {
			return fmt.Errorf("listen on %s: %w", a.cfg.ListenAddr, err)
		}
	}
	a.log.Info("agent listening", "addr", ln.Addr().String(), "pid", os.Getpid())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if a.cfg.ForwardSignals {
		go a.forwardSignals(ctx, cancel)
	}
	return a.Serve(ctx, ln)
}

// Close stops the background loops. Started processes keep running.
func (a *Agent) Close() error {
	a.closeOne.Do(func() {
		a.stop()
		a.watchers.closeAll()
		a.bgDone.Wait()
	})
	return nil
}

// environMap turns KEY=VALUE pairs into a map; later duplicates win.
func environMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			m[k] = v
		}
	}
	return m
}
