package synth

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/internal/rank"
	"github.com/servetrace/servetrace/trace"
)

// chatTraffic builds a trace of chat conversations without session ids, as
// gateways log them: conversations start as a Poisson stream, each opens
// with one of four shared one-block system prompts (Zipf-popular) and
// runs a geometric number of turns; the user thinks for a log-normal time
// (median thinkS) between a response and the next turn, whose prompt is
// the whole history (every earlier prompt and answer) and the new message.
// Unless statedLaw is set: then a new turn's history is not its own
// conversation's but the one whose last block lies nearest a stack
// distance drawn from statedLaw, so the trace's reuse distances follow a
// stated law.
// With sessionIDs, each request carries its conversation's id and turn, as
// a gateway that logs them does.
func chatTraffic(t *testing.T, seed uint64, spanS, startsPerS, thinkS float64, sessionIDs bool, statedLaw func(*rand.Rand) float64) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 17))
	const bs = trace.DefaultBlockSize
	next := int64(1 << 30)
	fresh := func() int64 { next++; return next }
	var systems [][]int64
	for range 4 {
		systems = append(systems, []int64{fresh()})
	}
	type turn struct {
		at      float64
		blocks  []int64
		tokens  int64
		left    int
		session string
		turn    int32
	}
	var pending []turn // by time
	push := func(x turn) {
		i, _ := slices.BinarySearchFunc(pending, x.at, func(p turn, at float64) int { return cmp.Compare(p.at, at) })
		pending = slices.Insert(pending, i, x)
	}
	for at := rng.ExpFloat64() / startsPerS; at < spanS; at += rng.ExpFloat64() / startsPerS {
		sys := systems[min(3, int(math.Floor(math.Exp(rng.Float64()*math.Log(5))))-1)]
		tokens := int64(len(sys))*bs + 100 + rng.Int64N(2000)
		push(turn{at: at, blocks: slices.Clone(sys), tokens: tokens, left: int(rng.ExpFloat64() * 3), session: fmt.Sprintf("c%d", int(at*1e6)), turn: 0})
	}
	stack := newLRUStack(1 << 30)
	lastOwner := map[int64][]int64{} // a history's last block → the history
	var rows []trace.Request
	for len(pending) > 0 {
		x := pending[0]
		pending = pending[1:]
		if x.at >= spanS {
			continue
		}
		blocks := x.blocks
		if statedLaw != nil && x.turn > 0 && stack.live > 0 {
			// Continue instead whichever history's last block lies nearest
			// the drawn distance, looking both ways from it.
			// The prompt is that history and a new message. A distance
			// the trace cannot hold yet is no reuse of a history (the
			// turn opens a conversation of its own), so every history
			// reuse is a draw of the law, right-truncated at the blocks
			// seen, as a trace that starts mid-conversation is.
			dist := int(statedLaw(rng))
			if dist >= stack.live {
				sys := systems[min(3, int(math.Floor(math.Exp(rng.Float64()*math.Log(5))))-1)]
				blocks = slices.Clone(sys)
				x.tokens = int64(len(sys))*bs + 100 + rng.Int64N(2000)
				dist = -1
			}
			st0 := stack.stampAt(dist)
			for k := int32(0); dist >= 0 && k < int32(len(stack.ids)); k++ {
				h := nearestOwner(stack, lastOwner, st0-k)
				if h == nil {
					h = nearestOwner(stack, lastOwner, st0+k)
				}
				if h != nil {
					blocks = slices.Clone(h)
					x.tokens = int64(len(h)+1+rng.IntN(3))*bs + rng.Int64N(bs)
					break
				}
			}
		}
		nb := int((x.tokens + bs - 1) / bs)
		for len(blocks) < nb {
			blocks = append(blocks, fresh())
		}
		out := 50 + rng.Int64N(600)
		id := trace.Identity{RequestID: fmt.Sprintf("r%d", len(rows))}
		if sessionIDs {
			id.SessionID, id.Turn = x.session, x.turn
		}
		rows = append(rows, trace.Request{Identity: id, TS: int64(x.at * 1e6),
			Shape: trace.Shape{InputTokens: x.tokens, OutputTokens: out, API: trace.APIChat, PrefixBlocks: blocks}})
		for _, id := range blocks {
			stack.use(id, x.at)
		}
		full := blocks[:x.tokens/bs]
		if len(full) > 0 {
			lastOwner[full[len(full)-1]] = full
		}
		if x.left > 0 {
			think := thinkS * math.Exp(rng.NormFloat64())
			push(turn{at: x.at + float64(out)*0.02 + think, blocks: slices.Clone(full), tokens: x.tokens + out + 20 + rng.Int64N(400), left: x.left - 1, session: x.session, turn: x.turn + 1})
		}
	}
	return writeBucket(t, rows, &trace.Manifest{BlockSize: bs})
}

// nearestOwner returns the history whose last block was last used at stamp
// st, or nil.
func nearestOwner(s *lruStack, owner map[int64][]int64, st int32) []int64 {
	if st < 0 || int(st) >= len(s.ids) || s.ids[st] < 0 {
		return nil
	}
	return owner[s.ids[st]]
}

