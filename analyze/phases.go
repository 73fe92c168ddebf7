package analyze

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/servetrace/servetrace/internal/traceid"
	"github.com/servetrace/servetrace/trace"
)

// Phases is where each request's time went, from the spans the server
// exported about it (trace.ServerPhases) joined to the client's timings
// by trace id. Server durations are measured on the server's clock and
// client ones on the client's; only durations are compared, never times
// across the two clocks.
type Phases struct {
	// OK is the counted ok requests with a first token; Joined those of
	// them whose span arrived.
	OK     int `json:"ok"`
	Joined int `json:"joined"`
	// ResidualMs is client TTFT − server TTFT per joined request: what the
	// network, the HTTP stack and the client add.
	ResidualMs PhaseStat `json:"residual_ms"`
	// TTFT splits the client's TTFT into queue, prefill, the rest of the
	// server's TTFT (API, tokenizing) and the residual; E2E splits its
	// end to end into queue, prefill, decode, the rest of the server's and
	// the residual. Each by band of the client's TTFT (E2E: of E2E).
	TTFT []PhaseBand `json:"ttft"`
	E2E  []PhaseBand `json:"e2e"`
	// Windows is the queue's share of TTFT per time window (--window), so
	// a flash crowd shows queue time taking over.
	Windows []PhaseWindow `json:"windows,omitempty"`
	// Verdict says which phase dominates the slowest 1% by TTFT.
	Verdict string `json:"verdict,omitempty"`
}

// PhaseStat is a few order statistics of a per-request value.
type PhaseStat struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// PhaseBand is the mean share of each phase in a band of requests (all;
// the slowest 10% and 1% by the metric), with a moving-block bootstrap
// interval over the band's requests in send order.
type PhaseBand struct {
	Band     string       `json:"band"`
	Requests int          `json:"requests"`
	MeanMs   float64      `json:"mean_ms"`
	Shares   []PhaseShare `json:"shares"`
}

// PhaseShare is one phase's mean share of the metric in a band.
type PhaseShare struct {
	Phase string     `json:"phase"`
	Share float64    `json:"share"`
	CI95  [2]float64 `json:"ci95"`
}

// PhaseWindow is one time window's queue share of TTFT.
type PhaseWindow struct {
	StartS     float64 `json:"start_s"`
	Requests   int     `json:"requests"`
	QueueShare float64 `json:"queue_share"`
}

// Phase names, in the order the bands list them.
var (
	ttftPhases = []string{"queue", "prefill", "server_other", "residual"}
	e2ePhases  = []string{"queue", "prefill", "decode", "server_other", "residual"}
)

// joinedRequest is one ok request's client timings and server phases.
type joinedRequest struct {
	sentNs        int64
	ttftMs, e2eMs float64
	p             trace.ServerPhases
}

// hasServerPhases reports whether any run directory holds server phases.
func hasServerPhases(dirs []string) bool {
	for _, d := range dirs {
		if _, err := os.Lstat(filepath.Join(d, trace.ServerPhasesName)); err == nil {
			return true
		}
	}
	return false
}

// joinPhases joins the loaded runs' counted ok rows with a first token
// to their server phases, in send order; ok counts those rows, and found
// is false when no run has phases.
func joinPhases(l *loaded, mode TTFTMode) (joined []joinedRequest, ok int, found bool, err error) {
	byID := map[string]trace.ServerPhases{}
	for _, d := range l.dirs {
		rows, has, err := trace.ReadServerPhases(d)
		if err != nil {
			return nil, 0, false, err
		}
		found = found || has
		for _, p := range rows {
			byID[p.TraceID] = p
		}
	}
	if !found || l.cols.requestID == nil {
		return nil, 0, false, nil
	}
	c := l.cols
	for _, run := range l.runIDs {
		for _, i32 := range l.runRows[run] {
			i := int(i32)
			if c.warmup[i] || c.outcome[i] != trace.OutcomeOK || c.sent[i] == null || c.done[i] == null {
				continue
			}
			at := c.firstToken[i]
			if mode == TTFTFirstChunk {
				at = c.firstChunk[i]
			}
			if at == null {
				continue
			}
			ok++
			p, has := byID[traceid.For(run, c.requestID[i]).String()]
			if !has || p.TTFTS == nil {
				continue
			}
			joined = append(joined, joinedRequest{sentNs: c.sent[i], ttftMs: nsToMs(at - c.sent[i]), e2eMs: nsToMs(c.done[i] - c.sent[i]), p: p})
		}
	}
	slices.SortFunc(joined, func(a, b joinedRequest) int { return cmp.Compare(a.sentNs, b.sentNs) })
	return joined, ok, true, nil
}

