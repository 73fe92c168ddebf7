package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"iter"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/servetrace/servetrace/internal/media"
	"github.com/servetrace/servetrace/trace"
)

// Limits on what a request may make the simulator read: media parts as a
// trace record bounds them, and image URLs fetched (each, and all of one
// request's) within a timeout.
const (
	maxMediaParts     = trace.MaxMediaParts
	maxImageFetch     = 64 << 20
	maxFetchTotal     = 256 << 20
	imageFetchTimeout = 10 * time.Second
	maxTopLogprobs    = 20 // vLLM's default max_logprobs
	maxChoices        = 128
)

// The token ids /tokenize shows for media placeholders: Qwen2-VL's
// <|image_pad|> and Qwen2-Audio's <|AUDIO|>.
const imagePadID, audioPadID = 151655, 151646

// errHostNotAllowed refuses an image URL on another host than loopback:
// the simulator never makes network traffic beyond the machine.
var errHostNotAllowed = errors.New("image URL host not allowed: the simulator fetches loopback URLs only")

// contentPart is one part of a chat message's content list.
type contentPart struct {
	Type       string        `json:"type"`
	Text       string        `json:"text"`
	ImageURL   imageURLField `json:"image_url"`
	InputAudio *struct {
		Data   string `json:"data"`
		Format string `json:"format"`
	} `json:"input_audio"`
}

// mediaPart is an image or audio clip of a message, located for errors and
// measured by resolveMedia.
type mediaPart struct {
	msg, part int
	audio     bool
	src       string // image: a data URI or a URL; audio: base64 data or a data URI
	format    string // audio format, as given
	tokens    int
	hash      uint64 // of the bytes: the encoder cache's key
}

func (m *mediaPart) where() string { return fmt.Sprintf("messages[%d].content[%d]", m.msg, m.part) }

// prompt is a request's prompt as the simulator counts it: each message's
// text (its text parts joined), each message's media in part order, and
// the tools' JSON.
type prompt struct {
	texts []string
	media [][]mediaPart
	tools json.RawMessage // a non-empty list, else nil
}

func (p *prompt) has(audio bool) bool {
	for _, ms := range p.media {
		for _, m := range ms {
			if m.audio == audio {
				return true
			}
		}
	}
	return false
}

// parts returns message i's text and media. Content is a string, null, or
// a list of parts: text, image_url (an object with a url, or a bare
// string) and input_audio (base64 data and its format).
func (m message) parts(i int) (string, []mediaPart, error) {
	if m.Content.bad {
		return "", nil, fmt.Errorf("messages[%d]: content must be a string or a list of parts", i)
	}
	parts := m.Content.parts
	if parts == nil {
		return m.Content.text, nil, nil
	}
	// The text parts joined; a single one as it is, not copied.
	var text string
	var joined strings.Builder
	texts := 0
	var out []mediaPart
	for j, p := range parts {
		switch p.Type {
		case "text", "":
			if texts++; texts == 2 {
				joined.WriteString(text)
			}
			if texts == 1 {
				text = p.Text
			} else {
				joined.WriteString(p.Text)
			}
		case "image_url":
			if !p.ImageURL.ok {
				return "", nil, fmt.Errorf("messages[%d].content[%d]: image_url must be an object with a url", i, j)
			}
			out = append(out, mediaPart{msg: i, part: j, src: p.ImageURL.url})
		case "input_audio":
			if p.InputAudio == nil || p.InputAudio.Data == "" {
				return "", nil, fmt.Errorf("messages[%d].content[%d]: input_audio needs data (base64 WAV)", i, j)
			}
			out = append(out, mediaPart{msg: i, part: j, audio: true, src: p.InputAudio.Data, format: p.InputAudio.Format})
		default:
			return "", nil, fmt.Errorf("messages[%d].content[%d]: part type %q is not supported; use text, image_url or input_audio", i, j, p.Type)
		}
	}
	if texts > 1 {
		text = joined.String()
	}
	return text, out, nil
}

