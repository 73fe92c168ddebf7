package datasets

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/anon"
)

// Format names accepted by Read and by `servetrace convert --format`.
const (
	FormatAzure    = "azure"    // Azure LLM inference trace CSV, 2023 and 2024, and the LMM (multimodal) trace 2025
	FormatMooncake = "mooncake" // Mooncake JSONL
)

// Formats lists the formats Read understands.
var Formats = []string{FormatAzure, FormatMooncake, FormatBurstGPT, FormatShareGPT, FormatOpenAILog, FormatOpenAIBatch, FormatCSV, FormatOTLP}

// MaxLineBytes is the longest input line accepted; a longer one is rejected.
const MaxLineBytes = 16 << 20

// Options controls how a source becomes request records.
type Options struct {
	// Name is the source's name in errors, rejects and request ids.
	Name string
	// Format is one of Formats, or "" to detect it from the first line.
	Format string
	// Start anchors relative timestamps (Mooncake); default trace.DefaultStart.
	Start time.Time
	// API and Stream fill the request shape where the source is silent.
	API    string
	Stream bool
	// Model fills the model column where the source is silent.
	Model string
	// Log configures request-log conversion (FormatOpenAILog).
	Log LogOptions
	// SessionsFromPrefix links a Mooncake trace's requests into sessions
	// by their hash ids (mooncakeLinker): Mooncake's conversation and
	// tool-agent traces carry their sessions no other way.
	SessionsFromPrefix bool
}

// Sink receives converted rows and rejected lines.
type Sink interface {
	Write(trace.Request) error
	Reject(trace.Reject) error
}

// Stats summarises one source read.
type Stats struct {
	Format        string
	Rows          int64
	Rejects       int64
	TimesRelative bool
	// TimeResolutionUs is the coarsest of 1, 10, 100, ... 1e6 µs that divides
	// every accepted timestamp (relative to the first): 1e6 means whole seconds.
	TimeResolutionUs int64
	// BlockSize is the prefix block size the source's ids use, or 0.
	BlockSize int
	// PrefixSalted says the prefix ids were computed here, keyed by the
	// salt (not copied from the source).
	PrefixSalted bool
	// Tokenizer names the tokenizer that counted and hashed prompts.
	Tokenizer string
	// Salt is the salt that keyed the ids and prefix blocks, where the
	// reader keyed any (the caller's, or a random one it chose).
	Salt anon.Salt
	// SyntheticTimes says the source had no times and rows were spaced
	// by the reader.
	SyntheticTimes bool
	// RejectReasons counts rejected lines by reason.
	RejectReasons map[string]int64
	// Notes are for the manifest: what the reader skipped, and why.
	Notes []string

	res resolution // of the accepted rows' times
}

// accept checks a converted row (trace.Request.Validate) and writes it to
// the sink, or rejects its line when a value is out of range, so no reader
// of the bucket meets a value replay or fit cannot handle.
func (st *Stats) accept(sink Sink, file string, line int64, req *trace.Request) error {
	if err := req.Validate(); err != nil {
		return st.reject(sink, file, line, err.Error())
	}
	if err := sink.Write(*req); err != nil {
		return err
	}
	st.res.add(req.TS)
	st.Rows++
	return nil
}

// reject records a line that could not be converted, with a reason that
// never quotes it, and counts it.
func (st *Stats) reject(sink Sink, file string, line int64, reason string) error {
	st.Rejects++
	return sink.Reject(trace.Reject{File: file, Line: line, Reason: reason})
}

// ErrUnknownFormat is returned when the input's start matches no format.
var ErrUnknownFormat = errors.New("unrecognised input format")

// Detect names the format of an input from its head: its first line, or
// as much of its start as the caller has, since a JSON document (a
// pretty-printed log record, an array of them) may span many lines. A Git
// LFS pointer and a compressed file that Read cannot decompress are named
// as such (ErrNotData), not as an unknown format.
func Detect(head []byte) (string, error) { return detect(head, true, "") }

