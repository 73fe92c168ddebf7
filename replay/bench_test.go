package replay

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// BenchmarkSSEParse measures parsing a 256-token chat stream through the
// timestamping reader and chunk decoder.
func BenchmarkSSEParse(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n")
	for range 256 {
		sb.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null}]}` + "\n\n")
	}
	sb.WriteString(`data: {"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":256}}` + "\n\ndata: [DONE]\n\n")
	body := []byte(sb.String())
	r := testRunner("http://unused")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		res := trace.Result{SentNs: trace.Ptr(int64(0))}
		r.readStream(context.Background(), io.NopCloser(bytes.NewReader(body)), &res, behaviour{})
		if res.Outcome != trace.OutcomeOK || len(res.TokenTimesNs) != 256 {
			b.Fatal(res.Outcome, len(res.TokenTimesNs))
		}
	}
	b.ReportMetric(float64(258*b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkScheduleLag measures how late waitUntil wakes for a due time
// 2 ms ahead: the pacer's own contribution to send lateness.
func BenchmarkScheduleLag(b *testing.B) {
	start := time.Now()
	r := &Runner{start: start, clock: monotonicClock(start)}
	lags := make([]float64, 0, 1024)
	for b.Loop() {
		due := r.clock() + int64(2*time.Millisecond)
		r.waitUntil(context.Background(), due)
		lags = append(lags, float64(r.clock()-due))
	}
	slices.Sort(lags)
	b.ReportMetric(lags[len(lags)/2], "lag-p50-ns")
	b.ReportMetric(lags[len(lags)*99/100], "lag-p99-ns")
}

// BenchmarkOpenLoopMaxRate finds the highest open-loop rate of 16-token
// streaming requests this client sends with lateness p99 under 2 ms, against
// the simulator in a separate process. `make bench-client` pins the client
// and the simulator to different cores with taskset; run alone, both share
// the machine. Reported as max-rate-rps; each step replays 3 s.
func BenchmarkOpenLoopMaxRate(b *testing.B) {
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), simChildEnv+"=1")
	if cpu := os.Getenv("SERVETRACE_SIM_CPU"); cpu != "" {
		child = exec.Command("taskset", "-c", cpu, os.Args[0], "-test.run=^$")
		child.Env = append(os.Environ(), simChildEnv+"=1")
	}
	stdin, _ := child.StdinPipe()
	stdout, _ := child.StdoutPipe()
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); child.Wait() }()
	url, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	url = strings.TrimSpace(url)

	best := 0.0
	for b.Loop() {
		for _, rate := range []float64{500, 1000, 1500, 2000, 2500, 3000, 4000, 5000, 6000, 8000} {
			n := int(rate * 3)
			wl := benchWorkload(b, n)
			opts := DefaultOptions()
			opts.Target, opts.Rate, opts.Arrival, opts.IgnoreEOS = url, rate, ArrivalConstant, true
			opts.MaxLateness = 2 * time.Millisecond
			info, err := Run(context.Background(), wl, filepath.Join(b.TempDir(), "run"), opts)
			if err != nil {
				b.Fatal(err)
			}
			ok := info.Outcomes[trace.OutcomeOK] == int64(n)
			b.Logf("rate %5.0f/s: lateness p50 %.3f ms p99 %.3f ms max %.2f ms, achieved %.0f/s, ok %d/%d",
				rate, info.Lateness.P50Ms, info.Lateness.P99Ms, info.Lateness.MaxMs, info.AchievedRate, info.Outcomes[trace.OutcomeOK], n)
			if !ok || info.Lateness.P99Ms >= 2 {
				break
			}
			best = rate
		}
	}
	b.ReportMetric(best, "max-rate-rps")
}

// benchWorkload writes n requests of 32 prompt and 16 output tokens.
func benchWorkload(b *testing.B, n int) string {
	dir := filepath.Join(b.TempDir(), "wl")
	w, err := trace.NewBucketWriter(dir, trace.WriterOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		w.Write(trace.Request{Identity: trace.Identity{RequestID: strconv.Itoa(i)}, TS: int64(i),
			Shape: trace.Shape{InputTokens: 32, OutputTokens: 16, MaxTokens: 16, API: trace.APICompletions, Stream: true, N: 1}})
	}
	if err := w.Close(&trace.Manifest{}); err != nil {
		b.Fatal(err)
	}
	return dir
}