// parsePrompt reads the prompt: each chat message (template tokens are not
// counted, and a template keeps messages apart, so each is counted on its
// own) with its media and the tools, or the completion prompt.
func (r *genRequest) parsePrompt(chat bool) (*prompt, error) {
	p := &prompt{}
	if chat {
		if len(r.Messages) == 0 {
			return nil, fmt.Errorf("messages is required and must not be empty")
		}
		n := 0
		for i, m := range r.Messages {
			t, ms, err := m.parts(i)
			if err != nil {
				return nil, err
			}
			if n += len(ms); n > maxMediaParts {
				return nil, fmt.Errorf("messages hold more than %d images and audio clips", maxMediaParts)
			}
			p.texts, p.media = append(p.texts, t), append(p.media, ms)
		}
		tools, err := parseTools(r.Tools)
		if err != nil {
			return nil, err
		}
		p.tools = tools
		return p, nil
	}
	if !r.Prompt.given {
		return nil, fmt.Errorf("prompt is required")
	}
	if r.Prompt.bad {
		return nil, fmt.Errorf("prompt must be a string (or a list of one string)")
	}
	p.texts = []string{r.Prompt.text}
	return p, nil
}

// parseTools returns the tools' JSON exactly as the request gave it, or
// nil for none (absent, null or an empty list): a server renders the
// definitions into the prompt, so their text is counted as prompt tokens.
func parseTools(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("tools must be a list of tool definitions")
	}
	if len(list) == 0 {
		return nil, nil
	}
	return raw, nil
}

// resolveMedia measures every image and clip: an image's size from its
// header, whether inline (a data URI) or fetched from a loopback URL, a
// clip's duration from its WAV header; each gets its tokens by
// internal/media's rules and the hash of its bytes. Fetched bytes are held
// in h while they are read. Errors name the message and part.
func (s *Server) resolveMedia(ctx context.Context, p *prompt, h *hold) error {
	fetched := 0
	for _, ms := range p.media {
		for k := range ms {
			m := &ms[k]
			var err error
			if m.audio {
				err = s.resolveAudio(m)
			} else {
				err = s.resolveImage(ctx, m, h, &fetched)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", m.where(), err)
			}
		}
	}
	return nil
}

func (s *Server) resolveImage(ctx context.Context, m *mediaPart, h *hold, fetched *int) error {
	var data []byte
	if media.IsDataURI(m.src) {
		_, b, err := media.ParseDataURI(m.src)
		if err != nil {
			return fmt.Errorf("image_url does not decode: %w", err)
		}
		data = b
	} else {
		b, err := s.fetchImage(ctx, m.src, min(maxImageFetch, maxFetchTotal-*fetched), h)
		if err != nil {
			return err
		}
		*fetched += len(b)
		data = b
	}
	width, height, _, err := media.ImageConfig(data)
	if err != nil {
		return fmt.Errorf("image does not decode: %w", err)
	}
	m.tokens = media.ImageTokens(width, height)
	m.hash = maphash.Bytes(s.hashSeed, data)
	return nil
}

func (s *Server) resolveAudio(m *mediaPart) error {
	if f := strings.ToLower(m.format); f != "" && f != "wav" {
		return fmt.Errorf("input_audio format %q is not supported: the simulator reads WAV only", m.format)
	}
	src := m.src
	if !media.IsDataURI(src) {
		// Raw base64, as OpenAI's input_audio carries it: decode it
		// with the data URI reader's lenient base64.
		src = "data:audio/wav;base64," + src
	}
	_, data, err := media.ParseDataURI(src)
	if err != nil {
		return fmt.Errorf("input_audio data does not decode: %w", err)
	}
	ms, err := media.WAVDuration(data)
	if err != nil {
		return fmt.Errorf("input_audio does not decode: %w", err)
	}
	m.tokens = media.AudioTokens(ms)
	m.hash = maphash.Bytes(s.hashSeed, data)
	return nil
}

