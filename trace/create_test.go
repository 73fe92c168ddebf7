package trace

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestCreateFileNeverWritesThroughWhatIsThere plants, where a file is to
// be created, a link to a file, a dangling link and a file, and checks
// that each is refused and left as it was; a fresh name is created 0644
// less the umask.
func TestCreateFileNeverWritesThroughWhatIsThere(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("keep"), 0o600)
	plant := map[string]func(p string) error{
		"link to a file":  func(p string) error { return os.Symlink(victim, p) },
		"dangling link":   func(p string) error { return os.Symlink(filepath.Join(dir, "nowhere"), p) },
		"a file is there": func(p string) error { return os.WriteFile(p, []byte("old"), 0o600) },
	}
	for name, put := range plant {
		p := filepath.Join(dir, name)
		if err := put(p); err != nil {
			t.Fatal(err)
		}
		if f, err := CreateFile(p); err == nil {
			f.Close()
			t.Errorf("%s: created", name)
		} else if !errors.Is(err, fs.ErrExist) {
			t.Errorf("%s: %v, want fs.ErrExist", name, err)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("the link's target was written: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(dir, "nowhere")); err == nil {
		t.Error("the dangling link's target was created")
	}
	f, err := CreateFile(filepath.Join(dir, "fresh"))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if st, _ := os.Stat(f.Name()); st.Mode().Perm() != filePerm() {
		t.Errorf("mode %v, want %v", st.Mode().Perm(), filePerm())
	}
}

func TestMakeDirRefusesALinkOrFile(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other")
	os.Mkdir(other, 0o755)
	os.Symlink(other, filepath.Join(dir, "link"))
	os.WriteFile(filepath.Join(dir, "file"), nil, 0o644)
	for _, c := range []struct {
		name string
		ok   bool
	}{{"link", false}, {"file", false}, {"other", true}, {"new/nested", true}} {
		err := MakeDir(filepath.Join(dir, c.name))
		if (err == nil) != c.ok {
			t.Errorf("MakeDir(%s) = %v, want ok %v", c.name, err, c.ok)
		}
	}
}

// TestLockRefusesWhatIsNotAFile plants a named pipe and a link where an
// output's lock goes: each is refused, nothing blocks, and the link's
// target keeps its text.
func TestLockRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	lock := filepath.Join(dir, ".out.writer.lock")
	if err := syscall.Mkfifo(lock, 0o644); err != nil {
		t.Fatal(err)
	}
	if l, err := lockOutput(out, "writer"); err == nil {
		l.release()
		t.Error("a named pipe was taken as the lock")
	}
	os.Remove(lock)
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	os.Symlink(victim, lock)
	if l, err := lockOutput(out, "writer"); err == nil {
		l.release()
		t.Error("a link was followed to take the lock")
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("the link's target was written: %q", b)
	}
}
