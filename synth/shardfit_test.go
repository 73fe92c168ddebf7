package synth

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

// shardFixture writes a trace of stated laws over 8 hours: first turns
// arrive at 0.12/s; each opens a session of 1 + a geometric(1/2) number of
// later turns, a log-normal think time apart (median 40 s); six (model,
// api) classes, the first model's share moving with the hour of day; input
// lengths log-normal by class, output correlated with input; prompts head
// with one of five system prompts (60%) or a fresh block, and 15% repeat
// an earlier first turn's whole prompt (a document asked about again); a
// later turn holds its session's history; images on 10% of first turns,
// 30% of their ids repeating an earlier one; tools, schemas, adapters and
// sampling extras on a share each. It returns the rows in time order too.
func shardFixture(t *testing.T) (string, []trace.Request) {
	t.Helper()
	rng := rand.New(rand.NewPCG(21, 4))
	const bs = trace.DefaultBlockSize
	next := int64(1 << 30)
	fresh := func() int64 { next++; return next }
	var systems [][]int64
	for k := range 5 {
		var s []int64
		for range 1 + k%3 {
			s = append(s, fresh())
		}
		systems = append(systems, s)
	}
	type prompt struct {
		blocks []int64
		tokens int64
	}
	var firsts []prompt
	var images []int64
	var rows []trace.Request
	const spanS = 8 * 3600.0
	start := int64(1_700_000_000_000_000)
	models := []string{"m-a", "m-b", "m-c"}
	for at, i := rng.ExpFloat64()/0.12, 0; at < spanS; at, i = at+rng.ExpFloat64()/0.12, i+1 {
		hour := math.Mod(at/3600, 24)
		model := models[1+rng.IntN(2)]
		if rng.Float64() < 0.45+0.3*math.Sin(2*math.Pi*hour/24) {
			model = models[0]
		}
		api := trace.APIChat
		if rng.Float64() < 0.3 {
			api = trace.APICompletions
		}
		var p prompt
		switch u := rng.Float64(); {
		case u < 0.15 && len(firsts) > 0:
			p = firsts[rng.IntN(len(firsts))]
		case u < 0.75:
			sys := systems[min(4, int(rng.ExpFloat64()*1.5))]
			p.blocks = slices.Clone(sys)
			p.tokens = int64(len(sys))*bs + 50 + int64(math.Exp(5+rng.NormFloat64()))
		default:
			p.tokens = 20 + int64(math.Exp(5.5+rng.NormFloat64()))
		}
		for int64(len(p.blocks)) < (p.tokens+bs-1)/bs {
			p.blocks = append(p.blocks, fresh())
		}
		firsts = append(firsts, p)
		out := max(1, int64(float64(p.tokens)*0.2*math.Exp(0.5*rng.NormFloat64())))
		if api == trace.APICompletions {
			out = 1 + out/3
		}
		temp := []float64{0, 0.7, 1}[rng.IntN(3)]
		r := trace.Request{Identity: trace.Identity{RequestID: fmt.Sprint("r", i), SessionID: fmt.Sprint("s", i), Turn: 0,
			Tenant: fmt.Sprint("tenant-", rng.IntN(5)), Model: model},
			TS: start + int64(at*1e6), Shape: trace.Shape{InputTokens: p.tokens, OutputTokens: out, API: api, Stream: rng.Float64() < 0.7, N: 1,
				PrefixBlocks: p.blocks}, Temperature: &temp}
		if rng.Float64() < 0.3 {
			r.Adapter = fmt.Sprint("lora-", zipfRank((&Zipf{N: 12, S: 1.1}).cumulative(), rng))
		}
		if rng.Float64() < 0.1 {
			for range 1 + rng.IntN(3) {
				addImage(&r, rng, &images, 512, 384)
			}
			r.Features = append(r.Features, trace.FeatureImage)
		}
		if rng.Float64() < 0.15 {
			r.ToolCount, r.ToolTokens, r.ToolChoice = int32(1+rng.IntN(4)), 300, "auto"
			r.Features = append(r.Features, trace.FeatureTools)
		}
		if rng.Float64() < 0.05 {
			r.OutputFormat, r.SchemaTokens, r.SchemaID = trace.OutputJSONSchema, 80, int64(1+rng.IntN(20))
			r.Features = append(r.Features, trace.FeatureSchema)
		}
		if rng.Float64() < 0.1 {
			r.Seed = new(int64(7))
		}
		slices.Sort(r.Features)
		rows = append(rows, r)
		// The session's later turns: the history and a new message.
		hist, tokens, when := p.blocks[:p.tokens/bs], p.tokens+out, at
		for k := int32(1); rng.Float64() < 0.5; k++ {
			think := 40 * math.Exp(0.8*rng.NormFloat64())
			when += float64(out)*0.02 + think
			if when >= spanS {
				break
			}
			tokens += 30 + rng.Int64N(300)
			blocks := slices.Clone(hist)
			for int64(len(blocks)) < (tokens+bs-1)/bs {
				blocks = append(blocks, fresh())
			}
			out = 20 + rng.Int64N(400)
			thinkMs := think * 1000
			rows = append(rows, trace.Request{Identity: trace.Identity{RequestID: fmt.Sprint("r", i, "-", k), SessionID: r.SessionID, Turn: k,
				Tenant: r.Tenant, Model: model}, TS: start + int64(when*1e6), Shape: trace.Shape{InputTokens: tokens, OutputTokens: out, API: api, N: 1, PrefixBlocks: blocks},
				ThinkTimeMs: &thinkMs})
			hist, tokens = blocks[:tokens/bs], tokens+out
		}
	}
	slices.SortStableFunc(rows, func(a, b trace.Request) int { return int(a.TS - b.TS) })
	return writeBucket(t, rows, &trace.Manifest{BlockSize: bs}), rows
}

