package cli

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/space-platform/space/pkg/apiv1"
)

// secrets set sends stdin minus one trailing newline, and never prints
// the value.
func TestSecretsSetReadsStdin(t *testing.T) {
	var got []apiv1.SetSecretRequest
	useServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req apiv1.SetSecretRequest
		if r.Method != http.MethodPost || r.URL.Path != "/v1/secrets" || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, `{"code":400,"message":"bad"}`, http.StatusBadRequest)
			return
		}
		got = append(got, req)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(apiv1.Secret{Name: req.Name})
	}))
	for in, want := range map[string]string{
		"s3cret-value\n":   "s3cret-value",
		"s3cret-value\r\n": "s3cret-value",
		"two\nlines\n\n":   "two\nlines\n",
		"no-newline":       "no-newline",
	} {
		got = nil
		code, out, errOut := runMain(t, in, "secrets", "set", "TOKEN")
		if code != 0 || len(got) != 1 || got[0].Name != "TOKEN" || got[0].Value != want {
			t.Fatalf("stdin %q: code %d, sent %+v, stderr %q", in, code, got, errOut)
		}
		if strings.Contains(out+errOut, want) || !strings.Contains(errOut, "created secret TOKEN") {
			t.Errorf("stdin %q: output %q %q", in, out, errOut)
		}
	}
	if code, _, errOut := runMain(t, "", "secrets", "set", "TOKEN"); code != 1 || !strings.Contains(errOut, "no value") {
		t.Errorf("empty stdin: code %d, stderr %q", code, errOut)
	}
	if code, _, _ := runMain(t, "x", "secrets", "set"); code != 2 {
		t.Errorf("missing name: code %d, want a usage error", code)
	}
}
