package e2b

import (
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"
)

// Pages cover every item once, and the token stays right when an item
// before it goes away.
func TestPage(t *testing.T) {
	base := time.Unix(1700000000, 0)
	var keys []pageKey
	for i := 0; i < 5; i++ {
		keys = append(keys, pageKey{base.Add(time.Duration(i) * time.Second), "id" + strconv.Itoa(i)})
	}
	w := httptest.NewRecorder()
	from, to, next, ok := page(w, keys, "", 2)
	if !ok || from != 0 || to != 2 || next == "" {
		t.Fatalf("first page: %d..%d next %q", from, to, next)
	}
	keys = keys[1:] // id0 deleted meanwhile
	from, to, next, _ = page(w, keys, next, 2)
	if keys[from].id != "id2" || to-from != 2 || next == "" {
		t.Fatalf("second page starts at %s (%d..%d)", keys[from].id, from, to)
	}
	from, to, next, _ = page(w, keys, next, 2)
	if keys[from].id != "id4" || to != len(keys) || next != "" {
		t.Fatalf("last page: %d..%d next %q", from, to, next)
	}
	if _, _, _, ok := page(httptest.NewRecorder(), keys, "!!", 2); ok {
		t.Fatal("a bad token was accepted")
	}
}

// The JS SDKs percent-encode metadata keys and values before URL-encoding
// the pairs; Python does not. Both decode to the same filter.
func TestMetadataFilter(t *testing.T) {
	for _, raw := range []string{
		url.Values{"suite": {"e2b@2.20 x"}}.Encode(),                                               // Python
		url.Values{url.QueryEscape("suite"): {url.PathEscape("e2b@2.20 x")}}.Encode(),              // JS
		url.Values{"suite": {"e2b@2.20 x"}, "other": {"1"}}.Encode() + "&" + url.Values{}.Encode(), // two keys
	} {
		md, ok := metadataFilter(httptest.NewRecorder(), url.Values{"metadata": {raw}})
		if !ok || md["suite"] != "e2b@2.20 x" {
			t.Errorf("metadata %q decoded to %v", raw, md)
		}
	}
}
