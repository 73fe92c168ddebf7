package synth

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	"gonum.org/v1/gonum/stat"

	"github.com/servetrace/servetrace/internal/rank"
	"github.com/servetrace/servetrace/trace"
)

// FitOptions controls Fit.
type FitOptions struct {
	// Knots is the number of quantile-table knots per length marginal
	// (default 1025).
	Knots int
	// Span restricts the fit to a part of the trace by time, as fractions
	// of its span: {0, 0.7} fits the first 70%. Zero means the whole trace.
	Span [2]float64
	// NoLatent skips the latent-rate layer (its fit simulates the process
	// a few hundred times).
	NoLatent bool
	// Progress, when set, is called with a line of progress now and then.
	Progress func(string)
}

// maxClasses bounds the length classes; rarer (model, api) pairs join the
// last class.
const maxClasses = 8

// maxTrackedClasses bounds the (model, api) pairs a fit's accumulation
// keeps apart; rarer ones join the last. Which pairs are the model's
// maxClasses is known only once every row is in (a shard sees its own
// first pairs), so the accumulation keeps more apart than the model and
// the finish folds them: a sharded fit's classes are exact up to this many
// pairs.
const maxTrackedClasses = 4 * maxClasses

// Fit reads the bucket at dir in one pass, in bounded memory (8 bytes per
// first turn for arrival times; histograms, reservoirs and a bounded block
// memory for the rest), and fits a Model to it. The model passes
// Model.Validate; a cancelled ctx returns its error within about a second.
// It is a sharded fit of one shard: the statistics of the span, finished
// (FitPartial and FitMerged split the same work over machines).
func Fit(ctx context.Context, dir string, opts FitOptions) (*Model, error) {
	p, err := accumulate(ctx, dir, opts, 0, 1)
	if err != nil {
		return nil, err
	}
	return finish(ctx, p, opts)
}

// fitState is what a fit accumulates over the rows of a time slice before
// any law is fitted: counts, histograms, reservoirs with their seen counts,
// the first turns' arrival times. States of consecutive slices merge
// (fitState.merge) into the state of their union.
type fitState struct {
	rows, firstTurns int64
	sawSessions      bool
	// arrivals are the first turns' times in seconds, in time order.
	arrivals []float64
	// classes are the (model, api) pairs in the order first seen.
	classes  []*classState
	classIdx map[[2]string]int
	// lastClass is the class of the row above, which most rows share.
	lastClass *classState
	prefix    *prefixFitter
	sessions  *sessionFitter
	mix       *mixCounter
	contract  *contractFitter
}

// classState is one (model, api) pair's lengths.
type classState struct {
	model, api string
	lengths    *lengthFitter
}

func newFitState(blockSize int) *fitState {
	return &fitState{classIdx: map[[2]string]int{}, prefix: newPrefixFitter(blockSize), sessions: newSessionFitter(),
		mix: newMixCounter(), contract: newContractFitter()}
}

// add accumulates one row. Later turns of a session (the session seen
// before in the slice, a turn number past 0, or a parent named) count
// for the sessions
// and fill the prefix cache; first turns make the arrivals, lengths, mix
// and contract.
func (s *fitState) add(r *trace.Request) {
	s.rows++
	t := float64(r.TS) / 1e6
	later := s.sessions.add(r, t)
	if later || r.SessionID != "" && r.Turn > 0 || len(r.ParentIDs) > 0 {
		s.sawSessions = true
		s.prefix.touch(t, r.PrefixBlocks)
		return
	}
	s.firstTurns++
	s.arrivals = append(s.arrivals, t)
	s.class(r.Model, r.API).add(r.InputTokens, r.OutputTokens)
	s.prefix.add(t, r.InputTokens, r.PrefixBlocks)
	s.mix.add(r.Model, r.Adapter, r.Tenant, r.API, r.Stream, r.Temperature, r.TopP, r.Features, r.TS)
	s.contract.add(r)
}

