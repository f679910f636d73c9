package version

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the SDKs' version copies to Version")

// copies are the places the SDKs' packaging needs the version as a literal,
// each with the pattern whose first group is the version.
var copies = []struct {
	path    string
	pattern *regexp.Regexp
}{
	{"sdk/python/pyproject.toml", regexp.MustCompile(`(?m)^version = "([^"]*)"`)},
	{"sdk/python/src/space_sandbox/_version.py", regexp.MustCompile(`(?m)^__version__ = "([^"]*)"`)},
	{"sdk/typescript/package.json", regexp.MustCompile(`(?m)^  "version": "([^"]*)"`)},
	{"sdk/typescript/src/version.ts", regexp.MustCompile(`(?m)^export const VERSION = "([^"]*)"`)},
}

func TestSDKVersionsFollowTheServer(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, c := range copies {
		path := filepath.Join(root, c.path)
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		loc := c.pattern.FindSubmatchIndex(raw)
		if loc == nil {
			t.Errorf("%s: no version found (pattern %s)", c.path, c.pattern)
			continue
		}
		got := string(raw[loc[2]:loc[3]])
		if got == Version {
			continue
		}
		if !*update {
			t.Errorf("%s has version %q, the server %q: run go test ./internal/version/ -update", c.path, got, Version)
			continue
		}
		out := append(append(append([]byte{}, raw[:loc[2]]...), Version...), raw[loc[3]:]...)
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
