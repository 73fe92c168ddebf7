package trace

import (
	"errors"
	"fmt"
	"path/filepath"
)

// ErrTampered marks a file servetrace wrote whose content points outside
// the directory it belongs to: a path with "..", an absolute path, or a
// symbolic link leading out. Such a file was edited, and nothing it names
// is read, renamed or written.
var ErrTampered = errors.New("the file was edited: a path in it leads outside its directory")

// InsideDir returns dir joined with rel, a path read from a file in dir
// (a manifest's part, a sweep's run directory), if it names something
// inside dir: rel is relative, without "..", and, where it exists, no
// symbolic link on its way resolves outside dir. Otherwise the error
// wraps ErrTampered and names the file it came from.
func InsideDir(dir, rel, from string) (string, error) {
	if rel == "" || !filepath.IsLocal(filepath.FromSlash(rel)) {
		return "", fmt.Errorf("%s names %q: %w", from, rel, ErrTampered)
	}
	p := filepath.Join(dir, filepath.FromSlash(rel))
	root, err := resolvePath(dir)
	if err != nil {
		return "", err
	}
	real, err := resolvePath(p)
	if err != nil {
		return "", err
	}
	if !within(real, root) {
		return "", fmt.Errorf("%s names %q, which resolves to %s, outside %s: %w", from, rel, real, dir, ErrTampered)
	}
	return p, nil
}
