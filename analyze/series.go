package analyze

import (
	"cmp"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/servetrace/servetrace/internal/promtext"
	"github.com/servetrace/servetrace/internal/regfile"
	"github.com/servetrace/servetrace/internal/servermetrics"
	"github.com/servetrace/servetrace/trace"
)

// Regions of a time series.
const (
	RegionCold       = "cold"
	RegionWarm       = "warm"
	RegionSteady     = "steady"
	RegionSaturated  = "saturated"
	RegionRecovering = "recovering"
)

// Series is a run's time series in fixed windows, with regions and the
// recovery after an overload.
//
// Regions, in this order of precedence:
//   - saturated: the queue grows through the window: in-flight requests rise
//     by more than 10% and by more than Poisson noise (twice the square root
//     of sends plus completions) while completions fall short of 95% of
//     sends, or the server's waiting gauge rises by at least 2 and 10%.
//   - recovering: after a saturated window, until p99 TTFT, in-flight
//     requests and (where scraped) waiting requests and KV usage are back
//     within 10% of their steady values.
//   - cold: leading windows whose TTFT p50 exceeds 1.5× the steady p50,
//     beyond its own noise (the lower end of its 95% interval).
//   - warm: leading windows after those, still above 1.1× the steady p50.
//   - steady: the rest.
//
// Steady values are medians over the windows before the first saturated
// one (all non-saturated windows when the run starts saturated).
type Series struct {
	WindowS float64  `json:"window_s"`
	Windows []Window `json:"windows"`
	// Steady holds the reference values the regions are judged against.
	Steady SteadyValues `json:"steady"`
	// Recovery is set when some window broke the SLO (or, without --slo,
	// was saturated).
	Recovery *Recovery `json:"recovery,omitempty"`
	// RegionTTFT is, per region, the TTFT of the requests sent in its
	// windows with headline intervals. A whole-run percentile under a ramp
	// or a flash crowd describes the run's own mixture of regions, not a
	// steady state; these keep the steady state's apart.
	RegionTTFT map[string]Distribution `json:"region_ttft_ms,omitempty"`
}

// Window is one interval [StartS, StartS+WindowS) of the run's clock.
// Latency percentiles are over the requests sent in the window.
type Window struct {
	StartS           float64  `json:"start_s"`
	Sent             int      `json:"sent"`
	Completed        int      `json:"completed_ok"`
	Failed           int      `json:"failed"`
	SendRate         float64  `json:"send_rate"`
	CompletionRate   float64  `json:"completion_rate"`
	OutputTokensPerS float64  `json:"output_tokens_per_s"`
	GoodputPerS      *float64 `json:"goodput_per_s,omitempty"`
	TTFTP50Ms        *float64 `json:"ttft_p50_ms,omitempty"`
	TTFTP99Ms        *float64 `json:"ttft_p99_ms,omitempty"`
	E2EP99Ms         *float64 `json:"e2e_p99_ms,omitempty"`
	// InFlight counts requests sent and not finished at the window's end.
	InFlight int `json:"in_flight"`
	// Server gauges from the last scrape in the window (--metrics-url).
	Running *float64 `json:"server_running,omitempty"`
	Waiting *float64 `json:"server_waiting,omitempty"`
	KVUsage *float64 `json:"server_kv_usage,omitempty"`
	// Engine counters over the window (from the last scrape before it to
	// the last in it): preemptions, and the prefix cache's hit rate (hit
	// over queried tokens).
	Preemptions   *float64 `json:"server_preemptions,omitempty"`
	PrefixHitRate *float64 `json:"server_prefix_hit_rate,omitempty"`
	// The engine's request-phase histograms over the window (vLLM's
	// vllm:request_queue_time_seconds, _prefill_, _decode_ and
	// e2e_request_latency_seconds): the mean of each phase over the
	// requests that finished in it, Δsum/Δcount, in ms. Aggregate: no
	// request's own split, and by finishing time, not send time.
	AggQueueMs   *float64 `json:"server_agg_queue_mean_ms,omitempty"`
	AggPrefillMs *float64 `json:"server_agg_prefill_mean_ms,omitempty"`
	AggDecodeMs  *float64 `json:"server_agg_decode_mean_ms,omitempty"`
	AggE2EMs     *float64 `json:"server_agg_e2e_mean_ms,omitempty"`
	// GPU gauges of a DCGM exporter in the last scrape: utilisation (mean
	// over GPUs, %), power (W) and memory used (MiB), summed over GPUs (and
	// over exporters, with several --metrics-url gpu=).
	GPUUtilPct    *float64 `json:"gpu_util_pct,omitempty"`
	GPUPowerW     *float64 `json:"gpu_power_w,omitempty"`
	GPUMemUsedMiB *float64 `json:"gpu_mem_used_mib,omitempty"`
	Region        string   `json:"region"`
	BreaksSLO     bool     `json:"breaks_slo,omitempty"`
}

