//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/tracetest"
)

// TestFlagFilesAreBoundedAndNeverBlock (issue 46 item 12): every flag that
// names a file to read whole (a salt, an API key, a CA certificate, a
// probe file, a scenario file, a log mapping) refuses a named pipe at once
// (a FIFO blocked --salt-file for ever, deaf to SIGINT), a device (/dev/zero
// read whole killed replay) and a file past its bound, naming the flag and
// what the file is.
func TestFlagFilesAreBoundedAndNeverBlock(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero here")
	}
	big := func(name string, n int) string { return writeFile(t, dir, name, []byte(strings.Repeat("a", n))) }
	wl := tracetest.WriteWorkload(t, []trace.Request{{Identity: trace.Identity{RequestID: "r"}, TS: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro(),
		Shape: trace.Shape{InputTokens: 4, OutputTokens: 1, MaxTokens: 1, API: trace.APIChat, Stream: true, N: 1}}})
	logs := writeFile(t, dir, "logs.jsonl", []byte("{}\n"))
	replay := func(flag ...string) []string {
		return append([]string{"replay", wl, "--target", "http://127.0.0.1:1", "--out", filepath.Join(dir, "run")}, flag...)
	}
	for _, c := range []struct {
		flag string
		args func(path string) []string
		over string // a regular file past the flag's bound
	}{
		{"--salt-file", func(p string) []string { return replay("--salt-file", p) }, big("salt", maxSaltFileBytes+1)},
		{"--api-key-file", func(p string) []string { return replay("--api-key-file", p) }, big("key", maxAPIKeyFileBytes+1)},
		{"--ca-cert", func(p string) []string { return replay("--ca-cert", p) }, big("ca.pem", 1<<20+1)},
		{"--probes-file", func(p string) []string { return replay("--probes", "0.5", "--probes-file", p) }, ""},
		{"--scenarios", func(p string) []string {
			return []string{"generate", filepath.Join(dir, "no-model.json"), "--scenarios", p, "--out", filepath.Join(dir, "gen")}
		}, big("scenarios.yaml", 1<<20+1)},
		{"--salt-file", func(p string) []string {
			return []string{"convert", logs, "--format", "openai-log", "--salt-file", p, "--out", filepath.Join(dir, "conv")}
		}, ""},
		{"--map", func(p string) []string {
			return []string{"convert", logs, "--format", "openai-log", "--map", p, "--out", filepath.Join(dir, "conv")}
		}, big("mapping.txt", 1<<20+1)},
	} {
		for _, f := range []struct{ path, want string }{{fifo, "named pipe"}, {"/dev/zero", "character device"}, {c.over, "larger than"}} {
			if f.path == "" {
				continue
			}
			args := c.args(f.path)
			type result struct {
				code   int
				stderr string
			}
			done := make(chan result, 1)
			go func() {
				code, _, stderr := runCLI(t, args...)
				done <- result{code, stderr}
			}()
			select {
			case r := <-done:
				if r.code == 0 || !strings.Contains(r.stderr, c.flag) || !strings.Contains(r.stderr, f.want) {
					t.Errorf("%s %s: exit %d, %q; want a failure naming the flag and %q", args[0], strings.Join(args[len(args)-4:], " "), r.code, strings.TrimSpace(r.stderr), f.want)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("%s %s %s hung", args[0], c.flag, f.path)
			}
		}
	}
}
