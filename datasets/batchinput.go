package datasets

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"strings"
)

// MaxBatchInputBytes bounds the batch input held in memory: OpenAI takes
// batch input files of at most 200 MB, so a larger file is not one batch's
// input.
const MaxBatchInputBytes = 256 << 20

// MaxBatchInputRequests bounds the requests indexed, a map entry each
// beside their lines: ten times the most any provider's batch holds
// (Azure OpenAI's 100,000; OpenAI's is 50,000).
const MaxBatchInputRequests = 1_000_000

// BatchInput is an OpenAI Batch API input file (JSONL lines of custom_id,
// method, url and body) indexed by custom_id: the request side that the
// batch's output lines lack (the prompt, max_tokens, sampling). It keeps
// the lines and decodes one only when an output line asks for it, and is
// safe for concurrent use.
type BatchInput struct {
	// Name is the file as given; SHA256 is its content's (as stored).
	Name, SHA256 string
	data         []byte
	spans        map[string]batchSpan
	// maxTokens is the most JSON tokens a line holds (jsonTokens): what
	// joining one adds to a record's share of the decode budget.
	maxTokens int
}

// batchSpan is one input line: where it is in data, and its line number.
type batchSpan struct {
	off, n int
	line   int64
}

// Requests returns how many requests the batch input holds.
func (bi *BatchInput) Requests() int { return len(bi.spans) }

// LoadBatchInput reads and indexes a batch input file (plain, gzip, zstd
// or bzip2).
func LoadBatchInput(ctx context.Context, path string) (*BatchInput, error) {
	f, stop, err := openInput(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("batch input: %w", err)
	}
	defer stop()
	return ReadBatchInput(ctx, f, path)
}

// ReadBatchInput indexes a batch input read from r; name is for errors.
// A malformed line, a line without a custom_id, a repeated custom_id or a
// Batch API output line is an error naming the line, since any of them
// means the file is not the batch's input and every join would be suspect.
func ReadBatchInput(ctx context.Context, r io.Reader, name string) (*BatchInput, error) {
	h := sha256.New()
	br, closeAll, err := decompress(ctx, io.TeeReader(r, h), name)
	defer closeAll()
	if err != nil {
		return nil, fmt.Errorf("batch input %w", err)
	}
	head, _, err := peekHead(br)
	if err != nil {
		return nil, fmt.Errorf("batch input %s: %w", name, err)
	}
	if err := notData(head, name); err != nil {
		return nil, fmt.Errorf("batch input %s: %w", name, err)
	}
	bi := &BatchInput{Name: name, spans: map[string]batchSpan{}}
	lines := lineReader{br: br}
	for n := int64(1); ; n++ {
		if n&1023 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		line, err := lines.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("batch input %s line %d: %w", name, n, err)
		}
		if line = bytes.TrimSpace(line); len(line) == 0 {
			continue
		}
		tokens := jsonTokens(line)
		if tokens > maxDecodeTokens {
			return nil, fmt.Errorf("batch input %s line %d: %s", name, n, errTooManyTokens.reason)
		}
		// Only custom_id is decoded, and whether body and response are
		// there: a body is decoded when an output line joins it.
		var probe struct {
			CustomID *string     `json:"custom_id"`
			Body     jsonPresent `json:"body"`
			Response jsonPresent `json:"response"`
		}
		if err := json.Unmarshal(line, &probe); err != nil {
			return nil, fmt.Errorf("batch input %s line %d: malformed JSON (%s): fix or remove the line", name, n, jsonReason(err))
		}
		if probe.Body.present && !probe.Body.object {
			return nil, fmt.Errorf("batch input %s line %d: malformed JSON (%s): fix or remove the line", name, n, jsonReason(&json.UnmarshalTypeError{Value: "not an object", Type: reflect.TypeFor[map[string]any](), Field: "body"}))
		}
		switch {
		case !probe.Body.present && probe.Response.present:
			return nil, fmt.Errorf("batch input %s line %d: a Batch API output line (it has a response), not an input one: give the file the batch was created from", name, n)
		case probe.CustomID == nil || *probe.CustomID == "":
			return nil, fmt.Errorf("batch input %s line %d: no custom_id, which joins a request to its output line: is this a Batch API input file?", name, n)
		}
		id := *probe.CustomID
		if prev, dup := bi.spans[id]; dup {
			return nil, fmt.Errorf("batch input %s line %d: the custom_id of line %d again; one batch's custom_ids are unique: give one batch's input", name, n, prev.line)
		}
		if len(bi.spans) == MaxBatchInputRequests {
			return nil, fmt.Errorf("batch input %s line %d: more than %d requests, and no provider's batch holds more than 100,000: give one batch's input", name, n, MaxBatchInputRequests)
		}
		if len(bi.data)+len(line) > MaxBatchInputBytes {
			return nil, fmt.Errorf("batch input %s: more than %d MiB, and OpenAI batch inputs are at most 200 MB: give one batch's input", name, MaxBatchInputBytes>>20)
		}
		bi.spans[id] = batchSpan{off: len(bi.data), n: len(line), line: n}
		bi.maxTokens = max(bi.maxTokens, tokens)
		bi.data = append(bi.data, line...)
	}
	if len(bi.spans) == 0 {
		return nil, fmt.Errorf("batch input %s: no requests", name)
	}
	io.Copy(io.Discard, br) // the rest (a compressed stream's trailer) into the hash
	bi.SHA256 = hex.EncodeToString(h.Sum(nil))
	return bi, nil
}

// jsonPresent records whether a value is there (not null) and whether it
// is an object, without decoding it.
type jsonPresent struct{ present, object bool }

func (p *jsonPresent) UnmarshalJSON(b []byte) error {
	p.present = string(b) != "null"
	p.object = len(b) > 0 && b[0] == '{'
	return nil
}

// join puts the batch input line with rec's custom_id under batch_input,
// a Responses API request's input as its messages, or rejects the record
// when no input line has its custom_id (the files are of different
// batches).
func (bi *BatchInput) join(rec map[string]any) error {
	id, _ := rec["custom_id"].(string)
	if id == "" {
		return bad("custom_id", "missing, so no batch input line joins this record")
	}
	sp, ok := bi.spans[id]
	if !ok {
		return bad("custom_id", "not in the batch input %s (another batch's input?)", filepath.Base(bi.Name))
	}
	dec := json.NewDecoder(bytes.NewReader(bi.data[sp.off : sp.off+sp.n]))
	dec.UseNumber()
	var in map[string]any
	if err := dec.Decode(&in); err != nil { // it decoded when indexed
		return bad("batch_input", "malformed JSON: %s", jsonReason(err))
	}
	if body, ok := in["body"].(map[string]any); ok {
		url, _ := in["url"].(string)
		responsesMessages(body, url)
	}
	rec["batch_input"] = in
	return nil
}

// responsesMessages gives a Responses API request body (url
// /v1/responses) the messages its input stands for: a string is one user
// message, an array of items reads as messages already. Other endpoints'
// bodies are left alone (an embeddings input is not a prompt to count).
func responsesMessages(body map[string]any, url string) {
	url, _, _ = strings.Cut(url, "?")
	if !strings.HasSuffix(strings.TrimSuffix(url, "/"), "/responses") || body["messages"] != nil {
		return
	}
	switch in := body["input"].(type) {
	case string:
		body["messages"] = []any{map[string]any{"role": "user", "content": in}}
	case []any:
		body["messages"] = in
	}
}