// SteadyValues are the medians the regions are judged against.
type SteadyValues struct {
	TTFTP50Ms float64  `json:"ttft_p50_ms"`
	TTFTP99Ms float64  `json:"ttft_p99_ms"`
	InFlight  float64  `json:"in_flight"`
	Waiting   *float64 `json:"server_waiting,omitempty"`
	KVUsage   *float64 `json:"server_kv_usage,omitempty"`
}

// Recovery measures an overload: from the first window that breaks the
// SLO to the first window after the load drops where p99 TTFT, the queue
// and KV usage are back within 10% of their steady values.
type Recovery struct {
	FirstBreakS float64 `json:"first_break_s"`
	// LoadDropS is the start of the first window after the break that is
	// no longer saturated.
	LoadDropS *float64 `json:"load_drop_s,omitempty"`
	// RecoveredS is the start of the first window back within 10%.
	RecoveredS *float64 `json:"recovered_s,omitempty"`
	// RecoveryS is RecoveredS − FirstBreakS.
	RecoveryS *float64 `json:"recovery_s,omitempty"`
	Note      string   `json:"note"`
}

// scrape is one server metrics scrape on the run's clock.
type scrape struct {
	atNs int64
	// file is the scrape's path; cut says replay kept only the first
	// whole lines of a too-long answer.
	file string
	cut  bool
	// source names the endpoint: its scrape files' prefix ("scrape-" for
	// the engine's, "gpu-scrape-" for a DCGM exporter's); role is the
	// header's (empty in runs before roles).
	source, role             string
	running, waiting, kvUsed float64
	hasRunning, hasWaiting   bool
	hasKV                    bool
	// GPU gauges of a DCGM exporter, over its GPUs: utilisation summed
	// (gpus of them), power and memory used summed, the energy counter
	// (mJ since the driver loaded) summed.
	gpuUtil, powerW, fbUsedMiB, energyMJ float64
	gpus                                 int
	hasPower, hasEnergy, hasFB           bool
	// Engine counters: preemptions, prefix cache hit and queried tokens.
	preemptions, prefixHits, prefixQueries float64
	hasPreemptions, hasPrefix              bool
	// Speculative decoding counters (specdecode.go).
	specDrafts, specDraftTokens, specAccepted float64
	hasSpec                                   bool
	// The engine's request-phase histograms' _sum (s) and _count, by
	// aggregatePhases' order: queue, prefill, decode, end to end.
	phaseSum, phaseCount [4]float64
	hasPhase             [4]bool
}

// aggregatePhases are the histogram kinds of a scrape's phaseSum, in order.
var aggregatePhases = [4]servermetrics.Kind{servermetrics.QueueTime, servermetrics.PrefillTime, servermetrics.DecodeTime, servermetrics.E2ETime}

// maxScrapeFileBytes bounds a scrape file: replay keeps at most 32 MiB of
// an endpoint's answer, and a header line.
const maxScrapeFileBytes = 33 << 20

// readScrapes reads the metrics/*.prom scrapes of the run directories.
func readScrapes(dirs []string) ([]scrape, error) {
	var out []scrape
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "metrics", "*.prom"))
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			b, err := regfile.ReadFile(f, maxScrapeFileBytes)
			if err != nil {
				return nil, err
			}
			if s, ok := parseScrape(b); ok {
				base := filepath.Base(f)
				s.source, s.file = base[:strings.LastIndex(base, "scrape-")+len("scrape-")], f
				out = append(out, s)
			}
		}
	}
	slices.SortFunc(out, func(a, b scrape) int { return int(a.atNs - b.atNs) })
	return out, nil
}

// scrapeNotes says which scrapes replay cut short.
func scrapeNotes(scrapes []scrape) []string {
	cut, first := 0, ""
	for _, s := range scrapes {
		if s.cut {
			if cut++; first == "" {
				first = s.file
			}
		}
	}
	if cut == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%d metrics scrapes were cut short by replay, the endpoint's answer being past 32 MiB (first: %s): the gauges after the cut are missing from them", cut, first)}
}

