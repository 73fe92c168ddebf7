//go:build unix

package probe

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/servetrace/servetrace/internal/regfile"
)

// TestReadFileFIFO: a named pipe with no writer is refused at once, not
// waited on.
func TestReadFileFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "probes.jsonl")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ReadFile(path)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, regfile.ErrNotRegular) {
			t.Errorf("ReadFile of a FIFO: %v, want it refused as not a regular file", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReadFile of a FIFO hung")
	}
}