// shardTruth is what a sharded fit must lose, computed from the rows by the
// rule docs/architecture.md states, not by the fitters.
type shardTruth struct {
	// sessionPieces and multiPieces count each session's turns in each
	// slice as a session of its own; crossings are the pieces beyond the
	// first of each session.
	sessionPieces, multiPieces, crossings int64
	// lostReuses are first turns whose first block was used before their
	// slice began and not again in it before them: reuses one fit sees
	// and the shards do not.
	lostReuses int64
	// affected are first turns with a block whose latest use before them
	// lies before their slice: the reuses whose depth or age may differ.
	affected int64
}

func truthOfShards(rows []trace.Request, bounds []int64) shardTruth {
	var tr shardTruth
	sliceOf := func(ts int64) int {
		i, _ := slices.BinarySearch(bounds, ts+1)
		return i - 1
	}
	pieces := map[string]map[int]int{}
	lastUse := map[int64]int64{} // block → the time of its latest use
	for _, r := range rows {
		k := sliceOf(r.TS)
		if pieces[r.SessionID] == nil {
			pieces[r.SessionID] = map[int]int{}
		}
		pieces[r.SessionID][k]++
		first := r.Turn == 0
		if first && len(r.PrefixBlocks) > 0 {
			if at, ok := lastUse[r.PrefixBlocks[0]]; ok && at < bounds[k] {
				tr.lostReuses++
			}
			for _, b := range r.PrefixBlocks {
				if at, ok := lastUse[b]; ok && at < bounds[k] {
					tr.affected++
					break
				}
			}
		}
		if first && len(r.PrefixBlocks) == 0 {
			continue // the prefix fit skips a first turn without blocks
		}
		for _, b := range r.PrefixBlocks {
			lastUse[b] = r.TS
		}
	}
	for _, p := range pieces {
		tr.crossings += int64(len(p) - 1)
		for _, turns := range p {
			tr.sessionPieces++
			if turns > 1 {
				tr.multiPieces++
			}
		}
	}
	return tr
}

