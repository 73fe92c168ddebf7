package trace

import (
	"fmt"
	"math"
	"strconv"
)

// Feature labels in Shape.Features. A converter sets a label wherever it sees
// the feature; the quantities behind it (how many images of what size, how
// many tools of how many tokens) are the Media and Calls columns.
const (
	FeatureImage     = "image"
	FeatureAudio     = "audio"
	FeatureTools     = "tools"
	FeatureJSON      = "json"        // response_format json_object
	FeatureSchema    = "json_schema" // a JSON schema, however it was asked for
	FeatureGrammar   = "grammar"     // a regex, an EBNF grammar or a choice list
	FeatureLogprobs  = "logprobs"
	FeatureReasoning = "reasoning"
	FeatureSeed      = "seed"
	FeatureN         = "n" // more than one completion asked
)

// Output formats for Calls.OutputFormat: what constrained decoding the
// request asked for ("" when none).
const (
	OutputJSONObject = "json_object"
	OutputJSONSchema = "json_schema"
	OutputRegex      = "regex"
	OutputGrammar    = "grammar"
	OutputChoice     = "choice"
)

// Media is what a request carried besides text: images and audio clips, as
// counts, sizes and identities, never their bytes. The lists run in the
// order the parts appeared, one entry per part.
//
// It is embedded in Request and holds no nullable columns (see Shape).
type Media struct {
	ImageCount int32 `parquet:"image_count" json:"image_count,omitempty"`
	// ImageWidthsPx and ImageHeightsPx are each image's size in pixels; 0
	// where the log named the image only by URL (size unknown).
	ImageWidthsPx  []int32 `parquet:"image_widths_px,list" json:"image_widths_px,omitempty"`
	ImageHeightsPx []int32 `parquet:"image_heights_px,list" json:"image_heights_px,omitempty"`
	// ImageIDs are salted hashes of each image's bytes (or URL): equal ids
	// are the same image, which replay sends as byte-identical bytes so a
	// server's multimodal cache sees the trace's reuse.
	ImageIDs   []int64 `parquet:"image_ids,list" json:"image_ids,omitempty"`
	AudioCount int32   `parquet:"audio_count" json:"audio_count,omitempty"`
	// AudioMs is each clip's duration in milliseconds; 0 where unknown.
	AudioMs  []int64 `parquet:"audio_ms,list" json:"audio_ms,omitempty"`
	AudioIDs []int64 `parquet:"audio_ids,list" json:"audio_ids,omitempty"`
}

// Calls is what a request asked of decoding besides its length: tools,
// structured output, logprobs, stop sequences and reasoning effort, as
// counts and sizes, never tool names or schema text.
//
// It is embedded in Request and holds no nullable columns (see Shape).
type Calls struct {
	// ToolCount tool definitions of ToolTokens tokens in all (their JSON,
	// counted with the trace's tokenizer).
	ToolCount  int32  `parquet:"tool_count" json:"tool_count,omitempty"`
	ToolTokens int64  `parquet:"tool_tokens" json:"tool_tokens,omitempty"`
	ToolChoice string `parquet:"tool_choice,dict" json:"tool_choice,omitempty"` // auto | none | required | function ("" not given)
	// OutputFormat is the constrained decoding asked for (OutputJSONSchema,
	// ...); SchemaTokens the schema's (or grammar's) size in tokens, and
	// SchemaID a salted hash of its text: equal ids are the same schema,
	// which replay sends as the same synthetic schema so a server's grammar
	// cache sees the trace's reuse.
	OutputFormat    string `parquet:"output_format,dict" json:"output_format,omitempty"`
	SchemaTokens    int64  `parquet:"schema_tokens" json:"schema_tokens,omitempty"`
	SchemaID        int64  `parquet:"schema_id" json:"schema_id,omitempty"`
	Logprobs        bool   `parquet:"logprobs" json:"logprobs,omitempty"`
	StopCount       int32  `parquet:"stop_count" json:"stop_count,omitempty"`
	ReasoningEffort string `parquet:"reasoning_effort,dict" json:"reasoning_effort,omitempty"` // low | medium | high | ...
}

// Ceilings of the contract columns, checked by Validate.
const (
	// MaxMediaParts bounds the images and the audio clips of one request.
	MaxMediaParts = 1024
	// MaxTools bounds the tool definitions of one request.
	MaxTools = 4096
	// MaxStops bounds the stop sequences of one request.
	MaxStops = 1024
	// MaxImageSidePx bounds an image's width and height.
	MaxImageSidePx = 1 << 16
	// MaxAudioMs bounds a clip's duration: a day.
	MaxAudioMs = 24 * 3600 * 1000
	// MaxTopK bounds top_k and top_logprobs.
	MaxTopK = 1 << 20
)

