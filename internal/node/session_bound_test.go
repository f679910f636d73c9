package node

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/agent/gen/processpb"
	"github.com/space-platform/space/internal/agent/gen/processpb/processpbconnect"
	"github.com/space-platform/space/internal/nodeapi"
)

// fakeProcesses is an agent's process service: "true" ends at once,
// anything else runs until the node lets go of its stream.
type fakeProcesses struct {
	processpbconnect.UnimplementedProcessHandler
	pid    atomic.Uint32
	starts atomic.Int32
	mu     sync.Mutex
	envs   []map[string]string
}

func (f *fakeProcesses) Start(ctx context.Context, req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) error {
	f.starts.Add(1)
	f.mu.Lock()
	f.envs = append(f.envs, req.Msg.GetProcess().GetEnvs())
	f.mu.Unlock()
	pid := 100 + f.pid.Add(1)
	if err := stream.Send(&processpb.StartResponse{Event: &processpb.ProcessEvent{
		Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: pid}}}}); err != nil {
		return err
	}
	if req.Msg.GetProcess().GetCmd() == "true" {
		return stream.Send(&processpb.StartResponse{Event: &processpb.ProcessEvent{
			Event: &processpb.ProcessEvent_End{End: &processpb.ProcessEvent_EndEvent{Exited: true}}}})
	}
	<-ctx.Done()
	return nil
}

// fakeAgentSandbox is a sandbox of n whose agent is fake, on loopback.
func fakeAgentSandbox(t *testing.T, n *Node) (*Sandbox, *fakeProcesses) {
	t.Helper()
	procs := &fakeProcesses{}
	_, h := processpbconnect.NewProcessHandler(procs)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	sb := n.newSandbox("aaaaaaaaaaaaaaaaaaaa", "tok")
	sb.Agent = &AgentConn{Process: processpbconnect.NewProcessClient(srv.Client(), srv.URL)}
	t.Cleanup(func() { sb.discardSessions("test over") })
	return sb, procs
}

// waitEnded waits until the node saw s end.
func waitEnded(t *testing.T, s *Session) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); s.EndedAt().IsZero(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("session %s never ended", s.ID)
		}
	}
}

// A sandbox keeps MaxSessions sessions: a new one makes room by
// forgetting the finished one that ended first, and with all of them
// running it is refused before the agent is asked.
func TestSessionsPerSandboxAreBounded(t *testing.T) {
	n := journalNode(t, 1<<10)
	n.cfg.MaxSessions = 3
	sb, procs := fakeAgentSandbox(t, n)
	ctx := context.Background()
	start := func(cmd string) *Session {
		t.Helper()
		s, err := sb.StartSession(ctx, SessionSpec{Cmd: []string{cmd}})
		if err != nil {
			t.Fatalf("start %s: %v", cmd, err)
		}
		return s
	}
	first := start("true")
	waitEnded(t, first)
	time.Sleep(2 * time.Millisecond) // a later end
	second := start("true")
	waitEnded(t, second)
	start("sleep")
	start("sleep") // forgets first
	if _, err := sb.Session(first.ID); !errors.Is(err, ErrNoSession) {
		t.Fatalf("the session that ended first is still kept (%v) past the bound", err)
	}
	if _, err := sb.Session(second.ID); err != nil {
		t.Fatalf("the session that ended later was forgotten first: %v", err)
	}
	start("sleep") // forgets second
	if got := len(sb.Sessions()); got != 3 {
		t.Fatalf("%d sessions kept, want 3", got)
	}
	asked := procs.starts.Load()
	_, err := sb.StartSession(ctx, SessionSpec{Cmd: []string{"sleep"}})
	if !errors.Is(err, ErrTooManySessions) {
		t.Fatalf("a fourth running session: %v, want ErrTooManySessions", err)
	}
	if procs.starts.Load() != asked {
		t.Fatal("the agent started a process the node then refused to keep")
	}
	if got := len(sb.Sessions()); got != 3 {
		t.Fatalf("%d sessions after the refusal, want 3", got)
	}
}

// A spec past the bounds is refused before the agent is asked, and what
// the node keeps of a session holds no environment.
func TestSessionSpecIsBoundedAndEnvNotKept(t *testing.T) {
	n := journalNode(t, 1<<10)
	sb, procs := fakeAgentSandbox(t, n)
	ctx := context.Background()
	for name, spec := range map[string]SessionSpec{
		"tag":       {Cmd: []string{"sleep"}, Tag: strings.Repeat("t", nodeapi.MaxSessionTag+1)},
		"cmd bytes": {Cmd: []string{"sh", "-c", strings.Repeat("x", nodeapi.MaxSessionCmdBytes)}},
		"args":      {Cmd: make([]string, nodeapi.MaxSessionArgs+1)},
		"cwd":       {Cmd: []string{"sleep"}, Cwd: "/" + strings.Repeat("d", nodeapi.MaxSessionPath)},
	} {
		spec.Cmd[0] = "sleep"
		if _, err := sb.StartSession(ctx, spec); !errors.Is(err, nodeapi.ErrSessionSpec) {
			t.Errorf("%s past the bound: %v, want ErrSessionSpec", name, err)
		}
	}
	if procs.starts.Load() != 0 {
		t.Fatal("the agent was asked to start a command past the bounds")
	}
	s, err := sb.StartSession(ctx, SessionSpec{Cmd: []string{"sleep"}, Env: map[string]string{"BIG": "value"},
		Tag: strings.Repeat("t", nodeapi.MaxSessionTag)})
	if err != nil {
		t.Fatal(err)
	}
	if procs.envs[0]["BIG"] != "value" {
		t.Fatalf("the process got env %v", procs.envs[0])
	}
	if s.Spec.Env != nil || s.info().Spec.Env != nil {
		t.Fatalf("the node keeps the session's env: %v", s.Spec.Env)
	}
}
