package analyze

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// update rewrites the golden reports: go test ./analyze -run TestGoldenReports -update
var update = flag.Bool("update", false, "rewrite the golden report files in testdata/golden")

// TestGoldenReports renders a fixed run (seeded latencies, 2,000 requests)
// as the table and as Markdown and compares each byte for byte with the
// file under testdata/golden, so any change to a report's text is seen and
// reviewed in the diff (rewrite them with -update).
func TestGoldenReports(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	writeSyntheticRun(t, dir, 2000)
	rep, err := Analyze([]string{dir}, Options{Bootstrap: BootstrapOptions{Resamples: 500, Seed: 1},
		SLO: SLO{TTFT: 400 * time.Millisecond}, By: []string{"tenant"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file  string
		write func(*strings.Builder) error
	}{
		{"report.txt", func(b *strings.Builder) error { return WriteTable(b, rep) }},
		{"report.md", func(b *strings.Builder) error { return WriteMarkdown(b, rep) }},
	} {
		var b strings.Builder
		if err := c.write(&b); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", "golden", c.file)
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (write it with: go test ./analyze -run TestGoldenReports -update)", err)
		}
		if got := b.String(); got != string(want) {
			gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
			for i := range max(len(gl), len(wl)) {
				g, w := "", ""
				if i < len(gl) {
					g = gl[i]
				}
				if i < len(wl) {
					w = wl[i]
				}
				if g != w {
					t.Errorf("%s differs from the golden file at line %d:\n got: %s\nwant: %s\n(rewrite with -update if the change is meant)", c.file, i+1, g, w)
					break
				}
			}
		}
	}
}
