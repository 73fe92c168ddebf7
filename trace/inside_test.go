package trace

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestInsideDir: a plain name or a subpath inside dir is joined; "..", an
// absolute path, an empty name and a symbolic link out of dir are refused
// as tampered, naming the file they came from.
func TestInsideDir(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "sweep")
	os.MkdirAll(filepath.Join(dir, "step-001"), 0o755)
	os.MkdirAll(filepath.Join(root, "victim"), 0o755)
	os.Symlink(filepath.Join(root, "victim"), filepath.Join(dir, "out"))
	for _, c := range []struct {
		rel string
		ok  bool
	}{
		{"step-001", true},
		{"step-002", true}, // not made yet: inside all the same
		{"results/part-00000.parquet", true},
		{"../victim", false},
		{"step-001/../../victim", false},
		{filepath.Join(root, "victim"), false},
		{"", false},
		{"out", false},
		{"out/x", false},
	} {
		p, err := InsideDir(dir, c.rel, "sweep.json")
		switch {
		case c.ok && (err != nil || p != filepath.Join(dir, filepath.FromSlash(c.rel))):
			t.Errorf("%q: %q, %v", c.rel, p, err)
		case !c.ok && !errors.Is(err, ErrTampered):
			t.Errorf("%q: %q, %v; want ErrTampered", c.rel, p, err)
		}
	}
}