// parseScrape reads a scrape file: the servetrace header's run_ns and the
// server metrics servermetrics names, summed over label sets. A failed
// scrape is skipped.
func parseScrape(b []byte) (scrape, bool) {
	var s scrape
	header, failed := false, false
	comment := func(line string) {
		switch {
		case strings.HasPrefix(line, trace.ScrapeCutPrefix):
			s.cut = true
		case strings.HasPrefix(line, "# scrape failed"):
			failed = true
		case strings.HasPrefix(line, "# servetrace scrape "):
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "run_ns="); ok {
					if n, err := strconv.ParseInt(v, 10, 64); err == nil {
						s.atNs, header = n, true
					}
				}
				if v, ok := strings.CutPrefix(f, "role="); ok {
					s.role = v
				}
			}
		}
	}
	promtext.Scan(string(b), func(m promtext.Sample) { s.add(m) }, comment)
	return s, header && !failed
}

// add sums one sample into the scrape by what servermetrics says it is.
func (s *scrape) add(m promtext.Sample) {
	v := m.Value
	kind, part := servermetrics.Classify(m.Name)
	if i := slices.Index(aggregatePhases[:], kind); i >= 0 {
		switch part {
		case servermetrics.Sum:
			s.phaseSum[i], s.hasPhase[i] = s.phaseSum[i]+v, true
		case servermetrics.Count:
			s.phaseCount[i] += v
		}
		return
	}
	switch kind {
	case servermetrics.Running:
		s.running, s.hasRunning = s.running+v, true
	case servermetrics.Waiting:
		s.waiting, s.hasWaiting = s.waiting+v, true
	case servermetrics.KVUsage:
		s.kvUsed, s.hasKV = s.kvUsed+v, true
	case servermetrics.GPUUtil:
		s.gpuUtil, s.gpus = s.gpuUtil+v, s.gpus+1
	case servermetrics.GPUPower:
		s.powerW, s.hasPower = s.powerW+v, true
	case servermetrics.GPUMemUsed:
		s.fbUsedMiB, s.hasFB = s.fbUsedMiB+v, true
	case servermetrics.GPUEnergy:
		s.energyMJ, s.hasEnergy = s.energyMJ+v, true
	case servermetrics.Preemptions:
		s.preemptions, s.hasPreemptions = s.preemptions+v, true
	case servermetrics.PrefixHits:
		s.prefixHits, s.hasPrefix = s.prefixHits+v, true
	case servermetrics.PrefixQueries:
		s.prefixQueries += v
	case servermetrics.SpecDrafts:
		s.specDrafts, s.hasSpec = s.specDrafts+v, true
	case servermetrics.SpecDraftTokens:
		s.specDraftTokens, s.hasSpec = s.specDraftTokens+v, true
	case servermetrics.SpecAccepted:
		s.specAccepted, s.hasSpec = s.specAccepted+v, true
	}
}

