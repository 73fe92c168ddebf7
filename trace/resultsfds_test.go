package trace

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fdChildEnv makes TestResultWriterFlushesWithNoDescriptorLeft run its
// body in a child process, under a low descriptor limit it then uses up.
const fdChildEnv = "SERVETRACE_RESULTS_FD_CHILD"

// TestResultWriterFlushesWithNoDescriptorLeft: with every descriptor the
// process may open taken (by a flood of connections, say), a result
// writer still writes its part, having opened the part's file ahead; the
// next part's file, which cannot be opened then, is opened once
// descriptors free up, and every row is read back.
func TestResultWriterFlushesWithNoDescriptorLeft(t *testing.T) {
	if dir := os.Getenv(fdChildEnv); dir != "" {
		resultsFdChild(t, dir)
		return
	}
	dir := filepath.Join(t.TempDir(), "run")
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), fdChildEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("the child did not run the test:\n%s", out)
	}
	rows, err := ReadResults(dir)
	if err != nil || len(rows) != 6 {
		t.Fatalf("read back %d rows (%v), want 6", len(rows), err)
	}
}

// resultsFdChild writes three rows, takes every descriptor left, flushes
// them, writes three more once descriptors free up, and flushes again.
func resultsFdChild(t *testing.T, dir string) {
	lim := syscall.Rlimit{Cur: 64, Max: 64}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	w, err := NewResultWriter(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	row := func(i int) Result {
		r := Result{RunID: "fd", ScheduledNs: int64(i), Outcome: OutcomeOK}
		r.RequestID = fmt.Sprintf("q%d", i)
		return r
	}
	for i := range 3 {
		if err := w.Write(row(i)); err != nil {
			t.Fatal(err)
		}
	}
	var held []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatal(err)
			}
			break
		}
		held = append(held, f)
	}
	t.Logf("%d descriptors taken", len(held))
	if err := w.Flush(); err != nil {
		t.Fatalf("flush with no descriptor left: %v", err)
	}
	for i := 3; i < 6; i++ {
		if err := w.Write(row(i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range held {
		f.Close()
	}
	if err := w.Flush(); err != nil {
		t.Fatalf("flush once descriptors were free: %v", err)
	}
	w.Close()
	if ents, _ := os.ReadDir(filepath.Join(dir, ResultsDir)); len(ents) != 2 {
		t.Errorf("results/ holds %d files after Close, want the 2 parts and nothing held ahead", len(ents))
	}
}
