package synth

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadScenarioFileIsBounded (issue 46, the class of item 13): a
// scenario file is an input like any other: read only if it is a regular
// file and at most maxScenarioFileBytes, and YAML aliases that expand
// without end are refused. Before, a 2 MiB file was read whole and a named
// pipe with no writer blocked generate for ever.
func TestReadScenarioFileIsBounded(t *testing.T) {
	dir := t.TempDir()
	good := "scenarios:\n  - name: flash-crowd\n    at: 60s\n"
	laughs := "a: &a [\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\"]\n"
	for i, prev := 'b', 'a'; i <= 'j'; i, prev = i+1, i {
		laughs += string(i) + ": &" + string(i) + " [" + strings.Repeat("*"+string(prev)+",", 8) + "*" + string(prev) + "]\n"
	}
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, text, want string
	}{
		{"a file of 2 MiB", "big.yaml", good + "# " + strings.Repeat("x", 2<<20) + "\n", "larger than"},
		{"a named pipe", "fifo.yaml", "", "named pipe"},
		{"aliases that expand a billion times", "laughs.yaml", laughs + good, "alias"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.path)
			if tc.text != "" {
				if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err, ok := withinDeadline(t, 30*time.Second, func() error { _, err := ReadScenarioFile(path); return err })
			if ok && (err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("error %v; want one naming %s and saying %q", err, path, tc.want)
			}
		})
	}
	if _, err := os.Stat(fifo); err == nil {
		os.Remove(fifo)
	}
	path := filepath.Join(dir, "good.yaml")
	os.WriteFile(path, []byte(good), 0o644)
	if sc, err := ReadScenarioFile(path); err != nil || len(sc) != 1 {
		t.Errorf("a good file: %v, %v", sc, err)
	}
}
