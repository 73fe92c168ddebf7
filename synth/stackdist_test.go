package synth

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// naiveDistances computes stack distances by keeping the LRU stack as a
// slice, most recent last: the independent truth for StackDistances.
func naiveDistances(blocks [][]int64) []float64 {
	var stack []int64
	var out []float64
	for _, bs := range blocks {
		for _, b := range bs {
			i := slices.Index(stack, b)
			if i < 0 {
				out = append(out, math.Inf(1))
			} else {
				out = append(out, float64(len(stack)-1-i))
				stack = slices.Delete(stack, i, i+1)
			}
			stack = append(stack, b)
		}
	}
	return out
}

// randomPrefixBlocks draws n requests that reuse a random earlier request's
// leading blocks, so distances span short and long reuse.
func randomPrefixBlocks(seed uint64, n int) [][]int64 {
	rng := rand.New(rand.NewPCG(seed, 1))
	var out [][]int64
	next := int64(0)
	for range n {
		nb := 1 + rng.IntN(12)
		var bs []int64
		if len(out) > 0 && rng.Float64() < 0.7 {
			p := out[len(out)-1-min(len(out)-1, int(rng.ExpFloat64()*float64(1+rng.IntN(300))))]
			bs = append(bs, p[:min(len(p), 1+rng.IntN(nb))]...)
		}
		for len(bs) < nb {
			next++
			bs = append(bs, next)
		}
		out = append(out, bs)
	}
	return out
}

func TestStackDistancesMatchNaiveStack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		blocks [][]int64
	}{
		{"hand", [][]int64{{1, 2, 3}, {1, 2, 4}, {3}, {1}}},
		{"random", randomPrefixBlocks(3, 3000)}, // past several compactions
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := StackDistances(context.Background(), tc.blocks)
			if err != nil {
				t.Fatal(err)
			}
			want := naiveDistances(tc.blocks)
			if !slices.Equal(got, want) {
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("use %d: distance %v, want %v", i, got[i], want[i])
					}
				}
			}
		})
	}
	// Hand-computed: {1,2,3},{1,2,4},{3},{1} → 1 after 2,3: distance 2;
	// 2 after 3,1: 2; 4 new; 3 after 1,2,4: 3; 1 after 2,4,3: 3.
	got, _ := StackDistances(context.Background(), [][]int64{{1, 2, 3}, {1, 2, 4}, {3}, {1}})
	inf := math.Inf(1)
	if want := []float64{inf, inf, inf, 2, 2, inf, 3, 3}; !slices.Equal(got, want) {
		t.Errorf("hand-computed distances %v, want %v", got, want)
	}
}

// TestHitCurveEqualsLRUSimulation checks the identity the reuse model rests
// on: an LRU cache of C blocks hits exactly the uses at distance below C.
func TestHitCurveEqualsLRUSimulation(t *testing.T) {
	blocks := randomPrefixBlocks(5, 5000)
	d, err := StackDistances(context.Background(), blocks)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(d)
	caps := []float64{1, 2, 7, 30, 100, 400, 2000, 1e6}
	got := HitCurve(d, caps)
	want := lruHitRates(blocks, 1, caps)
	for i := range caps {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Errorf("capacity %g: hit curve %v, LRU simulation %v", caps[i], got[i], want[i])
		}
	}
}

// TestStackStampAtInvertsDistance checks stampAt against distance, and that
// a bounded stack forgets the least recent blocks and nothing else.
func TestStackStampAtInvertsDistance(t *testing.T) {
	s := newLRUStack(1000)
	rng := rand.New(rand.NewPCG(9, 9))
	var order []int64 // distinct blocks, most recent last
	for i := range 20000 {
		id := int64(rng.IntN(1500))
		s.use(id, float64(i))
		if j := slices.Index(order, id); j >= 0 {
			order = slices.Delete(order, j, j+1)
		}
		order = append(order, id)
	}
	if !s.forgot || s.live > 1000 {
		t.Fatalf("a stack bounded at 1000 blocks holds %d (forgot %v)", s.live, s.forgot)
	}
	for id, st := range s.last {
		d, _, ok := s.distance(id)
		if !ok || s.stampAt(d) != st {
			t.Fatalf("block %d at distance %d: stampAt gives %d, want %d", id, d, s.stampAt(d), st)
		}
	}
	if st := s.stampAt(1 << 30); s.distanceOfStamp(st) != s.live-1 {
		t.Errorf("a distance beyond the stack gives stamp %d at distance %d, want the least recent (%d)", st, s.distanceOfStamp(st), s.live-1)
	}
	// The remembered blocks are the most recent ones.
	for _, id := range order[len(order)-s.live:] {
		if _, ok := s.last[id]; !ok {
			t.Fatalf("block %d is among the %d most recent but was forgotten", id, s.live)
		}
	}
	if empty := newLRUStack(10); empty.stampAt(0) != -1 {
		t.Error("an empty stack gives a stamp")
	}
}
