package trace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrOutputIsInput marks an output path that is an input, lies inside one,
// or holds one: writing it would overwrite what is being read.
var ErrOutputIsInput = errors.New("the output overlaps an input")

// CheckOutputPath refuses an output path (file or directory) that is one of
// the inputs, lies inside an input directory, or contains an input. Paths
// are compared after resolving symbolic links, so a link cannot hide the
// overlap; an input that does not exist as a path (a bundled dataset name,
// "-") is skipped.
func CheckOutputPath(out string, inputs []string) error {
	o, err := resolvePath(out)
	if err != nil {
		return fmt.Errorf("output %s: %w", out, err)
	}
	for _, in := range inputs {
		if in == "" || in == "-" {
			continue
		}
		if _, err := os.Lstat(in); err != nil {
			continue
		}
		i, err := resolvePath(in)
		if err != nil {
			return fmt.Errorf("input %s: %w", in, err)
		}
		switch {
		case o == i:
			return fmt.Errorf("output %s is the input %s: %w; write somewhere else", out, in, ErrOutputIsInput)
		case within(o, i):
			return fmt.Errorf("output %s lies inside the input %s: %w; write somewhere else", out, in, ErrOutputIsInput)
		case within(i, o):
			return fmt.Errorf("output %s holds the input %s: %w; replacing it would delete the input; write somewhere else", out, in, ErrOutputIsInput)
		}
	}
	return nil
}

// within reports whether path p lies strictly inside directory dir (both
// absolute and clean).
func within(p, dir string) bool {
	return strings.HasPrefix(p, strings.TrimSuffix(dir, string(filepath.Separator))+string(filepath.Separator))
}

// resolvePath makes p absolute and resolves the symbolic links of its
// longest existing prefix; the rest, not yet created, is appended as is.
func resolvePath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	var rest []string
	cur := abs
	for {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(append([]string{r}, rest...)...), nil
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return abs, nil
		}
		rest = append([]string{filepath.Base(cur)}, rest...)
		cur = parent
	}
}

// outputLock is an exclusive lock on an output directory, held through a
// lock file beside it (the directory itself is replaced on commit).
type outputLock struct {
	f    *os.File
	path string
}

// ErrOutputLocked marks an output another process is writing.
var ErrOutputLocked = errors.New("another servetrace process is writing this output")

// lockOutput takes the lock named name beside dir (".BASE.NAME.lock" in
// dir's parent, which it creates). The lock is an flock, so a killed
// writer's lock is released by the kernel; the file records the holder's pid.
func lockOutput(dir, name string) (*outputLock, error) {
	parent, base := filepath.Split(filepath.Clean(dir))
	if parent == "" {
		parent = "."
	}
	if err := os.MkdirAll(parent, dirPerm()); err != nil {
		return nil, fmt.Errorf("create the directory of %s: %w", dir, err)
	}
	path := filepath.Join(parent, "."+base+"."+name+".lock")
	for range 10 {
		// O_NOFOLLOW: a link planted as the lock would have the
		// truncation below empty whatever it points to.
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, filePerm())
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", dir, err)
		}
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			f.Close()
			return nil, fmt.Errorf("lock %s: %s is not a regular file: move it away", dir, path)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			// The holder's pid, from the file already open: a bounded read.
			var pid [32]byte
			n, _ := f.ReadAt(pid[:], 0)
			holder := pid[:n]
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("output %s: %w (pid %s, lock %s); wait for it to finish or choose another output", dir, ErrOutputLocked, strings.TrimSpace(string(holder)), path)
			}
			return nil, fmt.Errorf("lock %s: %w", dir, err)
		}
		// The holder before us may have removed the file after we opened
		// it: then we hold a lock nobody else can see; take the new file.
		var a, b syscall.Stat_t
		if syscall.Fstat(int(f.Fd()), &a) != nil || syscall.Stat(path, &b) != nil || a.Ino != b.Ino {
			f.Close()
			continue
		}
		f.Truncate(0)
		f.WriteString(strconv.Itoa(os.Getpid()) + "\n")
		return &outputLock{f: f, path: path}, nil
	}
	return nil, fmt.Errorf("lock %s: the lock file %s keeps changing", dir, path)
}