// TestLongShardedFitMatchesOneFit fits the fixture once and as shards, merges
// the shards' partial files (given out of order) and holds the merged model
// to the single fit within the errors docs/architecture.md states: exact
// arrivals, lengths, mix and contract; sessions split at each slice
// boundary they cross; prefix reuse lost where its last use lies before
// the slice.
func TestLongShardedFitMatchesOneFit(t *testing.T) {
	skipLong(t)
	dir, rows := shardFixture(t)
	ctx := context.Background()
	cases := []struct {
		name   string
		shards int
		span   [2]float64
	}{
		{"4 shards of the whole trace", 4, [2]float64{}},
		{"3 shards of 20-90%", 3, [2]float64{0.2, 0.9}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			single, err := Fit(ctx, dir, FitOptions{Span: c.span, NoLatent: true})
			if err != nil {
				t.Fatal(err)
			}
			// The slices, from the rows: [first, last + 1 µs) of the trace,
			// the span's fractions of it, cut in equal lengths.
			first, last := rows[0].TS, rows[len(rows)-1].TS+1
			from, to := first, last
			if c.span != ([2]float64{}) {
				from = first + int64(math.Round(c.span[0]*float64(last-1-first)))
				to = first + int64(math.Round(c.span[1]*float64(last-1-first)))
			}
			bounds := make([]int64, c.shards+1)
			for k := range bounds {
				bounds[k] = from + (to-from)*int64(k)/int64(c.shards)
			}
			var paths []string
			for i := c.shards - 1; i >= 0; i-- { // out of order: the merge sorts them
				p, err := FitPartial(ctx, dir, FitOptions{Span: c.span}, i, c.shards)
				if err != nil {
					t.Fatal(err)
				}
				if p.FromUs != bounds[i] || p.ToUs != bounds[i+1] {
					t.Fatalf("shard %d fitted [%d, %d), want [%d, %d)", i, p.FromUs, p.ToUs, bounds[i], bounds[i+1])
				}
				path := filepath.Join(t.TempDir(), fmt.Sprintf("part-%d.fitpart.gz", i))
				if err := WritePartial(path, p); err != nil {
					t.Fatal(err)
				}
				paths = append(paths, path)
			}
			merged, err := FitMerged(ctx, paths, FitOptions{NoLatent: true})
			if err != nil {
				t.Fatal(err)
			}
			var inSpan []trace.Request
			for _, r := range rows {
				if r.TS >= from && r.TS < to {
					inSpan = append(inSpan, r)
				}
			}
			compareShardedFit(t, single, merged, truthOfShards(inSpan, bounds))
		})
	}
}

