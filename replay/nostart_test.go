package replay

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// TestRunThatCannotStartLeavesNothing makes a run with a span receiver
// fail at each step of its start: the receiver's port taken, the port of
// its own metrics taken, a file already where its client health goes.
// Each run must fail leaving the run dir as it found it (absent, or
// holding only what was there) and its span receiver closed.
func TestRunThatCannotStartLeavesNothing(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cases := []struct {
		name  string
		setup func(opts *Options, runDir string)
		had   []string // what the run dir held before
	}{
		{"span receiver's port taken", func(o *Options, _ string) { o.CollectSpans = taken.Addr().String() }, nil},
		{"own metrics' port taken", func(o *Options, _ string) { o.ServeMetrics = taken.Addr().String() }, nil},
		{"client health's file there", func(_ *Options, runDir string) {
			os.MkdirAll(runDir, 0o755)
			os.WriteFile(filepath.Join(runDir, "client.jsonl"), []byte("not servetrace's\n"), 0o644)
		}, []string{"client.jsonl"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			runDir := filepath.Join(base, "run")
			srv := newListener(t, nil)
			opts := DefaultOptions()
			opts.Target, opts.Timeout = srv.srv.URL, 5*time.Second
			opts.CollectSpans, opts.SpansWait = freeLoopbackAddr(t), 10*time.Millisecond
			c.setup(&opts, runDir)
			if err := opts.validate(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			_, err := runRequests(ctx, sliceSource(oneRequest(nil)()), &trace.Manifest{Kind: "workload", BlockSize: 16}, "", runDir, opts)
			if err == nil {
				t.Fatal("the run started")
			}
			var left []string
			filepath.WalkDir(base, func(p string, _ os.DirEntry, err error) error {
				if err == nil && p != base {
					left = append(left, p)
				}
				return nil
			})
			var want []string
			if c.had != nil {
				want = append(want, runDir)
				for _, h := range c.had {
					want = append(want, filepath.Join(runDir, h))
				}
			}
			if !slices.Equal(left, want) {
				t.Errorf("the failed run (%v) left %v, want %v", err, left, want)
			}
			if opts.CollectSpans != taken.Addr().String() {
				if conn, err := net.Dial("tcp", opts.CollectSpans); err == nil {
					conn.Close()
					t.Errorf("the failed run's span receiver at %s still answers", opts.CollectSpans)
				}
			}
		})
	}
}
