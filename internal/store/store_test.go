package store

import (
	"errors"
	"path/filepath"
	"testing"
)

type rec struct{ Name string }

func TestPutGetDeleteSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put("things", "a", rec{"alpha"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Put("things", "b", rec{"beta"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("things", "b"); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got rec
	if err := s.Get("things", "a", &got); err != nil || got.Name != "alpha" {
		t.Fatalf("Get after reopen = %+v, %v", got, err)
	}
	if err := s.Get("things", "b", &got); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted record: err = %v, want ErrNotFound", err)
	}
	if err := s.Get("nobucket", "x", &got); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing bucket: err = %v, want ErrNotFound", err)
	}
	all, err := All[rec](s, "things")
	if err != nil || len(all) != 1 {
		t.Fatalf("All = %v, %v", all, err)
	}
}