// detect is Detect where complete says whether head is the whole input:
// when it is not, a JSON document cut off at head's end is classified by
// the keys seen so far instead of being called truncated. name, where
// given, lets a compressed file's error say whether its name says so.
func detect(head []byte, complete bool, name string) (string, error) {
	if err := notData(head, name); err != nil {
		return "", err
	}
	head = bytes.TrimLeft(bytes.TrimPrefix(head, []byte("\xef\xbb\xbf")), " \t\r\n")
	if len(head) == 0 {
		return "", fmt.Errorf("%w: the input is empty", ErrUnknownFormat)
	}
	if !utf8ish(head) {
		return "", fmt.Errorf("%w: the input looks binary", ErrUnknownFormat)
	}
	if head[0] == '{' || head[0] == '[' {
		return detectJSON(head, complete)
	}
	line := head
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	header := strings.ToLower(string(bytes.TrimSpace(line)))
	if strings.Contains(header, "contexttokens") && strings.Contains(header, "generatedtokens") {
		return FormatAzure, nil
	}
	if strings.Contains(header, "request tokens") && strings.Contains(header, "response tokens") {
		return FormatBurstGPT, nil
	}
	return "", fmt.Errorf("%w: expected an Azure LLM trace CSV header (TIMESTAMP,ContextTokens,GeneratedTokens) or Mooncake JSONL; name the format: %s", ErrUnknownFormat, strings.Join(Formats, ", "))
}

// ErrBatchInput marks a Batch API input file given as the input: it holds
// requests only (no times, no outcomes), so it is joined to the batch's
// output file instead (LogOptions.BatchInput).
var ErrBatchInput = errors.New("an OpenAI Batch API input file: convert the batch's output file, and give this one as its batch input")

// detectJSON names a JSON input by the top-level keys of its first object
// (an array's first element): a JSON document is recognised whether it
// sits on one line or spans many.
func detectJSON(head []byte, complete bool) (string, error) {
	keys, inArray, err := firstObjectKeys(head)
	cut := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
	switch {
	case errors.Is(err, errNotObject):
		return "", fmt.Errorf("%w: a JSON array whose first element is not an object; name the format", ErrUnknownFormat)
	case err != nil && (complete || !cut):
		reason := jsonReason(err)
		if cut {
			reason = "the input ends inside it"
		}
		return "", fmt.Errorf("%w: the first JSON document starts like JSON but does not parse (%s): truncated or corrupt?", ErrUnknownFormat, reason)
	case inArray && keys == nil:
		return FormatShareGPT, nil // an empty array: ShareGPT, as it always was
	}
	has := keySet(keys).hasAny
	switch {
	case has("resourceSpans"):
		return FormatOTLP, nil
	case has("conversations"):
		return FormatShareGPT, nil
	case has("hash_ids", "input_length"):
		if inArray {
			return "", fmt.Errorf("%w: a JSON array of Mooncake records, but Mooncake traces are JSONL (one record per line): write one element per line", ErrUnknownFormat)
		}
		return FormatMooncake, nil
	case has("custom_id") && has("response", "error"):
		return FormatOpenAIBatch, nil
	case has("custom_id") && has("body", "method", "url"):
		return "", ErrBatchInput
	case has("request", "messages", "request_body", "startTime", "prompt", "model_parameters"):
		return FormatOpenAILog, nil
	case inArray:
		return FormatShareGPT, nil // an array of something else: ShareGPT, as it always was
	case cut:
		return "", fmt.Errorf("%w: the first JSON document runs past the first %d KiB without a key that names its format; name the format", ErrUnknownFormat, len(head)>>10)
	}
	return "", fmt.Errorf("%w: the first JSON document is neither Mooncake (input_length, hash_ids), a request log (request, messages, request_body, startTime), Batch API output (custom_id, response) nor OTLP (resourceSpans); name the format", ErrUnknownFormat)
}

