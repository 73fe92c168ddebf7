package trace

import (
	"fmt"
	"os"
	"path/filepath"
)

// writeFileAtomic writes path through write, atomically: into a hidden
// temporary file in the same directory, synced and renamed into place, so
// a crash never leaves a file under the final name that looks whole but is
// not.
func writeFileAtomic(path string, write func(*os.File) error) (err error) {
	dir, base := filepath.Split(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return fmt.Errorf("create temporary part in %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Chmod(tmp.Name(), filePerm()); err != nil { // CreateTemp made it 0600
		return fmt.Errorf("set the mode of %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename part into place as %s: %w", path, err)
	}
	return nil
}
