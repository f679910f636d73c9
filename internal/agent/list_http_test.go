package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
	"github.com/space-platform/space/internal/dirlist"
)

// listPage calls GET /list and decodes its JSON lines.
func listPage(t *testing.T, env *testEnv, q url.Values) (int, []*filesystempb.EntryInfo, dirlist.Line) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, env.baseURL+"/list?"+q.Encode(), nil)
	req.Header.Set(accessTokenHeader, testToken)
	resp, body := doRequest(t, env.h1Client, req)
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil, dirlist.Line{}
	}
	var entries []*filesystempb.EntryInfo
	var last dirlist.Line
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var line dirlist.Line
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if line.Entry != nil {
			var e filesystempb.EntryInfo
			if err := protojson.Unmarshal(line.Entry, &e); err != nil {
				t.Fatal(err)
			}
			entries = append(entries, &e)
			continue
		}
		last = line
	}
	return resp.StatusCode, entries, last
}

func TestListPagesADirectory(t *testing.T) {
	env := newTestEnv(t)
	dir := filepath.Join(env.dir, "many")
	mustMkdir(t, dir)
	for i := range 25 {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("f%02d", 24-i)), "x")
	}
	var names []string
	q := url.Values{"path": {dir}, "limit": {"10"}}
	for pages := 0; ; pages++ {
		status, entries, last := listPage(t, env, q)
		if status != http.StatusOK || !last.Done || last.Error != "" || len(entries) > 10 {
			t.Fatalf("page %d: %d, %d entries, last %+v", pages, status, len(entries), last)
		}
		for _, e := range entries {
			names = append(names, e.GetName())
			if e.GetPath() != filepath.Join(dir, e.GetName()) || e.GetOwner() != "root" {
				t.Errorf("entry %+v", e)
			}
		}
		if last.NextCursor == "" {
			break
		}
		q.Set("cursor", last.NextCursor)
	}
	if len(names) != 25 || names[0] != "f00" || names[24] != "f24" {
		t.Errorf("names %v", names)
	}
	for _, bad := range []url.Values{
		{"path": {dir}, "limit": {"0"}},
		{"path": {dir}, "limit": {"10001"}},
		{"path": {dir}, "depth": {"65"}},
		{"path": {dir}, "cursor": {"not base64!"}},
		{"path": {filepath.Join(dir, "f00")}},
	} {
		if status, _, _ := listPage(t, env, bad); status != http.StatusBadRequest {
			t.Errorf("%v: %d, want 400", bad, status)
		}
	}
	if status, _, _ := listPage(t, env, url.Values{"path": {filepath.Join(dir, "nope")}}); status != http.StatusNotFound {
		t.Errorf("missing dir: %d, want 404", status)
	}
	if status, _, _ := listPage(t, env, url.Values{"path": {dir}, "username": {"nosuch"}}); status == http.StatusOK {
		t.Errorf("unknown user listed")
	}
}