// class returns the length fitter of a (model, api) pair, the last tracked
// one's when maxTrackedClasses pairs are tracked already.
func (s *fitState) class(model, api string) *lengthFitter {
	if c := s.lastClass; c != nil && c.model == model && c.api == api {
		return c.lengths
	}
	key := [2]string{model, api}
	if i, ok := s.classIdx[key]; ok {
		s.lastClass = s.classes[i]
		return s.classes[i].lengths
	}
	if len(s.classes) >= maxTrackedClasses {
		return s.classes[len(s.classes)-1].lengths
	}
	c := &classState{model: model, api: api, lengths: newLengthFitter(uint64(len(s.classes)) + 1)}
	s.classIdx[key] = len(s.classes)
	s.classes = append(s.classes, c)
	return c.lengths
}

// accumulate reads shard of shards of the span opts.Span of the bucket at
// dir (the whole span for 0 of 1) into a Partial. The bucket is read from
// the first part that may hold a row of the slice (by the manifest's
// max_ts_us, which the writer sets from the part's last row) to the first
// row past the slice: rows before the slice in the parts it opens are read
// and checked, not fitted.
func accumulate(ctx context.Context, dir string, opts FitOptions, shard, shards int) (*Partial, error) {
	span := opts.Span
	if span == [2]float64{} {
		span = [2]float64{0, 1}
	}
	if !(span[0] >= 0 && span[1] <= 1 && span[0] < span[1]) {
		return nil, fmt.Errorf("fit %s: span %v must be two fractions 0 ≤ from < to ≤ 1", dir, span)
	}
	b, err := trace.OpenBucket(dir)
	if err != nil {
		return nil, err
	}
	digest, err := manifestDigest(dir)
	if err != nil {
		return nil, fmt.Errorf("fit %s: %w", dir, err)
	}
	man := b.Manifest
	spanFrom, spanTo := spanBounds(man, span)
	fromUs, toUs := sliceBounds(spanFrom, spanTo, shard, shards)
	blockSize := man.BlockSize
	if blockSize <= 0 {
		blockSize = trace.DefaultBlockSize
	}
	var res int64
	for _, s := range man.Sources {
		res = max(res, s.TimeResolutionUs)
	}
	st := newFitState(blockSize)
	err = bucketFrom(b, fromUs).Scan(ctx, func(r *trace.Request) error {
		if r.TS >= toUs {
			return errSliceEnd // the scan is in time order: nothing after is in the slice
		}
		if r.TS < fromUs {
			return nil
		}
		st.add(r)
		if opts.Progress != nil && st.rows%1_000_000 == 0 {
			opts.Progress(fmt.Sprintf("fit: %d rows read", st.rows))
		}
		return nil
	})
	if err != nil && !errors.Is(err, errSliceEnd) {
		return nil, fmt.Errorf("fit %s: %w", dir, err)
	}
	st.sessions.closeAll()
	st.prefix.endSlice()
	return &Partial{PartialHeader: PartialHeader{Format: PartialFormat, Version: PartialVersion, Shard: shard, Shards: shards,
		Span: span, SpanFromUs: spanFrom, SpanToUs: spanTo, FromUs: fromUs, ToUs: toUs,
		Trace:            PartialTrace{Dir: dir, ManifestSHA256: digest, Rows: man.Rows},
		TimeResolutionUs: res, BlockSize: blockSize, Rows: st.rows, FirstTurns: st.firstTurns}, state: st}, nil
}

// errSliceEnd stops a scan at the first row past the slice.
var errSliceEnd = errors.New("past the slice")

// bucketFrom returns b without the parts that end before fromUs (by their
// manifest max_ts_us), so a shard late in the trace does not read the
// parts before it. Scan checks a part's min_ts_us as it opens it; the
// max_ts_us of the parts left out is trusted, as the writer set it from
// the part's last row, where it is a time range at all.
func bucketFrom(b *trace.Bucket, fromUs int64) *trace.Bucket {
	man := *b.Manifest
	man.Parts = nil
	for _, p := range b.Manifest.Parts {
		if !(p.MinTS <= p.MaxTS && p.MaxTS < fromUs) {
			man.Parts = append(man.Parts, p)
		}
	}
	return &trace.Bucket{Dir: b.Dir, Manifest: &man}
}

