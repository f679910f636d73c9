package proxy

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http/httptest"
	"testing"
)

// A suspended sandbox is resumed only for a request the agent could
// accept: its access token, or a /files URL signed with it. A made-up
// ?signature= is neither.
func TestCarriesAccessToken(t *testing.T) {
	const token = "tok3n"
	sum := sha256.Sum256([]byte("/etc/hostname:read:user:" + token + ":99"))
	good := "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
	for _, c := range []struct {
		url, header string
		ok          bool
	}{
		{url: "/health", header: token, ok: true},
		{url: "/health", header: "", ok: false},
		{url: "/health", header: "tok3", ok: false},
		{url: "/files?path=/etc/hostname&username=user&signature_expiration=99&signature=" + good, ok: true},
		{url: "/files?path=/etc/hostname&username=user&signature_expiration=98&signature=" + good, ok: false},
		{url: "/files?path=/etc/hostname&username=user&signature=x", ok: false},
		// The agent checks a header first and ignores the signature then.
		{url: "/files?path=/etc/hostname&signature=x", header: token, ok: true},
		{url: "/files?path=/etc/hostname&username=user&signature_expiration=99&signature=" + good, header: "tok3", ok: false},
	} {
		r := httptest.NewRequest("GET", c.url, nil)
		r.Header.Set(headerAccessToken, c.header)
		if got := carriesAccessToken(r, token); got != c.ok {
			t.Errorf("%s with token %q: %v, want %v", c.url, c.header, got, c.ok)
		}
	}
	if !carriesAccessToken(httptest.NewRequest("GET", "/health", nil), "") {
		t.Error("a sandbox without an access token refused")
	}
}
