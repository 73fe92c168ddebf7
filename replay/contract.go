package replay

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/servetrace/servetrace/internal/media"
	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
)

// Defaults for a feature a workload names by label only (a trace that
// records "tools" but not how many, a generated workload): replay sends
// this much and counts, in run.json's notes, that it did.
const (
	DefaultAudioMs      = 5000
	DefaultToolCount    = 1
	DefaultToolTokens   = 150
	DefaultSchemaTokens = 100
)

// contentPart is one part of a chat message's content.
type contentPart struct {
	Type       string          `json:"type"`
	Text       string          `json:"text,omitempty"`
	ImageURL   *imageURLPart   `json:"image_url,omitempty"`
	InputAudio *inputAudioPart `json:"input_audio,omitempty"`
}

type imageURLPart struct {
	URL string `json:"url"`
}

type inputAudioPart struct {
	Data   string `json:"data"`
	Format string `json:"format"`
}

// partsMessage is a chat message whose content is parts (text, images,
// audio), as clients send multimodal requests.
type partsMessage struct {
	Role    string        `json:"role"`
	Content []contentPart `json:"content"`
}

// contract is what a request body carries beyond prompt and length, built
// from the request's columns: the parts each feature adds, what they count
// into the prompt, and which features were sent or stripped.
type contract struct {
	parts       []contentPart // images and audio, after the text
	mediaTokens int64         // the prompt tokens the images and clips take
	mediaBytes  int64         // their raw bytes while built (MaxMediaBytes)
	tools       json.RawMessage
	toolTokens  int64
	toolChoice  any
	format      any             // response_format
	guidedJSON  json.RawMessage // vLLM's older guided_json
	guided      map[string]any  // guided_regex, guided_grammar, guided_choice
	structured  map[string]any  // structured_outputs
	logprobs    bool
	topLogprobs *int32
	n           int32
	seed        *int64
	topK        *int32
	presence    *float64
	frequency   *float64
	stop        []string
	effort      string
	model       string // the adapter's name, when the request has one
	sent        []string
	stripped    []string
}

// buildContract reads q's features into a contract for api, leaving out
// those Options.Strip names and those the API cannot carry (images, audio
// and tools on completions), which are recorded as stripped.
func (r *Runner) buildContract(q *trace.Request, api string) (*contract, error) {
	c := &contract{n: 1}
	constrained := ""
	for _, f := range carried(q) {
		var why string // why a feature is not sent, for the notes
		switch {
		case slices.Contains(r.opts.Strip, f):
		case api == trace.APICompletions && (f == FeatureImage || f == FeatureAudio || f == FeatureTools):
			why = f + " was not sent: the completions API has no place for it (replay with API chat)"
		case (f == FeatureJSON || f == FeatureSchema || f == FeatureGrammar) && constrained != "":
			why = f + " was not sent beside " + constrained + ": a request asks for one constrained decoding"
		case f == FeatureAdapter && r.opts.Model != "" && len(r.opts.AdapterMap) == 0 && len(r.opts.Adapters) == 0:
			why = "adapter was not sent: Model names every request's model (AdapterMap or Adapters send adapters)"
		default:
			if f == FeatureJSON || f == FeatureSchema || f == FeatureGrammar {
				constrained = f
			}
			if err := r.addFeature(c, q, f); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			c.sent = append(c.sent, f)
			continue
		}
		c.stripped = append(c.stripped, f)
		if why != "" {
			r.notes.add(why, q.RequestID)
		}
	}
	return c, nil
}

// addFeature adds one carried feature to the contract.
func (r *Runner) addFeature(c *contract, q *trace.Request, f string) error {
	switch f {
	case FeatureImage:
		return r.addImages(c, q)
	case FeatureAudio:
		return r.addAudio(c, q)
	case FeatureTools:
		r.addTools(c, q)
	case FeatureJSON:
		c.format = map[string]string{"type": "json_object"}
	case FeatureSchema, FeatureGrammar:
		r.addConstraint(c, q, f)
	case FeatureLogprobs:
		c.logprobs, c.topLogprobs = true, q.TopLogprobs
	case FeatureN:
		c.n = q.N
	case FeatureSeed:
		c.seed = q.Seed
	case FeatureTopK:
		c.topK = q.TopK
	case FeaturePenalties:
		c.presence, c.frequency = q.PresencePenalty, q.FrequencyPenalty
	case FeatureStop:
		// Stop sequences no generated text holds: the output keeps its
		// length while the server still scans for them.
		for i := range q.StopCount {
			c.stop = append(c.stop, fmt.Sprintf("<|servetrace-stop-%d|>", i))
		}
	case FeatureReasoningEffort:
		c.effort = q.ReasoningEffort
	case FeatureAdapter:
		c.model = r.adapterName(q.Adapter)
	}
	return nil
}