// release removes the lock file and drops the lock; nil-safe and idempotent.
func (l *outputLock) release() {
	if l == nil || l.f == nil {
		return
	}
	os.Remove(l.path)
	l.f.Close()
	l.f = nil
}

// newStageDir creates an empty hidden directory beside dir to build the
// output in, so that it can replace dir with one rename.
func newStageDir(dir string) (string, error) {
	parent, base := filepath.Split(filepath.Clean(dir))
	if parent == "" {
		parent = "."
	}
	stage, err := os.MkdirTemp(parent, "."+base+".staging-*")
	if err != nil {
		return "", fmt.Errorf("create a staging directory beside %s: %w", dir, err)
	}
	if err := os.Chmod(stage, dirPerm()); err != nil {
		os.RemoveAll(stage)
		return "", fmt.Errorf("create a staging directory beside %s: %w", dir, err)
	}
	return stage, nil
}

// foreignFiles lists the files under dir (relative, slash-separated) that
// owned does not recognise as servetrace's, at most limit of them. A
// missing dir holds none.
func foreignFiles(dir string, owned func(rel string) bool, limit int) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == dir {
				return fs.SkipAll
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if !d.Type().IsRegular() || !owned(rel) {
			out = append(out, rel)
			if len(out) >= limit {
				return fs.SkipAll
			}
		}
		return nil
	})
	return out, err
}

// replaceDir puts the finished stage in dir's place. An existing dir is
// moved aside, the stage renamed in, and only then is the old one removed,
// after checking that it holds nothing but files owned recognises: a
// failure at any step leaves dir as it was.
func replaceDir(dir, stage string, owned func(rel string) bool) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.Rename(stage, dir); err != nil {
			return fmt.Errorf("move the finished output into place as %s: %w", dir, err)
		}
		return nil
	}
	foreign, err := foreignFiles(dir, owned, 3)
	if err != nil {
		return fmt.Errorf("check %s before replacing it: %w", dir, err)
	}
	if len(foreign) > 0 {
		return fmt.Errorf("output %s holds files servetrace did not write (%s): move them away or choose another output; nothing was replaced", dir, strings.Join(foreign, ", "))
	}
	old, err := os.MkdirTemp(filepath.Dir(filepath.Clean(dir)), "."+filepath.Base(filepath.Clean(dir))+".old-*")
	if err != nil {
		return fmt.Errorf("replace %s: %w", dir, err)
	}
	os.Remove(old) // only its unique name is wanted
	if err := os.Rename(dir, old); err != nil {
		return fmt.Errorf("replace %s: move the old output aside: %w", dir, err)
	}
	if err := os.Rename(stage, dir); err != nil {
		if rerr := os.Rename(old, dir); rerr != nil {
			return fmt.Errorf("replace %s: %w; the old output is at %s", dir, err, old)
		}
		return fmt.Errorf("replace %s: %w", dir, err)
	}
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("replaced %s, but removing the old output at %s failed: %w", dir, old, err)
	}
	return nil
}

// mergeDir moves every file of the finished stage into dir beside what dir
// holds (creating directories as needed), then removes the stage. Names are
// unique per writer, so an existing file is never overwritten: that is an
// error.
func mergeDir(dir, stage string) error {
	err := filepath.WalkDir(stage, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(stage, p)
		dst := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), dirPerm()); err != nil {
			return err
		}
		if _, err := os.Lstat(dst); err == nil {
			return fmt.Errorf("%s already exists", dst)
		}
		return os.Rename(p, dst)
	})
	if err != nil {
		return fmt.Errorf("move the finished output into %s: %w", dir, err)
	}
	return os.RemoveAll(stage)
}

// umask is the process's file-mode creation mask, read from
// /proc/self/status (Linux 4.7 and later) because syscall.Umask can only be
// read by setting it, which races with other goroutines creating files.
var umask = func() os.FileMode {
	b, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Umask:"); ok {
				if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					return os.FileMode(m)
				}
			}
		}
	}
	return 0o022
}()

// filePerm is the mode of every file servetrace writes: 0644, less the
// umask, as os.Create would give (temporary files start at 0600).
func filePerm() os.FileMode { return 0o644 &^ umask }

// dirPerm is the mode of every directory servetrace creates: 0755 less the
// umask.
func dirPerm() os.FileMode { return 0o755 &^ umask }
