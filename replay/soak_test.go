package replay

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/replay/pacing"
)

// TestSoak replays at a steady 1,000 req/s (SERVETRACE_SOAK_RATE) for
// SERVETRACE_SOAK (e.g. 10m; make soak) against the simulator in its own
// process, and checks from the client.jsonl samples in the run dir that
// the replayer stays flat: the heap retained after a full collection at
// 95% of the run within 10% of that at 30%; from the second fifth of the
// run to the last, RSS within 25% or under the heap bound Run sets under
// TuneProcess (plus the runtime's own memory), and goroutines within 10%;
// and RSS past the first fifth at most maxSteadyRSS while the heap
// ceiling holds. Skipped unless asked for;
// SERVETRACE_SOAK_HEAPPROFILE=path also writes heap profiles path.0 and
// path.1 at 30% and 95%.
// runtimeOverhead is what RSS holds beyond the Go heap's memory limit:
// stacks, the collector's metadata, the binary.
const runtimeOverhead = 64e6

// maxSteadyRSS is the most a steady replay under the heap ceiling may hold.
const maxSteadyRSS = 300e6

func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("SERVETRACE_SOAK"))
	if err != nil || d <= 0 {
		t.Skip("set SERVETRACE_SOAK=10m (make soak) to run the soak test")
	}
	rate := 1000
	if v, err := strconv.Atoi(os.Getenv("SERVETRACE_SOAK_RATE")); err == nil && v > 0 {
		rate = v
	}
	url := startSimChild(t, nil)
	wl := workload(t, int(d.Seconds()*float64(rate))+rate, time.Millisecond)
	run := filepath.Join(t.TempDir(), "run")
	opts := DefaultOptions()
	opts.Target, opts.Rate, opts.Arrival, opts.Duration = url, float64(rate), ArrivalPoisson, d
	defer pacing.TuneProcess()()
	// What the process really retains: the live heap right after a full
	// collection, at 30% and at 95% of the run. The live heap the
	// collector reports after its own cycles also counts what was
	// allocated while it marked (at GOGC 400, up to twice what is
	// retained), so it drifts up as the pacer settles without any leak.
	var retained [2]float64
	var bound float64 // the memory limit pacing.BoundHeap set, read during the run
	var profileErr error
	for i, at := range []time.Duration{d * 3 / 10, d * 95 / 100} {
		timer := time.AfterFunc(at, func() {
			runtime.GC()
			sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
			metrics.Read(sample)
			retained[i] = float64(sample[0].Value.Uint64())
			bound = float64(pacing.HeapBound())
			if path := os.Getenv("SERVETRACE_SOAK_HEAPPROFILE"); path != "" {
				f, err := os.Create(fmt.Sprintf("%s.%d", path, i)) // for go tool pprof -base
				if err == nil {
					err = errors.Join(pprof.WriteHeapProfile(f), f.Close())
				}
				profileErr = err
			}
		})
		defer timer.Stop()
	}
	info, err := Run(context.Background(), wl, run, opts)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(run, "client.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rss, live, gor []float64
	maxGC, minGoal := 0.0, math.Inf(1) // minGoal: the least heap goal over the live heap
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s struct {
			RSS        float64 `json:"rss_bytes"`
			Live       float64 `json:"live_heap_bytes"`
			Goroutines float64 `json:"goroutines"`
			GCShare    float64 `json:"gc_cpu_share"`
			Goal       float64 `json:"heap_goal_bytes"`
			Note       string  `json:"note"`
		}
		if json.Unmarshal(sc.Bytes(), &s) != nil {
			continue
		}
		if s.Note != "" {
			t.Errorf("a steady replay should never need its heap bound lifted: %s", s.Note)
		}
		if s.RSS > 0 {
			rss, live, gor = append(rss, s.RSS), append(live, s.Live), append(gor, s.Goroutines)
			maxGC = max(maxGC, s.GCShare)
			if s.Live > 0 {
				minGoal = min(minGoal, s.Goal/s.Live)
			}
		}
	}
	t.Logf("the collector's largest share of the CPU used in one second: %.1f%%; least heap goal %.2f times the live heap (the bound is lifted under %g); lateness p99 %.2f ms, max %.2f ms; client CPU %.0f%%",
		100*maxGC, minGoal, pacing.MinGoalRatio, info.Lateness.P99Ms, info.Lateness.MaxMs, 100*info.Client.CPUUtilization)
	if len(rss) < 10 {
		t.Fatalf("%d samples in client.jsonl", len(rss))
	}
	var series strings.Builder
	for i := 0; i < len(live); i += max(1, len(live)/10) {
		fmt.Fprintf(&series, " %.0f/%.0f", live[i]/1e6, rss[i]/1e6)
	}
	t.Logf("live heap/RSS (MB), every tenth of the run:%s", series.String())
	median := func(x []float64) float64 { y := slices.Clone(x); slices.Sort(y); return y[len(y)/2] }
	// Compare the second fifth of the run (past start-up) with the last.
	k := len(rss) / 5
	rssEarly, rssLate := median(rss[k:2*k]), median(rss[4*k:])
	liveEarly, liveLate := median(live[k:2*k]), median(live[4*k:])
	gEarly, gLate := median(gor[k:2*k]), median(gor[4*k:])
	t.Logf("%s at %d req/s: %d requests, %d samples; live heap %.0f → %.0f MB, RSS %.0f → %.0f MB, goroutines %.0f → %.0f",
		d, rate, info.Scheduled, len(rss), liveEarly/1e6, liveLate/1e6, rssEarly/1e6, rssLate/1e6, gEarly, gLate)
	t.Logf("retained after a full collection: %.1f MB at 30%% of the run, %.1f MB at 95%%; heap bound %.0f MB", retained[0]/1e6, retained[1]/1e6, bound/1e6)
	if profileErr != nil {
		t.Errorf("heap profile: %v", profileErr)
	}
	// What the process holds must not grow with run time; RSS settles at
	// the collector's headroom over that (GOGC 400 during a replay, held by
	// the memory limit pacing.BoundHeap sets).
	if retained[0] == 0 || retained[1] > 1.1*retained[0]+5e6 {
		t.Errorf("retained heap grew from %.1f to %.1f MB over the run: a leak", retained[0]/1e6, retained[1]/1e6)
	}
	// The live heap the collector reports is not checked: at GOGC 400 it
	// counts what was allocated while it marked, so it swings with the
	// phase of its cycles (34 to 74 MB within runs whose retained heap
	// stayed flat); the retained heap above is the leak check.
	// RSS rises toward the memory limit as the collector's goal drifts
	// (its figure counts what is allocated while it marks); with the
	// workload streamed rather than held, the run starts well under it.
	// Past the limit plus the runtime's own memory, or by more than a
	// quarter when no limit is in force, it is growing.
	if rssLate > 1.25*rssEarly && (bound == 0 || rssLate > bound+runtimeOverhead) {
		t.Errorf("RSS grew from %.0f to %.0f MB over the run, past the heap bound of %.0f MB and the runtime's %.0f MB", rssEarly/1e6, rssLate/1e6, bound/1e6, runtimeOverhead/1e6)
	}
	// Under the heap ceiling a steady replay holds 300 MB at most, however
	// long it runs (issue 15's budget for a day-long replay on one machine).
	// Whether the ceiling holds follows from the live heap the test
	// measured, not from the bound the code under test set.
	if peak := slices.Max(rss[k:]); 3*retained[0] <= pacing.HeapCeiling && peak > maxSteadyRSS {
		t.Errorf("RSS reached %.0f MB past the first fifth of the run: over the %.0f MB a steady replay may hold", peak/1e6, maxSteadyRSS/1e6)
	}
	if gLate > 1.1*gEarly+5 {
		t.Errorf("goroutines grew from %.0f to %.0f over the run", gEarly, gLate)
	}
}
