package client

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/space-platform/space/pkg/apiv1"
)

func TestDecodeListingStreamsEntries(t *testing.T) {
	body := `{"path":"/d","extra":{"a":[1,2]},"entries":[{"name":"a","path":"/d/a","type":"file"},
	{"name":"b","path":"/d/b","type":"dir"}],"next_cursor":"YQ"}`
	var names []string
	next, err := decodeListing(json.NewDecoder(strings.NewReader(body)), func(e apiv1.FileEntry) error {
		names = append(names, e.Name+":"+e.Type)
		return nil
	})
	if err != nil || next != "YQ" || strings.Join(names, ",") != "a:file,b:dir" {
		t.Fatalf("got %v next %q err %v", names, next, err)
	}
	for _, bad := range []string{`[]`, `{"entries":{}}`, `{"entries":[{"name":1}]}`, `{"entries":[`} {
		if _, err := decodeListing(json.NewDecoder(strings.NewReader(bad)), func(apiv1.FileEntry) error { return nil }); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
}
