package analyze

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// writeBigVLLMResult writes a `vllm bench serve --save-detailed` result
// of n requests (the shape of writeVLLMResult, written as it streams):
// TTFT 20–120 ms, 4 output tokens at 8–16 ms gaps, the latency 0.5 ms
// past the last, one request in 200 failed. It is kept at path for the
// next run.
func writeBigVLLMResult(tb testing.TB, path string, n int) {
	tb.Helper()
	if st, err := os.Stat(path); err == nil && st.Size() > 0 {
		return
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	fmt.Fprintf(w, `{"date": "20260101-000000", "backend": "vllm", "model_id": "m", "tokenizer_id": "m", "num_prompts": %d, "request_rate": 500.0, "burstiness": 1.0, "max_concurrency": null, "duration": %g, "completed": %d, "failed": %d, "request_throughput": 500.0, "output_throughput": 2000.0, "mean_ttft_ms": 70.0`,
		n, float64(n)/500, n-n/200, n/200)
	rng := rand.New(rand.NewPCG(7, 7))
	failed := func(i int) bool { return i%200 == 199 }
	array := func(key string, elem func(i int)) {
		fmt.Fprintf(w, `, %q: [`, key)
		for i := range n {
			if i > 0 {
				w.WriteString(", ")
			}
			elem(i)
		}
		w.WriteString("]")
	}
	array("input_lens", func(i int) { w.WriteString(strconv.Itoa(100 + i%900)) })
	array("output_lens", func(i int) {
		if failed(i) {
			w.WriteString("0")
		} else {
			w.WriteString("4")
		}
	})
	// Each request's latency is its TTFT, its gaps and 0.5 ms more, as
	// vLLM measures them: drawn up front so the lists agree.
	ttft := func(i int) float64 { return 0.02 + 0.1*float64(i*7919%1000)/1000 }
	gap := func(i, k int) float64 { return 0.008 + 0.008*float64((i*31+k*17)%100)/100 }
	array("ttfts", func(i int) {
		if failed(i) {
			w.WriteString("0.0")
		} else {
			w.WriteString(strconv.FormatFloat(ttft(i)+1e-6*rng.Float64(), 'f', 6, 64))
		}
	})
	array("itls", func(i int) {
		if failed(i) {
			w.WriteString("[]")
			return
		}
		fmt.Fprintf(w, "[%.6f, %.6f, %.6f]", gap(i, 0), gap(i, 1), gap(i, 2))
	})
	array("start_times", func(i int) { w.WriteString(strconv.FormatFloat(1.7e9+float64(i)/500, 'f', 6, 64)) })
	array("latencies", func(i int) {
		if failed(i) {
			w.WriteString("0.0")
		} else {
			w.WriteString(strconv.FormatFloat(ttft(i)+gap(i, 0)+gap(i, 1)+gap(i, 2)+0.0005, 'f', 6, 64))
		}
	})
	array("errors", func(i int) {
		if failed(i) {
			w.WriteString(`"Internal Server Error"`)
		} else {
			w.WriteString(`""`)
		}
	})
	w.WriteString("}\n")
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkAnalyzePeerPeakRSS analyzes a vLLM detailed result of
// PEER_REQUESTS requests (make bench-analyze-peer: 3M) in a child process
// and reports its time and peak RSS. The file is kept in ANALYZE_DIR.
func BenchmarkAnalyzePeerPeakRSS(b *testing.B) {
	n, err := strconv.Atoi(os.Getenv("PEER_REQUESTS"))
	if err != nil {
		b.Skip("set PEER_REQUESTS to a request count (make bench-analyze-peer)")
	}
	base := os.Getenv("ANALYZE_DIR")
	if base == "" {
		base = filepath.Join(os.TempDir(), "servetrace-bench-analyze")
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(base, fmt.Sprintf("vllm-detailed-%d.json", n))
	start := time.Now()
	writeBigVLLMResult(b, path, n)
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: %d requests, %.0f MB (written in %s)", path, n, float64(st.Size())/1e6, time.Since(start).Round(time.Second))
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	c := analyzeInChild(b, exe, path, 0)
	secs, hwm := c.secs, float64(c.peakKB)
	b.Logf("%d requests (streamed %v): %.1f s, peak RSS %.0f MB; %s", c.rows, c.streamed, secs, hwm/1024, c.line)
	b.ReportMetric(secs, "s")
	b.ReportMetric(hwm/1024, "peak-MB")
}
