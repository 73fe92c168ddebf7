package sim

import (
	"slices"
	"strconv"
)

// The logprobs the simulator reports are fixed, plausible numbers, not a
// model's: a token's log-probability is in [−2, −0.001], deterministic in its
// choice and position, and its top alternatives are other words of the
// generated text's vocabulary, each less likely than the one before. That
// is enough for a client to parse, store and size them; the cost of
// computing them is CostModel.LogprobsPerToken.

// logprob is the log-probability reported for choice c's token i.
func logprob(c, i int) float64 {
	return -float64((uint64(i)*2654435761+uint64(c)*40503)%2000+1) / 1000
}

// newVocab returns the distinct words the generated text is drawn from
// (as far as 4096 draws find them), the alternatives top_logprobs offers.
func newVocab(words []string) []string {
	out := slices.Clone(words)
	slices.Sort(out)
	return slices.Compact(out)
}

// alternatives returns choice c's token i and then k−1 other words, the
// top k tokens reported for it.
func (g *generation) alternatives(c, i, k int) []string {
	tok := g.word(c, i)
	out := []string{tok}
	v := g.s.vocab
	start := int((uint64(i)*0x9e3779b97f4a7c15 + uint64(c)) >> 33)
	for j := 0; len(out) < k && j < len(v); j++ {
		if w := v[(start+j)%len(v)]; w != tok {
			out = append(out, w)
		}
	}
	return out
}

func appendLogprob(buf []byte, lp float64) []byte {
	return strconv.AppendFloat(buf, lp, 'f', 3, 64)
}

// appendChatLogprobs appends choice c's tokens [from, to) as a chat
// choice's logprobs: {"content":[{"token","logprob","top_logprobs":[...]}]}.
func (g *generation) appendChatLogprobs(buf []byte, c, from, to int) []byte {
	buf = append(buf, `{"content":[`...)
	for i := from; i < to; i++ {
		if i > from {
			buf = append(buf, ',')
		}
		lp := logprob(c, i)
		buf = append(buf, `{"token":`...)
		buf = appendJSONString(buf, []byte(g.word(c, i)))
		buf = append(buf, `,"logprob":`...)
		buf = appendLogprob(buf, lp)
		buf = append(buf, `,"top_logprobs":[`...)
		if g.topLogprobs > 0 {
			for j, alt := range g.alternatives(c, i, g.topLogprobs) {
				if j > 0 {
					buf = append(buf, ',')
				}
				buf = append(buf, `{"token":`...)
				buf = appendJSONString(buf, []byte(alt))
				buf = append(buf, `,"logprob":`...)
				buf = appendLogprob(buf, lp-0.75*float64(j))
				buf = append(buf, '}')
			}
		}
		buf = append(buf, "]}"...)
	}
	return append(buf, "]}"...)
}

// appendTextLogprobs appends choice c's tokens [from, to) as a legacy
// completions choice's logprobs: {"tokens", "token_logprobs",
// "top_logprobs" (objects from token to logprob, or null without
// alternatives asked), "text_offset"}; offset is the text's length so far.
func (g *generation) appendTextLogprobs(buf []byte, c, from, to int, offset *int) []byte {
	list := func(name string, each func(i int)) {
		buf = append(buf, `"`+name+`":[`...)
		for i := from; i < to; i++ {
			if i > from {
				buf = append(buf, ',')
			}
			each(i)
		}
		buf = append(buf, ']')
	}
	buf = append(buf, '{')
	list("tokens", func(i int) { buf = appendJSONString(buf, []byte(g.word(c, i))) })
	buf = append(buf, ',')
	list("token_logprobs", func(i int) { buf = appendLogprob(buf, logprob(c, i)) })
	buf = append(buf, ',')
	if g.topLogprobs > 0 {
		list("top_logprobs", func(i int) {
			buf = append(buf, '{')
			for j, alt := range g.alternatives(c, i, g.topLogprobs) {
				if j > 0 {
					buf = append(buf, ',')
				}
				buf = appendJSONString(buf, []byte(alt))
				buf = append(buf, ':')
				buf = appendLogprob(buf, logprob(c, i)-0.75*float64(j))
			}
			buf = append(buf, '}')
		})
	} else {
		buf = append(buf, `"top_logprobs":null`...)
	}
	buf = append(buf, ',')
	list("text_offset", func(i int) {
		buf = strconv.AppendInt(buf, int64(*offset), 10)
		*offset += len(g.word(c, i))
	})
	return append(buf, '}')
}