func compareShardedFit(t *testing.T, single, merged *Model, truth shardTruth) {
	t.Helper()
	// Exact: the source, every arrival layer (the same times in the same
	// order), every length class, the mix and the contract.
	s, m := single.Source, merged.Source
	s.Dir, m.Dir = "", ""
	if s != m {
		t.Errorf("source %+v, one fit's %+v", m, s)
	}
	if !reflect.DeepEqual(single.Arrivals, merged.Arrivals) {
		t.Errorf("arrivals differ: %s at %.4f/s, one fit %s at %.4f/s", merged.Arrivals.Chosen, merged.MeanRatePerS(), single.Arrivals.Chosen, single.MeanRatePerS())
	}
	if len(single.Lengths) != 6 || len(merged.Lengths) != len(single.Lengths) {
		t.Fatalf("%d length classes, one fit %d, want 6", len(merged.Lengths), len(single.Lengths))
	}
	for i, a := range single.Lengths {
		b := merged.Lengths[i]
		if a.Model != b.Model || a.API != b.API || a.Share != b.Share {
			t.Errorf("class %d: %s/%s share %v, one fit %s/%s %v", i, b.Model, b.API, b.Share, a.Model, a.API, a.Share)
		}
		for _, p := range []float64{0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1} {
			if a.Input.Quantile(p) != b.Input.Quantile(p) || a.Output.Quantile(p) != b.Output.Quantile(p) {
				t.Errorf("class %s/%s p%g: input %v output %v, one fit %v %v", a.Model, a.API, 100*p, b.Input.Quantile(p), b.Output.Quantile(p), a.Input.Quantile(p), a.Output.Quantile(p))
			}
		}
		if math.Abs(a.Rho-b.Rho) > 1e-12 || a.Spearman != b.Spearman || a.Sampler != b.Sampler || !reflect.DeepEqual(a, b) {
			t.Errorf("class %s/%s: rho %v Spearman %v sampler %s, one fit %v %v %s", a.Model, a.API, b.Rho, b.Spearman, b.Sampler, a.Rho, a.Spearman, a.Sampler)
		}
	}
	if !reflect.DeepEqual(single.Mix, merged.Mix) {
		t.Errorf("mix differs:\n%+v\none fit:\n%+v", merged.Mix, single.Mix)
	}
	if !reflect.DeepEqual(single.Contract, merged.Contract) {
		t.Errorf("contract differs:\n%+v\none fit:\n%+v", merged.Contract, single.Contract)
	}

	// Sessions: each slice's turns of a session count as a session, and
	// the first turn of each later piece has no think time or new tokens.
	a, b := single.Sessions, merged.Sessions
	crossed := truth.crossings
	if a == nil || b == nil {
		t.Fatalf("sessions: one fit %v, merged %v", a != nil, b != nil)
	}
	multi := int64(math.Round(b.MultiTurnShare * float64(b.Sessions)))
	if b.Sessions != truth.sessionPieces || b.Sessions != a.Sessions+crossed || multi != truth.multiPieces || b.ThinkS.N != a.ThinkS.N-crossed || b.NewTokens.N != a.NewTokens.N-crossed {
		t.Errorf("sessions %d (multi-turn %d, think samples %d), want %d (%d, %d): one fit's %d split at %d crossings",
			b.Sessions, multi, b.ThinkS.N, truth.sessionPieces, truth.multiPieces, a.ThinkS.N-crossed, a.Sessions, crossed)
	}
	t.Logf("sessions: %d → %d (%d crossings, %.2f%%), multi-turn share %.4f → %.4f, think p50 %.2f → %.2f s",
		a.Sessions, b.Sessions, crossed, 100*float64(crossed)/float64(a.Sessions), a.MultiTurnShare, b.MultiTurnShare, a.ThinkS.Quantile(0.5), b.ThinkS.Quantile(0.5))

	// Prefix: groups exact; a reuse lost exactly where its first block's
	// last use lies before its slice; the age law moves by at most the
	// share of reuses with a block last used before their slice.
	p, q := single.Prefix, merged.Prefix
	if p == nil || q == nil {
		t.Fatalf("prefix: one fit %v, merged %v", p != nil, q != nil)
	}
	if q.Requests != p.Requests || q.Groups != p.Groups || q.NewGroupsPerS != p.NewGroupsPerS || !reflect.DeepEqual(q.GroupLifetimeS, p.GroupLifetimeS) ||
		q.ZipfAlpha != p.ZipfAlpha {
		t.Errorf("prefix groups: %d requests, %d groups, %v/s, Zipf %v; one fit %d, %d, %v/s, %v", q.Requests, q.Groups, q.NewGroupsPerS, q.ZipfAlpha, p.Requests, p.Groups, p.NewGroupsPerS, p.ZipfAlpha)
	}
	reusedP := int64(math.Round(p.ReuseShare * float64(p.Requests)))
	reusedQ := int64(math.Round(q.ReuseShare * float64(q.Requests)))
	if reusedP-reusedQ != truth.lostReuses {
		t.Errorf("reuses %d, one fit %d: lost %d, want %d", reusedQ, reusedP, reusedP-reusedQ, truth.lostReuses)
	}
	ks := marginalKS(&p.AgeS, &q.AgeS)
	bound := float64(truth.affected)/float64(reusedP) + float64(truth.affected)/float64(reusedQ) + 2.0/float64(len(p.AgeS.Knots)-1)
	if ks > bound {
		t.Errorf("reuse age law: KS %.4f from one fit's, want ≤ %.4f (%d reuses affected)", ks, bound, truth.affected)
	}
	t.Logf("prefix: reuse share %.4f → %.4f (%d of %d reuses lost), age KS %.4f (bound %.4f, %d affected), mean depth share %.4f → %.4f, distance p50 %.0f → %.0f blocks",
		p.ReuseShare, q.ReuseShare, truth.lostReuses, reusedP, ks, bound, truth.affected, p.Depth.Mean, q.Depth.Mean, p.Distance.Quantile(0.5), q.Distance.Quantile(0.5))
}

