package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/servetrace/servetrace/replay/pacing"
	"github.com/servetrace/servetrace/trace"
)

// healthSampler records, once a second, the client process's CPU use, Go
// scheduler latency, goroutines and heap into client.jsonl in the run dir,
// and summarises the run: a starved receive loop on a small machine shows up
// here instead of silently inflating ITL.
type healthSampler struct {
	path    string
	f       *os.File
	start   time.Time
	cpu0    float64
	sched0  *metrics.Float64Histogram
	gc0     uint64
	samples []metrics.Sample
	stop    chan struct{}
	wg      sync.WaitGroup
	gen     atomic.Int64 // the run's heap bound (pacing.BoundHeap), 0 until set
}

const (
	metricSched = "/sched/latencies:seconds"
	metricGC    = "/gc/cycles/total:gc-cycles"
	metricHeap  = "/memory/classes/heap/objects:bytes"
)

// newHealthSampler starts sampling the client's health into
// runDir/client.jsonl, which it creates (never through a link planted
// there).
func newHealthSampler(runDir string) (*healthSampler, error) {
	h := &healthSampler{path: filepath.Join(runDir, "client.jsonl"), start: time.Now(), cpu0: processCPU(), stop: make(chan struct{}),
		samples: []metrics.Sample{{Name: metricSched}, {Name: metricGC}, {Name: metricHeap}, {Name: "/gc/heap/live:bytes"},
			{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/total:cpu-seconds"}, {Name: "/cpu/classes/idle:cpu-seconds"}, {Name: "/gc/heap/goal:bytes"}}}
	metrics.Read(h.samples)
	h.sched0 = copyHist(h.samples[0].Value)
	h.gc0 = uint64Value(h.samples[1].Value)
	f, err := trace.CreateFile(h.path)
	if err != nil {
		return nil, fmt.Errorf("client health: %w", err)
	}
	h.f = f
	h.wg.Go(h.loop)
	return h, nil
}

func (h *healthSampler) loop() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	prevCPU, prevAt := h.cpu0, h.start
	prevSched := h.sched0
	var out io.Writer = io.Discard
	if h.f != nil {
		out = h.f
	}
	enc := json.NewEncoder(out)
	// The collector's share of the CPU the process used (not of what it
	// could have: on a shared machine that would hide a busy collector).
	prevGC, prevUsed := h.samples[4].Value.Float64(), h.samples[5].Value.Float64()-h.samples[6].Value.Float64()
	var valve pacing.GCValve // lifts the run's heap bound should the collector take over
	for {
		select {
		case <-h.stop:
			return
		case now := <-t.C:
			metrics.Read(h.samples)
			cpu := processCPU()
			sched := copyHist(h.samples[0].Value)
			gcCPU, usedCPU := h.samples[4].Value.Float64(), h.samples[5].Value.Float64()-h.samples[6].Value.Float64()
			share := 0.0
			if usedCPU > prevUsed {
				share = (gcCPU - prevGC) / (usedCPU - prevUsed)
			}
			p99, _ := histDeltaQuantile(prevSched, sched, 0.99)
			enc.Encode(map[string]any{
				"t_s":                  now.Sub(h.start).Seconds(),
				"cpu_utilization":      (cpu - prevCPU) / now.Sub(prevAt).Seconds() / float64(runtime.GOMAXPROCS(0)),
				"sched_latency_p99_ms": p99 * 1e3,
				"goroutines":           runtime.NumGoroutine(),
				"heap_bytes":           uint64Value(h.samples[2].Value),
				"rss_bytes":            residentBytes(),
				"live_heap_bytes":      uint64Value(h.samples[3].Value), // after the last GC: what is really held
				"heap_goal_bytes":      uint64Value(h.samples[7].Value), // the collector's heap goal, which a heap bound lowers
				"gc_cpu_share":         share,
			})
			valve.Observe(h.gen.Load(), gcCPU-prevGC, usedCPU-prevUsed)
			h.noteLift(enc)
			prevCPU, prevAt, prevSched, prevGC, prevUsed = cpu, now, sched, gcCPU, usedCPU
		}
	}
}

// bound tells the sampler its run's heap bound (pacing.BoundHeap's generation).
func (h *healthSampler) bound(gen int64) { h.gen.Store(gen) }

// noteLift writes the lift of the run's bound, if there was one since the
// last call; a lift of another run's is not this run's to report.
func (h *healthSampler) noteLift(enc *json.Encoder) {
	if lift := pacing.TakeLift(); lift != nil && lift.Gen == h.gen.Load() { // a lift's gen is never 0
		enc.Encode(map[string]any{"t_s": lift.At.Sub(h.start).Seconds(), "note": lift.Why})
	}
}

// finish stops sampling and returns the run's summary.
func (h *healthSampler) finish() trace.ClientHealth {
	close(h.stop)
	h.wg.Wait()
	metrics.Read(h.samples)
	wall := time.Since(h.start).Seconds()
	cpu := processCPU() - h.cpu0
	p99, maxv := histDeltaQuantile(h.sched0, copyHist(h.samples[0].Value), 0.99)
	out := trace.ClientHealth{CPUSeconds: cpu, CPUUtilization: cpu / wall / float64(runtime.GOMAXPROCS(0)),
		SchedLatencyP99Ms: p99 * 1e3, SchedLatencyMaxMs: maxv * 1e3, GCCycles: uint32(uint64Value(h.samples[1].Value) - h.gc0)}
	if h.f != nil {
		h.noteLift(json.NewEncoder(h.f)) // lifted after the last sample
		h.f.Close()
		out.Samples = "client.jsonl"
	}
	return out
}

// processCPU returns user+system CPU seconds of this process.
func processCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func uint64Value(v metrics.Value) uint64 {
	if v.Kind() == metrics.KindUint64 {
		return v.Uint64()
	}
	return 0
}

func copyHist(v metrics.Value) *metrics.Float64Histogram {
	if v.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	h := v.Float64Histogram()
	return &metrics.Float64Histogram{Counts: append([]uint64(nil), h.Counts...), Buckets: h.Buckets}
}

// histDeltaQuantile returns the q-quantile and the maximum (as bucket upper
// bounds) of the observations added between two cumulative histograms.
func histDeltaQuantile(before, after *metrics.Float64Histogram, q float64) (quantile, maximum float64) {
	if after == nil {
		return 0, 0
	}
	var total uint64
	delta := make([]uint64, len(after.Counts))
	for i, c := range after.Counts {
		delta[i] = c
		if before != nil && i < len(before.Counts) {
			delta[i] -= before.Counts[i]
		}
		total += delta[i]
	}
	if total == 0 {
		return 0, 0
	}
	upper := func(i int) float64 {
		u := after.Buckets[i+1]
		if math.IsInf(u, 1) {
			return after.Buckets[i]
		}
		return u
	}
	need := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, c := range delta {
		seen += c
		if seen >= need && quantile == 0 {
			quantile = upper(i)
		}
		if c > 0 {
			maximum = upper(i)
		}
	}
	return quantile, maximum
}

// residentBytes is the process's resident set size from /proc (0 where
// /proc is not there).
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}