// reuseDistances returns, for each reusing request of a bucket in order,
// the stack distance of its deepest shared block just before it (the
// quantity the fit's distance law describes, measured here apart from it),
// the blocks it reuses and the distinct blocks used before it (no
// distance can exceed them).
func reuseDistances(t *testing.T, dir string) (dist, depth, seen []float64) {
	t.Helper()
	b, err := trace.OpenBucket(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := newLRUStack(1 << 30)
	err = b.Scan(context.Background(), func(r *trace.Request) error {
		d := 0
		for d < len(r.PrefixBlocks) {
			if _, _, ok := s.distance(r.PrefixBlocks[d]); !ok {
				break
			}
			d++
		}
		if d > 0 {
			x, _, _ := s.distance(r.PrefixBlocks[d-1])
			dist, depth, seen = append(dist, float64(x)), append(depth, float64(d)), append(seen, float64(s.live))
		}
		for _, id := range r.PrefixBlocks {
			s.use(id, 0)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dist, depth, seen
}

// checkHitCurve validates gen against real and fails any LRU size whose
// hit rate is off by more than tol, or a stack-distance KS above ksTol.
func checkHitCurve(t *testing.T, real, gen string, tol, ksTol float64) {
	t.Helper()
	v, err := Validate(context.Background(), real, gen, ValidateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sizes := 0
	for _, c := range v.Checks {
		switch {
		case c.Name == "stack_distance_ks" && c.Diff > ksTol:
			t.Errorf("stack-distance KS %.4f, want ≤ %g", c.Diff, ksTol)
		case strings.HasPrefix(c.Name, "lru_hit_"):
			sizes++
			if c.Diff > tol {
				t.Errorf("%s: hit rate %.4f against the trace's %.4f, want within %g", c.Name, c.Synth, c.Real, tol)
			}
		}
	}
	if sizes != len(LRUSizes) {
		t.Fatalf("%d LRU sizes validated, want %d (skipped: %v)", sizes, len(LRUSizes), v.SkippedReason)
	}
}

// TestLongStackDistanceKnownTruth fits a trace whose reuse distances follow
// a stated law (log-uniform from 30 to 30,000 blocks) under a session
// structure (conversations whose histories grow turn by turn, shared system
// prompts), regenerates it, and checks that the workload gives the law
// back (KS ≤ 0.03 on the history reuses made once the stack could hold the
// law's longest distance, so none was truncated) and the LRU hit rate
// within 0.02 at every size. Measured, three seeds: law KS 0.020–0.022,
// hit rates within 0.006–0.013, validate's stack-distance KS 0.009–0.020,
// every reuse's distance against the truth's KS 0.024–0.043.
func TestLongStackDistanceKnownTruth(t *testing.T) {
	skipLong(t)
	const longest = 30000
	law := func(r *rand.Rand) float64 { return math.Exp(math.Log(30) + r.Float64()*math.Log(longest/30)) }
	truth := chatTraffic(t, 3, 3600, 1.5, 30, false, law)
	var stated []float64
	r := rand.New(rand.NewPCG(1, 1))
	for range 20000 {
		stated = append(stated, math.Round(law(r)))
	}
	// The history reuses (deeper than any system prompt) made when any
	// distance of the law could be: their distances are the law's.
	untruncated := func(dir string) []float64 {
		dist, depth, seen := reuseDistances(t, dir)
		var out []float64
		for i := range dist {
			if depth[i] > 3 && seen[i] > longest {
				out = append(out, dist[i])
			}
		}
		return out
	}
	td, _, _ := reuseDistances(t, truth)
	if ks := rank.KS(untruncated(truth), stated); ks > 0.03 {
		t.Fatalf("the truth's own reuse distances are off the stated law by KS %.3f: the fixture is wrong", ks)
	}
	m, err := Fit(context.Background(), truth, FitOptions{NoLatent: true})
	if err != nil {
		t.Fatal(err)
	}
	for seed := uint64(1); seed <= 2; seed++ {
		gen := generateBucket(t, m, GenerateOptions{Seed: seed})
		if ks := rank.KS(untruncated(gen), stated); ks > 0.03 {
			t.Errorf("seed %d: history reuse distances off the stated law by KS %.4f, want ≤ 0.03", seed, ks)
		}
		// Every reuse, system prompts too: theirs follow from how popular
		// each of the four is, which nothing pins, so the bar is looser.
		if gd, _, _ := reuseDistances(t, gen); rank.KS(gd, td) > 0.05 {
			t.Errorf("seed %d: per-request reuse distances off the truth's by KS %.4f, want ≤ 0.05", seed, rank.KS(gd, td))
		}
		checkHitCurve(t, truth, gen, 0.02, 0.03)
	}
}

// TestLongConversationReuseAtEveryCacheSize is the check the bundled
// samples cannot make: chat traffic with long think times, histories that
// grow turn by turn and a few shared system prompts. Whole-trace fit, three
// seeds of the same span: the LRU hit rate within 0.03 of the trace's at
// every size from 0.1% to 100% of its distinct blocks, and the refit of a
// generated workload gives back the stack-distance law (KS ≤ 0.05).
func TestLongConversationReuseAtEveryCacheSize(t *testing.T) {
	skipLong(t)
	truth := chatTraffic(t, 5, 3600, 1.2, 90, false, nil)
	m, err := Fit(context.Background(), truth, FitOptions{NoLatent: true})
	if err != nil {
		t.Fatal(err)
	}
	for seed := uint64(1); seed <= 3; seed++ {
		gen := generateBucket(t, m, GenerateOptions{Seed: seed})
		checkHitCurve(t, truth, gen, 0.03, 0.05)
		if seed == 1 {
			refit, err := Fit(context.Background(), gen, FitOptions{NoLatent: true})
			if err != nil {
				t.Fatal(err)
			}
			if ks := marginalKS(m.Prefix.Distance, refit.Prefix.Distance); ks > 0.05 {
				t.Errorf("refit stack-distance law off the fitted one by KS %.4f, want ≤ 0.05", ks)
			}
		}
	}
}