// presetByKeys names the mapping preset a request log's first object is
// shaped for, by keys only its gateway writes, and why; "" for none.
// LiteLLM's StandardLoggingPayload and SpendLogs rows time a call by
// startTime beside its call_type, model_group or spend; Helicone's
// records by request_created_at beside request_body or response_status.
func presetByKeys(head []byte) (preset, why string) {
	keys, _, _ := firstObjectKeys(head)
	has := keySet(keys).hasAny
	switch {
	case has("startTime") && has("call_type", "model_group", "spend", "response_cost", "api_base"):
		return "litellm", "its keys (startTime beside call_type, model_group, spend or response_cost) being LiteLLM's"
	case has("request_created_at") && has("request_body", "response_status", "delay_ms"):
		return "helicone", "its keys (request_created_at beside request_body, response_status or delay_ms) being Helicone's"
	}
	return "", ""
}

// keySet is an object's top-level keys.
type keySet map[string]bool

// hasAny reports whether the object has one of ks.
func (k keySet) hasAny(ks ...string) bool {
	for _, key := range ks {
		if k[key] {
			return true
		}
	}
	return false
}

// errNotObject: a JSON array whose first element is not an object.
var errNotObject = errors.New("not an object")

// firstObjectKeys returns the top-level keys of the first JSON object in b,
// or of an array's first element (inArray), as far as b goes: err is
// io.EOF or io.ErrUnexpectedEOF where b ends inside it, with the keys seen
// until then. An empty array has no keys and no error.
func firstObjectKeys(b []byte) (keys map[string]bool, inArray bool, err error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, false, err
	}
	if tok == json.Delim('[') {
		inArray = true
		if tok, err = dec.Token(); err != nil || tok == json.Delim(']') {
			return nil, true, err
		}
	}
	if tok != json.Delim('{') {
		return nil, inArray, errNotObject
	}
	keys = map[string]bool{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return keys, inArray, err
		}
		if s, ok := k.(string); ok {
			keys[s] = true
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return keys, inArray, err
		}
	}
	_, err = dec.Token() // the closing brace
	return keys, inArray, err
}

// Read converts one source into request records. Malformed lines go to the
// sink's Reject with their line number and a reason that never quotes the
// input's text; an unreadable source, an unknown
// format or a failing sink is an error.
func Read(ctx context.Context, r io.Reader, opts Options, sink Sink) (Stats, error) {
	if opts.Start.IsZero() {
		opts.Start = trace.DefaultStart
	}
	if opts.API == "" {
		opts.API = trace.APIChat
	}
	br, closeAll, err := decompress(ctx, r, opts.Name)
	defer closeAll()
	if err != nil {
		return Stats{}, err
	}
	head, complete, err := peekHead(br)
	if err != nil {
		return Stats{}, fmt.Errorf("%s: %w", opts.Name, err)
	}
	if err := notData(head, opts.Name); err != nil {
		// Whatever the format named: no reader can make sense of these.
		return Stats{}, fmt.Errorf("%s: %w", opts.Name, err)
	}
	if opts.Format == "" {
		f, err := detect(head, complete, opts.Name)
		if err != nil && otlpHead(br) { // a pretty-printed or long OTLP/JSON document
			f, err = FormatOTLP, nil
		}
		if keys, _, kerr := firstObjectKeys(head); errors.Is(err, ErrUnknownFormat) && opts.Log.Mapping != nil && kerr == nil && len(keys) > 0 {
			// JSON records of keys no format names, given with a mapping:
			// the mapping says where their fields are.
			f, err = FormatOpenAILog, nil
		}
		if err != nil {
			return Stats{}, fmt.Errorf("%s line 1: %w", opts.Name, err)
		}
		opts.Format = f
	}
	var st Stats
	switch opts.Format {
	case FormatAzure:
		st, err = readAzure(ctx, br, opts, sink)
	case FormatMooncake:
		st, err = readMooncake(ctx, br, opts, sink)
	case FormatOpenAILog:
		opts.Log.BatchInput = nil // joined to Batch API output only
		var note string
		if opts.Log.Mapping == nil {
			// No mapping named: a gateway's own log shape picks its preset.
			if preset, why := presetByKeys(head); preset != "" {
				opts.Log.Mapping, _ = LoadMapping(preset) // a preset: parses
				note = fmt.Sprintf("%s: read with the %s mapping preset, %s; name a mapping to read it otherwise", opts.Name, preset, why)
			}
		}
		st, err = readOpenAILog(ctx, br, opts, sink)
		if note != "" {
			st.Notes = append(st.Notes, note)
		}
	case FormatOpenAIBatch:
		if opts.Log.Mapping == nil {
			opts.Log.Mapping, _ = LoadMapping(FormatOpenAIBatch) // a preset: parses
		}
		opts.Log.skipFailedBatch = true
		st, err = readOpenAILog(ctx, br, opts, sink)
	case FormatCSV:
		st, err = readCSVLog(ctx, br, opts, sink)
	case FormatBurstGPT:
		st, err = readBurstGPT(ctx, br, opts, sink)
	case FormatOTLP:
		st, err = readOTLP(ctx, br, opts, sink)
	case FormatShareGPT:
		st, err = readShareGPT(ctx, br, opts, sink)
	default:
		return Stats{}, fmt.Errorf("unknown format %q; use one of: %s", opts.Format, strings.Join(Formats, ", "))
	}
	st.Format = opts.Format
	st.TimeResolutionUs = st.res.micros()
	return st, err
}