// serverPhases joins the loaded runs' rows to their server phases and
// sums up where the time went; nil when no run has phases.
func serverPhases(l *loaded, opts Options) (*Phases, []string, error) {
	joined, ok, found, err := joinPhases(l, opts.TTFTMode)
	if err != nil || !found {
		return nil, nil, err
	}
	out := &Phases{OK: ok, Joined: len(joined)}
	var notes []string
	if out.Joined < out.OK {
		notes = append(notes, fmt.Sprintf("server phases: %d of %d ok requests have their server's span; the rest are left out of \"where the time went\"", out.Joined, out.OK))
	}
	if out.Joined == 0 {
		return out, notes, nil
	}
	residual := make([]float64, len(joined))
	for k, j := range joined {
		residual[k] = j.ttftMs - *j.p.TTFTS*1e3
	}
	out.ResidualMs = phaseStat(residual)
	boot := opts.Bootstrap
	out.TTFT = phaseBands(joined, func(j joinedRequest) float64 { return j.ttftMs }, ttftPhases, ttftParts, boot)
	out.E2E = phaseBands(joined, func(j joinedRequest) float64 { return j.e2eMs }, e2ePhases, e2eParts, boot)
	if opts.Window > 0 {
		out.Windows = phaseWindows(joined, int64(opts.Window))
	}
	out.Verdict = phaseVerdict(out.TTFT)
	return out, notes, nil
}

// PhaseMetrics are the per-request server phases compare compares when
// both sides have them: which phase moved.
var PhaseMetrics = []string{"server_queue_ms", "server_prefill_ms", "server_decode_ms", "outside_server_ttft_ms"}

// phaseSamples returns each of PhaseMetrics per joined request, in send
// order; nil when the runs have no phases.
func phaseSamples(l *loaded, mode TTFTMode) (map[string][]float64, error) {
	joined, _, found, err := joinPhases(l, mode)
	if err != nil || !found || len(joined) == 0 {
		return nil, err
	}
	out := map[string][]float64{}
	for _, j := range joined {
		if j.p.QueueS != nil {
			out["server_queue_ms"] = append(out["server_queue_ms"], *j.p.QueueS*1e3)
		}
		if j.p.PrefillS != nil {
			out["server_prefill_ms"] = append(out["server_prefill_ms"], *j.p.PrefillS*1e3)
		}
		if j.p.DecodeS != nil {
			out["server_decode_ms"] = append(out["server_decode_ms"], *j.p.DecodeS*1e3)
		}
		out["outside_server_ttft_ms"] = append(out["outside_server_ttft_ms"], j.ttftMs-*j.p.TTFTS*1e3)
	}
	return out, nil
}

// ttftParts splits a request's client TTFT (ms) into ttftPhases.
func ttftParts(j joinedRequest) []float64 {
	q, pf := orZero(j.p.QueueS)*1e3, orZero(j.p.PrefillS)*1e3
	server := *j.p.TTFTS * 1e3
	return []float64{q, pf, server - q - pf, j.ttftMs - server}
}

// e2eParts splits a request's client E2E (ms) into e2ePhases.
func e2eParts(j joinedRequest) []float64 {
	q, pf, dc := orZero(j.p.QueueS)*1e3, orZero(j.p.PrefillS)*1e3, orZero(j.p.DecodeS)*1e3
	server := j.e2eMs
	if j.p.E2ES != nil {
		server = *j.p.E2ES * 1e3
	}
	return []float64{q, pf, dc, server - q - pf - dc, j.e2eMs - server}
}

