package replay

import (
	"slices"
	"strings"

	"github.com/servetrace/servetrace/trace"
)

// Feature names replay sends, strips (Options.Strip) and counts, beyond the
// trace's own labels: each names one part of a request body that a server
// may handle, or refuse, on its own.
const (
	FeatureImage           = trace.FeatureImage
	FeatureAudio           = trace.FeatureAudio
	FeatureTools           = trace.FeatureTools
	FeatureJSON            = trace.FeatureJSON
	FeatureSchema          = trace.FeatureSchema
	FeatureGrammar         = trace.FeatureGrammar
	FeatureLogprobs        = trace.FeatureLogprobs
	FeatureN               = trace.FeatureN
	FeatureSeed            = trace.FeatureSeed
	FeatureTopK            = "top_k"
	FeaturePenalties       = "penalties"
	FeatureStop            = "stop"
	FeatureReasoningEffort = "reasoning_effort"
	FeatureAdapter         = "adapter"
)

// Features lists every feature replay can send, in report order.
var Features = []string{FeatureImage, FeatureAudio, FeatureTools, FeatureJSON, FeatureSchema, FeatureGrammar, FeatureLogprobs,
	FeatureN, FeatureSeed, FeatureTopK, FeaturePenalties, FeatureStop, FeatureReasoningEffort, FeatureAdapter}

// carried lists the features q carries, from its quantities and, where a
// source gave only a label (OTLP, a generated workload), from its labels:
// a label without a count is sent at the documented defaults.
func carried(q *trace.Request) []string {
	var out []string
	add := func(on bool, f string) {
		if on {
			out = append(out, f)
		}
	}
	has := func(label string) bool { return slices.Contains(q.Features, label) }
	add(q.ImageCount > 0 || has(trace.FeatureImage), FeatureImage)
	add(q.AudioCount > 0 || has(trace.FeatureAudio), FeatureAudio)
	add(q.ToolCount > 0 || has(trace.FeatureTools), FeatureTools)
	add(q.OutputFormat == trace.OutputJSONObject || q.OutputFormat == "" && has(trace.FeatureJSON), FeatureJSON)
	add(q.OutputFormat == trace.OutputJSONSchema || q.OutputFormat == "" && has(trace.FeatureSchema), FeatureSchema)
	add(q.OutputFormat == trace.OutputRegex || q.OutputFormat == trace.OutputGrammar || q.OutputFormat == trace.OutputChoice ||
		q.OutputFormat == "" && has(trace.FeatureGrammar), FeatureGrammar)
	add(q.Logprobs || q.TopLogprobs != nil || has(trace.FeatureLogprobs), FeatureLogprobs)
	add(q.N > 1, FeatureN)
	add(q.Seed != nil, FeatureSeed)
	add(q.TopK != nil, FeatureTopK)
	add(q.PresencePenalty != nil || q.FrequencyPenalty != nil, FeaturePenalties)
	add(q.StopCount > 0, FeatureStop)
	add(q.ReasoningEffort != "", FeatureReasoningEffort)
	add(q.Adapter != "", FeatureAdapter)
	return out
}

// refusalWords tell, from a 4xx error message, which carried feature the
// server refused: the phrases vLLM, SGLang, TGI, llama.cpp, Ollama and
// OpenAI use when they do not support one.
var refusalWords = []struct {
	feature string
	words   []string
}{
	{FeatureImage, []string{"multimodal", "image", "vision"}},
	{FeatureAudio, []string{"audio"}},
	{FeatureTools, []string{"tool"}},
	{FeatureSchema, []string{"response_format", "json_schema", "schema", "guided", "structured"}},
	{FeatureJSON, []string{"response_format", "json_object", "json mode", "guided", "structured"}},
	{FeatureGrammar, []string{"regex", "grammar", "guided", "structured", "choice"}},
	{FeatureLogprobs, []string{"logprob"}},
	{FeatureN, []string{"n > 1", "n>1", "n must", "only n", "`n`", "'n'", "best_of"}},
	{FeatureSeed, []string{"seed"}},
	{FeatureTopK, []string{"top_k"}},
	{FeaturePenalties, []string{"penalty"}},
	{FeatureStop, []string{"stop"}},
	{FeatureReasoningEffort, []string{"reasoning"}},
	{FeatureAdapter, []string{"lora", "adapter", "does not exist"}},
}

// notARefusal are words of 4xx messages about something else than a
// feature: the prompt's length (whose message may name its images) or a
// rate limit.
var notARefusal = []string{"context length", "maximum context", "too long", "max_model_len", "rate limit", "too many requests"}

// refusedBy returns the sent features that a 400, 404 or 422 answer's
// message names: those whose words it holds. A message naming none, or
// one about the prompt's length or a rate limit, refuses no feature.
func refusedBy(status int, msg string, sent []string) []string {
	// 400, 422 (a validation error) and 404 (an adapter no server knows)
	// refuse a request's content; 408, 413, 429 and the rest do not.
	if status != 400 && status != 404 && status != 422 || len(sent) == 0 {
		return nil
	}
	m := strings.ToLower(msg)
	for _, w := range notARefusal {
		if strings.Contains(m, w) {
			return nil
		}
	}
	var out []string
	for _, rw := range refusalWords {
		if !slices.Contains(sent, rw.feature) {
			continue
		}
		for _, w := range rw.words {
			if strings.Contains(m, w) {
				out = append(out, rw.feature)
				break
			}
		}
	}
	return out
}
