package e2e

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The E2B tests replay the SDKs' wire requests (docs: the E2B protocol
// reference, §2 and §5) against the server's E2B API listener and sandbox
// proxy, to real sandboxes.

// e2bResponse is one answer of the E2B API or the proxy.
type e2bResponse struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the body into v, failing the test if it is not JSON.
func (r e2bResponse) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("response %d is not JSON: %v: %q", r.status, err, r.body)
	}
}

// wantError checks E2B's error shape: the status, and a non-empty JSON body
// whose integer code is the status and whose message says something.
func (r e2bResponse) wantError(t *testing.T, status int, messageContains string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	var e struct {
		Code    *int   `json:"code"`
		Message string `json:"message"`
	}
	r.json(t, &e)
	if e.Code == nil || *e.Code != status || e.Message == "" {
		t.Fatalf("error body %s: want {code: %d, message: non-empty}", r.body, status)
	}
	if !strings.Contains(e.Message, messageContains) {
		t.Fatalf("error message %q does not mention %q", e.Message, messageContains)
	}
}

// e2bRequest sends a request to the E2B API as the SDKs do (X-API-KEY and
// the metadata headers). body is sent verbatim when it is a string.
func e2bRequest(t *testing.T, method, path string, body any, header http.Header) e2bResponse {
	t.Helper()
	requireServer(t)
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case io.Reader:
		rd = b
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(testContext(t), method, env.srv.E2BURL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-KEY", env.srv.AdminKey)
	req.Header.Set("User-Agent", "e2b-python-sdk/2.21.1")
	req.Header.Set("lang", "python")
	req.Header.Set("publisher", "e2b")
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) e2bResponse {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", req.Method, req.URL, err)
	}
	return e2bResponse{status: resp.StatusCode, header: resp.Header, body: body}
}

// e2bSandbox is the Sandbox schema the SDKs read from create and connect.
type e2bSandbox struct {
	TemplateID      string  `json:"templateID"`
	SandboxID       string  `json:"sandboxID"`
	ClientID        string  `json:"clientID"`
	EnvdVersion     string  `json:"envdVersion"`
	EnvdAccessToken string  `json:"envdAccessToken"`
	Domain          *string `json:"domain"`
}

// e2bCreate creates a sandbox through POST /sandboxes with the Python SDK's
// body and deletes it when the test ends.
func e2bCreate(t *testing.T, template string, extra map[string]any) e2bSandbox {
	t.Helper()
	body := map[string]any{
		"templateID": template, "allow_internet_access": true, "autoPause": false,
		"envVars": map[string]string{}, "metadata": map[string]string{}, "secure": true, "timeout": 300,
	}
	for k, v := range extra {
		body[k] = v
	}
	resp := e2bRequest(t, http.MethodPost, "/sandboxes", body, nil)
	if resp.status != http.StatusCreated {
		t.Fatalf("create: status %d, want 201: %s", resp.status, resp.body)
	}
	var sb e2bSandbox
	resp.json(t, &sb)
	t.Cleanup(func() {
		req, _ := http.NewRequest(http.MethodDelete, env.srv.E2BURL()+"/sandboxes/"+sb.SandboxID, nil)
		req.Header.Set("X-API-KEY", env.srv.AdminKey)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	return sb
}

// envdHeaders are the headers the SDKs send with every envd request.
func envdHeaders(sb e2bSandbox, port string) http.Header {
	h := http.Header{}
	h.Set("E2b-Sandbox-Id", sb.SandboxID)
	h.Set("E2b-Sandbox-Port", port)
	h.Set("X-Access-Token", sb.EnvdAccessToken)
	h.Set("User-Agent", "e2b-python-sdk/2.21.1")
	return h
}

// proxyRequest sends a request to the sandbox proxy (E2B_SANDBOX_URL).
func proxyRequest(t *testing.T, method, path, contentType string, body io.Reader, header http.Header) e2bResponse {
	t.Helper()
	req, err := http.NewRequestWithContext(testContext(t), method, env.srv.ProxyURL()+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return do(t, req)
}

// envelope frames one Connect streaming message.
func envelope(flags byte, payload []byte) []byte {
	out := make([]byte, 5, 5+len(payload))
	out[0] = flags
	binary.BigEndian.PutUint32(out[1:], uint32(len(payload)))
	return append(out, payload...)
}

// connectMessage is one decoded envelope of a Connect stream.
type connectMessage struct {
	flags   byte
	payload map[string]any
	at      time.Duration // since the request was sent
}

// connectStream runs a Connect server-streaming RPC through the proxy, as
// the Python SDK frames it (pretty-printed JSON, identity encoding), and
// returns every envelope with the time it arrived.
func connectStream(t *testing.T, procedure string, message any, header http.Header) (int, []connectMessage) {
	t.Helper()
	payload, err := json.MarshalIndent(message, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(testContext(t), http.MethodPost, env.srv.ProxyURL()+procedure, bytes.NewReader(envelope(0, payload)))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Connect-Content-Encoding", "identity")
	if req.Header.Get("Connect-Timeout-Ms") == "" {
		req.Header.Set("Connect-Timeout-Ms", "60000")
	}
	req.Header.Set("Keepalive-Ping-Interval", "50")
	began := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", procedure, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, []connectMessage{{payload: map[string]any{"body": string(body)}}}
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/connect+json" {
		t.Fatalf("%s: content type %q", procedure, ct)
	}
	var out []connectMessage
	for {
		var prefix [5]byte
		if _, err := io.ReadFull(resp.Body, prefix[:]); err != nil {
			if err == io.EOF {
				return resp.StatusCode, out
			}
			t.Fatalf("%s: read envelope: %v", procedure, err)
		}
		data := make([]byte, binary.BigEndian.Uint32(prefix[1:]))
		if _, err := io.ReadFull(resp.Body, data); err != nil {
			t.Fatalf("%s: read envelope payload: %v", procedure, err)
		}
		m := connectMessage{flags: prefix[0], at: time.Since(began), payload: map[string]any{}}
		if err := json.Unmarshal(data, &m.payload); err != nil {
			t.Fatalf("%s: envelope is not JSON: %q", procedure, data)
		}
		out = append(out, m)
	}
}

// connectUnary runs a Connect unary RPC through the proxy.
func connectUnary(t *testing.T, procedure string, message any, header http.Header) e2bResponse {
	t.Helper()
	payload, err := json.Marshal(message)
	if err != nil {
		t.Fatal(err)
	}
	h := header.Clone()
	h.Set("Connect-Protocol-Version", "1")
	return proxyRequest(t, http.MethodPost, procedure, "application/json", bytes.NewReader(payload), h)
}
