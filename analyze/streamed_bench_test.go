package analyze

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servetrace/servetrace/internal/procstat"
	"github.com/servetrace/servetrace/trace"
)

// analyzeChildEnv makes the test binary analyze one run directory and
// print its time and peak RSS: "RUN_DIR|IN_MEMORY_ROWS".
const analyzeChildEnv = "SERVETRACE_ANALYZE_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(analyzeChildEnv); spec != "" {
		runAnalyzeChild(spec)
		return
	}
	os.Exit(m.Run())
}

func runAnalyzeChild(spec string) {
	dir, limit, _ := strings.Cut(spec, "|")
	n, _ := strconv.Atoi(limit)
	start := time.Now()
	rep, err := Analyze([]string{dir}, Options{InMemoryRows: n})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("seconds %.2f rows %d streamed %v ttft_p99_ms %.3f\n", time.Since(start).Seconds(), rep.Requests.Total, rep.Streamed != nil, rep.Metrics["ttft_ms"].Quantiles[3].Value)
	procstat.ReportPeak(os.Stdout)
}

// childAnalysis is what a child process analyzing one input reported.
type childAnalysis struct {
	secs     float64
	rows     int64
	streamed bool
	peakKB   int64
	line     string // its first line of output
}

// analyzeInChild analyzes path (a run directory or a result file) with
// InMemoryRows limit in a child process of the test binary exe.
func analyzeInChild(b *testing.B, exe, path string, limit int) childAnalysis {
	b.Helper()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), analyzeChildEnv+"="+path+"|"+strconv.Itoa(limit))
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("%s: %v\n%s", path, err, out)
	}
	var c childAnalysis
	if _, err := fmt.Sscanf(string(out), "seconds %g rows %d streamed %t", &c.secs, &c.rows, &c.streamed); err != nil {
		b.Fatalf("%s: child output %q: %v", path, out, err)
	}
	c.peakKB = procstat.PeakFromOutput(out)
	c.line = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	return c
}

// writeBenchRun writes a synthetic run of n rows in parts of 10,000 rows,
// as replay rotates them, two writers at once; run.json comes last, so an
// interrupted write is redone.
func writeBenchRun(tb testing.TB, dir string, n int) {
	tb.Helper()
	if _, err := os.Stat(filepath.Join(dir, trace.RunInfoName)); err == nil {
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		tb.Fatal(err)
	}
	const partRows = 10_000
	nparts := (n + partRows - 1) / partRows
	parts := make([]trace.Part, nparts)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for wk := range 2 {
		wg.Go(func() {
			for p := wk; p < nparts; p += 2 {
				stage := filepath.Join(dir, fmt.Sprintf("stage-%d", p))
				w, err := trace.NewResultWriter(stage, partRows)
				if err != nil {
					errs[wk] = err
					return
				}
				rng := rand.New(rand.NewPCG(uint64(p), 2))
				for i := p * partRows; i < min(n, (p+1)*partRows); i++ {
					w.Write(syntheticResult(i, rng))
				}
				if err := w.Flush(); err != nil {
					errs[wk] = err
					return
				}
				w.Close()
				rel := fmt.Sprintf("%s/part-%06d.parquet", trace.ResultsDir, p)
				if err := os.MkdirAll(filepath.Join(dir, trace.ResultsDir), 0o755); err != nil {
					errs[wk] = err
					return
				}
				if err := os.Rename(filepath.Join(stage, w.Parts()[0].Path), filepath.Join(dir, rel)); err != nil {
					errs[wk] = err
					return
				}
				os.RemoveAll(stage)
				parts[p] = trace.Part{Path: rel, Rows: w.Parts()[0].Rows}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			tb.Fatal(err)
		}
	}
	ri := trace.RunInfo{SchemaVersion: 1, RunID: "bench", Complete: true, Parts: parts}
	if err := trace.WriteJSONAtomic(filepath.Join(dir, trace.RunInfoName), ri); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkAnalyzeLongRun analyzes synthetic runs (16 token events a
// request) in child processes and reports each one's time and peak RSS:
// ANALYZE_ROWS streamed, and 1M rows both held and streamed. Runs are kept
// in ANALYZE_DIR (default the temp dir) between runs: 100M rows are about
// 12 GB and take minutes to write, so it runs only when ANALYZE_ROWS is
// set (make bench-analyze), never under a plain make bench.
func BenchmarkAnalyzeLongRun(b *testing.B) {
	rows, err := strconv.Atoi(os.Getenv("ANALYZE_ROWS"))
	if err != nil {
		b.Skip("set ANALYZE_ROWS to a row count (make bench-analyze)")
	}
	base := os.Getenv("ANALYZE_DIR")
	if base == "" {
		base = filepath.Join(os.TempDir(), "servetrace-bench-analyze")
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		rows, limit int
	}{{1_000_000, 0}, {1_000_000, 1}, {rows, 0}} {
		dir := filepath.Join(base, strconv.Itoa(c.rows))
		start := time.Now()
		writeBenchRun(b, dir, c.rows)
		if s := time.Since(start); s > time.Second {
			b.Logf("wrote %d rows in %s", c.rows, s.Round(time.Second))
		}
		ch := analyzeInChild(b, exe, dir, c.limit)
		secs, hwm := ch.secs, float64(ch.peakKB)
		mode := map[bool]string{false: "held", true: "streamed"}[ch.streamed]
		b.Logf("%d rows %s: %.1f s (%.0f rows/s), peak RSS %.0f MB; %s", c.rows, mode, secs, float64(c.rows)/secs, hwm/1024, ch.line)
		name := fmt.Sprintf("%dM-%s", c.rows/1_000_000, mode)
		b.ReportMetric(secs, name+"-s")
		b.ReportMetric(hwm/1024, name+"-MB")
	}
}