// MaxMediaBytes bounds the images and clips one request body may carry
// (their raw bytes while built: an image's pixels, a clip's samples); a
// request over it is not sent, and noted, rather than exhaust memory.
const MaxMediaBytes = 512 << 20

// errTooMuchMedia is a request whose media would pass MaxMediaBytes.
var errTooMuchMedia = errors.New("more than 512 MiB of images and audio in one request")

// imageSize is the size replay sends an image at: the recorded one, the
// default for an unknown size, and within media's limits (the aspect
// kept); each change is noted.
func (r *Runner) imageSize(w, h int32, requestID string) (int, int) {
	if w <= 0 || h <= 0 {
		r.notes.add(fmt.Sprintf("images of unknown size were sent at the default %dx%d", media.DefaultImageWidth, media.DefaultImageHeight), requestID)
		return media.DefaultImageWidth, media.DefaultImageHeight
	}
	iw, ih := int(w), int(h)
	scale := 1.0
	if m := max(iw, ih); m > media.MaxImageSide {
		scale = float64(media.MaxImageSide) / float64(m)
	}
	if px := float64(iw) * float64(ih) * scale * scale; px > media.MaxImagePixels {
		scale *= math.Sqrt(media.MaxImagePixels / px)
	}
	if scale < 1 {
		r.notes.add(fmt.Sprintf("images larger than %d px a side or %d pixels were sent scaled down to fit", media.MaxImageSide, media.MaxImagePixels), requestID)
		iw, ih = max(1, int(float64(iw)*scale)), max(1, int(float64(ih)*scale))
	}
	return iw, ih
}

// addImages adds q's images as image_url parts: synthetic images at the
// recorded sizes, one per recorded id (a repeated id is the same bytes),
// as data URIs or as URLs on the run's image server.
func (r *Runner) addImages(c *contract, q *trace.Request) error {
	n := int(q.ImageCount)
	if n == 0 {
		n = 1
		r.notes.add("requests labelled image without an image count were sent one image", q.RequestID)
	}
	sizes := make([][2]int, n)
	for i := range n {
		var w, h int32
		if i < len(q.ImageWidthsPx) && i < len(q.ImageHeightsPx) {
			w, h = q.ImageWidthsPx[i], q.ImageHeightsPx[i]
		}
		iw, ih := r.imageSize(w, h, q.RequestID)
		sizes[i] = [2]int{iw, ih}
		if c.mediaBytes += int64(iw) * int64(ih) * 4; c.mediaBytes > MaxMediaBytes { // before any is built
			return errTooMuchMedia
		}
	}
	var tokens int64
	for i := range n {
		iw, ih := sizes[i][0], sizes[i][1]
		id := tokenize.SeedFor(q.RequestID + "/image/" + strconv.Itoa(i))
		if i < len(q.ImageIDs) {
			id = uint64(q.ImageIDs[i])
		}
		k := mediaKey{id: id, w: iw, h: ih, format: r.opts.ImageFormat}
		var url string
		if r.images != nil {
			url = r.images.url(k)
		} else {
			_, b64, err := r.media.get(k)
			if err != nil {
				return err
			}
			url = "data:image/" + k.format + ";base64," + b64
		}
		c.parts = append(c.parts, contentPart{Type: "image_url", ImageURL: &imageURLPart{URL: url}})
		tokens += int64(media.ImageTokens(iw, ih))
	}
	if q.ImageTokens != nil {
		tokens = *q.ImageTokens // the server's own count, as logged
	}
	c.mediaTokens += tokens
	return nil
}

