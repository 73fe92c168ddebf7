package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCollectSpansRefusesRemoteAddress: --collect-spans on every
// interface is refused before anything runs, naming the flag that would
// allow it.
func TestCollectSpansRefusesRemoteAddress(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := runCLI(t, "replay", filepath.Join(dir, "wl"), "--target", "http://127.0.0.1:1", "--collect-spans", "0.0.0.0:0", "--out", filepath.Join(dir, "run"))
	if code == 0 || !strings.Contains(errOut, "--collect-spans") || !strings.Contains(errOut, "--allow-remote-spans") {
		t.Errorf("exit %d: %s; want a failure naming --collect-spans and --allow-remote-spans", code, errOut)
	}
	if _, err := os.Lstat(filepath.Join(dir, "run")); err == nil {
		t.Error("the refused run created its run dir")
	}
}
