package synth

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/internal/rank"
	"github.com/servetrace/servetrace/trace"
)

// reuseFixture builds a trace whose reuse depth depends on the prompt's
// length, as in agentic traffic: short prompts (2,048–4,095 tokens) share
// only a one-block system prompt when they reuse (depth 1/nb), long ones
// (33,000–34,999 tokens) continue a recent long conversation and reuse all
// of it but the last block (depth (nb−1)/nb).
func reuseFixture(t *testing.T, n int) string {
	rng := rand.New(rand.NewPCG(11, 11))
	const bs = trace.DefaultBlockSize
	next := int64(1 << 20)
	fresh := func() int64 { next++; return next }
	system := fresh()
	var longs [][]int64
	rows := make([]trace.Request, 0, n)
	ts := 0.0
	for i := range n {
		ts += rng.ExpFloat64() * 0.5
		var in int64
		var blocks []int64
		if rng.Float64() < 0.5 {
			in = int64(2048 + rng.IntN(2048))
			nb := int((in + bs - 1) / bs)
			if rng.Float64() < 0.6 {
				blocks = append(blocks, system)
			}
			for len(blocks) < nb {
				blocks = append(blocks, fresh())
			}
		} else {
			in = int64(33000 + rng.IntN(2000))
			nb := int((in + bs - 1) / bs)
			if len(longs) > 0 && rng.Float64() < 0.7 {
				p := longs[max(0, len(longs)-1-rng.IntN(20))]
				blocks = append(blocks, p[:min(nb-1, len(p)-1)]...)
			}
			for len(blocks) < nb {
				blocks = append(blocks, fresh())
			}
			longs = append(longs, blocks)
		}
		rows = append(rows, trace.Request{Identity: trace.Identity{RequestID: fmt.Sprintf("r%d", i)}, TS: int64(ts * 1e6),
			Shape: trace.Shape{InputTokens: in, OutputTokens: 100, API: trace.APIChat, PrefixBlocks: blocks}})
	}
	return writeBucket(t, rows, &trace.Manifest{BlockSize: bs})
}

// realisedDepths returns, for rows in order, the reused share of each
// reusing request's blocks, split by input below and above limit tokens,
// and the share of all requests that repeat an earlier prompt whole.
func realisedDepths(t *testing.T, dir string, limit int64) (short, long []float64, whole float64) {
	b, err := trace.OpenBucket(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	n, full := 0, 0
	err = b.Scan(context.Background(), func(r *trace.Request) error {
		d := 0
		for d < len(r.PrefixBlocks) && seen[r.PrefixBlocks[d]] {
			d++
		}
		if n++; d > 0 {
			share := float64(d) / float64(len(r.PrefixBlocks))
			if r.InputTokens < limit {
				short = append(short, share)
			} else {
				long = append(long, share)
			}
			if d == len(r.PrefixBlocks) {
				full++
			}
		}
		for _, id := range r.PrefixBlocks {
			seen[id] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return short, long, float64(full) / float64(n)
}

// TestLongReuseDepthFollowsLength fits a trace where short prompts reuse one
// block and long ones all but one, and checks that the generated workload
// keeps both depths per length (a pooled depth law gives the short prompts
// the long ones' depth) and repeats whole prompts as rarely as the trace.
func TestLongReuseDepthFollowsLength(t *testing.T) {
	skipLong(t)
	dir := reuseFixture(t, 6000)
	m, err := Fit(context.Background(), dir, FitOptions{NoLatent: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Prefix.ByInputBin) != 2 {
		t.Fatalf("per-bin reuse laws for %d bins, want 2 (short and long): %+v", len(m.Prefix.ByInputBin), m.Prefix.ByInputBin)
	}
	saved := m.Prefix.ByInputBin[1].Depth.Knots
	m.Prefix.ByInputBin[1].Depth.Knots = []float64{0.5, 1.5}
	if err := m.Validate(); err == nil || !strings.Contains(err.Error(), "laws_by_input_bin[1]") {
		t.Errorf("a depth table beyond 1 gave %v, want an error naming laws_by_input_bin[1]", err)
	}
	m.Prefix.ByInputBin[1].Depth.Knots = saved
	rs, rl, rWhole := realisedDepths(t, dir, 16384)
	gen := generateBucket(t, m, GenerateOptions{Seed: 4})
	gs, gl, gWhole := realisedDepths(t, gen, 16384)
	for _, c := range []struct {
		what       string
		real, synt []float64
	}{{"short prompts", rs, gs}, {"long prompts", rl, gl}} {
		if len(c.synt) < 100 {
			t.Fatalf("%s: %d reusing requests generated, want ≥ 100", c.what, len(c.synt))
		}
		r, s := rank.Percentile(sortedCopy(c.real), 0.5), rank.Percentile(sortedCopy(c.synt), 0.5)
		t.Logf("%s: median depth share real %.3f, generated %.3f (%d reusing)", c.what, r, s, len(c.synt))
		if math.Abs(r-s) > 0.05 {
			t.Errorf("%s: generated median depth share %.3f, the trace's %.3f", c.what, s, r)
		}
	}
	t.Logf("whole-prompt repeats: real %.3f, generated %.3f", rWhole, gWhole)
	if math.Abs(rWhole-gWhole) > 0.02 {
		t.Errorf("generated %.3f of requests repeat an earlier prompt whole, the trace %.3f", gWhole, rWhole)
	}
}