// newLoopbackFetcher returns the client image URLs are fetched with. It
// connects to loopback addresses only, checked on the address dialled (so
// a name that resolves elsewhere is refused too) and on every redirect,
// and never through a proxy.
func newLoopbackFetcher() *http.Client {
	d := &net.Dialer{Timeout: imageFetchTimeout, Control: func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return errHostNotAllowed
		}
		return nil
	}}
	return &http.Client{
		Timeout:   imageFetchTimeout,
		Transport: &http.Transport{Proxy: nil, DialContext: d.DialContext, MaxIdleConnsPerHost: 8, IdleConnTimeout: 30 * time.Second},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if !isLoopback(req.URL.Hostname()) {
				return errHostNotAllowed
			}
			if len(via) >= 5 {
				return errors.New("image URL redirected more than 5 times")
			}
			return nil
		},
	}
}

// fetchImage GETs an image URL on a loopback host, reading at most limit
// bytes, each held in h (errBusy past the budget). Errors never quote the
// URL, which may carry credentials.
func (s *Server) fetchImage(ctx context.Context, raw string, limit int, h *hold) ([]byte, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" {
		return nil, errors.New("image_url is neither a data URI nor an http(s) URL")
	}
	if !isLoopback(u.Hostname()) {
		return nil, errHostNotAllowed
	}
	ctx, cancel := context.WithTimeout(ctx, imageFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, errors.New("image_url is not a valid URL")
	}
	resp, err := s.fetcher.Do(req)
	if err != nil {
		if errors.Is(err, errHostNotAllowed) {
			return nil, errHostNotAllowed
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL
		}
		return nil, fmt.Errorf("image URL could not be fetched: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("image URL answered HTTP %d", resp.StatusCode)
	}
	b, err := io.ReadAll(heldReader{io.LimitReader(resp.Body, int64(limit)+1), h})
	if err != nil {
		return nil, fmt.Errorf("image URL body: %w", err)
	}
	if len(b) > limit {
		return nil, fmt.Errorf("image at the URL is larger than %d MiB (%d MiB per image, %d MiB per request)", limit>>20, maxImageFetch>>20, maxFetchTotal>>20)
	}
	return b, nil
}

// promptCount is a prompt tokenized: the tools' ids, each message's text
// ids, and the media, whose placeholder ids are only laid out (by ids)
// once the total is known to fit. A prompt past its limit keeps no more
// ids (over), only its count.
type promptCount struct {
	tools       []int
	texts       [][]int
	media       [][]mediaPart
	textTokens  int64 // the tools' and texts' tokens
	imageTokens int64
	audioTokens int64
	over        bool
}

// idBytes is what a token id takes in memory.
const idBytes = 8

// countPrompt tokenizes a resolved prompt of at most limit tokens. A text
// that could take the total past the limit (a token is at least a byte)
// is counted before it is encoded, and a prompt past it is only counted:
// the ids of a long text take up to eight times its bytes. The ids are
// held in h before they are made, at a token a byte, and what they did
// not take is given back; errBusy past the budget.
func (s *Server) countPrompt(p *prompt, limit int64, h *hold) (*promptCount, error) {
	c := &promptCount{media: p.media}
	for _, ms := range p.media {
		for _, m := range ms {
			if m.audio {
				c.audioTokens += int64(m.tokens)
			} else {
				c.imageTokens += int64(m.tokens)
			}
		}
	}
	encode := func(text string) ([]int, error) {
		if c.over {
			c.textTokens += int64(s.tok.Count(text))
			return nil, nil
		}
		most := int64(len(text))
		if c.total()+most > limit {
			n := int64(s.tok.Count(text))
			if c.total()+n > limit {
				c.textTokens += n
				c.over = true
				return nil, nil
			}
			most = n
		}
		if !h.grow(idBytes * most) {
			return nil, errBusy
		}
		ids := s.tok.Encode(text)
		h.shrink(idBytes * (most - int64(len(ids))))
		c.textTokens += int64(len(ids))
		return ids, nil
	}
	var err error
	if p.tools != nil {
		if c.tools, err = encode(string(p.tools)); err != nil {
			return nil, err
		}
	}
	for _, t := range p.texts {
		ids, err := encode(t)
		if err != nil {
			return nil, err
		}
		c.texts = append(c.texts, ids)
	}
	return c, nil
}

