package replay

import (
	"math"
	"strconv"

	"github.com/servetrace/servetrace/tokenize"
)

// plainBodyFields is room enough for a plain body's fields besides its
// model and text.
const plainBodyFields = 256

// appendPlainBody appends body, holding text as its one user message
// (chat) or its prompt (completions), as encoding/json writes it, and
// reports true; or appends nothing and reports false where the body has
// more than the plain fields (a contract feature, see bodyContract.empty)
// or a string that JSON must escape. encoding/json's reflection and
// escape scan are most of a short request's building (textPlain vouches
// that text needs no scan). TestPlainBodyIsMarshaled holds it to
// encoding/json's output.
func appendPlainBody(dst []byte, body *requestBody, chat bool, text string, textPlain bool) ([]byte, bool) {
	if !body.bodyContract.empty() || body.Messages != nil || body.Prompt != nil ||
		!tokenize.JSONPlain(body.Model) || !textPlain && !tokenize.JSONPlain(text) {
		return dst, false
	}
	for _, f := range []*float64{body.Temperature, body.TopP} {
		if f != nil && (math.IsNaN(*f) || math.IsInf(*f, 0)) {
			return dst, false
		}
	}
	b := append(dst, `{"model":"`...)
	b = append(b, body.Model...)
	if chat {
		b = append(b, `","messages":[{"role":"user","content":"`...)
		b = append(b, text...)
		b = append(b, `"}],"max_tokens":`...)
	} else {
		b = append(b, `","prompt":"`...)
		b = append(b, text...)
		b = append(b, `","max_tokens":`...)
	}
	b = strconv.AppendInt(b, body.MaxTokens, 10)
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, body.Stream)
	if body.StreamOptions != nil {
		b = append(b, `,"stream_options":{"include_usage":`...)
		b = strconv.AppendBool(b, body.StreamOptions.IncludeUsage)
		b = append(b, '}')
	}
	if body.Temperature != nil {
		b = appendJSONFloat(append(b, `,"temperature":`...), *body.Temperature)
	}
	if body.TopP != nil {
		b = appendJSONFloat(append(b, `,"top_p":`...), *body.TopP)
	}
	if body.IgnoreEOS {
		b = append(b, `,"ignore_eos":true`...)
	}
	if body.MinTokens != 0 {
		b = strconv.AppendInt(append(b, `,"min_tokens":`...), body.MinTokens, 10)
	}
	return append(b, '}'), true
}

// empty reports whether no contract field is set: the body is its plain
// fields alone. TestBodyContractEmptySeesEveryField fails when a field is
// added here and not to empty.
func (c *bodyContract) empty() bool {
	return c.Tools == nil && c.ToolChoice == nil && c.ResponseFormat == nil && c.StructuredOutputs == nil &&
		c.GuidedJSON == nil && c.GuidedRegex == nil && c.GuidedGrammar == nil && c.GuidedChoice == nil &&
		c.Logprobs == nil && c.TopLogprobs == nil && c.N == 0 && c.Seed == nil && c.TopK == nil &&
		c.PresencePenalty == nil && c.FrequencyPenalty == nil && c.Stop == nil && c.ReasoningEffort == ""
}

// appendJSONFloat appends a finite f as encoding/json writes a float64:
// the shortest decimal that reads back as f, in exponent form below 1e-6
// and from 1e21, with a one-digit negative exponent not zero-padded.
func appendJSONFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}
