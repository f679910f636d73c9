package e2b

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"
)

// walk pages through keys (already sorted in the order) limit at a time,
// calling between(page) after each page, and returns the ids in the order
// they came.
func walk(t *testing.T, keys func() []pageKey, limit int, desc bool, between func(int)) []string {
	t.Helper()
	var got []string
	token := ""
	for n := 0; ; n++ {
		k := keys()
		from, to, next, ok := pageIn(httptest.NewRecorder(), k, token, limit, desc)
		if !ok {
			t.Fatalf("page %d refused", n)
		}
		for _, key := range k[from:to] {
			got = append(got, key.id)
		}
		if next == "" {
			return got
		}
		token = next
		between(n)
	}
}

// Newest first by default, ties on the time broken by id the same way,
// every sandbox once across the pages, and a sandbox that goes away
// between pages does not shift the next page.
func TestPageDescending(t *testing.T) {
	base := time.Unix(1700000000, 0)
	var all []pageKey
	var items []string
	for i := 0; i < 7; i++ {
		at := base.Add(time.Duration(i/2) * time.Second) // pairs share a time
		all = append(all, pageKey{at, "id" + strconv.Itoa(i)})
		items = append(items, "id"+strconv.Itoa(i))
	}
	slices.Reverse(all) // arrive unsorted
	slices.Reverse(items)
	slices.Reverse(all[2:5])
	slices.Reverse(items[2:5])
	sortPage(all, items, true)
	want := []string{"id6", "id5", "id4", "id3", "id2", "id1", "id0"}
	for i, k := range all {
		if k.id != want[i] || items[i] != want[i] {
			t.Fatalf("sorted desc: keys %v items %v, want %v", all, items, want)
		}
	}
	if got := walk(t, func() []pageKey { return all }, 3, true, func(int) {}); !slices.Equal(got, want) {
		t.Fatalf("desc pages: %v, want %v", got, want)
	}
	// id3, the first of page two, is killed after page one.
	live := slices.Clone(all)
	got := walk(t, func() []pageKey { return live }, 3, true, func(n int) {
		if n == 0 {
			live = slices.DeleteFunc(live, func(k pageKey) bool { return k.id == "id3" })
		}
	})
	if want := []string{"id6", "id5", "id4", "id2", "id1", "id0"}; !slices.Equal(got, want) {
		t.Fatalf("desc pages with a kill between: %v, want %v", got, want)
	}
	// A sandbox created after the first page is newer than the token:
	// it is not listed again on later pages, nothing is skipped.
	live = slices.Clone(all)
	got = walk(t, func() []pageKey { return live }, 3, true, func(n int) {
		if n == 0 {
			live = append([]pageKey{{base.Add(time.Hour), "new"}}, live...)
		}
	})
	if !slices.Equal(got, want) {
		t.Fatalf("desc pages with a create between: %v, want %v", got, want)
	}
	asc := slices.Clone(all)
	ascItems := slices.Clone(items)
	sortPage(asc, ascItems, false)
	slices.Reverse(want)
	if got := walk(t, func() []pageKey { return asc }, 2, false, func(int) {}); !slices.Equal(got, want) {
		t.Fatalf("asc pages: %v, want %v", got, want)
	}
}

// A token is good only for the order it was issued in, and order takes
// only asc or desc.
func TestPageOrderErrors(t *testing.T) {
	keys := []pageKey{{time.Unix(3, 0), "c"}, {time.Unix(2, 0), "b"}, {time.Unix(1, 0), "a"}}
	_, _, descToken, _ := pageIn(httptest.NewRecorder(), keys, "", 1, true)
	slices.Reverse(keys)
	_, _, ascToken, _ := pageIn(httptest.NewRecorder(), keys, "", 1, false)
	for _, c := range []struct {
		token string
		desc  bool
	}{{descToken, false}, {ascToken, true}, {"!!", true}, {"ZA", true}} {
		w := httptest.NewRecorder()
		if _, _, _, ok := pageIn(w, keys, c.token, 1, c.desc); ok || w.Code != http.StatusBadRequest {
			t.Errorf("token %q (desc %v) accepted: %d", c.token, c.desc, w.Code)
		}
	}
	for raw, want := range map[string]bool{"": true, "desc": true, "asc": false} {
		if desc, ok := listOrder(httptest.NewRecorder(), url.Values{"order": {raw}}); !ok || desc != want {
			t.Errorf("order %q: desc %v ok %v", raw, desc, ok)
		}
	}
	w := httptest.NewRecorder()
	if _, ok := listOrder(w, url.Values{"order": {"random"}}); ok || w.Code != http.StatusBadRequest {
		t.Errorf("order random accepted: %d", w.Code)
	}
}
