package synth

import (
	"math"
	"math/rand/v2"

	"github.com/servetrace/servetrace/internal/rank"
)

// DepthLaw is how deep the reuses by prompts of Low ≤ nb < High blocks go
// (the classes of depthClass: one per count up to 8 blocks, then octaves).
// An input bin in tokens spans prompts of 3 to 8 blocks, and within it the
// depth follows the prompt's own length: a first turn, 3–5 blocks, reuses
// only its system prompt, while a later turn reuses all its history but the
// new message; drawn per input bin, a chat fixture's system prompts went to
// 8-block prompts too and its depth KS was 0.07.
type DepthLaw struct {
	Low  int   `json:"prompt_blocks_low"`
	High int   `json:"prompt_blocks_high"`
	N    int64 `json:"n"`
	// Blocks is the law of the reused blocks; its head atoms (contiguous
	// from p = 0, at most half the class's shortest prompt) are drawn as
	// they are: shared system prompts, a fixed number of blocks.
	Blocks Marginal `json:"depth_blocks"`
	// Whole is the share of the other reuses that repeat the prompt whole.
	Whole float64 `json:"whole_share"`
	// Beyond the heads and the whole repeats, the depth is the prompt less
	// a tail drawn from Tail (the blocks a reuse does not share: a turn
	// adds a message of its own length to a history of any length) where
	// the fit found it reproduces the class's depths better, else Share of
	// the prompt; either way short of the whole prompt.
	Tail  *Marginal `json:"tail_blocks,omitempty"`
	Share Marginal  `json:"depth_share"`
}

// isHeadDepth reports whether a depth of d blocks is one of heads'.
func isHeadDepth(heads []Atom, d float64) bool {
	for _, a := range heads {
		if d == a.Value {
			return true
		}
	}
	return false
}

// headAtoms returns the atoms that head an absolute depth law, contiguous
// from p = 0, of at most most blocks: the shared heads. In a class of
// short prompts every block count is an atom, and drawn as absolute
// counts they would ignore the prompt's length.
func headAtoms(law *Marginal, most float64) []Atom {
	if law == nil {
		return nil
	}
	var out []Atom
	head := 0.0
	for _, a := range law.Atoms {
		if a.PLow != head || a.Value > most {
			break
		}
		out = append(out, a)
		head = a.PHigh
	}
	return out
}

// fitDepthLaw fits one prompt-length class's DepthLaw from its reuses,
// each weighted by weight (Horvitz–Thompson, as the depth laws are).
// Tail is kept where it predicts the depths seen better than Share: each
// reuse's depth is predicted from its own prompt length and another
// reuse's share or tail (a fixed pairing; a tail that leaves no depth or
// a head's takes the next reuse's, as generation redraws it), and the
// law whose predictions lie nearer (KS) wins.
func fitDepthLaw(c int, r *reservoir[reuseObs], weight func(reuseObs) float64) DepthLaw {
	low, high := depthClassBounds(c)
	n := len(r.items)
	blocks, ws := make([]float64, n), make([]float64, n)
	for i, o := range r.items {
		blocks[i], ws[i] = o.blocks, weight(o)
	}
	law := DepthLaw{Low: low, High: high, N: int64(r.seen), Blocks: weightedMarginal(blocks, ws, 33, int64(r.seen))}
	heads := headAtoms(&law.Blocks, float64(low)/2)
	var rest []reuseObs
	whole, other := 0.0, 0.0
	for _, o := range r.items {
		if isHeadDepth(heads, o.blocks) {
			continue
		}
		other += weight(o)
		if o.blocks == o.prompt {
			whole += weight(o)
			continue
		}
		rest = append(rest, o)
	}
	if other > 0 {
		law.Whole = whole / other
	}
	k := len(rest)
	if k == 0 {
		law.Share = weightedMarginal([]float64{1}, []float64{1}, 2, 0)
		return law
	}
	share, tail, wk := make([]float64, k), make([]float64, k), make([]float64, k)
	for i, o := range rest {
		share[i], tail[i], wk[i] = o.share, o.prompt-o.blocks, weight(o)
	}
	law.Share = weightedMarginal(share, wk, 33, int64(r.seen))
	if high-low == 1 || k < minBinRequests {
		return law // one prompt length: share and tail say the same
	}
	depth, byShare, byTail := make([]float64, k), make([]float64, k), make([]float64, k)
	for i, o := range rest {
		j := (i*7919 + 1) % k // another reuse, the same pairing every fit
		depth[i] = o.blocks
		byShare[i] = shareDepth(share[j], o.prompt)
		byTail[i] = byShare[i]
		for try := range maxRedraws {
			if d := o.prompt - tail[(j+try)%k]; d >= 1 && !isHeadDepth(heads, d) {
				byTail[i] = d
				break
			}
		}
	}
	if rank.KS(byTail, depth) < rank.KS(byShare, depth) {
		t := weightedMarginal(tail, wk, 33, int64(r.seen))
		law.Tail = &t
	}
	return law
}

// shareDepth is the depth a share of a prompt of nb blocks gives: at
// least one block, short of the whole prompt (whole repeats are drawn
// apart, with their own share).
func shareDepth(share, nb float64) float64 {
	return math.Max(math.Min(math.Round(share*nb), nb-1), 1)
}

// draw returns the depth of a reuse by a prompt of nb blocks in this
// class: a head atom where u falls in one, else the whole prompt at the
// class's share of whole repeats, else the prompt less a tail (redrawn
// while it leaves nothing, or a head's depth, whose mass the atom holds),
// else a share of the prompt.
func (l *DepthLaw) draw(rng *rand.Rand, nb int) int {
	heads := headAtoms(&l.Blocks, float64(l.Low)/2)
	u := rng.Float64()
	for _, a := range heads {
		if u < a.PHigh {
			return min(max(int(a.Value), 1), nb)
		}
	}
	if rng.Float64() < l.Whole || nb == 1 {
		return nb
	}
	if l.Tail != nil {
		for range maxRedraws {
			if d := nb - max(int(math.Round(l.Tail.Quantile(rng.Float64()))), 1); d >= 1 && !isHeadDepth(heads, float64(d)) {
				return d
			}
		}
	}
	return int(shareDepth(l.Share.Quantile(rng.Float64()), float64(nb)))
}