// addAudio adds q's clips as input_audio parts: synthetic WAV clips of the
// recorded durations (the default for an unknown one).
func (r *Runner) addAudio(c *contract, q *trace.Request) error {
	n := int(q.AudioCount)
	if n == 0 {
		n = 1
		r.notes.add("requests labelled audio without a clip count were sent one clip", q.RequestID)
	}
	durations := make([]int64, n)
	for i := range n {
		ms := int64(0)
		if i < len(q.AudioMs) {
			ms = q.AudioMs[i]
		}
		if ms <= 0 {
			ms = DefaultAudioMs
			r.notes.add(fmt.Sprintf("audio clips of unknown duration were sent at the default %d ms", DefaultAudioMs), q.RequestID)
		}
		durations[i] = min(ms, media.MaxAudioMillis)
		if c.mediaBytes += durations[i] * 32; c.mediaBytes > MaxMediaBytes { // 16 kHz, 16-bit; before any is built
			return errTooMuchMedia
		}
	}
	var tokens int64
	for i := range n {
		ms := durations[i]
		id := tokenize.SeedFor(q.RequestID + "/audio/" + strconv.Itoa(i))
		if i < len(q.AudioIDs) {
			id = uint64(q.AudioIDs[i])
		}
		_, b64, err := r.media.get(mediaKey{id: id, ms: ms, format: "wav"})
		if err != nil {
			return err
		}
		c.parts = append(c.parts, contentPart{Type: "input_audio", InputAudio: &inputAudioPart{Data: b64, Format: "wav"}})
		tokens += int64(media.AudioTokens(ms))
	}
	if q.AudioTokens != nil {
		tokens = *q.AudioTokens
	}
	c.mediaTokens += tokens
	return nil
}

// toolSet is a synthetic tool list and its tokens, by (count, tokens):
// an application sends the same tools with every request, so equal
// shapes share one list.
type toolSet struct {
	json   json.RawMessage
	tokens int64
}

// addTools adds ToolCount synthetic tool definitions of about ToolTokens
// tokens in all, and tool_choice as recorded; their exact tokens (the JSON
// as sent) count into the prompt.
func (r *Runner) addTools(c *contract, q *trace.Request) {
	count, tokens := int(q.ToolCount), q.ToolTokens
	if count <= 0 {
		count = DefaultToolCount
		r.notes.add(fmt.Sprintf("requests labelled tools without a tool count were sent %d tool", DefaultToolCount), q.RequestID)
	}
	if tokens <= 0 {
		tokens = int64(count) * DefaultToolTokens
	}
	key := [2]int64{int64(count), tokens}
	if v, ok := r.toolSets.Load(key); ok {
		ts := v.(toolSet)
		c.tools, c.toolTokens = ts.json, ts.tokens
	} else {
		ts := r.synthTools(count, tokens)
		r.toolSets.Store(key, ts)
		c.tools, c.toolTokens = ts.json, ts.tokens
	}
	switch q.ToolChoice {
	case "auto", "none", "required":
		c.toolChoice = q.ToolChoice
	case "function":
		c.toolChoice = map[string]any{"type": "function", "function": map[string]string{"name": "tool_0"}}
	}
}

// toolOverhead is about the tokens of one tool definition without its
// description.
const toolOverhead = 30

// synthTools builds count function definitions whose descriptions pad the
// list to about tokens tokens (the padding corrected once by counting),
// and counts the list's JSON exactly as it is sent.
func (r *Runner) synthTools(count int, tokens int64) toolSet {
	build := func(per int) json.RawMessage {
		tools := make([]map[string]any, count)
		for i := range tools {
			desc := r.prompt.Build(per, nil, uint64(i)+1)
			tools[i] = map[string]any{"type": "function", "function": map[string]any{
				"name": "tool_" + strconv.Itoa(i), "description": strings.TrimSpace(desc),
				"parameters": map[string]any{"type": "object", "properties": map[string]any{"q": map[string]string{"type": "string"}}}}}
		}
		b, _ := json.Marshal(tools)
		return b
	}
	countTokens := func(b json.RawMessage) int64 { return int64(r.prompt.Counter().Count(string(b))) }
	b := fitSize(tokens, int(tokens)/count-toolOverhead, 0, build, countTokens)
	return toolSet{json: b, tokens: countTokens(b)}
}

// addConstraint adds the constrained decoding q asks for: a synthetic JSON
// schema (or regex, grammar, choice list) of the recorded size, the same
// for the same schema id, as response_format / structured_outputs, or as
// vLLM's older guided_* parameters with Options.GuidedDecoding.
func (r *Runner) addConstraint(c *contract, q *trace.Request, f string) {
	tokens := q.SchemaTokens
	if tokens <= 0 {
		tokens = DefaultSchemaTokens
	}
	id := uint64(q.SchemaID)
	kind := q.OutputFormat
	if kind == "" {
		kind = map[string]string{FeatureSchema: trace.OutputJSONSchema, FeatureGrammar: trace.OutputRegex}[f]
	}
	name := fmt.Sprintf("s%x", id)
	switch kind {
	case trace.OutputJSONSchema:
		schema := r.synthSchema(name, tokens)
		if r.opts.GuidedDecoding {
			c.guidedJSON = schema
		} else {
			c.format = map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": name, "schema": schema}}
		}
	default:
		v := synthGrammar(kind, name, tokens)
		if r.opts.GuidedDecoding {
			c.guided = map[string]any{"guided_" + kind: v}
		} else {
			c.structured = map[string]any{kind: v}
		}
	}
}

