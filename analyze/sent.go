package analyze

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/servetrace/servetrace/trace"
)

// TokenStats describes a token count distribution (type-7 percentiles).
type TokenStats struct {
	N   int     `json:"n"`
	P10 float64 `json:"p10"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func tokenStats(v []int64) TokenStats {
	if len(v) == 0 {
		return TokenStats{}
	}
	f := make([]float64, len(v))
	for i, x := range v {
		f[i] = float64(x)
	}
	slices.Sort(f)
	return TokenStats{N: len(f), P10: Percentile(f, 0.10), P50: Percentile(f, 0.50), P90: Percentile(f, 0.90), P99: Percentile(f, 0.99), Max: f[len(f)-1]}
}

// Sent is what the run actually sent and got back, over the counted
// requests that were sent (warmup excluded).
type Sent struct {
	// InputTokens are the prompt tokens sent.
	InputTokens TokenStats `json:"input_tokens"`
	// RequestedOutputTokens are the output lengths the workload asked for.
	RequestedOutputTokens TokenStats `json:"requested_output_tokens"`
	// OutputTokens are the output tokens observed, successful requests only.
	OutputTokens  TokenStats     `json:"output_tokens"`
	FinishReasons map[string]int `json:"finish_reasons"`
	// ReusedPrefixShare is the share of prompt blocks whose id an earlier
	// request (in send order) had already sent: the prefix-cache
	// opportunity. PrefixKnown counts requests that carried block ids.
	ReusedPrefixShare float64 `json:"reused_prefix_share"`
	PrefixKnown       int     `json:"prefix_known"`
	// FeatureShares is the share of requests carrying each feature tag.
	FeatureShares map[string]float64 `json:"feature_shares,omitempty"`
	// PromptGap is served minus intended prompt tokens (the server's usage
	// count minus the workload's input_tokens), where the server said.
	PromptGap *TokenStats `json:"prompt_gap,omitempty"`
}

// summarizeSent describes what was sent.
func summarizeSent(c *resultColumns) Sent {
	s := Sent{FinishReasons: map[string]int{}, FeatureShares: map[string]float64{}}
	var inputs, requested, outputs, gaps []int64
	order := make([]int32, 0, c.n)
	for i := range c.n {
		if c.warmup[i] || c.sent[i] == null {
			continue
		}
		order = append(order, int32(i))
	}
	slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(c.sent[a], c.sent[b]) })
	seen := map[int64]bool{}
	var blocks, reused int
	for _, i := range order {
		inputs = append(inputs, c.promptSent[i])
		requested = append(requested, c.requestedOutput[i])
		if c.outcome[i] == trace.OutcomeOK {
			outputs = append(outputs, c.observedOut[i])
		}
		if r := c.finishReason[i]; r != "" {
			s.FinishReasons[r]++
		}
		if c.usagePrompt[i] != null {
			gaps = append(gaps, c.usagePrompt[i]-c.inputTokens[i])
		}
		for _, f := range c.featuresOf(int(i)) {
			s.FeatureShares[f]++
		}
		if pb := c.prefixBlocksOf(int(i)); len(pb) > 0 {
			s.PrefixKnown++
			for _, b := range pb {
				blocks++
				if seen[b] {
					reused++
				}
				seen[b] = true
			}
		}
	}
	for f := range s.FeatureShares {
		s.FeatureShares[f] /= float64(len(order))
	}
	if blocks > 0 {
		s.ReusedPrefixShare = float64(reused) / float64(blocks)
	}
	s.InputTokens, s.RequestedOutputTokens, s.OutputTokens = tokenStats(inputs), tokenStats(requested), tokenStats(outputs)
	if len(gaps) > 0 {
		g := tokenStats(gaps)
		s.PromptGap = &g
	}
	return s
}

// Smoothness describes how evenly tokens streamed.
type Smoothness struct {
	// ITLCV is the coefficient of variation (stddev / mean) of the pooled
	// inter-token gaps.
	ITLCV float64 `json:"itl_cv"`
	// StallMs is the threshold; Stalls counts gaps above it, per 1,000
	// streamed output tokens in StallsPer1kTokens.
	StallMs           float64 `json:"stall_ms"`
	Stalls            int     `json:"stalls"`
	StallsPer1kTokens float64 `json:"stalls_per_1k_tokens"`
	LongestStallMs    float64 `json:"longest_gap_ms"`
}

func smoothnessOf(t *tally, cv float64, opts Options) Smoothness {
	sm := Smoothness{StallMs: nsToMs(stallThreshold(opts)), Stalls: t.stalls, LongestStallMs: nsToMs(t.longestStallNs), ITLCV: cv}
	if t.streamedTokens > 0 {
		sm.StallsPer1kTokens = 1000 * float64(t.stalls) / float64(t.streamedTokens)
	}
	return sm
}

// itlCV is the pooled gaps' coefficient of variation (sample standard
// deviation over the mean), 0 for fewer than two gaps or a zero mean.
func itlCV(itl []float64) float64 {
	if len(itl) < 2 {
		return 0
	}
	var sum float64
	for _, v := range itl {
		sum += v
	}
	mean := sum / float64(len(itl))
	var ss float64
	for _, v := range itl {
		ss += (v - mean) * (v - mean)
	}
	if mean <= 0 {
		return 0
	}
	return math.Sqrt(ss/float64(len(itl)-1)) / mean
}

// Dimensions are the --by breakdowns.
var Dimensions = []string{"tenant", "model", "adapter", "turn", "role", "input_bucket", "phase", "modality", "feature"}

// maxGroups is how many groups a breakdown shows; the smallest beyond it
// are pooled as "(other)".
const maxGroups = 20

// Group is one value of a breakdown dimension.
type Group struct {
	Value       string  `json:"value"`
	Counted     int     `json:"counted"`
	OK          int     `json:"ok"`
	SuccessRate float64 `json:"success_rate"`
	// RequestsPerS and OutputTokensPerS are over the whole run's span, so
	// groups add up to the total.
	RequestsPerS     float64                 `json:"requests_per_s"`
	OutputTokensPerS float64                 `json:"output_tokens_per_s"`
	Metrics          map[string]Distribution `json:"metrics"`
	// PrefixCacheHit is the share of the ok requests' prompt tokens the
	// server's prefix cache served, over those whose usage said both
	// (usage_cached_tokens, usage_prompt_tokens); nil where none did. By
	// turn it shows whether the cache kept a growing context.
	PrefixCacheHit *float64 `json:"prefix_cache_hit,omitempty"`
}

// cacheTally sums the cached and prompt tokens of the ok requests whose
// usage gave both.
type cacheTally struct{ cached, prompt int64 }

func (t *cacheTally) add(c *resultColumns, i int) {
	if c.warmup[i] || c.outcome[i] != trace.OutcomeOK || c.usageCached[i] == null || c.usagePrompt[i] == null {
		return
	}
	t.cached += min(c.usageCached[i], c.usagePrompt[i])
	t.prompt += c.usagePrompt[i]
}

func (t *cacheTally) merge(o *cacheTally) { t.cached, t.prompt = t.cached+o.cached, t.prompt+o.prompt }

// share is the hit share, nil without a prompt token counted.
func (t *cacheTally) share() *float64 {
	if t.prompt == 0 {
		return nil
	}
	return new(float64(t.cached) / float64(t.prompt))
}

// groupKey returns row i's value of a dimension.
func groupKey(c *resultColumns, dim string, i int) string {
	switch dim {
	case "tenant":
		return orNone(c.tenant[i])
	case "model":
		return orNone(c.model[i])
	case "adapter":
		return orNone(c.adapter[i])
	case "phase":
		return orNone(c.phase[i])
	case "role":
		return orNone(c.role[i])
	case "turn":
		return strconv.FormatInt(c.turn[i], 10)
	case "input_bucket":
		return inputBucket(c.promptSent[i])
	case "modality":
		return modalityOf(c, i)
	}
	return ""
}

// groupKeys returns row i's values of a dimension: one, but for "feature",
// where a request is in the group of each feature label it carries (or
// "(none)"), so groups overlap.
func groupKeys(c *resultColumns, dim string, i int) []string {
	if dim != "feature" {
		return []string{groupKey(c, dim, i)}
	}
	if fs := c.featuresOf(i); len(fs) > 0 {
		return fs
	}
	return []string{"(none)"}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// inputBucketEdges bound the input_bucket groups (prompt tokens sent).
var inputBucketEdges = []int64{256, 1024, 4096, 16384, 65536}

func inputBucket(tokens int64) string {
	for i, e := range inputBucketEdges {
		if tokens < e {
			return inputBucketLabels[i]
		}
	}
	return inputBucketLabels[len(inputBucketEdges)]
}

// inputBucketLabels name the input_bucket groups, one past the last edge:
// "0-255", ..., "65536+".
var inputBucketLabels = func() []string {
	var out []string
	lo := int64(0)
	for _, e := range inputBucketEdges {
		out = append(out, fmt.Sprintf("%d-%d", lo, e-1))
		lo = e
	}
	return append(out, fmt.Sprintf("%d+", lo))
}()

// orderGroupKeys sorts a breakdown's keys: turn and input_bucket in their
// natural order, other dimensions by size (rows), largest first, then by
// name.
func orderGroupKeys(keys []string, dim string, size func(string) int) {
	slices.SortFunc(keys, func(a, b string) int {
		if dim == "turn" || dim == "input_bucket" {
			return cmp.Compare(numericPrefix(a), numericPrefix(b))
		}
		return cmp.Or(cmp.Compare(size(b), size(a)), cmp.Compare(a, b))
	})
}

// newGroup is key k's group with its counts, and its rates over the run's
// span (spanS, 0 when unknown); the caller adds the metrics.
func newGroup(k string, counted, ok int, outTok int64, spanS float64) Group {
	g := Group{Value: k, Counted: counted, OK: ok, Metrics: map[string]Distribution{}}
	if counted > 0 {
		g.SuccessRate = float64(ok) / float64(counted)
	}
	if spanS > 0 {
		g.RequestsPerS, g.OutputTokensPerS = float64(ok)/spanS, float64(outTok)/spanS
	}
	return g
}

// breakdown summarizes every metric per value of dim. Percentiles carry
// order-statistic intervals (no bootstrap: groups are many and small).
func breakdown(c *resultColumns, dim string, opts Options, spanS float64) []Group {
	rows := map[string][]int32{}
	for i := range c.n {
		for _, k := range groupKeys(c, dim, i) {
			rows[k] = append(rows[k], int32(i))
		}
	}
	// Rows whose value was pooled at read (past maxDistinctValues) are
	// "(other)" whatever the groups' sizes.
	pooled := rows[otherValue]
	delete(rows, otherValue)
	keys := slices.Collect(maps.Keys(rows))
	orderGroupKeys(keys, dim, func(k string) int { return len(rows[k]) })
	if len(keys) > maxGroups || pooled != nil {
		keep := min(len(keys), maxGroups-1)
		other := pooled
		for _, k := range keys[keep:] {
			other = append(other, rows[k]...)
		}
		keys = append(keys[:keep], otherValue)
		rows[otherValue] = other
	}
	var out []Group
	for _, k := range keys {
		x := extractRows(c, opts, rows[k])
		g := newGroup(k, x.counts.Counted, x.counts.Outcomes[trace.OutcomeOK], x.outTok, spanS)
		var cache cacheTally
		for _, i := range rows[k] {
			cache.add(c, int(i))
		}
		g.PrefixCacheHit = cache.share()
		for _, name := range []string{"ttft_ms", "tpot_ms", "e2e_ms"} {
			if v := x.values(name); len(v) > 0 {
				g.Metrics[name] = Summarize(v, opts.Percentiles)
			}
		}
		if v := x.pooled["itl_ms"]; len(v) > 0 {
			g.Metrics["itl_ms"] = Summarize(v, opts.Percentiles)
		}
		out = append(out, g)
	}
	return out
}

// numericPrefix reads the leading integer of a group value, for ordering.
func numericPrefix(s string) int64 {
	end := 0
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || end == 0 && s[end] == '-') {
		end++
	}
	v, _ := strconv.ParseInt(s[:end], 10, 64)
	return v
}
