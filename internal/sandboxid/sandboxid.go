// Package sandboxid makes and checks sandbox identifiers: 20 characters of
// [a-z0-9], E2B's format. They are safe in host names (host routing splits
// on '-' and '.'), network namespace names and file names.
package sandboxid

import (
	"crypto/rand"
	"regexp"
)

const (
	alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	length   = 20
)

var valid = regexp.MustCompile(`^[a-z0-9]{20}$`)

// New returns a fresh random identifier.
func New() string {
	b := make([]byte, length)
	_, _ = rand.Read(b)
	for i := range b {
		// 256 % 36 leaves a slight bias toward the first letters; ids need
		// to be unique, not uniform.
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// Valid reports whether s has the identifier format.
func Valid(s string) bool { return valid.MatchString(s) }