// synthSchema is a JSON schema of about tokens tokens titled name, so equal
// names give equal schemas and different ones differ.
// Its property count is fitted to the size by counting the tokens (two
// corrections from a first guess of eight tokens a property); schemas are
// kept by name and size, since a trace repeats them.
func (r *Runner) synthSchema(name string, tokens int64) json.RawMessage {
	key := name + "/" + strconv.FormatInt(tokens, 10)
	if v, ok := r.schemas.Load(key); ok {
		return v.(json.RawMessage)
	}
	build := func(n int) json.RawMessage {
		props := make(map[string]any, n)
		for i := range n {
			props["p"+strconv.Itoa(i)] = map[string]string{"type": []string{"string", "integer", "number", "boolean"}[i%4]}
		}
		b, _ := json.Marshal(map[string]any{"title": name, "type": "object", "properties": props})
		return b
	}
	count := func(b json.RawMessage) int64 { return int64(r.prompt.Counter().Count(string(b))) }
	b := fitSize(tokens, max(1, int(tokens/8)), 1, build, count)
	r.schemas.Store(key, b)
	return b
}

// fitSize builds with a size parameter (properties, description words)
// fitted so that the result's tokens come closest to tokens. The tokens
// grow with the parameter, so a doubling from guess then a bisection finds
// it in a few dozen builds at most; minParam bounds the parameter below.
func fitSize(tokens int64, guess, minParam int, build func(int) json.RawMessage, count func(json.RawMessage) int64) json.RawMessage {
	// A unit of the parameter adds at least a token, so twice the tokens
	// bounds it; a count that fails (a server's /tokenize, -1) ends the
	// search at the guess.
	maxParam := minParam + 2*int(min(tokens, trace.MaxTokens)) + 64
	lo, hi := minParam, min(max(guess, minParam), maxParam)
	if count(build(hi)) < 0 {
		return build(hi)
	}
	for count(build(hi)) < tokens && hi < maxParam {
		lo, hi = hi, min(hi*2+1, maxParam)
	}
	for lo < hi { // the smallest parameter reaching tokens
		mid := lo + (hi-lo)/2
		if n := count(build(mid)); n >= 0 && n < tokens {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	best := build(hi)
	if hi > minParam {
		if below := build(hi - 1); abs64(count(below)-tokens) < abs64(count(best)-tokens) {
			best = below
		}
	}
	return best
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// synthGrammar is a regex, an EBNF grammar or a choice list of about
// tokens tokens whose alternatives carry name.
func synthGrammar(kind, name string, tokens int64) any {
	n := max(1, int(tokens/3))
	alts := make([]string, n)
	for i := range alts {
		alts[i] = name + strconv.Itoa(i)
	}
	switch kind {
	case trace.OutputChoice:
		return alts
	case trace.OutputGrammar:
		return `root ::= "` + strings.Join(alts, `" | "`) + `"`
	}
	return "(" + strings.Join(alts, "|") + ")"
}

// rankAdapters sets r.adapterRank from the workload's adapters and their
// request counts: Adapters assigns the server's adapters to the
// workload's by popularity rank (the most requested first), cycling when
// the server has fewer.
func (r *Runner) rankAdapters(counts map[string]int) {
	if len(r.opts.Adapters) == 0 {
		return
	}
	names := make([]string, 0, len(counts))
	for a := range counts {
		names = append(names, a)
	}
	slices.SortFunc(names, func(a, b string) int {
		if counts[a] != counts[b] {
			return counts[b] - counts[a]
		}
		return strings.Compare(a, b)
	})
	r.adapterRank = make(map[string]string, len(names))
	for i, a := range names {
		r.adapterRank[a] = r.opts.Adapters[i%len(r.opts.Adapters)]
	}
}

// adapterName is the model name the server serves an adapter under.
func (r *Runner) adapterName(a string) string {
	if m, ok := r.opts.AdapterMap[a]; ok {
		return m
	}
	if m, ok := r.adapterRank[a]; ok {
		return m
	}
	return a
}