// total is the prompt tokens: the tools' JSON, every message's text, and
// every image's and clip's tokens.
func (c *promptCount) total() int64 {
	return c.textTokens + c.imageTokens + c.audioTokens
}

// ids lays out the prompt's token ids: the tools first (a chat template
// renders them into the system prompt), then each message's text followed
// by its media's placeholders. For the prefix cache (forHash) a
// placeholder is its image's or clip's hash, so different images never
// share a block; for /tokenize it is the model's pad token. Call it only
// for a prompt within its limit (not over).
func (c *promptCount) ids(forHash bool) []int {
	return slices.AppendSeq(make([]int, 0, c.total()), c.all(forHash))
}

// all yields the ids ids lays out, one at a time.
func (c *promptCount) all(forHash bool) iter.Seq[int] {
	return func(yield func(int) bool) {
		for _, id := range c.tools {
			if !yield(id) {
				return
			}
		}
		for i, t := range c.texts {
			for _, id := range t {
				if !yield(id) {
					return
				}
			}
			if i >= len(c.media) {
				continue
			}
			for _, m := range c.media[i] {
				id := imagePadID
				switch {
				case forHash:
					id = int(m.hash >> 1)
				case m.audio:
					id = audioPadID
				}
				for range m.tokens {
					if !yield(id) {
						return
					}
				}
			}
		}
	}
}

// images returns the prompt's images for the vision encoder.
func (c *promptCount) images() []imageRef {
	var out []imageRef
	for _, ms := range c.media {
		for _, m := range ms {
			if !m.audio {
				out = append(out, imageRef{hash: m.hash, tokens: m.tokens})
			}
		}
	}
	return out
}

// constraint is a request's structured-output constraint.
type constraint struct {
	kind    string // json_object, json_schema, regex, grammar, choice, structural_tag
	feature string // its name in Options.Refuse: json, json_schema or grammar
	source  string // the request field it came from
	hash    uint64 // of kind and canonical text: the grammar cache's key
}

// features are what a request asks beyond its prompt and length.
type features struct {
	n           int
	logprobs    bool
	topLogprobs int
	seed        *int64
	constraint  *constraint
}

// parseFeatures reads and checks n, logprobs, tool_choice, stop and the
// structured-output fields. Sampling parameters change which tokens, not
// how many or how fast: temperature only tells greedy requests (whose
// answer the prompt fixes, answers.go); top_p, top_k and penalties are
// accepted and ignored.
func (s *Server) parseFeatures(r *genRequest) (features, error) {
	f := features{n: 1, seed: r.Seed}
	if r.N != nil {
		if *r.N < 1 || *r.N > maxChoices {
			return f, fmt.Errorf("n must be between 1 and %d, got %d", maxChoices, *r.N)
		}
		f.n = *r.N
	}
	if len(r.Logprobs) > 0 && string(r.Logprobs) != "null" {
		var b bool
		var k int
		switch {
		case json.Unmarshal(r.Logprobs, &b) == nil:
			f.logprobs = b
		case json.Unmarshal(r.Logprobs, &k) == nil: // the completions API's logprobs: k
			if k < 0 || k > maxTopLogprobs {
				return f, fmt.Errorf("logprobs must be between 0 and %d, got %d", maxTopLogprobs, k)
			}
			f.logprobs, f.topLogprobs = true, k
		default:
			return f, fmt.Errorf("logprobs must be true, false or (completions) an integer")
		}
	}
	if r.TopLogprobs != nil {
		if *r.TopLogprobs < 0 || *r.TopLogprobs > maxTopLogprobs {
			return f, fmt.Errorf("top_logprobs must be between 0 and %d, got %d", maxTopLogprobs, *r.TopLogprobs)
		}
		f.topLogprobs = *r.TopLogprobs
	}
	if err := checkToolChoice(r.ToolChoice); err != nil {
		return f, err
	}
	if err := checkStop(r.Stop); err != nil {
		return f, err
	}
	c, err := s.parseConstraint(r)
	if err != nil {
		return f, err
	}
	f.constraint = c
	return f, nil
}