// peekLine returns the input's first line without consuming it.
func peekLine(br *bufio.Reader) ([]byte, error) {
	for n := 4096; ; n *= 2 {
		b, err := br.Peek(n)
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			return b[:i], nil
		}
		if err != nil { // EOF or buffer full: the whole input, or as much as fits
			if len(b) == 0 && err != io.EOF {
				return nil, fmt.Errorf("read: %w", err)
			}
			if !utf8ish(b) {
				return nil, fmt.Errorf("%w: the input looks binary", ErrUnknownFormat)
			}
			return b, nil
		}
	}
}

// utf8ish reports whether b looks like text (no NUL bytes in its head).
func utf8ish(b []byte) bool { return bytes.IndexByte(b[:min(len(b), 4096)], 0) < 0 }

// resolution tracks the coarsest power-of-ten quantum dividing all offsets.
type resolution struct {
	first int64
	seen  bool
	unit  int64
}

func (r *resolution) add(tsMicros int64) {
	if !r.seen {
		r.first, r.seen, r.unit = tsMicros, true, 1_000_000
		return
	}
	d := tsMicros - r.first
	if d < 0 {
		d = -d
	}
	for r.unit > 1 && d%r.unit != 0 {
		r.unit /= 10
	}
}

func (r *resolution) micros() int64 {
	if !r.seen {
		return 0
	}
	return r.unit
}

// fastAzureTime parses the common shape "YYYY-MM-DD hh:mm:ss[.fraction]"
// (no zone: UTC) into microseconds since the epoch, a fraction of one
// truncated as time.Time.UnixMicro does, without time.Parse or time.Date;
// ok is false for anything else, which then takes the general path. It
// accepts exactly what time.Parse with the layouts below accepts for this
// shape (TestFastAzureTimeMatchesTimeParse).
func fastAzureTime(s string) (int64, bool) {
	if len(s) < 19 || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':' || s[16] != ':' {
		return 0, false
	}
	y1, ok1 := twoDigits(s, 0)
	y2, ok2 := twoDigits(s, 2)
	mo, ok3 := twoDigits(s, 5)
	d, ok4 := twoDigits(s, 8)
	h, ok5 := twoDigits(s, 11)
	mi, ok6 := twoDigits(s, 14)
	sec, ok7 := twoDigits(s, 17)
	y := y1*100 + y2
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) || mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || sec > 59 {
		return 0, false
	}
	ns := 0
	if len(s) > 19 {
		if s[19] != '.' || len(s) == 20 || len(s) > 29 {
			return 0, false
		}
		for i := 20; i < 29; i++ { // nine digits of nanoseconds, the missing ones 0
			c := byte('0')
			if i < len(s) {
				c = s[i]
			}
			if c < '0' || c > '9' {
				return 0, false
			}
			ns = ns*10 + int(c-'0')
		}
	}
	if d > daysIn(y, mo) { // Feb 30 and friends: time.Parse rejects them
		return 0, false
	}
	secs := daysFromCivil(y, mo, d)*86400 + int64(h*3600+mi*60+sec)
	return secs*1_000_000 + int64(ns/1000), true
}

