//go:build unix

package analyze

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// replaceWithFIFO puts a named pipe with no writer where path was.
func replaceWithFIFO(t *testing.T, path string) {
	t.Helper()
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
}

// TestHostileRunFiles (issue 42, 3): a run directory or sweep whose files
// are named pipes, as an attacker or a careless script can leave them,
// must be refused at once, naming the file; before, analyze blocked
// forever opening a run.json that was a FIFO.
func TestHostileRunFiles(t *testing.T) {
	rows := []trace.Result{{Identity: trace.Identity{RequestID: "a"}, Shape: trace.Shape{Stream: true}, SentNs: ptr(int64(0)), FirstChunkNs: ptr(int64(5e6)),
		FirstTokenNs: ptr(int64(5e6)), DoneNs: ptr(int64(9e6)), TokenTimesNs: []int64{5e6, 9e6}, ObservedOutputTokens: 2, Outcome: trace.OutcomeOK, HTTPStatus: 200}}
	for _, c := range []struct {
		name string
		// fifo is the file of the run dir (or of the directory above
		// it) made a named pipe.
		fifo func(run string) string
		// arg is what analyze is given.
		arg func(run string) string
	}{
		{"run.json", func(run string) string { return filepath.Join(run, trace.RunInfoName) }, func(run string) string { return run }},
		{"a results part", func(run string) string { return filepath.Join(run, trace.ResultsDir, "part-00000.parquet") }, func(run string) string { return run }},
		{"a metrics scrape", func(run string) string {
			os.MkdirAll(filepath.Join(run, "metrics"), 0o755)
			return filepath.Join(run, "metrics", "scrape-00000.prom")
		}, func(run string) string { return run }},
		{"sweep.json", func(run string) string { return filepath.Join(filepath.Dir(run), "sweep.json") }, func(run string) string { return filepath.Dir(run) }},
		{"another tool's result file", func(run string) string { return filepath.Join(filepath.Dir(run), "vllm.json") },
			func(run string) string { return filepath.Join(filepath.Dir(run), "vllm.json") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := filepath.Join(t.TempDir(), "run")
			writeRun(t, run, "r", rows, 1)
			fifo := c.fifo(run)
			replaceWithFIFO(t, fifo)
			done := make(chan error, 1)
			go func() {
				dirs, err := ExpandRunDirs(c.arg(run))
				if err == nil {
					_, err = AnalyzeContext(context.Background(), dirs, Options{})
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "named pipe") || !strings.Contains(err.Error(), filepath.Base(fifo)) {
					t.Errorf("error %v; want one naming %s as a named pipe", err, fifo)
				}
			case <-time.After(20 * time.Second):
				// Opening the pipe for writing frees the reader, so the
				// test ends either way.
				if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
					w.Close()
				}
				t.Fatalf("analyze still blocked on %s after 20 s", fifo)
			}
		})
	}
}
