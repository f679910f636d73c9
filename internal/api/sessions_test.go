package api

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
)

// A session past the count bound is a 429, one past the size bounds a
// 400, both as JSON errors, whether the node answered in process or
// across the wire (the same sentinels).
func TestSessionBoundErrors(t *testing.T) {
	for err, want := range map[error]int{
		fmt.Errorf("node: %w: 64 running", nodeapi.ErrTooManySessions):                                      http.StatusTooManyRequests,
		nodeapi.SessionSpec{Cmd: []string{"x"}, Tag: string(make([]byte, nodeapi.MaxSessionTag+1))}.Check(): http.StatusBadRequest,
	} {
		rec := httptest.NewRecorder()
		(&Server{}).fail(rec, err)
		var body struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if jerr := json.Unmarshal(rec.Body.Bytes(), &body); jerr != nil || rec.Code != want || body.Code != want || body.Message == "" {
			t.Errorf("%v: %d %s, want %d", err, rec.Code, rec.Body, want)
		}
	}
}

// A listing of many sessions comes in pages of at most limit sessions
// and about sessionPageBytes of commands, each once, oldest first, and
// a page's cursor survives sessions forgotten meanwhile.
func TestSessionListingIsPaged(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var all []nodeapi.SessionInfo
	for i := range 250 {
		// Pairs started at the same instant: the id orders them.
		all = append(all, nodeapi.SessionInfo{ID: fmt.Sprintf("s%03d", 249-i), StartedAt: t0.Add(time.Duration(i/2) * time.Second),
			Spec: nodeapi.SessionSpec{Cmd: []string{"sh", "-c", strings.Repeat("x", 20<<10)}}})
	}
	rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	var seen []string
	var after *sessionCursor
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("the listing never ends")
		}
		page := sessionPage(slices.Clone(all), after, 40)
		body, _ := json.Marshal(page)
		if len(page.Sessions) > 40 || len(body) > sessionPageBytes+64<<10 {
			t.Fatalf("a page of %d sessions, %d bytes", len(page.Sessions), len(body))
		}
		for _, s := range page.Sessions {
			seen = append(seen, s.ID)
		}
		if page.NextCursor == "" {
			break
		}
		var err error
		if after, err = parseSessionCursor(page.NextCursor); err != nil {
			t.Fatal(err)
		}
		all = slices.DeleteFunc(all, func(s nodeapi.SessionInfo) bool { return s.ID == seen[0] }) // forgotten
	}
	if len(seen) != 250 || len(slices.Compact(slices.Clone(seen))) != 250 {
		t.Fatalf("%d sessions listed, %d of them different, want 250", len(seen), len(slices.Compact(slices.Clone(seen))))
	}
	for i := 0; i < len(seen); i += 2 {
		if want := fmt.Sprintf("s%03d", 248-i); seen[i] != want {
			t.Fatalf("listed %v..., want oldest first, then by id", seen[:i+1])
		}
	}
	if page := sessionPage(all, nil, 1000); len(page.Sessions) >= 250 || page.NextCursor == "" {
		t.Fatalf("%d sessions of 20 KiB commands in one page", len(page.Sessions))
	}
	for _, bad := range []string{"x", "!!!", base64.RawURLEncoding.EncodeToString([]byte("12")), base64.RawURLEncoding.EncodeToString([]byte("a.s1"))} {
		if _, err := parseSessionCursor(bad); err == nil {
			t.Errorf("cursor %q accepted", bad)
		}
	}
}
