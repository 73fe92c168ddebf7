package replay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/internal/procstat"
	"github.com/servetrace/servetrace/replay/pacing"
	"github.com/servetrace/servetrace/trace"
)

// replayChildEnv makes the test binary run one replay and print its peak
// RSS: "TARGET|WORKLOAD|RUN_DIR|DURATION|RATE".
const replayChildEnv = "SERVETRACE_REPLAY_CHILD"

func runReplayChild(spec string) {
	f := strings.Split(spec, "|")
	d, err := time.ParseDuration(f[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rate, _ := strconv.ParseFloat(f[4], 64)
	defer pacing.TuneProcess()()
	o := DefaultOptions()
	o.Target, o.Rate, o.Arrival, o.Duration = f[0], rate, ArrivalConstant, d
	info, err := Run(context.Background(), f[1], f[2], o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("sent %d lateness_p99_ms %.3f\n", info.Outcomes[trace.OutcomeOK], info.Lateness.P99Ms)
	procstat.ReportPeak(os.Stdout)
}

// writeLongWorkload writes n requests 100 µs apart: 20 to 500 prompt
// tokens with their prefix blocks (longer prompts would make a 10M-request
// workload tens of GB), a third of them turns of ten-turn sessions.
func writeLongWorkload(tb testing.TB, dir string, n int) {
	tb.Helper()
	w, err := trace.NewBucketWriter(dir, trace.WriterOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		in := int64(20 + rng.IntN(480))
		q := trace.Request{Identity: trace.Identity{RequestID: "r" + strconv.Itoa(i)}, TS: t0.Add(time.Duration(i) * 100 * time.Microsecond).UnixMicro(),
			Shape: trace.Shape{InputTokens: in, OutputTokens: 16, MaxTokens: 16, API: trace.APIChat, Stream: true, N: 1}}
		q.PrefixBlocks = make([]int64, in/16)
		for b := range q.PrefixBlocks {
			q.PrefixBlocks[b] = int64(b) + int64(i%50)*1000
		}
		if i%3 == 0 {
			q.SessionID, q.Turn = "s"+strconv.Itoa(i/30), int32((i/3)%10)
		}
		if err := w.Write(q); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Close(&trace.Manifest{Kind: "workload", BlockSize: 16}); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkReplayPeakRSS replays 2 s at 1,000 requests/s of a 1M- and a
// 10M-request workload, each in a child process against a simulator in
// another, and reports each one's peak RSS (the least of two runs) and
// their ratio: the schedule streams, so memory follows the look-ahead and
// the rate, not the workload's length. RSS moves with whatever else the
// machine runs, so this is a benchmark (make bench-replay-memory).
func BenchmarkReplayPeakRSS(b *testing.B) {
	dir := b.TempDir()
	target := startSimChild(b, nil)
	runs := 0
	peak := func(n int) int64 {
		wl := filepath.Join(dir, fmt.Sprintf("wl-%d", n))
		if _, err := os.Stat(wl); err != nil {
			start := time.Now()
			writeLongWorkload(b, wl, n)
			b.Logf("wrote a %d-request workload in %v", n, time.Since(start).Round(time.Second))
		}
		runs++
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), replayChildEnv+"="+strings.Join([]string{target, wl, filepath.Join(dir, fmt.Sprintf("run-%d-%d", n, runs)), "2s", "1000"}, "|"))
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("child: %v\n%s", err, out)
		}
		kb := procstat.PeakFromOutput(out)
		if kb == 0 {
			b.Fatalf("no peak memory reported:\n%s", out)
		}
		b.Logf("%d requests: %s peak %d kB, %v in all (the workload's check included)", n, strings.TrimSpace(strings.Split(string(out), "\n")[0]), kb, time.Since(start).Round(time.Millisecond))
		return kb
	}
	for range b.N {
		one, ten := min(peak(1_000_000), peak(1_000_000)), min(peak(10_000_000), peak(10_000_000))
		b.ReportMetric(float64(one), "peak-kB-1M")
		b.ReportMetric(float64(ten), "peak-kB-10M")
		b.ReportMetric(float64(ten)/float64(one), "ratio")
	}
}