// timeSeries builds the windows, labels regions and measures recovery.
func timeSeries(c *resultColumns, scrapes []scrape, opts Options) *Series {
	w := int64(opts.Window)
	nw := int(maxTime(c)/w) + 1
	ser := &Series{WindowS: float64(w) / 1e9, Windows: make([]Window, nw)}
	ttfts := make([][]float64, nw)
	var sentTTFT []timedValue // every request's TTFT, at its send time
	e2es := make([][]float64, nw)
	outTok := make([]float64, nw)
	good := make([]int, nw)
	delta := make([]int, nw+1)   // in-flight changes at window boundaries
	p50Lo := make([]float64, nw) // lower 95% bound of each window's TTFT p50
	slo := !opts.SLO.Empty()
	for i := range c.n {
		if c.warmup[i] || c.sent[i] == null {
			continue
		}
		sent := c.sent[i]
		ws := int(sent / w)
		ser.Windows[ws].Sent++
		finish := c.done[i]
		if finish == null {
			finish = sent
		}
		fw := min(int(finish/w), nw-1)
		// In flight at the end of windows ws..fw-1.
		delta[ws]++
		delta[fw]--
		if c.outcome[i] != trace.OutcomeOK || c.done[i] == null {
			ser.Windows[fw].Failed++
			continue
		}
		ser.Windows[fw].Completed++
		e2e := nsToMs(c.done[i] - sent)
		e2es[ws] = append(e2es[ws], e2e)
		ttftAt := c.firstToken[i]
		if opts.TTFTMode == TTFTFirstChunk {
			ttftAt = c.firstChunk[i]
		}
		ttft, hasTTFT := 0.0, ttftAt != null
		if hasTTFT {
			ttft = nsToMs(ttftAt - sent)
			ttfts[ws] = append(ttfts[ws], ttft)
			sentTTFT = append(sentTTFT, timedValue{sent, ttft})
		}
		times := c.tokenTimesOf(i)
		if len(times) > 0 {
			per := float64(c.observedOut[i]) / float64(len(times))
			for _, t := range times {
				outTok[min(int((sent+t)/w), nw-1)] += per
			}
		}
		tpot, hasTPOT := 0.0, false
		if ft := c.firstToken[i]; ft != null && c.observedOut[i] > 1 {
			tpot, hasTPOT = nsToMs(c.done[i]-ft)/float64(c.observedOut[i]-1), true
		}
		if slo && opts.SLO.meets(ttft, tpot, e2e, hasTTFT, hasTPOT) {
			good[fw]++
		}
	}
	sec := float64(w) / 1e9
	inFlight := 0
	si := 0
	gauges := newWindowGauges()
	for k := range ser.Windows {
		win := &ser.Windows[k]
		win.StartS = float64(k) * sec
		win.SendRate, win.CompletionRate, win.OutputTokensPerS = float64(win.Sent)/sec, float64(win.Completed)/sec, outTok[k]/sec
		if slo {
			win.GoodputPerS = new(float64(good[k]) / sec)
		}
		inFlight += delta[k]
		win.InFlight = inFlight
		if v := ttfts[k]; len(v) > 0 {
			slices.Sort(v)
			win.TTFTP50Ms, win.TTFTP99Ms = new(Percentile(v, 0.5)), new(Percentile(v, 0.99))
			if lo, _, ok, _ := OrderStatCI(len(v), 0.5, 0.95); ok {
				p50Lo[k] = v[lo-1]
			}
		}
		if v := e2es[k]; len(v) > 0 {
			slices.Sort(v)
			win.E2EP99Ms = new(Percentile(v, 0.99))
		}
		for si < len(scrapes) && scrapes[si].atNs < int64(k+1)*w {
			gauges.take(&scrapes[si])
			si++
		}
		gauges.fill(win)
		if slo {
			win.BreaksSLO = (opts.SLO.TTFT > 0 && win.TTFTP99Ms != nil && *win.TTFTP99Ms > ms(opts.SLO.TTFT)) ||
				(opts.SLO.E2E > 0 && win.E2EP99Ms != nil && *win.E2EP99Ms > ms(opts.SLO.E2E))
		}
	}
	labelRegions(ser, slo, p50Lo)
	ser.RegionTTFT = regionTTFT(ser, sentTTFT, opts)
	return ser
}

// regionTTFT summarizes, per region, the TTFTs of requests sent in its
// windows, in send order.
func regionTTFT(ser *Series, sentTTFT []timedValue, opts Options) map[string]Distribution {
	slices.SortStableFunc(sentTTFT, func(a, b timedValue) int { return cmp.Compare(a.at, b.at) })
	w := int64(ser.WindowS * 1e9)
	byRegion := map[string][]float64{}
	for _, tv := range sentTTFT {
		if r := ser.Windows[min(int(tv.at/w), len(ser.Windows)-1)].Region; r != "" {
			byRegion[r] = append(byRegion[r], tv.v)
		}
	}
	out := map[string]Distribution{}
	for r, v := range byRegion {
		out[r] = SummarizeBootstrap(v, opts.Percentiles, opts.Bootstrap, opts.Precision, opts.Interval)
	}
	return out
}

