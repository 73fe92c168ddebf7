package replay

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// TestReplayWritesNothingThroughPlantedLinks plants a symbolic link where
// replay creates each of its files and directories, pointing outside the
// run directory, and checks that the run refuses it, naming the path,
// while what the link points to stays as it was.
func TestReplayWritesNothingThroughPlantedLinks(t *testing.T) {
	const victimText = "not servetrace's: must survive\n"
	cases := []struct {
		name string // what is planted, relative to the run dir
		dir  bool   // the link points to a directory
	}{
		{name: "client.jsonl"},
		{name: SpansName},
		{name: trace.ResultsDir, dir: true},
		{name: "metrics", dir: true},
		{name: "../.run.writer.lock"}, // the writer's lock, beside the run dir
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			runDir := filepath.Join(base, "run")
			outside := filepath.Join(base, "outside")
			if err := os.MkdirAll(runDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(outside, 0o755); err != nil {
				t.Fatal(err)
			}
			victim := filepath.Join(outside, "victim")
			if err := os.WriteFile(victim, []byte(victimText), 0o644); err != nil {
				t.Fatal(err)
			}
			target, emptyDir := victim, filepath.Join(outside, "empty")
			if err := os.Mkdir(emptyDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if c.dir {
				target = emptyDir
			}
			link := filepath.Join(runDir, c.name)
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			srv := newListener(t, func(_ *listener, w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/metrics" {
					w.Write([]byte("vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n"))
					return
				}
				okServer(w, r)
			})
			opts := DefaultOptions()
			opts.Target = srv.srv.URL
			opts.Timeout = 5 * time.Second
			opts.CollectSpans = "127.0.0.1:0"
			opts.SpansWait = 10 * time.Millisecond
			opts.Metrics = []MetricsEndpoint{{Role: RoleEngine, URL: srv.srv.URL + "/metrics"}}
			if err := opts.validate(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			_, err := runRequests(ctx, sliceSource(oneRequest(nil)()), &trace.Manifest{Kind: "workload", BlockSize: 16}, "", runDir, opts)
			if err == nil {
				t.Fatalf("the run wrote past a link planted as %s", c.name)
			}
			if err != nil && !strings.Contains(err.Error(), filepath.Base(c.name)) {
				t.Errorf("the error does not name %s: %v", c.name, err)
			}
			if b, err := os.ReadFile(victim); err != nil || string(b) != victimText {
				t.Errorf("the file outside the run dir was changed: %q, %v", b, err)
			}
			if ents, _ := os.ReadDir(emptyDir); len(ents) != 0 {
				t.Errorf("the run wrote into the directory outside it: %v", ents)
			}
		})
	}
}
