package analyze

import (
	"fmt"
	"slices"
	"strings"

	"github.com/servetrace/servetrace/trace"
)

// FeatureUse is what a run did with one feature of its requests, over the
// counted ones: carried (sent plus stripped), sent with it, stripped on
// purpose, refused by the target.
type FeatureUse struct {
	Feature  string `json:"feature"`
	Carried  int    `json:"carried"`
	Sent     int    `json:"sent"`
	Stripped int    `json:"stripped"`
	Refused  int    `json:"refused"`
}

// featureUses counts each feature's fate over the counted requests, in
// order of how many carried it.
func featureUses(c *resultColumns) []FeatureUse {
	by := map[string]*FeatureUse{}
	addFeatureUses(by, c)
	return sortedFeatureUses(by)
}

// addFeatureUses adds the counted rows of c to by, keyed by feature.
func addFeatureUses(by map[string]*FeatureUse, c *resultColumns) {
	get := func(f string) *FeatureUse {
		if by[f] == nil {
			by[f] = &FeatureUse{Feature: f}
		}
		return by[f]
	}
	for i := range c.n {
		if c.warmup[i] {
			continue
		}
		for _, f := range c.contract[0].of(i) {
			u := get(f)
			u.Carried++
			u.Sent++
		}
		for _, f := range c.contract[1].of(i) {
			u := get(f)
			u.Carried++
			u.Stripped++
		}
		for _, f := range c.contract[2].of(i) {
			get(f).Refused++
		}
	}
}

// sortedFeatureUses lists by's uses, the most carried first.
func sortedFeatureUses(by map[string]*FeatureUse) []FeatureUse {
	out := make([]FeatureUse, 0, len(by))
	for _, u := range by {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b FeatureUse) int {
		if a.Carried != b.Carried {
			return b.Carried - a.Carried
		}
		return strings.Compare(a.Feature, b.Feature)
	})
	return out
}

// FeaturesText is the report's line on features, "" when none; the
// replay summary prints run.json's counts with it too.
func FeaturesText(us []FeatureUse) string {
	if len(us) == 0 {
		return ""
	}
	parts := make([]string, 0, len(us))
	for _, u := range us {
		p := fmt.Sprintf("%s %d/%d sent", u.Feature, u.Sent, u.Carried)
		if u.Stripped > 0 {
			p += fmt.Sprintf(", %d stripped", u.Stripped)
		}
		if u.Refused > 0 {
			p += fmt.Sprintf(", %d refused", u.Refused)
		}
		parts = append(parts, p)
	}
	return "features (requests carrying each: sent/carried): " + strings.Join(parts, "; ")
}

// Reasoning describes a reasoning model's output, over ok requests that
// streamed reasoning (their first answer event came after their first
// token): how many tokens went to reasoning and their share of the output.
// Time to first answer token is the metric ttfa_ms.
type Reasoning struct {
	Requests         int        `json:"requests"`
	TokensPerRequest TokenStats `json:"tokens_per_request"`
	// Share is reasoning tokens over output tokens, pooled.
	Share float64 `json:"share"`
}

// reasoningOf summarizes reasoning over the counted ok requests, nil when
// none streamed reasoning before its answer.
func reasoningOf(c *resultColumns) *Reasoning {
	var tokens []int64
	var reasoning, output int64
	for i := range c.n {
		if c.warmup[i] || c.outcome[i] != trace.OutcomeOK || !reasonedFirst(c, i) {
			continue
		}
		tokens = append(tokens, c.reasoning[i])
		reasoning += c.reasoning[i]
		output += c.observedOut[i]
	}
	if len(tokens) == 0 {
		return nil
	}
	r := &Reasoning{Requests: len(tokens), TokensPerRequest: tokenStats(tokens)}
	if output > 0 {
		r.Share = float64(reasoning) / float64(output)
	}
	return r
}

// reasonedFirst reports whether row i streamed reasoning before its
// answer.
func reasonedFirst(c *resultColumns, i int) bool {
	return c.firstAnswer[i] != null && c.firstToken[i] != null && c.firstAnswer[i] > c.firstToken[i] ||
		c.firstAnswer[i] == null && c.firstToken[i] != null && c.reasoning[i] > 0
}

// anyReasoned reports whether any of the rows (all when idx is nil)
// streamed reasoning first: only then is time to first answer reported.
func anyReasoned(c *resultColumns, idx []int32) bool {
	if idx == nil {
		for i := range c.n {
			if reasonedFirst(c, i) {
				return true
			}
		}
		return false
	}
	return slices.ContainsFunc(idx, func(i int32) bool { return reasonedFirst(c, int(i)) })
}

// reasoningText is the report's line on reasoning.
func reasoningText(r *Reasoning) string {
	return fmt.Sprintf("reasoning: %d requests reasoned before answering; reasoning tokens per request p50 %.0f, p90 %.0f; %.1f%% of their output",
		r.Requests, r.TokensPerRequest.P50, r.TokensPerRequest.P90, 100*r.Share)
}

// modalityOf is row i's modality: "text", or the media it carried joined
// by "+" ("image", "audio", "image+audio").
func modalityOf(c *resultColumns, i int) string {
	var m []string
	fs := c.featuresOf(i)
	for _, f := range []string{trace.FeatureImage, trace.FeatureAudio} {
		if slices.Contains(fs, f) {
			m = append(m, f)
		}
	}
	if len(m) == 0 {
		return "text"
	}
	return strings.Join(m, "+")
}