// labelRegions sets each window's region and the recovery (see Series).
func labelRegions(ser *Series, slo bool, p50Lo []float64) {
	ws := ser.Windows
	prevInFlight := 0
	var prevWaiting *float64
	firstSat := -1
	for k := range ws {
		win := &ws[k]
		// A rise beyond Poisson noise: twice the standard deviation of
		// sends minus completions, and at least 10%.
		rise := float64(win.InFlight - prevInFlight)
		noise := 2 * math.Sqrt(float64(win.Sent+win.Completed))
		grows := rise > max(noise, 0.1*float64(prevInFlight), 1) && float64(win.Completed) < 0.95*float64(win.Sent)
		if win.Waiting != nil && prevWaiting != nil && *win.Waiting-*prevWaiting >= max(2, 0.1**prevWaiting) {
			grows = true
		}
		if grows {
			win.Region = RegionSaturated
			if firstSat < 0 {
				firstSat = k
			}
		}
		prevInFlight, prevWaiting = win.InFlight, win.Waiting
	}
	// Steady values: before the first saturated window, else all others.
	var ref []Window
	for k := range ws {
		if ws[k].Region == "" && ws[k].Sent > 0 && (firstSat < 0 || k < firstSat) {
			ref = append(ref, ws[k])
		}
	}
	if len(ref) == 0 {
		for k := range ws {
			if ws[k].Region == "" && ws[k].Sent > 0 {
				ref = append(ref, ws[k])
			}
		}
	}
	ser.Steady = steadyOf(ref)
	st := ser.Steady
	within := func(v, ref float64) bool { return v <= 1.1*ref+1e-9 }
	recovered := func(win Window) bool {
		if win.TTFTP99Ms != nil && st.TTFTP99Ms > 0 && !within(*win.TTFTP99Ms, st.TTFTP99Ms) {
			return false
		}
		if float64(win.InFlight) > 1.1*st.InFlight+1 {
			return false
		}
		if st.Waiting != nil && win.Waiting != nil && *win.Waiting > 1.1**st.Waiting+1 {
			return false
		}
		return st.KVUsage == nil || win.KVUsage == nil || within(*win.KVUsage, *st.KVUsage+0.01)
	}
	// Recovering: after a saturated window until back within 10%.
	recovering := false
	for k := range ws {
		switch {
		case ws[k].Region == RegionSaturated:
			recovering = true
		case recovering && !recovered(ws[k]):
			ws[k].Region = RegionRecovering
		default:
			recovering = false
		}
	}
	// Cold and warm: leading windows slower than steady.
	leading := true
	for k := range ws {
		if ws[k].Region != "" {
			leading = false
			continue
		}
		lo := p50Lo[k] // slower than steady beyond the window's own noise
		switch {
		case leading && st.TTFTP50Ms > 0 && lo > 1.5*st.TTFTP50Ms:
			ws[k].Region = RegionCold
		case leading && st.TTFTP50Ms > 0 && lo > 1.1*st.TTFTP50Ms:
			ws[k].Region = RegionWarm
		default:
			leading = false
			ws[k].Region = RegionSteady
		}
	}
	// Recovery.
	first := -1
	for k := range ws {
		if (slo && ws[k].BreaksSLO) || (!slo && ws[k].Region == RegionSaturated) {
			first = k
			break
		}
	}
	if first < 0 {
		return
	}
	rec := &Recovery{FirstBreakS: ws[first].StartS}
	drop := -1
	for k := first + 1; k < len(ws); k++ {
		if ws[k].Region != RegionSaturated {
			drop = k
			break
		}
	}
	if drop < 0 {
		rec.Note = "the load never dropped below saturation before the run ended"
		ser.Recovery = rec
		return
	}
	rec.LoadDropS = new(ws[drop].StartS)
	for k := drop; k < len(ws); k++ {
		if ws[k].Region != RegionRecovering && ws[k].Region != RegionSaturated && recovered(ws[k]) && !(slo && ws[k].BreaksSLO) {
			rec.RecoveredS = new(ws[k].StartS)
			rec.RecoveryS = new(ws[k].StartS - rec.FirstBreakS)
			rec.Note = "p99 TTFT, queue and KV usage back within 10% of steady"
			ser.Recovery = rec
			return
		}
	}
	rec.Note = "not back within 10% of steady by the end of the run"
	ser.Recovery = rec
}

// steadyOf takes the medians of the reference windows.
func steadyOf(ref []Window) SteadyValues {
	med := func(get func(Window) *float64) *float64 {
		var v []float64
		for _, w := range ref {
			if p := get(w); p != nil {
				v = append(v, *p)
			}
		}
		if len(v) == 0 {
			return nil
		}
		slices.Sort(v)
		return new(Percentile(v, 0.5))
	}
	var st SteadyValues
	if p := med(func(w Window) *float64 { return w.TTFTP50Ms }); p != nil {
		st.TTFTP50Ms = *p
	}
	if p := med(func(w Window) *float64 { return w.TTFTP99Ms }); p != nil {
		st.TTFTP99Ms = *p
	}
	if p := med(func(w Window) *float64 { return new(float64(w.InFlight)) }); p != nil {
		st.InFlight = *p
	}
	st.Waiting = med(func(w Window) *float64 { return w.Waiting })
	st.KVUsage = med(func(w Window) *float64 { return w.KVUsage })
	return st
}
