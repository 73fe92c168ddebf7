package datasets

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMappingFileIsBounded (issue 46, the class of item 15): a mapping
// file is read only if it is a regular file of at most 1 MiB. Before, a
// 2 MiB file was read whole and a named pipe with no writer blocked
// convert for ever.
func TestMappingFileIsBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.map")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.map")
	if err := os.WriteFile(big, []byte("ts: time\n# "+strings.Repeat("x", 2<<20)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{{big, "larger than"}, {fifo, "named pipe"}} {
		err, ok := withinDeadline(t, 30*time.Second, func() error { _, err := LoadMapping(tc.path); return err })
		if ok && (err == nil || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("error %v; want one naming %s and saying %q", err, tc.path, tc.want)
		}
	}
}

// TestMappingLongLineIsNotDropped: a line past the scanner's default 64
// KiB used to end the mapping there without a word, dropping every field
// after it; the whole file is read, or refused.
func TestMappingLongLineIsNotDropped(t *testing.T) {
	text := "ts: time\n# " + strings.Repeat("x", 100<<10) + "\nmodel: the_model\n"
	m, err := parseMapping("long", text)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Paths["model"]) != 1 {
		t.Errorf("the field after a 100 KiB line was dropped: %v", m.Paths)
	}
}
