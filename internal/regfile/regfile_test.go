//go:build unix

package regfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRefusesWhatIsNotARegularFile: a named pipe with no writer, a
// directory and a socket path are refused at once, naming what they are;
// a regular file and a symbolic link to one are read.
func TestRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "run.json")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	plain := filepath.Join(dir, "plain.json")
	if err := os.WriteFile(plain, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(plain, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, want string
	}{
		{fifo, "a named pipe (FIFO)"},
		{dir, "a directory"},
		{filepath.Join(dir, "missing"), "no such file"},
		{plain, ""},
		{link, ""},
	} {
		done := make(chan error, 1)
		go func() { _, err := ReadFile(c.path, 0); done <- err }()
		var err error
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: ReadFile hung", c.path)
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.path, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want it to say %q", c.path, err, c.want)
		case c.want != "" && c.want != "no such file" && !errors.Is(err, ErrNotRegular):
			t.Errorf("%s: %v is not ErrNotRegular", c.path, err)
		}
		if err := Check(c.path); (err == nil) != (c.want == "") {
			t.Errorf("Check(%s) = %v", c.path, err)
		}
	}
}

// TestReadFileLimit: a file of exactly the limit is read; one byte more is
// refused as too large.
func TestReadFileLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	os.WriteFile(path, []byte("12345"), 0o644)
	if b, err := ReadFile(path, 5); err != nil || string(b) != "12345" {
		t.Errorf("at the limit: %q, %v", b, err)
	}
	if _, err := ReadFile(path, 4); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), path) {
		t.Errorf("past the limit: %v", err)
	}
}
