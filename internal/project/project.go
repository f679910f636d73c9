// Package project defines projects, space's tenants: their names, the scope
// a caller sees (its own project, or every project for an admin key), and
// per-project quotas with the create-rate limiter that enforces one of them.
// Every sandbox, snapshot, session, template, secret and API key belongs to
// exactly one project.
package project

import (
	"errors"
	"fmt"
	"regexp"
)

// Default is the project of everything that names none: keys created
// without a project and every object stored before projects existed.
const Default = "default"

// ErrInvalid is returned (wrapped) for a malformed project name.
var ErrInvalid = errors.New("invalid project name")

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidName checks a project name: lowercase letters, digits and '-', 1 to
// 63 characters, starting with a letter or digit. '/' is excluded because
// template catalog names are "<project>/<name>".
func ValidName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("%w: %q must be 1-63 lowercase letters, digits or '-', starting with a letter or digit", ErrInvalid, name)
	}
	return nil
}

// Of returns the project an object belongs to: its recorded project, or
// Default for objects recorded before projects existed.
func Of(recorded string) string {
	if recorded == "" {
		return Default
	}
	return recorded
}

// Scope is what a caller may see and touch. Project is the caller's own
// project: objects it creates belong to it. All (admin keys without a
// project filter) sees every project.
type Scope struct {
	Project string
	All     bool
}

// Everything is the scope of the server's own work (recovery, reaping,
// the traffic proxy's routing): every project.
var Everything = Scope{Project: Default, All: true}

// In is the scope of a caller confined to project p.
func In(p string) Scope { return Scope{Project: Of(p)} }

// Sees reports whether an object of project owner is visible in the scope.
func (s Scope) Sees(owner string) bool {
	return s.All || Of(owner) == Of(s.Project)
}

// Owner is the project new objects created in this scope belong to.
func (s Scope) Owner() string { return Of(s.Project) }