// validate checks the media lists: counts within MaxMediaParts, one size and
// one id per part, sizes within their ceilings.
func (m *Media) validate() error {
	if m.ImageCount == 0 && m.AudioCount == 0 && len(m.ImageWidthsPx)+len(m.ImageHeightsPx)+len(m.ImageIDs)+len(m.AudioMs)+len(m.AudioIDs) == 0 {
		return nil // no media: most requests
	}
	if m.ImageCount < 0 || m.ImageCount > MaxMediaParts {
		return &FieldError{"image_count", strconv.Itoa(int(m.ImageCount)), fmt.Sprintf("must be 0 to %d", MaxMediaParts)}
	}
	for _, l := range []struct {
		name string
		n    int
	}{{"image_widths_px", len(m.ImageWidthsPx)}, {"image_heights_px", len(m.ImageHeightsPx)}, {"image_ids", len(m.ImageIDs)}} {
		if l.n != 0 && l.n != int(m.ImageCount) {
			return &FieldError{l.name, strconv.Itoa(l.n) + " entries", fmt.Sprintf("must be empty or one per image (image_count %d)", m.ImageCount)}
		}
	}
	for _, c := range []struct {
		name string
		v    []int32
	}{{"image_widths_px", m.ImageWidthsPx}, {"image_heights_px", m.ImageHeightsPx}} {
		for i, px := range c.v {
			if px < 0 || px > MaxImageSidePx {
				return &FieldError{c.name, fmt.Sprintf("[%d] = %d", i, px), fmt.Sprintf("must be 0 (unknown) to %d pixels", MaxImageSidePx)}
			}
		}
	}
	if m.AudioCount < 0 || m.AudioCount > MaxMediaParts {
		return &FieldError{"audio_count", strconv.Itoa(int(m.AudioCount)), fmt.Sprintf("must be 0 to %d", MaxMediaParts)}
	}
	for _, l := range []struct {
		name string
		n    int
	}{{"audio_ms", len(m.AudioMs)}, {"audio_ids", len(m.AudioIDs)}} {
		if l.n != 0 && l.n != int(m.AudioCount) {
			return &FieldError{l.name, strconv.Itoa(l.n) + " entries", fmt.Sprintf("must be empty or one per clip (audio_count %d)", m.AudioCount)}
		}
	}
	for i, ms := range m.AudioMs {
		if ms < 0 || ms > MaxAudioMs {
			return &FieldError{"audio_ms", fmt.Sprintf("[%d] = %d", i, ms), fmt.Sprintf("must be 0 (unknown) to %d ms", MaxAudioMs)}
		}
	}
	return nil
}

// validate checks the tool and structured-output columns.
func (c *Calls) validate() error {
	if c.ToolCount < 0 || c.ToolCount > MaxTools {
		return &FieldError{"tool_count", strconv.Itoa(int(c.ToolCount)), fmt.Sprintf("must be 0 to %d", MaxTools)}
	}
	if c.StopCount < 0 || c.StopCount > MaxStops {
		return &FieldError{"stop_count", strconv.Itoa(int(c.StopCount)), fmt.Sprintf("must be 0 to %d", MaxStops)}
	}
	for _, n := range []struct {
		name string
		v    int64
	}{{"tool_tokens", c.ToolTokens}, {"schema_tokens", c.SchemaTokens}} {
		if err := checkCount(n.name, n.v, MaxTokens); err != nil {
			return err
		}
	}
	switch c.OutputFormat {
	case "", OutputJSONObject, OutputJSONSchema, OutputRegex, OutputGrammar, OutputChoice:
	default:
		return &FieldError{"output_format", strconv.Quote(c.OutputFormat), "must be json_object, json_schema, regex, grammar, choice or empty"}
	}
	for _, s := range []struct{ name, v string }{{"tool_choice", c.ToolChoice}, {"reasoning_effort", c.ReasoningEffort}} {
		if err := checkString(s.name, s.v); err != nil {
			return err
		}
	}
	return nil
}

// validateSampling checks the nullable sampling columns: top_k and
// top_logprobs within MaxTopK, penalties finite within OpenAI's [-2, 2].
func (r *Request) validateSampling() error {
	for _, k := range []struct {
		name string
		v    *int32
	}{{"top_logprobs", r.TopLogprobs}, {"top_k", r.TopK}} {
		// top_k -1 is vLLM's and SGLang's "no limit".
		if k.v != nil && (*k.v < -1 || *k.v > MaxTopK) {
			return &FieldError{k.name, strconv.Itoa(int(*k.v)), fmt.Sprintf("must be -1 to %d", MaxTopK)}
		}
	}
	for _, p := range []struct {
		name string
		v    *float64
	}{{"presence_penalty", r.PresencePenalty}, {"frequency_penalty", r.FrequencyPenalty}} {
		if p.v != nil && (math.IsNaN(*p.v) || *p.v < -2 || *p.v > 2) {
			return &FieldError{p.name, strconv.FormatFloat(*p.v, 'g', -1, 64), "must be a number from -2 to 2"}
		}
	}
	return nil
}
