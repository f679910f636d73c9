package redteam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// listingBound is the largest listing response the section takes as
// bounded: a page of a listing, not all of it (the one listing
// was 151 MB). The runner reads no more of a response than this.
const listingBound = 8 << 20

// tagBomb is the size of the tag the tag check sends.
const tagBomb = 1 << 20

// floodTagSizes are the tag sizes tried, largest first, for the flood's
// sessions once the 1 MiB tag is refused: the flood uses the largest the
// server takes, as an attacker would.
var floodTagSizes = []int{256 << 10, 64 << 10, 16 << 10, 4 << 10, 1 << 10, 256, 0}

// errBudget: the run's upload budget (--max-upload-mib) is spent.
var errBudget = errors.New("the run's upload budget is spent")

func sessionFloodAttack() ServerAttack {
	return ServerAttack{
		Name: "session flood", Timeout: 4 * time.Minute,
		Checks: []Check{
			{Name: "session tag of 1 MiB", Expected: "400: the tag is over its bound",
				Escape: "the server keeping a tag of any size a client sends, per session"},
			{Name: "sessions per sandbox", Expected: "429 past a bound, or the oldest finished sessions forgotten",
				Escape: "the server keeping every session a client starts"},
			{Name: "session listing", Expected: "no listing response over 8 MiB (paged)",
				Escape: "one listing making the server build a response of every session at once"},
		},
		Run: func(ctx context.Context, t *tenant) []Verdict { return t.sessionFlood(ctx) },
	}
}

// flood is what the session flood did.
type flood struct {
	sandbox string
	tagSize int
	made    int
	// refused is the 429 that ended the flood, stop what else did.
	refused string
	stop    string
	err     error
}

func (t *tenant) sessionFlood(ctx context.Context) []Verdict {
	sb, err := t.newSandbox(ctx, 0)
	if err != nil {
		v := failed("create the sandbox for the flood: %v", err)
		return []Verdict{v, v, v}
	}
	f := &flood{sandbox: sb.ID}
	tagV := t.bigTag(ctx, f)
	if tagV.Outcome == Errored {
		return []Verdict{tagV, tagV, tagV}
	}
	if f.tagSize != tagBomb {
		if v, ok := t.largestTag(ctx, f); !ok {
			return []Verdict{tagV, v, v}
		}
	}
	t.logf("flooding sandbox %s with sessions of %d-byte tags", sb.ID, f.tagSize)
	for f.made < t.cfg.MaxSessions && f.refused == "" && f.stop == "" && f.err == nil {
		switch err := t.newSession(ctx, f, f.tagSize); {
		case err == nil:
		case ctx.Err() != nil:
			f.stop = "the attack's time ran out"
		case statusOf(err) == http.StatusTooManyRequests:
			f.refused = err.Error()
		case errors.Is(err, errBudget):
			f.stop = "the upload budget (--max-upload-mib) ran out"
		default:
			f.err = err
		}
	}
	if f.stop == "" && f.refused == "" && f.err == nil {
		f.stop = "the run's bound (--max-sessions) was reached"
	}
	// The listing is the flood's last word, also when its time ran out.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.scaled(time.Minute))
	defer cancel()
	l := t.walkSessions(lctx, sb.ID)
	countV := judgeCount(f, l)
	return []Verdict{tagV, countV, judgeListing(f, l, tagV, countV)}
}

// newSession starts a session that exits at once, with a tag of size
// bytes, unique by the flood's count.
func (t *tenant) newSession(ctx context.Context, f *flood, size int) error {
	if !t.spend(int64(size)) {
		return errBudget
	}
	tag := fmt.Sprintf("rt-%06d-", f.made)
	if size < len(tag) {
		tag = tag[:size]
	} else {
		tag += strings.Repeat("x", size-len(tag))
	}
	if _, err := t.api.CreateSession(ctx, f.sandbox, apiv1.CreateSessionRequest{Cmd: []string{"true"}, Tag: tag}); err != nil {
		return err
	}
	f.made++
	return nil
}

// bigTag sends a session with a 1 MiB tag: held if refused with 400 (the
// tag's bound) or 413 (the request's: a 1 MiB tag fills a JSON body).
func (t *tenant) bigTag(ctx context.Context, f *flood) Verdict {
	switch err := t.newSession(ctx, f, tagBomb); {
	case err == nil:
		f.tagSize = tagBomb
		return broke("a session with a tag of %s was created", mib(tagBomb))
	case refusedAsTooLarge(err):
		return held("%d: %s", statusOf(err), err)
	case errors.Is(err, errBudget):
		return skipped("the run's upload budget (--max-upload-mib) is less than the 1 MiB tag")
	default:
		return failed("create a session with a 1 MiB tag: %v", err)
	}
}