// TestShardedFitPrefixFromALaterShard fits a trace whose prompts carry
// prefix blocks only in its second half, as two shards: the first shard
// has no prefix statistics at all, and no reuse crosses the boundary, so
// the merged prefix law is one fit's exactly.
func TestShardedFitPrefixFromALaterShard(t *testing.T) {
	ctx := context.Background()
	var rows []trace.Request
	rng := rand.New(rand.NewPCG(6, 6))
	for i := range 400 {
		r := trace.Request{Identity: trace.Identity{RequestID: fmt.Sprint(i)}, TS: 1_700_000_000_000_000 + int64(i)*1_000_000,
			Shape: trace.Shape{InputTokens: 600 + rng.Int64N(400), OutputTokens: 10 + rng.Int64N(90), API: trace.APIChat}}
		if i >= 250 {
			r.PrefixBlocks = []int64{int64(1 + rng.IntN(20)), int64(1000 + i)}
		}
		rows = append(rows, r)
	}
	dir := writeBucket(t, rows, &trace.Manifest{BlockSize: trace.DefaultBlockSize})
	single, err := Fit(ctx, dir, FitOptions{NoLatent: true})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for i := range 2 {
		p, err := FitPartial(ctx, dir, FitOptions{}, i, 2)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, filepath.Join(t.TempDir(), "p.fitpart.gz"))
		if err := WritePartial(paths[i], p); err != nil {
			t.Fatal(err)
		}
	}
	merged, err := FitMerged(ctx, paths, FitOptions{NoLatent: true})
	if err != nil {
		t.Fatal(err)
	}
	if single.Prefix == nil || !reflect.DeepEqual(single.Prefix, merged.Prefix) {
		t.Errorf("prefix law %+v, one fit's %+v", merged.Prefix, single.Prefix)
	}
}