// twoDigits reads the decimal digits s[i] and s[i+1].
func twoDigits(s string, i int) (int, bool) {
	a, b := s[i]-'0', s[i+1]-'0' // a byte below '0' wraps past 9
	return int(a)*10 + int(b), a <= 9 && b <= 9
}

// daysIn returns the days of month mo of year y (proleptic Gregorian).
func daysIn(y, mo int) int {
	switch mo {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil returns the days from 1970-01-01 to y-mo-d, the
// proleptic Gregorian calendar's (Hinnant's days_from_civil), which is
// what time.Date counts.
func daysFromCivil(y, mo, d int) int64 {
	if mo <= 2 {
		y--
	}
	era := y / 400
	if y < 0 {
		era = (y - 399) / 400
	}
	yoe := y - era*400
	doy := (153*((mo+9)%12)+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}

// azureTimeLayouts are the timestamp shapes seen in the Azure 2023 and 2024
// traces; a timestamp without a zone is UTC.
var azureTimeLayouts = []string{
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999Z07:00",
	"2006-01-02T15:04:05.999999999",
}

func parseAzureTime(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if us, ok := fastAzureTime(s); ok {
		return us, nil
	}
	for _, layout := range azureTimeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UnixMicro(), nil
		}
	}
	return 0, errors.New("TIMESTAMP is not YYYY-MM-DD hh:mm:ss[.fraction][zone]")
}

func readAzure(ctx context.Context, br *bufio.Reader, opts Options, sink Sink) (Stats, error) {
	cr := newFastCSV(br)
	header, col, err := csvColumns(cr, opts.Name)
	if err != nil {
		return Stats{}, err
	}
	iTS, okTS := col["timestamp"]
	iIn, okIn := col["contexttokens"]
	iOut, okOut := col["generatedtokens"]
	if !okTS || !okIn || !okOut {
		return Stats{}, fmt.Errorf("%s line 1: Azure header needs TIMESTAMP, ContextTokens and GeneratedTokens columns, found %q", opts.Name, strings.Join(header, ","))
	}
	// The Azure LMM (multimodal) trace 2025 adds NumImages: how many
	// images each request carried, never their sizes.
	iImg, okImg := col["numimages"]
	need := max(iTS, iIn, iOut) + 1
	if okImg {
		need = max(need, iImg+1)
	}
	idBuf := []byte(idPrefix(opts.Name) + "-")
	idLen := len(idBuf)
	var ids stringArena
	st := Stats{}
	err = eachCSVRecord(ctx, cr, opts, sink, &st, func(rec []string, line int64) error {
		reject := func(reason string) error {
			return st.reject(sink, opts.Name, line, reason)
		}
		if len(rec) < need {
			return reject(fmt.Sprintf("%d fields, want at least %d", len(rec), need))
		}
		ts, err := parseAzureTime(rec[iTS])
		if err != nil {
			return reject(err.Error())
		}
		in, err1 := parseCount(rec[iIn], "ContextTokens")
		out, err2 := parseCount(rec[iOut], "GeneratedTokens")
		if err := errors.Join(err1, err2); err != nil {
			return reject(err.Error())
		}
		req := trace.Request{
			Identity: trace.Identity{RequestID: ids.string(strconv.AppendInt(idBuf[:idLen], line, 10)), Model: opts.Model},
			TS:       ts,
			Shape:    trace.Shape{InputTokens: in, OutputTokens: out, MaxTokens: out, API: opts.API, Stream: opts.Stream, N: 1},
		}
		if okImg {
			n, err := parseCount(rec[iImg], "NumImages")
			if err == nil && n > trace.MaxMediaParts {
				err = fmt.Errorf("NumImages %d is more than %d", n, trace.MaxMediaParts)
			}
			if err != nil {
				return reject(err.Error())
			}
			if n > 0 {
				req.ImageCount = int32(n)
				req.Features = []string{trace.FeatureImage}
			}
		}
		return st.accept(sink, opts.Name, line, &req)
	})
	if err != nil {
		return st, err
	}
	return st, nil
}

var errLineTooLong = fmt.Errorf("line longer than %d MiB", MaxLineBytes>>20)

// lineReader returns lines of any length up to MaxLineBytes; a longer line is
// skipped whole and reported as errLineTooLong.
type lineReader struct {
	br  *bufio.Reader
	buf []byte
}

func (l *lineReader) next() ([]byte, error) {
	l.buf = l.buf[:0]
	tooLong := false
	for {
		chunk, err := l.br.ReadSlice('\n')
		if !tooLong {
			if len(l.buf)+len(chunk) > MaxLineBytes {
				tooLong, l.buf = true, l.buf[:0]
			} else {
				l.buf = append(l.buf, chunk...)
			}
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && (len(l.buf) > 0 || tooLong):
			if tooLong {
				return nil, errLineTooLong
			}
			return l.buf, nil
		case err != nil:
			return nil, err
		}
		if tooLong {
			return nil, errLineTooLong
		}
		return l.buf, nil
	}
}

func parseCount(s, name string) (int64, error) {
	v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s is not a whole number", name)
	}
	if v < 0 {
		return 0, fmt.Errorf("%s is negative (%d)", name, v)
	}
	return v, nil
}