func orZero(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

// phaseStat is the median, 99th percentile and maximum of x.
func phaseStat(x []float64) PhaseStat {
	s := slices.Clone(x)
	slices.Sort(s)
	at := func(p float64) float64 { return s[min(len(s)-1, int(math.Ceil(p*float64(len(s))))-1)] }
	return PhaseStat{P50: at(0.5), P90: at(0.9), P99: at(0.99), Max: s[len(s)-1]}
}

// phaseBands returns the mean share of each phase for all requests and
// for the slowest 10% and 1% by metric (a band needs 10 requests).
func phaseBands(joined []joinedRequest, metric func(joinedRequest) float64, names []string, parts func(joinedRequest) []float64, boot BootstrapOptions) []PhaseBand {
	values := make([]float64, len(joined))
	for k, j := range joined {
		values[k] = metric(j)
	}
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	var out []PhaseBand
	for _, b := range []struct {
		name string
		top  float64
	}{{"all", 1}, {"slowest 10%", 0.10}, {"slowest 1%", 0.01}} {
		k := int(math.Ceil(b.top * float64(len(sorted))))
		if k < 10 && b.top < 1 {
			continue
		}
		cut := sorted[len(sorted)-k]
		var members []joinedRequest // in send order
		for i, j := range joined {
			if values[i] >= cut && values[i] > 0 {
				members = append(members, j)
			}
		}
		if len(members) == 0 {
			continue
		}
		band := PhaseBand{Band: b.name, Requests: len(members)}
		shares := make([][]float64, len(names))
		for _, j := range members {
			m := metric(j)
			band.MeanMs += m / float64(len(members))
			for p, v := range parts(j) {
				shares[p] = append(shares[p], v/m)
			}
		}
		for p, name := range names {
			lo, hi := blockMeanInterval(shares[p], boot)
			band.Shares = append(band.Shares, PhaseShare{Phase: name, Share: mean(shares[p]), CI95: [2]float64{lo, hi}})
		}
		out = append(out, band)
	}
	return out
}

// blockMeanInterval is a 95% moving-block bootstrap interval for the mean
// of x, in time order: requests close in time share a server's state, so
// blocks keep that dependence (the block length from x's autocorrelation
// unless boot.Block is set).
func blockMeanInterval(x []float64, boot BootstrapOptions) (lo, hi float64) {
	n := len(x)
	if n < 2 {
		m := mean(x)
		return m, m
	}
	l := blockFor(x, boot.Block)
	resamples := cmp.Or(boot.Resamples, 2000)
	rng := rand.New(rand.NewPCG(boot.Seed, 0x9e3779b97f4a7c15))
	prefix := make([]float64, n+1)
	for i, v := range x {
		prefix[i+1] = prefix[i] + v
	}
	blocks := (n + l - 1) / l
	means := make([]float64, resamples)
	for r := range means {
		sum := 0.0
		for range blocks {
			s := rng.IntN(n - l + 1)
			sum += prefix[s+l] - prefix[s]
		}
		means[r] = sum / float64(blocks*l)
	}
	slices.Sort(means)
	return means[int(0.025*float64(resamples))], means[min(resamples-1, int(0.975*float64(resamples)))]
}

// phaseWindows is the queue's share of TTFT per window of send time.
func phaseWindows(joined []joinedRequest, windowNs int64) []PhaseWindow {
	start := joined[0].sentNs
	var out []PhaseWindow
	for _, j := range joined {
		k := int((j.sentNs - start) / windowNs)
		for len(out) <= k {
			out = append(out, PhaseWindow{StartS: float64(int64(len(out))*windowNs) / 1e9})
		}
		w := &out[k]
		w.Requests++
		if j.ttftMs > 0 {
			w.QueueShare += (orZero(j.p.QueueS)*1e3/j.ttftMs - w.QueueShare) / float64(w.Requests)
		}
	}
	return out
}

// phaseVerdict names the phase with the largest mean share of the
// slowest band's TTFT.
func phaseVerdict(bands []PhaseBand) string {
	if len(bands) == 0 {
		return ""
	}
	b := bands[len(bands)-1]
	top := b.Shares[0]
	for _, s := range b.Shares[1:] {
		if s.Share > top.Share {
			top = s
		}
	}
	what := map[string]string{"queue": "waiting in the server's queue", "prefill": "prefill", "server_other": "the server outside its scheduler (API, tokenizing)",
		"residual": "outside the server (network, HTTP, the client)"}[top.Phase]
	return fmt.Sprintf("of the %s by TTFT (%d requests, mean %.0f ms), %.0f%% (95%% CI %.0f–%.0f%%) was %s", b.Band, b.Requests, b.MeanMs,
		100*top.Share, 100*top.CI95[0], 100*top.CI95[1], what)
}

// phasesText is the report's block on where the time went.
func phasesText(p *Phases) string {
	var b strings.Builder
	fmt.Fprintf(&b, "where the time went (the server's spans of %d of %d ok requests; outside the server, client TTFT − server TTFT: p50 %.2f ms, p99 %.2f ms)", p.Joined, p.OK, p.ResidualMs.P50, p.ResidualMs.P99)
	for _, part := range []struct {
		metric string
		bands  []PhaseBand
	}{{"TTFT", p.TTFT}, {"E2E", p.E2E}} {
		for _, band := range part.bands {
			fmt.Fprintf(&b, "\n  %s, %s (%d requests, mean %.1f ms):", part.metric, band.Band, band.Requests, band.MeanMs)
			for _, s := range band.Shares {
				fmt.Fprintf(&b, " %s %.0f%% [%.0f, %.0f]", strings.ReplaceAll(s.Phase, "_", " "), wholePercent(s.Share), wholePercent(s.CI95[0]), wholePercent(s.CI95[1]))
			}
		}
	}
	if p.Verdict != "" {
		b.WriteString("\n  " + p.Verdict)
	}
	return b.String()
}

// wholePercent is a share in percent for printing to the unit: a share
// that rounds to zero is 0, not "-0" (a server rest of exactly nothing,
// less a float's error).
func wholePercent(share float64) float64 {
	if v := 100 * share; math.Abs(v) >= 0.5 {
		return v
	}
	return 0
}
