package template

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

// The built-in recipes ship inside the binary so that `space serve` can
// build them on a fresh host without any files around.
//
//go:embed recipes/*.yaml
var builtinFS embed.FS

// Builtin returns a fresh copy of the built-in recipe called name.
func Builtin(name string) (*Recipe, bool) {
	data, err := builtinFS.ReadFile("recipes/" + name + ".yaml")
	if err != nil {
		return nil, false
	}
	r, err := ParseRecipe(data)
	if err != nil {
		panic(fmt.Sprintf("built-in recipe %s is invalid: %v", name, err)) // caught by tests
	}
	if r.Name == "" {
		r.Name = name
	}
	return r, true
}

// BuiltinNames lists the built-in recipes, sorted.
func BuiltinNames() []string {
	entries, _ := fs.ReadDir(builtinFS, "recipes")
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}