func checkToolChoice(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "auto" || s == "none" || s == "required" {
			return nil
		}
	} else {
		var named struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if json.Unmarshal(raw, &named) == nil && named.Type == "function" && named.Function.Name != "" {
			return nil
		}
	}
	return fmt.Errorf(`tool_choice must be "auto", "none", "required" or {"type":"function","function":{"name":...}}`)
}

func checkStop(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var s string
	var list []string
	if json.Unmarshal(raw, &s) != nil && json.Unmarshal(raw, &list) != nil {
		return fmt.Errorf("stop must be a string or a list of strings")
	}
	return nil
}

// parseConstraint reads the structured output asked, in any of the forms
// clients send: OpenAI's response_format (json_object, json_schema), vLLM's
// older guided_json, guided_regex, guided_grammar and guided_choice, and
// its newer structured_outputs. At most one may be given.
func (s *Server) parseConstraint(r *genRequest) (*constraint, error) {
	var found []*constraint
	add := func(source, kind, feature, text string) {
		found = append(found, &constraint{kind: kind, feature: feature, source: source,
			hash: maphash.String(s.hashSeed, kind+"\x00"+text)})
	}
	// jsonText is a schema's canonical text: keys sorted, spacing dropped,
	// so the same schema hits the cache however it was written. A schema
	// may come as an object or as a string holding one.
	jsonText := func(field string, raw json.RawMessage) (string, error) {
		var str string
		if json.Unmarshal(raw, &str) == nil {
			raw = json.RawMessage(str)
		}
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			return "", fmt.Errorf("%s is not a JSON schema: %w", field, err)
		}
		b, _ := json.Marshal(v)
		return string(b), nil
	}
	text := func(field string, raw json.RawMessage) (string, error) {
		var str string
		if err := json.Unmarshal(raw, &str); err != nil {
			return "", fmt.Errorf("%s must be a string", field)
		}
		return str, nil
	}
	choice := func(field string, raw json.RawMessage) (string, error) {
		var list []string
		if err := json.Unmarshal(raw, &list); err != nil || len(list) == 0 {
			return "", fmt.Errorf("%s must be a non-empty list of strings", field)
		}
		b, _ := json.Marshal(list)
		return string(b), nil
	}
	given := func(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

	if given(r.ResponseFormat) {
		var rf struct {
			Type       string          `json:"type"`
			JSONSchema json.RawMessage `json:"json_schema"`
		}
		if err := json.Unmarshal(r.ResponseFormat, &rf); err != nil {
			return nil, fmt.Errorf("response_format must be an object with a type")
		}
		switch rf.Type {
		case "text":
		case "json_object":
			add("response_format", "json_object", "json", "")
		case "json_schema":
			var js struct {
				Schema json.RawMessage `json:"schema"`
			}
			if !given(rf.JSONSchema) || json.Unmarshal(rf.JSONSchema, &js) != nil {
				return nil, fmt.Errorf("response_format of type json_schema needs a json_schema object")
			}
			schema := rf.JSONSchema
			if given(js.Schema) {
				schema = js.Schema
			}
			t, err := jsonText("response_format.json_schema.schema", schema)
			if err != nil {
				return nil, err
			}
			add("response_format", "json_schema", "json_schema", t)
		case "structural_tag":
			t, err := jsonText("response_format", r.ResponseFormat)
			if err != nil {
				return nil, err
			}
			add("response_format", "structural_tag", "grammar", t)
		default:
			return nil, fmt.Errorf("response_format type %q is not supported; use text, json_object or json_schema", rf.Type)
		}
	}
	type field struct {
		name string
		raw  json.RawMessage
	}
	guided := []field{{"guided_json", r.GuidedJSON}, {"guided_regex", r.GuidedRegex}, {"guided_grammar", r.GuidedGrammar}, {"guided_choice", r.GuidedChoice}}
	if given(r.StructuredOutputs) {
		var so struct {
			JSON       json.RawMessage `json:"json"`
			Regex      json.RawMessage `json:"regex"`
			Grammar    json.RawMessage `json:"grammar"`
			Choice     json.RawMessage `json:"choice"`
			JSONObject bool            `json:"json_object"`
		}
		if err := json.Unmarshal(r.StructuredOutputs, &so); err != nil {
			return nil, fmt.Errorf("structured_outputs must be an object")
		}
		guided = append(guided, field{"structured_outputs.json", so.JSON}, field{"structured_outputs.regex", so.Regex},
			field{"structured_outputs.grammar", so.Grammar}, field{"structured_outputs.choice", so.Choice})
		if so.JSONObject {
			add("structured_outputs.json_object", "json_object", "json", "")
		}
	}
	for _, g := range guided {
		if !given(g.raw) {
			continue
		}
		var t string
		var err error
		kind, feature := "", "grammar"
		switch {
		case strings.HasSuffix(g.name, "json"):
			kind, feature = "json_schema", "json_schema"
			t, err = jsonText(g.name, g.raw)
		case strings.HasSuffix(g.name, "regex"):
			kind = "regex"
			t, err = text(g.name, g.raw)
		case strings.HasSuffix(g.name, "grammar"):
			kind = "grammar"
			t, err = text(g.name, g.raw)
		default:
			kind = "choice"
			t, err = choice(g.name, g.raw)
		}
		if err != nil {
			return nil, err
		}
		add(g.name, kind, feature, t)
	}
	switch len(found) {
	case 0:
		return nil, nil
	case 1:
		return found[0], nil
	}
	return nil, fmt.Errorf("only one kind of structured output may be asked; got %s and %s", found[0].source, found[1].source)
}