// TestFitMergedRefuses gives the merge partials that are not every shard
// of one fit once: each is refused naming the file and the fix.
func TestFitMergedRefuses(t *testing.T) {
	ctx := context.Background()
	rowsOf := func(seed uint64) []trace.Request {
		rng := rand.New(rand.NewPCG(seed, 1))
		var rows []trace.Request
		for i := range 400 {
			rows = append(rows, trace.Request{Identity: trace.Identity{RequestID: fmt.Sprint(i)}, TS: 1_700_000_000_000_000 + int64(i)*1_000_000 + rng.Int64N(1_000_000),
				Shape: trace.Shape{InputTokens: 100 + rng.Int64N(900), OutputTokens: 10 + rng.Int64N(90), API: trace.APIChat}})
		}
		return rows
	}
	dirA, dirB := writeBucket(t, rowsOf(1), nil), writeBucket(t, rowsOf(2), nil)
	out := t.TempDir()
	part := func(dir string, i, n int, span [2]float64) string {
		p, err := FitPartial(ctx, dir, FitOptions{Span: span}, i, n)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(out, fmt.Sprintf("%s-%d-of-%d-%g.fitpart.gz", filepath.Base(filepath.Dir(dir)), i, n, span[0]))
		if err := WritePartial(path, p); err != nil {
			t.Fatal(err)
		}
		return path
	}
	a0, a1, a2 := part(dirA, 0, 3, [2]float64{}), part(dirA, 1, 3, [2]float64{}), part(dirA, 2, 3, [2]float64{})
	a0of2, b1 := part(dirA, 0, 2, [2]float64{}), part(dirB, 1, 3, [2]float64{})
	a1span := part(dirA, 1, 3, [2]float64{0.5, 1})
	notPartial := filepath.Join(out, "model.json")
	os.WriteFile(notPartial, []byte(`{"version": 1}`), 0o644)
	cases := []struct {
		name  string
		paths []string
		is    error
		want  []string // in the message
	}{
		{"a shard missing", []string{a0, a2}, ErrShardsIncomplete, []string{"shards [1] of 3", "missing"}},
		{"a shard twice", []string{a0, a1, a1, a2}, ErrShardsIncomplete, []string{a1, "both shard 1 of 3"}},
		{"shard counts differ", []string{a0, a1, a0of2}, ErrPartialsMismatch, []string{a0of2, "shard 0 of 2", "one shard count"}},
		{"another trace", []string{a0, b1, a2}, ErrPartialsMismatch, []string{b1, "merge the partials of one trace"}},
		{"another span", []string{a0, a1span, a2}, ErrPartialsMismatch, []string{a1span, "same span"}},
		{"not a partial", []string{a0, notPartial}, nil, []string{notPartial, "not a fit partial"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := FitMerged(ctx, c.paths, FitOptions{NoLatent: true})
			if err == nil || c.is != nil && !errors.Is(err, c.is) {
				t.Fatalf("error %v, want %v", err, c.is)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	// Another format version: rewrite a partial's header.
	old := filepath.Join(out, "old.fitpart.gz")
	p, err := readPartial(a1)
	if err != nil {
		t.Fatal(err)
	}
	p.Version = PartialVersion + 1
	if err := WritePartial(old, p); err != nil {
		t.Fatal(err)
	}
	if _, err := FitMerged(ctx, []string{a0, old, a2}, FitOptions{}); !errors.Is(err, ErrPartialsMismatch) || !strings.Contains(err.Error(), old) || !strings.Contains(err.Error(), "format version") {
		t.Errorf("a partial of another format version: %v", err)
	}
	// The three shards of one trace merge, in any order.
	if _, err := FitMerged(ctx, []string{a2, a0, a1}, FitOptions{NoLatent: true}); err != nil {
		t.Errorf("the shards of one trace: %v", err)
	}
}

// TestMixMergeKeepsHours counts three days of requests whose model share
// moves with the hour, in one counter and in four consecutive slices
// merged: the mixes, per-hour shares included, are the same.
func TestMixMergeKeepsHours(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	whole := newMixCounter()
	var slices4 [4]*mixCounter
	for i := range slices4 {
		slices4[i] = newMixCounter()
	}
	const hours = 72
	temp := 0.7
	for i := range 20000 {
		tsUs := int64(1_700_000_000_000_000) + int64(float64(i)/20000*hours*3600e6)
		h := math.Mod(float64(tsUs)/3600e6, 24)
		model := "m-b"
		if rng.Float64() < 0.5+0.3*math.Sin(2*math.Pi*h/24) {
			model = "m-a"
		}
		features := []string{trace.FeatureTools, trace.FeatureImage}[:rng.IntN(3)]
		whole.add(model, "", fmt.Sprint("t", rng.IntN(3)), trace.APIChat, i%2 == 0, &temp, nil, features, tsUs)
		slices4[i*4/20000].add(model, "", fmt.Sprint("t", rng.IntN(3)), trace.APIChat, i%2 == 0, &temp, nil, features, tsUs)
	}
	merged := slices4[0]
	for _, s := range slices4[1:] {
		merged.merge(s)
	}
	a, b := whole.mix(), merged.mix()
	if a.Model.ByHour == nil {
		t.Fatal("three days of an hour-dependent model share fitted no per-hour shares")
	}
	if !reflect.DeepEqual(a.Model, b.Model) || !reflect.DeepEqual(a.Features, b.Features) || !reflect.DeepEqual(a.Stream, b.Stream) {
		t.Errorf("merged mix %+v, one counter's %+v", b, a)
	}
}

// TestReservoirMergeIsUniform merges reservoirs over their capacity and
// checks that every value seen is kept with the same probability,
// capacity over values seen, whichever side saw it.
func TestReservoirMergeIsUniform(t *testing.T) {
	const capacity, trials = 50, 4000
	kept := make([]int, 300) // values 0..99 on one side, 100..299 on the other
	rng := rand.New(rand.NewPCG(3, 3))
	for trial := range trials {
		a, b := newReservoir[int](capacity, uint64(2*trial)), newReservoir[int](capacity, uint64(2*trial+1))
		for v := range 100 {
			a.add(v)
		}
		for v := 100; v < 300; v++ {
			b.add(v)
		}
		a.merge(b, rng)
		if len(a.items) != capacity || a.seen != 300 {
			t.Fatalf("merged %d items of %d seen, want %d of 300", len(a.items), a.seen, capacity)
		}
		for _, v := range a.items {
			kept[v]++
		}
	}
	// Each side's share of the kept values: binomial around its share of
	// the values seen (1/3 and 2/3), within 4 standard errors.
	var left int
	for v := range 100 {
		left += kept[v]
	}
	share, want := float64(left)/float64(capacity*trials), 1.0/3
	if se := math.Sqrt(want * (1 - want) / float64(capacity*trials)); math.Abs(share-want) > 4*se*3 { // ×3: values within a trial are not independent
		t.Errorf("the first side's share of the merged sample %.4f, want %.4f", share, want)
	}
	// Under capacity the merge keeps everything, in order.
	a, b := newReservoir[int](10, 1), newReservoir[int](10, 2)
	for v := range 4 {
		a.add(v)
		b.add(10 + v)
	}
	a.merge(b, rng)
	if want := []int{0, 1, 2, 3, 10, 11, 12, 13}; !slices.Equal(a.items, want) || a.seen != 8 {
		t.Errorf("under capacity: %v (seen %d), want %v", a.items, a.seen, want)
	}
}

// TestReadPartialRefusesBrokenStatistics edits one statistic of a real
// partial per row, as a damaged or hand-made file would have it: the read
// fails naming the file, never panics or merges it.
func TestReadPartialRefusesBrokenStatistics(t *testing.T) {
	var rows []trace.Request
	rng := rand.New(rand.NewPCG(4, 4))
	for i := range 300 {
		blocks := []int64{int64(1 + rng.IntN(5)), int64(100 + i)}
		rows = append(rows, trace.Request{Identity: trace.Identity{RequestID: fmt.Sprint(i)}, TS: 1_700_000_000_000_000 + int64(i)*2_000_000,
			Shape: trace.Shape{InputTokens: 600 + rng.Int64N(400), OutputTokens: 10 + rng.Int64N(90), API: trace.APIChat, PrefixBlocks: blocks}})
	}
	dir := writeBucket(t, rows, &trace.Manifest{BlockSize: trace.DefaultBlockSize})
	p, err := FitPartial(context.Background(), dir, FitOptions{}, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(t.TempDir(), "good.fitpart.gz")
	if err := WritePartial(good, p); err != nil {
		t.Fatal(err)
	}
	header, state := partialLines(t, good)
	type obj = map[string]any
	cases := []struct {
		name string
		edit func(s obj)
	}{
		{"a reservoir holding more than it saw", func(s obj) { s["prefix"].(obj)["reuses"].(obj)["seen"] = 3 }},
		{"a reuse of no depth class", func(s obj) {
			s["prefix"].(obj)["reuses"].(obj)["items"].([]any)[0].([]any)[4] = 99
		}},
		{"a reservoir of another capacity", func(s obj) { s["prefix"].(obj)["distances"].(obj)["capacity"] = 7 }},
		{"distances of a depth class without its excess shares", func(s obj) {
			byDepth := s["prefix"].(obj)["excess_by_depth"].([]any)
			for i := range byDepth {
				byDepth[i] = nil
			}
		}},
		{"an arrival outside the slice", func(s obj) { s["arrivals_s"].([]any)[3] = 1.0 }},
		{"lengths that do not count the first turns", func(s obj) {
			s["classes"].([]any)[0].(obj)["lengths"].(obj)["input_tokens"] = obj{"5": 1}
		}},
		{"a negative count", func(s obj) { s["sessions"].(obj)["turns"] = obj{"1": -300} }},
		{"a fitter missing", func(s obj) { delete(s, "mix") }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s obj
			if err := json.Unmarshal(state, &s); err != nil {
				t.Fatal(err)
			}
			c.edit(s)
			b, _ := json.Marshal(s)
			path := filepath.Join(t.TempDir(), "bad.fitpart.gz")
			writeGzipLines(t, path, header, b)
			_, err := readPartial(path)
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("error %v; want one naming %s", err, path)
			}
		})
	}
	t.Run("a truncated file", func(t *testing.T) {
		b, _ := os.ReadFile(good)
		path := filepath.Join(t.TempDir(), "cut.fitpart.gz")
		os.WriteFile(path, b[:len(b)/2], 0o644)
		if _, err := readPartial(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("error %v; want one naming %s", err, path)
		}
	})
	if _, err := readPartial(good); err != nil {
		t.Errorf("the unedited partial: %v", err)
	}
}

// partialLines returns a partial file's two JSON lines.
func partialLines(t *testing.T, path string) ([]byte, []byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(gz)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitN(b, []byte("\n"), 3)
	return lines[0], lines[1]
}

func writeGzipLines(t *testing.T, path string, lines ...[]byte) {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	for _, l := range lines {
		gz.Write(append(l, '\n'))
	}
	gz.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
