package agent

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-platform/space/internal/agent/envdversion"
)

// initRequest is the body of POST /init. Absent fields leave the current
// value unchanged; envVars are merged into the existing ones.
type initRequest struct {
	AccessToken    *string           `json:"accessToken"`
	EnvVars        map[string]string `json:"envVars"`
	DefaultUser    *string           `json:"defaultUser"`
	DefaultWorkdir *string           `json:"defaultWorkdir"`
	Hostname       *string           `json:"hostname"`
	Entropy        *string           `json:"entropy"`   // base64 bytes for /dev/urandom
	Timestamp      *string           `json:"timestamp"` // RFC 3339 wall clock after restore
	// Identity, when present, is written to run/space/identity.json under
	// the root: how processes restored into a new sandbox (a branch, a
	// copy of a snapshot) learn who they are now.
	Identity map[string]string `json:"identity"`
}

const maxInitBody = 1 << 20

// handleInit applies sandbox settings. It is authenticated by the CURRENT
// token when one is set, which is how the node re-keys a sandbox after a
// branch or restore: the new accessToken takes effect for every request
// after this one returns.
func (a *Agent) handleInit(w http.ResponseWriter, r *http.Request) {
	// Before any check, as envd does: whoever calls /init (the node, on
	// create and on every resume) learns the running agent's level, also
	// when the call fails.
	w.Header().Set(envdversion.Header, envdversion.Version)
	if !a.settings.tokenMatches(r.Header.Get(accessTokenHeader)) {
		writeJSONError(w, http.StatusUnauthorized, errBadToken)
		return
	}
	var req initRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxInitBody))
	if err := dec.Decode(&req); err != nil {
		writeJSONError(w, http.StatusBadRequest, fmt.Errorf("decode init body: %w", err))
		return
	}
	var entropy []byte
	if req.Entropy != nil && *req.Entropy != "" {
		var err error
		if entropy, err = decodeBase64(*req.Entropy); err != nil {
			writeJSONError(w, http.StatusBadRequest, fmt.Errorf("entropy: %w", err))
			return
		}
	}
	var clock time.Time
	if req.Timestamp != nil && *req.Timestamp != "" {
		var err error
		if clock, err = time.Parse(time.RFC3339Nano, *req.Timestamp); err != nil {
			writeJSONError(w, http.StatusBadRequest, fmt.Errorf("timestamp: %w", err))
			return
		}
	}

	a.settings.apply(req)
	if a.cfg.ApplySystemSettings {
		a.applySystemSettings(req.Hostname, entropy, clock)
	}
	if req.Identity != nil {
		if err := writeIdentity(filepath.Join(a.cfg.RootDir, "run", "space", "identity.json"), req.Identity); err != nil {
			writeJSONError(w, http.StatusInternalServerError, fmt.Errorf("identity file: %w", err))
			return
		}
	}
	a.log.Info("init applied", "token_changed", req.AccessToken != nil, "env_vars", len(req.EnvVars))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

func (s *settings) apply(req initRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.AccessToken != nil {
		s.accessToken = *req.AccessToken
	}
	for k, v := range req.EnvVars {
		s.envVars[k] = v
	}
	if req.DefaultUser != nil && *req.DefaultUser != "" {
		s.defaultUser = *req.DefaultUser
	}
	if req.DefaultWorkdir != nil && *req.DefaultWorkdir != "" {
		s.defaultWorkdir = *req.DefaultWorkdir
	}
}

// applySystemSettings is best effort: gVisor may refuse some of it (EPERM),
// and none of it is worth failing the re-key for.
func (a *Agent) applySystemSettings(hostname *string, entropy []byte, clock time.Time) {
	if hostname != nil && *hostname != "" {
		if err := unix.Sethostname([]byte(*hostname)); err != nil && !errors.Is(err, unix.EPERM) {
			a.log.Warn("set hostname", "err", err)
		}
		if err := mapHostname(filepath.Join(a.cfg.RootDir, "etc", "hosts"), *hostname); err != nil {
			a.log.Warn("map hostname in /etc/hosts", "err", err)
		}
		if err := pointResolver(filepath.Join(a.cfg.RootDir, "etc", "resolv.conf")); err != nil {
			a.log.Warn("point /etc/resolv.conf at the gateway", "err", err)
		}
	}
	if len(entropy) > 0 {
		if f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0); err == nil {
			_, _ = f.Write(entropy)
			_ = f.Close()
		}
	}
	// A restored snapshot resumes with the clock of the moment it was taken.
	if !clock.IsZero() && clock.After(time.Now()) {
		ts := unix.NsecToTimespec(clock.UnixNano())
		if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil && !errors.Is(err, unix.EPERM) {
			a.log.Warn("set clock", "err", err)
		}
	}
}

func decodeBase64(s string) ([]byte, error) {
	if b, err := base64.StdEncoding.DecodeString(s); err == nil {
		return b, nil
	}
	b, err := base64.RawStdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("invalid base64: %w", err)
	}
	return b, nil
}

// hostsMarker tags the /etc/hosts line the agent owns.
const hostsMarker = "# space: this sandbox"

// mapHostname makes the sandbox's own name resolve (sudo and many tools
// look it up), replacing the line an earlier identity left.
func mapHostname(path, hostname string) error {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var lines []string
	for _, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if line != "" && !strings.HasSuffix(line, hostsMarker) {
			lines = append(lines, line)
		}
	}
	lines = append(lines, "127.0.1.1\t"+hostname+" "+hostsMarker)
	tmp := path + ".space-tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// gatewayResolver is the sandbox's gateway (network.GatewayAddr), whose
// resolver answers by the sandbox's egress policy. DNS sent elsewhere is
// redirected there too, but a nameserver on loopback (or none: libc then
// asks 127.0.0.1) would never leave the sandbox.
const gatewayResolver = "169.254.0.22"

// pointResolver makes the gateway the only nameserver, keeping the file's
// other settings (search, options).
func pointResolver(path string) error {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	want := "nameserver " + gatewayResolver
	lines := []string{want}
	for _, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "nameserver" || line == "" || strings.HasPrefix(line, "# placeholder") {
			continue
		}
		lines = append(lines, line)
	}
	out := strings.Join(lines, "\n") + "\n"
	if string(data) == out {
		return nil
	}
	tmp := path + ".space-tmp"
	if err := os.WriteFile(tmp, []byte(out), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// writeIdentity replaces the identity file atomically. It is not synced:
// it describes the running sandbox, and the node writes it again after any
// restore.
func writeIdentity(path string, identity map[string]string) error {
	data, err := json.MarshalIndent(identity, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
