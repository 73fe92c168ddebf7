package trace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// CreateFile creates path as a new regular file open for writing, 0644
// less the umask. It never follows a symbolic link and never opens a file
// that is already there: a link or file planted at path (by another
// process, or left from elsewhere) is refused rather than written through,
// so nothing outside the output is truncated. Files written whole go
// through WriteFileAtomic instead; this is for files written as a run goes.
func CreateFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o644)
	if errors.Is(err, fs.ErrExist) {
		what := "a file"
		if st, lerr := os.Lstat(path); lerr == nil && st.Mode()&fs.ModeSymlink != 0 {
			what = "a symbolic link"
		}
		return nil, fmt.Errorf("create %s: %s is already there and servetrace writes only files it creates: move it away or choose another output: %w", path, what, fs.ErrExist)
	}
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return f, nil
}

// MakeDir creates the directory dir names inside an output (a run's
// results/ or metrics/), parents included. One already there must be a
// directory, not a symbolic link: what servetrace writes inside would
// otherwise land wherever the link points.
func MakeDir(dir string) error {
	if err := os.MkdirAll(dir, dirPerm()); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	if !st.IsDir() {
		what := "not a directory"
		if st.Mode()&fs.ModeSymlink != 0 {
			what = "a symbolic link"
		}
		return fmt.Errorf("create directory %s: %s is there, and servetrace writes only into directories: move it away or choose another output: %w", dir, what, fs.ErrExist)
	}
	return nil
}