// jsonReason describes a JSON error without quoting the input.
func jsonReason(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %s has the wrong type (want %s)", te.Field, te.Type)
	}
	return "invalid JSON"
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// idPrefix turns a source name into a request-id prefix: its base name
// without extension.
func idPrefix(name string) string {
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	if i := strings.IndexByte(name, '.'); i > 0 {
		name = name[:i]
	}
	if name == "" {
		return "req"
	}
	return name
}

// eachCSVRecord reads records until EOF, checking ctx every 1024 records,
// and hands each to fn with its line number. A malformed record is
// rejected with the parser's reason (never the text) and counted in st; a
// read error or an error from fn stops the loop.
func eachCSVRecord(ctx context.Context, cr csvSource, opts Options, sink Sink, st *Stats, fn func(rec []string, line int64) error) error {
	for n := 0; ; n++ {
		if n&1023 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		rec, err := cr.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				if err := st.reject(sink, opts.Name, int64(pe.Line), "malformed CSV: "+pe.Err.Error()); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("%s: read CSV: %w", opts.Name, err)
		}
		line, _ := cr.FieldPos(0) // only valid for a record Read returned
		if err := fn(rec, int64(line)); err != nil {
			return err
		}
	}
}

// csvColumns reads a CSV header and maps each column name, lower-cased with
// its byte-order mark dropped and runs of spaces collapsed ("Request  tokens"
// → "request tokens"), to its index. It returns the header too (a copy, safe
// from a reader that reuses records), for error messages.
func csvColumns(cr csvSource, name string) ([]string, map[string]int, error) {
	header, err := cr.Read()
	if err != nil {
		return nil, nil, fmt.Errorf("%s line 1: read CSV header: %w", name, err)
	}
	header = slices.Clone(header)
	col := make(map[string]int, len(header))
	for i, h := range header {
		col[strings.ToLower(strings.Join(strings.Fields(strings.TrimPrefix(h, "\ufeff")), " "))] = i
	}
	return header, col, nil
}