// sliceBounds returns shard i of n of the span [from, to) in microseconds:
// n consecutive slices of equal length (to a microsecond) that tile it.
func sliceBounds(from, to int64, i, n int) (int64, int64) {
	q, r := (to-from)/int64(n), (to-from)%int64(n)
	at := func(k int) int64 { return from + q*int64(k) + r*int64(k)/int64(n) }
	return at(i), at(i + 1)
}

// finish fits the Model to an accumulated span (one shard's, or the merge
// of every shard's).
func finish(ctx context.Context, p *Partial, opts FitOptions) (*Model, error) {
	if opts.Knots < 2 {
		opts.Knots = 1025
	}
	st, dir := p.state, p.Trace.Dir
	if len(st.arrivals) < 10 {
		return nil, fmt.Errorf("fit %s: %d requests in the span; a fit needs at least 10", dir, len(st.arrivals))
	}
	m := &Model{Version: ModelVersion, CreatedAt: time.Now().UTC().Truncate(time.Second),
		Source: SourceInfo{Dir: dir, Rows: st.rows, FirstTurns: st.firstTurns, Start: time.UnixMicro(p.SpanFromUs).UTC(), End: time.UnixMicro(p.SpanToUs).UTC(),
			SpanFraction: p.Span, TimeResolutionUs: p.TimeResolutionUs, BlockSize: p.BlockSize}}
	if opts.Progress != nil {
		opts.Progress(fmt.Sprintf("fit: %d rows, fitting arrivals", st.rows))
	}
	var err error
	m.Arrivals, err = fitArrivals(ctx, st.arrivals, float64(p.SpanFromUs)/1e6, float64(p.SpanToUs)/1e6, float64(p.TimeResolutionUs)/1e6, opts.NoLatent)
	if err != nil {
		return nil, fmt.Errorf("fit %s: %w", dir, err)
	}
	st.arrivals = nil
	// The pairs past the first maxClasses join the last class, as they
	// would had the fit kept only maxClasses apart while reading.
	classes := st.classes
	if len(classes) > maxClasses {
		rng := rand.New(rand.NewPCG(foldSeed, 0))
		for _, c := range classes[maxClasses:] {
			classes[maxClasses-1].lengths.merge(c.lengths, rng)
		}
		classes = classes[:maxClasses]
	}
	total := float64(st.firstTurns)
	for _, k := range classes {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("fit %s: %w", dir, err)
		}
		c := k.lengths.fit(opts.Knots)
		c.Model, c.API = k.model, k.api
		c.Share = float64(k.lengths.pairs.seen) / total
		m.Lengths = append(m.Lengths, c)
	}
	slices.SortStableFunc(m.Lengths, func(a, b LengthClass) int { return cmp.Compare(b.Share, a.Share) })
	if m.Prefix, err = st.prefix.fit(ctx); err != nil {
		return nil, fmt.Errorf("fit %s: %w", dir, err)
	}
	if st.sawSessions {
		m.Sessions = st.sessions.fit()
	}
	m.Mix = st.mix.mix()
	m.Contract = st.contract.fit()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fit %s: %w", dir, err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("fit %s: the fitted model is not usable: %w", dir, err)
	}
	return m, nil
}

// foldSeed seeds the reservoir merges that fold rare classes into the last
// one, so a fit is the same each time.
const foldSeed = 0xf01d

// spanBounds returns the [from, to) bounds in microseconds of a fraction of
// the manifest's span. The whole span includes its last arrival.
func spanBounds(man *trace.Manifest, span [2]float64) (int64, int64) {
	start, end := man.Start.UnixMicro(), man.End.UnixMicro()
	length := float64(end - start)
	from := start + int64(math.Round(span[0]*length))
	to := start + int64(math.Round(span[1]*length))
	if span[1] >= 1 {
		to = end + 1
	}
	return from, to
}

