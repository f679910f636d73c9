package proxy

import (
	"strings"
	"testing"
)

// A sandbox with a traffic token takes requests to its ports only with
// exactly that token; one without is public.
func TestTrafficRefusal(t *testing.T) {
	for _, c := range []struct {
		want, token, refusal string
	}{
		{want: "", token: "", refusal: ""},
		{want: "", token: "anything", refusal: ""},
		{want: "s3cret", token: "s3cret", refusal: ""},
		{want: "s3cret", token: "", refusal: "only with its traffic access token"},
		{want: "s3cret", token: "s3cre", refusal: "does not match"},
		{want: "s3cret", token: "s3cret ", refusal: "does not match"},
	} {
		got := trafficRefusal(c.want, c.token, "abc123")
		if (c.refusal == "") != (got == "") || !strings.Contains(got, c.refusal) {
			t.Errorf("token %q for %q: got %q, want %q", c.token, c.want, got, c.refusal)
		}
	}
}