// refusal returns the 400 message for a feature in Options.Refuse that the
// request uses, in vLLM's words, or "" when nothing is refused.
func (s *Server) refusal(model string, p *prompt, f features) string {
	r := s.refuse
	switch {
	case r["image"] && p.has(false):
		return model + " is not a multimodal model"
	case r["audio"] && p.has(true):
		return model + " does not support audio input"
	case r["tools"] && p.tools != nil:
		// vLLM's message names its own server flag; the simulator's names
		// none (library strings never hold a flag), keeping vLLM's words.
		return `tool calling is not enabled for this server ("auto" tool choice requires enable-auto-tool-choice and a tool-call-parser)`
	case f.constraint != nil && r[f.constraint.feature]:
		return "structured output (response_format) is not supported"
	case r["logprobs"] && f.logprobs:
		return "logprobs are not supported"
	case r["n"] && f.n > 1:
		return "n > 1 is not supported"
	case r["seed"] && f.seed != nil:
		return "seed is not supported"
	}
	return ""
}

// reasoningShare scales ReasoningRatio by the reasoning_effort asked: low
// (and minimal) halves it, high doubles it (to at most 0.9, or the ratio
// itself if higher), medium and anything else keep it. Reasoning models
// spend about that much more or less thought per effort level.
func reasoningShare(ratio float64, effort string) float64 {
	switch effort {
	case "low", "minimal":
		return ratio / 2
	case "high":
		return min(2*ratio, max(0.9, ratio))
	}
	return ratio
}