// refusedAsTooLarge reports whether the server refused a request for its
// size: 400 for a field past its bound, 413 for a body past the server's.
func refusedAsTooLarge(err error) bool {
	status := statusOf(err)
	return status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge
}

// largestTag finds the largest tag size the server takes; false with
// the verdict of the count when it takes none.
func (t *tenant) largestTag(ctx context.Context, f *flood) (Verdict, bool) {
	var last error
	for _, size := range floodTagSizes {
		err := t.newSession(ctx, f, size)
		if err == nil {
			f.tagSize = size
			return Verdict{}, true
		}
		if !refusedAsTooLarge(err) {
			return failed("create a session with a %d-byte tag: %v", size, err), false
		}
		last = err
	}
	return failed("no session could be created, with any tag: %v", last), false
}

// listing is what walking a session listing found.
type listing struct {
	pages   int
	largest int64
	entries int
	// over: a response passed listingBound (its read stopped there).
	over bool
	err  error
}

// walkSessions reads the sandbox's session listing page by page
// (next_cursor → ?cursor=), reading no response past listingBound.
func (t *tenant) walkSessions(ctx context.Context, id string) listing {
	var l listing
	cursor := ""
	for l.pages < 10000 {
		path := "/v1/sandboxes/" + url.PathEscape(id) + "/sessions"
		if cursor != "" {
			path += "?cursor=" + url.QueryEscape(cursor)
		}
		body, n, err := t.raw.measure(ctx, path, listingBound)
		l.pages++
		l.largest = max(l.largest, n)
		if err != nil {
			l.err = err
			return l
		}
		if body == nil {
			l.over = true
			return l
		}
		var page struct {
			Sessions   []json.RawMessage `json:"sessions"`
			NextCursor string            `json:"next_cursor"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			l.err = fmt.Errorf("session listing page %d: %w", l.pages, err)
			return l
		}
		l.entries += len(page.Sessions)
		if page.NextCursor == "" {
			return l
		}
		cursor = page.NextCursor
	}
	l.err = fmt.Errorf("the session listing did not end after %d pages", l.pages)
	return l
}

// judgeCount: held if a create answered 429 within the run's bound, or
// the server keeps fewer sessions than were made (the oldest finished
// ones forgotten); broke if it keeps all of them.
func judgeCount(f *flood, l listing) Verdict {
	switch {
	case f.refused != "":
		return held("429 at session %d (%d-byte tags): %s", f.made+1, f.tagSize, f.refused)
	case f.err != nil:
		return failed("session %d: %v", f.made+1, f.err)
	case l.err != nil:
		return failed("list the sessions: %v", l.err)
	case !l.over && l.entries < f.made:
		return held("%d sessions made, no 429; the server keeps %d of them (the oldest forgotten)", f.made, l.entries)
	}
	kept := fmt.Sprintf("all %d", l.entries)
	if l.over {
		kept = "them all (the listing was too large to count)"
	}
	return broke("%d sessions with %d-byte tags (%s of tags) and no 429 before %s; the server keeps %s",
		f.made, f.tagSize, mib(int64(f.made)*int64(f.tagSize)), f.stop, kept)
}

// judgeListing: broke if one response passed listingBound; held if none
// did and the listing is paged or the sessions it can list are bounded
// (the tag or the count held); otherwise the run made too little to tell.
func judgeListing(f *flood, l listing, tag, count Verdict) Verdict {
	switch {
	case l.err != nil:
		return failed("list the sessions: %v", l.err)
	case l.over:
		return broke("a listing response passed %s (the read stopped there) after %d sessions with %d-byte tags",
			mib(listingBound), f.made, f.tagSize)
	case l.pages > 1:
		return held("%d pages listing %d sessions, the largest %s", l.pages, l.entries, mib(l.largest))
	case tag.Outcome == Held || count.Outcome == Held:
		return held("one response of %s listing %d sessions: what a listing holds is bounded by the tag and session bounds", mib(l.largest), l.entries)
	default:
		return skipped("inconclusive: %d sessions in one response of %s; the run made too few to tell (raise --max-sessions or --max-upload-mib)", l.entries, mib(l.largest))
	}
}

// measure GETs path and reads its body up to limit bytes: the body, or
// nil when it is longer (then n is limit+1: the read stopped there).
func (r rawAPI) measure(ctx context.Context, path string, limit int64) (body []byte, n int64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url+path, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+r.key)
	req.Header.Set("Accept", "application/json")
	resp, err := r.hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, int64(len(b)), fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, int64(len(b)), &client.APIError{StatusCode: resp.StatusCode, Message: tail(string(b), 300)}
	}
	if int64(len(b)) > limit {
		return nil, int64(len(b)), nil
	}
	return b, int64(len(b)), nil
}