// The latent and gap-chain fits simulate the process a few hundred times
// over at most maxSimSpanS of the span, and only when that part holds at
// least minSimArrivals arrivals: the work follows the rows, not the span.
const (
	maxSimSpanS    = daySeconds
	minSimArrivals = 200
)

// arrivalVariant is one way of modelling the gaps, with its latent layer
// and the dispersion curve and gap quantiles it reproduces.
type arrivalVariant struct {
	name    string
	renewal Renewal
	latent  Latent
	curve   []float64
}

// fitArrivals fits the three arrival layers to arrival times ts (absolute
// seconds; sorted here if they are not) observed over [start, end).
func fitArrivals(ctx context.Context, ts []float64, start, end, res float64, noLatent bool) (ArrivalModel, error) {
	if !slices.IsSorted(ts) {
		slices.Sort(ts)
	}
	span := end - start
	if !(span > 0) || len(ts) < 2 || ts[len(ts)-1] <= ts[0] {
		return ArrivalModel{}, fmt.Errorf("all %d arrivals share one timestamp; a rate needs arrivals at different times", len(ts))
	}
	if rate := float64(len(ts)) / span; rate > MaxRatePerS {
		return ArrivalModel{}, fmt.Errorf("%d arrivals in %.3g s are %.3g requests/s, more than %g (MaxRatePerS); are the timestamps in microseconds?", len(ts), span, rate, float64(MaxRatePerS))
	}
	var a ArrivalModel
	// Intensity from binned counts (bins tile the span exactly).
	width := 60.0
	if span >= daySeconds {
		width = 300
	}
	nb := max(1, int(math.Ceil(span/width)))
	if nb > maxIntensityBins {
		nb = maxIntensityBins
		a.Notes = append(a.Notes, fmt.Sprintf("intensity: %d count bins of %.4g s (at most %d; harmonics shorter than four bins are not fitted)", nb, span/float64(nb), maxIntensityBins))
	}
	bins := binnedCounts{Start: start, Width: span / float64(nb), Counts: make([]float64, nb)}
	for _, t := range ts {
		bins.Counts[min(nb-1, max(0, int((t-start)/bins.Width)))]++
	}
	var err error
	if a.Intensity, err = fitIntensity(ctx, bins, span); err != nil {
		return a, err
	}
	in := &a.Intensity
	rateAt := func(abs float64) float64 {
		if in.Kind == "fourier" {
			return in.Rate(abs)
		}
		return in.Rate(abs - start)
	}
	// Dispersion curve and gap quantiles of the trace: what the layers
	// together must reproduce.
	var windows, target []float64
	for _, w := range dispersionWindows {
		if w < res || span/w < 20 {
			continue
		}
		if d := DispersionIndex(ts, start, end, w); !math.IsNaN(d) && d > 0 {
			windows = append(windows, w)
			target = append(target, d)
		}
	}
	gaps := make([]float64, 0, len(ts)-1)
	for i := 1; i < len(ts); i++ {
		gaps = append(gaps, ts[i]-ts[i-1])
	}
	mean, sd := stat.MeanStdDev(gaps, nil)
	a.InterArrivalCV = sd / mean // mean > 0: the times are sorted and not all equal
	for _, q := range rank.Percentiles(gaps, gapProbs) {
		target = append(target, max(q, res/2, 1e-6))
	}
	gaps = nil
	base := func(t float64) float64 { return rateAt(start + t) }
	// The latent fit simulates the process a few hundred times: over a long
	// or dense trace it simulates the first part only, about 200,000
	// arrivals but at least 20 one-minute windows (and at most
	// maxSimSpanS), and fits the windows that part holds 20 of.
	simSpan := span
	if n := float64(len(ts)); n > 200_000 {
		simSpan = min(max(span*200_000/n, 20*60), span)
	}
	if simSpan > maxSimSpanS {
		simSpan = maxSimSpanS
		a.Notes = append(a.Notes, fmt.Sprintf("dispersion: simulated over the first %g s of the %.4g s span", maxSimSpanS, span))
	}
	simArrivals := float64(len(ts)) * simSpan / span
	if simSpan < span {
		var kept, keptT []float64
		for i, w := range windows {
			if simSpan/w >= 20 {
				kept = append(kept, w)
				keptT = append(keptT, target[i])
			}
		}
		windows, target = kept, append(keptT, target[len(target)-len(gapProbs):]...)
	}
	// The renewal law is fitted by maximum likelihood twice: to gaps
	// rescaled by the deterministic intensity alone (all burstiness in the
	// renewal law), and to gaps rescaled by a local rate (counts in a
	// window around each gap: slow wander removed, left to the latent
	// layer). Each gets its latent layer; the pair that reproduces the
	// dispersion curve and gap quantiles better is kept.
	localW := min(max(30/in.MeanRatePerS, 5), 300)
	simulate := len(windows) >= 2 && simArrivals >= minSimArrivals && !noLatent
	renewalVariant := func(ctx context.Context, local bool) (*arrivalVariant, error) {
		sample := newReservoir[gapObs](maxRenewalGaps, 3)
		lo, hi := 0, 0
		for i := 1; i < len(ts); i++ {
			if i&0xffff == 0 && ctx.Err() != nil {
				return nil, ctx.Err()
			}
			mid := (ts[i] + ts[i-1]) / 2
			var lam float64
			if local {
				for lo < len(ts) && ts[lo] < mid-localW/2 {
					lo++
				}
				for hi < len(ts) && ts[hi] < mid+localW/2 {
					hi++
				}
				lam = max(float64(hi-lo), 1) / localW
			} else {
				lam = rateAt(mid)
			}
			sample.add(gapObs{gap: (ts[i] - ts[i-1]) * lam, res: max(res, 1e-6) * lam})
		}
		ren, err := fitRenewal(ctx, sample.items, res > 0)
		if err != nil {
			return nil, err
		}
		v := &arrivalVariant{name: "intensity-rescaled", renewal: ren}
		if local {
			v.name = fmt.Sprintf("local-rate-rescaled (%.3g s window)", localW)
		}
		if !simulate {
			v.latent = Latent{Kind: "none", Note: "not fitted (the latent layer was skipped)"}
			switch {
			case len(windows) < 2:
				v.latent.Note = "the trace is too short for a dispersion curve"
			case simArrivals < minSimArrivals:
				v.latent.Note = fmt.Sprintf("not fitted: %.3g arrivals in the simulated span, fewer than %d", simArrivals, minSimArrivals)
			}
			v.curve = simulateDispersion(ctx, base, &v.renewal, &v.latent, simSpan, windows, 4, 1)
		} else {
			v.latent, v.curve = fitLatent(ctx, base, &v.renewal, simSpan, windows, target, simArrivals)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		v.latent.Loss = curveLoss(v.curve, target)
		return v, nil
	}
	// A third variant: gaps in intensity-rescaled time as a Markov chain
	// over gap classes, the number of classes and order chosen by how well
	// the process alone reproduces the trace; then its latent layer. A
	// chain alone draws the gaps, so its simulation needs no renewal law;
	// the chosen variant carries the best renewal law for reference.
	chainVariant := func(ctx context.Context) (*arrivalVariant, error) {
		gaps := make([]float64, 0, len(ts)-1)
		rng := rand.New(rand.NewPCG(uint64(len(ts)), 0xc4a1))
		for i := 1; i < len(ts); i++ {
			lam := rateAt((ts[i] + ts[i-1]) / 2)
			g := (ts[i] - ts[i-1]) * lam
			if res > 0 { // dequantise: spread over the interval it stands for
				g = max(g+(rng.Float64()-0.5)*res*lam, 0)
			}
			gaps = append(gaps, g)
		}
		chains, err := fitGapChains(ctx, gaps, 1)
		if err != nil {
			return nil, ctx.Err() // no chain: the renewal variants stand
		}
		none := Latent{Kind: "none"}
		var chosen *arrivalVariant
		for _, c := range chains {
			v := &arrivalVariant{name: fmt.Sprintf("intensity-rescaled, as a Markov chain over %d gap classes of order %d", len(c.Quantiles), c.Order), latent: none}
			v.renewal.Chain = c
			v.curve = simulateDispersion(ctx, base, &v.renewal, &none, simSpan, windows, 4, 1)
			v.latent.Loss = curveLoss(v.curve, target)
			if chosen == nil || v.latent.Loss < chosen.latent.Loss {
				chosen = v
			}
		}
		if !noLatent {
			chosen.latent, chosen.curve = fitLatent(ctx, base, &chosen.renewal, simSpan, windows, target, simArrivals)
			chosen.latent.Loss = curveLoss(chosen.curve, target)
		} else {
			chosen.latent.Note = "not fitted (the latent layer was skipped)"
		}
		return chosen, ctx.Err()
	}
	// The variants are independent: each is fitted on a goroutine of its
	// own (the first to fail stops the others), and the best is chosen in
	// the order intensity, local, chain.
	var variants [3]*arrivalVariant
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { variants[0], err = renewalVariant(gctx, false); return err })
	if simulate {
		g.Go(func() (err error) { variants[1], err = renewalVariant(gctx, true); return err })
	}
	if len(windows) >= 2 && len(ts) >= 1000 && simArrivals >= minSimArrivals {
		g.Go(func() (err error) { variants[2], err = chainVariant(gctx); return err })
	}
	if err := g.Wait(); err != nil {
		return a, err
	}
	best := variants[0]
	if v := variants[1]; v != nil && v.latent.Loss < best.latent.Loss {
		best = v
	}
	if v := variants[2]; v != nil {
		chain := v.renewal.Chain
		v.renewal = best.renewal
		v.renewal.Chain = chain
		if v.latent.Loss < best.latent.Loss {
			best = v
		}
	}
	a.Renewal, a.Latent, a.RenewalGaps = best.renewal, best.latent, best.name
	curve := best.curve
	for i, w := range windows {
		a.Dispersion = append(a.Dispersion, DispersionPoint{WindowS: w, Trace: target[i], Model: curve[i]})
	}
	for j, p := range gapProbs {
		a.GapQuantiles = append(a.GapQuantiles, GapQuantile{P: p, TraceS: target[len(windows)+j], ModelS: curve[len(windows)+j]})
	}
	a.Chosen = fmt.Sprintf("%s intensity (%s), %s renewal of %s gaps (shape %.3g, KS %.3f), latent %s", in.Kind, in.Candidates[bestCandidate(in.Candidates)].Name,
		a.Renewal.Dist, a.RenewalGaps, a.Renewal.Shape, a.Renewal.KS, a.Latent.Kind)
	if a.Renewal.Chain != nil {
		a.Chosen = fmt.Sprintf("%s intensity (%s), gaps %s, latent %s", in.Kind, in.Candidates[bestCandidate(in.Candidates)].Name, a.RenewalGaps, a.Latent.Kind)
	}
	return a, nil
}

func bestCandidate(c []IntensityCandidate) int {
	best := 0
	for i := range c {
		if c[i].QAIC < c[best].QAIC {
			best = i
		}
	}
	return best
}

// curveLoss is the mean squared log error between a simulated curve and the
// trace's.
func curveLoss(model, target []float64) float64 {
	s := 0.0
	for i := range target {
		d := math.Log(max(model[i], 1e-6)) - math.Log(max(target[i], 1e-6))
		s += d * d
	}
	return s / float64(max(len(target), 1))
}
