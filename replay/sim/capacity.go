package sim

import "time"

// RequestWork is the engine time one request of prompt and output tokens
// takes when the engine runs full (no prefix cache hit): its prefill
// tokens and its decode steps at their per-token and per-sequence costs,
// the KV each decode step reads (the prompt and the tokens so far), and
// its share of the iterations' fixed cost, every iteration carrying
// MaxNumBatchedTokens tokens. A saturated engine completes 1 / mean work
// requests a second: the capacity a sweep's bracket should hold.
func (o EngineOptions) RequestWork(prompt, output int64) time.Duration {
	c := o.Cost
	decodes := max(output-1, 0) // the prefill's iteration yields the first token
	kv := decodes*prompt + decodes*(decodes+1)/2
	share := float64(c.IterBase) * float64(prompt+decodes) / float64(max(o.MaxNumBatchedTokens, 1))
	return time.Duration(prompt)*c.PerPrefillToken + time.Duration(decodes)*c.PerDecodeSeq + time.Duration(kv)*c.PerKVToken + time.Duration(share)
}

// Capacity is the requests a second a saturated engine completes of a
// mix: one over the mean of RequestWork over the requests' (prompt,
// output) pairs; 0 for none.
func (o EngineOptions) Capacity(prompts, outputs []int64) float64 {
	if len(prompts) == 0 || len(prompts) != len(outputs) {
		return 0
	}
	var total time.Duration
	for i := range prompts {
		total += o.RequestWork(prompts[i], outputs[i])
	}
	if total <= 0 {
		return 0
	}
	return float64(len(prompts)) / total.Seconds()
}
