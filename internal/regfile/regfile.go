// Package regfile opens the files servetrace finds as inputs (a run's
// run.json and parts, a trace's manifest, a sweep's record, a fit partial,
// another tool's result file) only when they are regular files. A named
// pipe, device or socket put in their place would block a read forever or
// never end, so it is refused, naming the path and what it is.
package regfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ErrNotRegular is wrapped by the error for a path that is not a regular
// file.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped by ReadFile's error for a file past its limit.
var ErrTooLarge = errors.New("larger than the most this file may hold")

// Open opens path for reading if it is a regular file. It never blocks on
// a named pipe: the open itself does not wait for a writer (O_NONBLOCK
// where the system has it), and the opened file is checked before any
// read.
func Open(path string) (*os.File, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, notRegular(path, st.Mode())
	}
	return f, nil
}

// ReadFile reads a regular file whole. A limit above zero is the most it
// may hold: a longer file is refused (ErrTooLarge) without being read
// past the limit.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if limit > 0 {
		if st, err := f.Stat(); err == nil && st.Size() > limit {
			return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%d bytes: %w (%d)", st.Size(), ErrTooLarge, limit)}
		}
		r = io.LimitReader(f, limit+1)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if limit > 0 && int64(len(b)) > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (%d bytes)", ErrTooLarge, limit)}
	}
	return b, nil
}

// Check reports whether path is a regular file (following symbolic
// links), without opening it: for code that hands the path to a library
// that opens it itself.
func Check(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return notRegular(path, st.Mode())
	}
	return nil
}

// notRegular names what path is instead of a regular file.
func notRegular(path string, m fs.FileMode) error {
	what := "not a plain file"
	switch {
	case m.IsDir():
		what = "a directory"
	case m&fs.ModeNamedPipe != 0:
		what = "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		what = "a socket"
	case m&fs.ModeCharDevice != 0:
		what = "a character device"
	case m&fs.ModeDevice != 0:
		what = "a device"
	}
	return &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%s, %w: servetrace reads its inputs only from regular files", what, ErrNotRegular)}
}
