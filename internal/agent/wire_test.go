package agent

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"testing"
)

// TestStartWireShapeAsSentByE2BSDK speaks the Connect streaming protocol by
// hand, the way the Python SDK does (pretty-printed JSON in one envelope),
// and checks the exact response framing the SDKs depend on.
func TestStartWireShapeAsSentByE2BSDK(t *testing.T) {
	env := newTestEnv(t)
	payload := []byte("{\n  \"process\": {\n    \"cmd\": \"/bin/sh\",\n    \"args\": [\n      \"-c\",\n      \"echo hi\"\n    ]\n  },\n  \"stdin\": false,\n  \"unknownField\": 1\n}")
	var body bytes.Buffer
	body.WriteByte(0)
	_ = binary.Write(&body, binary.BigEndian, uint32(len(payload)))
	body.Write(payload)

	req, _ := http.NewRequest(http.MethodPost, env.baseURL+"/process.Process/Start", &body)
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Connect-Content-Encoding", "identity")
	req.Header.Set("Connect-Timeout-Ms", "60000")
	req.Header.Set("Keepalive-Ping-Interval", "50")
	req.Header.Set(accessTokenHeader, testToken)
	resp, err := env.h1Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}

	type envelope struct {
		flag    byte
		payload map[string]any
	}
	var envs []envelope
	for {
		var prefix [5]byte
		if _, err := io.ReadFull(resp.Body, prefix[:]); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("read envelope prefix: %v", err)
		}
		msg := make([]byte, binary.BigEndian.Uint32(prefix[1:]))
		if _, err := io.ReadFull(resp.Body, msg); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(msg, &m); err != nil {
			t.Fatalf("envelope payload %q: %v", msg, err)
		}
		envs = append(envs, envelope{prefix[0], m})
	}
	if len(envs) < 4 {
		t.Fatalf("only %d envelopes: %v", len(envs), envs)
	}
	event := func(i int) map[string]any { return envs[i].payload["event"].(map[string]any) }
	if start, ok := event(0)["start"].(map[string]any); !ok || start["pid"] == nil || envs[0].flag != 0 {
		t.Errorf("first envelope %v", envs[0])
	}
	if data := event(1)["data"].(map[string]any); data["stdout"] != "aGkK" { // base64("hi\n")
		t.Errorf("data envelope %v", envs[1])
	}
	end, ok := event(len(envs) - 2)["end"].(map[string]any)
	if !ok || end["exited"] != true || end["status"] != "exit status 0" {
		t.Errorf("end envelope %v", envs[len(envs)-2])
	}
	if _, has := end["exitCode"]; has {
		t.Errorf("zero exitCode must be omitted: %v", end)
	}
	last := envs[len(envs)-1]
	if last.flag != 0x02 || len(last.payload) != 0 && last.payload["error"] != nil {
		t.Errorf("last envelope flag %#x payload %v, want end-stream {}", last.flag, last.payload)
	}
}

// TestRPCWithoutTokenIsUnauthenticatedOnTheWire checks the unary error
// shape: non-200 status with {"code":"unauthenticated"}.
func TestRPCWithoutTokenIsUnauthenticatedOnTheWire(t *testing.T) {
	env := newTestEnv(t)
	req, _ := http.NewRequest(http.MethodPost, env.baseURL+"/filesystem.Filesystem/Stat", bytes.NewReader([]byte(`{"path":"/"}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := env.h1Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct{ Code string }
	_ = json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != http.StatusUnauthorized || e.Code != "unauthenticated" {
		t.Errorf("status %d code %q", resp.StatusCode, e.Code)
	}
}
