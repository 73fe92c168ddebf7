package sim

import (
	"fmt"
	"slices"
	"time"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat"

	"github.com/servetrace/servetrace/trace"
)

// Calibration is a cost model fitted to a replay against a real endpoint.
type Calibration struct {
	Cost CostModel `json:"cost"`
	// PrefillSamples requests had the server to themselves from send to
	// first token; their TTFT against prompt tokens gives the prefill cost
	// per token.
	PrefillSamples int     `json:"prefill_samples"`
	PrefillR2      float64 `json:"prefill_r2"`
	// DecodeSamples token gaps had a steady batch and no prefill beside
	// them; gap = iter base + per-seq x batch + per-KV-token x KV read.
	DecodeSamples int      `json:"decode_samples"`
	DecodeR2      float64  `json:"decode_r2"`
	Notes         []string `json:"notes,omitempty"`
}

// interval is one request's phases on the run clock (ns).
type interval struct {
	sent, first, done int64
	prompt            int64
	tokens            []int64 // absolute token event times
}

// Calibrate fits the cost model to replay results. TTFT of requests that
// found the server idle is regressed on their prompt tokens (slope: prefill
// cost per token); each token gap during which the batch did not change and
// no request was prefilling is regressed on the batch size and the KV tokens
// the batch reads (intercept: iteration base; slopes: cost per decoding
// sequence and per KV token). It needs streamed, successful requests with
// one token per event.
func Calibrate(rows []trace.Result) (*Calibration, error) {
	var iv []interval
	for _, r := range rows {
		if r.Outcome != trace.OutcomeOK || r.Warmup || r.SentNs == nil || r.FirstTokenNs == nil || r.DoneNs == nil {
			continue
		}
		prompt := r.PromptTokensSent
		if r.UsagePromptTokens != nil {
			prompt = *r.UsagePromptTokens
		}
		x := interval{sent: *r.SentNs, first: *r.FirstTokenNs, done: *r.DoneNs, prompt: prompt}
		for _, t := range r.TokenTimesNs {
			x.tokens = append(x.tokens, *r.SentNs+t)
		}
		iv = append(iv, x)
	}
	if len(iv) < 3 {
		return nil, fmt.Errorf("calibrate: %d usable requests; need streamed, successful requests (at least a few dozen)", len(iv))
	}
	slices.SortFunc(iv, func(a, b interval) int { return int(a.sent - b.sent) })
	c := &Calibration{}

	// Prefill: requests alone on the server for their whole prefill (no
	// other request in flight between their send and first token).
	var xs, ys []float64
	for i, x := range iv {
		idle := true
		for j, y := range iv {
			if j != i && y.sent < x.first && y.done > x.sent {
				idle = false
				break
			}
		}
		if idle {
			xs, ys = append(xs, float64(x.prompt)), append(ys, float64(x.first-x.sent))
		}
	}
	c.PrefillSamples = len(xs)
	if len(xs) < 3 || stat.Variance(xs, nil) == 0 {
		return nil, fmt.Errorf("calibrate: %d requests met the server idle (with different prompt sizes); replay some requests spaced apart, of several sizes, to measure prefill", len(xs))
	}
	alpha, beta := stat.LinearRegression(xs, ys, nil, false)
	c.PrefillR2 = stat.RSquared(xs, ys, nil, alpha, beta)
	c.Cost.PerPrefillToken = time.Duration(beta)

	// Decode: gaps with a steady batch and no prefill beside them.
	var rowsX []float64
	var gaps []float64
	for _, x := range iv {
		for k := 1; k < len(x.tokens); k++ {
			t0, t1 := x.tokens[k-1], x.tokens[k]
			batch, kv, clean := 0, 0.0, true
			for _, y := range iv {
				if y.sent < t1 && y.first > t0 { // y was prefilling during the gap
					clean = false
					break
				}
				decodingAt0 := y.first <= t0 && y.done >= t0
				decodingAt1 := y.first <= t1 && y.done >= t1
				if decodingAt0 != decodingAt1 {
					clean = false // the batch changed
					break
				}
				if decodingAt0 {
					batch++
					got := 0
					for _, tt := range y.tokens {
						if tt <= t0 {
							got++
						}
					}
					kv += float64(y.prompt) + float64(got)
				}
			}
			if clean && batch > 0 {
				rowsX = append(rowsX, 1, float64(batch), kv)
				gaps = append(gaps, float64(t1-t0))
			}
		}
	}
	c.DecodeSamples = len(gaps)
	if len(gaps) < 10 {
		return nil, fmt.Errorf("calibrate: %d clean token gaps; replay bursts of concurrent streams of several batch sizes to measure decoding", len(gaps))
	}
	X := mat.NewDense(len(gaps), 3, rowsX)
	y := mat.NewVecDense(len(gaps), gaps)
	var b mat.VecDense
	if err := b.SolveVec(X, y); err != nil {
		return nil, fmt.Errorf("calibrate: decode regression: %w (vary batch sizes and prompt lengths independently)", err)
	}
	c.Cost.IterBase, c.Cost.PerDecodeSeq, c.Cost.PerKVToken = time.Duration(b.AtVec(0)), time.Duration(b.AtVec(1)), time.Duration(b.AtVec(2))
	var fitted mat.VecDense
	fitted.MulVec(X, &b)
	c.DecodeR2 = rSquared(gaps, fitted.RawVector().Data)
	if alpha > 0 && c.Cost.IterBase > 0 {
		c.Notes = append(c.Notes, fmt.Sprintf("TTFT intercept %.2f ms vs iteration base %.2f ms: the difference is request overhead outside the engine (HTTP, tokenization)",
			alpha/1e6, float64(c.Cost.IterBase)/1e6))
	}
	for name, d := range map[string]time.Duration{"iter base": c.Cost.IterBase, "prefill per token": c.Cost.PerPrefillToken,
		"decode per sequence": c.Cost.PerDecodeSeq, "KV per token": c.Cost.PerKVToken} {
		if d < 0 {
			c.Notes = append(c.Notes, fmt.Sprintf("the fitted %s is negative (%v): the run does not separate it from the others; set it by hand", name, d))
		}
	}
	return c, nil
}

func rSquared(y, fitted []float64) float64 {
	mean := stat.Mean(y, nil)
	var ssRes, ssTot float64
	for i := range y {
		ssRes += (y[i] - fitted[i]) * (y[i] - fitted[i])
		ssTot += (y[i] - mean) * (y[i] - mean)
	}
	if ssTot == 0 {
		return 0
	}
	return 1 - ssRes/ssTot
}
