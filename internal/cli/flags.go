package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"sort"
	"strings"
)

// flagSet is a flag.FlagSet that knows its usage text and reports problems
// as usageError/helpRequest instead of printing them itself.
type flagSet struct {
	*flag.FlagSet
	synopsis    string // "space sandbox ls [flags]"
	description string
}

func newFlagSet(synopsis, description string) *flagSet {
	fs := flag.NewFlagSet(synopsis, flag.ContinueOnError)
	fs.SetOutput(discard{})
	return &flagSet{FlagSet: fs, synopsis: synopsis, description: description}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// usage is the text shown by -h and after usage errors.
func (f *flagSet) usage() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Usage: %s\n\n%s\n", f.synopsis, strings.TrimSpace(f.description))
	hasFlags := false
	f.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		b.WriteString("\nFlags:\n")
		f.SetOutput(&b)
		f.PrintDefaults()
		f.SetOutput(discard{})
	}
	return b.String()
}

// parse parses args and returns the positional arguments. With
// interspersed, flags may follow positional arguments ("space branch ID
// --count 3"); "--" ends flag parsing either way. Without it, parsing stops
// at the first positional argument, which exec needs so that the remote
// command's own flags are left alone.
func (f *flagSet) parse(args []string, interspersed bool) ([]string, error) {
	var positional []string
	for {
		if err := f.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, &helpRequest{text: f.usage()}
			}
			return nil, f.usageErrorf("%s", err)
		}
		rest := f.Args()
		consumed := len(args) - len(rest)
		endOfFlags := consumed > 0 && args[consumed-1] == "--"
		if !interspersed || endOfFlags || len(rest) == 0 {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

func (f *flagSet) usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...), usage: f.usage()}
}

// keyValues is a repeatable KEY=VALUE flag (--env, --metadata).
type keyValues map[string]string

func (kv keyValues) String() string {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	pairs := make([]string, len(keys))
	for i, k := range keys {
		pairs[i] = k + "=" + kv[k]
	}
	return strings.Join(pairs, ",")
}

func (kv keyValues) Set(s string) error {
	key, value, err := parseKeyValue(s)
	if err != nil {
		return err
	}
	kv[key] = value
	return nil
}

// parseKeyValue splits "KEY=VALUE" at the first "="; the value may be empty
// or contain more "=".
func parseKeyValue(s string) (key, value string, err error) {
	key, value, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", fmt.Errorf("%q is not KEY=VALUE", s)
	}
	if key == "" {
		return "", "", fmt.Errorf("%q has an empty key", s)
	}
	return key, value, nil
}

// orNil returns nil for an empty map so JSON omits it.
func (kv keyValues) orNil() map[string]string {
	if len(kv) == 0 {
		return nil
	}
	return kv
}
