// Package peer reads other load tools' result files — vLLM bench serve,
// SGLang bench_serving, AIPerf, GenAI-Perf, guidellm, LLMPerf — into one
// neutral shape, so analysis gives their runs the same metrics and
// intervals as a servetrace run. Formats are told apart by content, never
// by file name; a file of a known tool in a shape this package cannot use
// is named as that tool's.
package peer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Run is one benchmark run as a peer tool recorded it.
type Run struct {
	// Tool names the tool and, where the file says, its version.
	Tool string
	// Source is the file, with ":N" for line N of a file holding one run
	// per line or "[N]" for element N of an array.
	Source string
	// ID labels the run: the tool's short name and the file's base name.
	ID             string
	Model, Backend string
	// Requests are the per-request records; nil for a summary-only file.
	Requests []Request
	// SendTimes says how Requests' Sent was known; NoTiming that the file
	// keeps neither send times nor a duration, so no rate follows from it.
	SendTimes SendTimes
	NoTiming  bool
	// DurationS is the tool's own benchmark duration in seconds, 0 when the
	// file gives none; Completed its count of successful requests, -1 when
	// not given. Peer tools count throughput as completed / duration.
	DurationS float64
	Completed int64
	// OfferedRate is the request rate asked for (req/s), 0 when unknown or
	// unlimited; AllAtOnce marks an unlimited rate (vLLM's "inf").
	OfferedRate float64
	AllAtOnce   bool
	// MaxConcurrency is the tool's concurrency limit, 0 when none.
	MaxConcurrency int
	// Figures are the file's own aggregate figures, as given.
	Figures []Figure
	// Notes are what a reader of the analysis must know about this file.
	Notes []string
	// Remedy says, for a summary-only run, where its per-request data
	// would come from.
	Remedy string
}

// SendTimes says where a run's send times came from.
type SendTimes int

const (
	// SentRecorded: the file records each request's send time.
	SentRecorded SendTimes = iota
	// SentAllAtOnce: no send times, and every request was sent at once.
	SentAllAtOnce
	// SentSpread: no send times; sends are spread evenly over the
	// duration in file order.
	SentSpread
	// SentByConcurrency: no send times, every request sent at once under
	// a concurrency cap; each starts when a slot frees, in file order.
	SentByConcurrency
)

// Figure is one aggregate a peer tool computed, under the tool's own name
// ("mean_ttft_ms", "request_throughput") and unit.
type Figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit,omitempty"`
}

// Request is one request of a peer run. Times are nanoseconds; Sent is
// relative to the run's first send. Unknown values are -1.
type Request struct {
	SentNs int64
	// OK is false for a failed request, whose Error says why when the
	// tool recorded it.
	OK    bool
	Error string
	// TTFTNs is the time to first token; GapsNs the gaps between
	// successive token events after it (vLLM's itls).
	TTFTNs int64
	GapsNs []int64
	// E2ENs is the request's latency as the tool measured it, -1 when it
	// recorded none (then it is TTFT plus the gaps).
	E2ENs        int64
	InputTokens  int64
	OutputTokens int64
	// Streamed is false for a request served without streaming (no TTFT).
	Streamed bool
	// Status is the HTTP status where the tool recorded one, else 0.
	Status int
	// Cancelled marks a request the tool cancelled; Warmup one it sent
	// before measuring.
	Cancelled, Warmup bool
}

// ErrNotPeer is wrapped by Read's error for a file no peer format matches.
var ErrNotPeer = errors.New("not a result file of a supported load tool")

// maxFileBytes bounds a result file read whole: a detailed run of a
// million requests is a few hundred MB.
const maxFileBytes = 4 << 30

// format reads one parsed document (an object) of a tool's, or says it is
// not this format.
type format struct {
	tool string
	// match reports whether an object's keys are this format's.
	match func(keys map[string]json.RawMessage) bool
	// read converts one matched object into runs.
	read func(obj map[string]json.RawMessage, src string) ([]Run, error)
}

// formats are tried in order; the first whose match holds reads.
var formats = []format{}

// register adds a format; each format file calls it from init so the
// order of detection is stated in one place (detectOrder).
func register(f format) { formats = append(formats, f) }

// IsResultFile reports whether path is a file (not a directory) that
// Read should try: servetrace runs are directories, peer results files.
func IsResultFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// Read reads every run in a peer tool's result file: a JSON document, a
// JSON array of documents (a sweep summary), or JSON lines (one run or
// one record per line, as SGLang and AIPerf write).
func Read(path string) ([]Run, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read result file: %w", err)
	}
	if st.Size() > maxFileBytes {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d a result file may have", path, st.Size(), int64(maxFileBytes))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read result file: %w", err)
	}
	return readBytes(b, path)
}

// readBytes is Read on a file's content.
func readBytes(b []byte, path string) ([]Run, error) {
	t := sanitizePython(bytes.TrimLeft(b, " \t\r\n\ufeff"))
	if len(t) == 0 {
		return nil, fmt.Errorf("%s: empty file: %w", path, ErrNotPeer)
	}
	switch t[0] {
	case '[':
		var docs []json.RawMessage
		if err := json.Unmarshal(t, &docs); err != nil {
			return nil, fmt.Errorf("%s: a JSON array that does not parse (%v): truncated? (%w)", path, err, ErrNotPeer)
		}
		if runs, ok, err := readRecords(docs, path); ok || err != nil {
			return runs, err
		}
		var runs []Run
		for i, d := range docs {
			r, err := readDoc(d, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			runs = append(runs, r...)
		}
		if len(runs) == 0 {
			return nil, fmt.Errorf("%s: an empty JSON array: %w", path, ErrNotPeer)
		}
		return runs, nil
	case '{':
		var one json.RawMessage
		if err := json.Unmarshal(t, &one); err == nil {
			if runs, ok, err := readRecords([]json.RawMessage{one}, path); ok || err != nil {
				return runs, err
			}
			return readDoc(one, path)
		}
		return readLines(t, path)
	}
	return nil, fmt.Errorf("%s: not JSON (starts with %q): %w", path, firstBytes(t), ErrNotPeer)
}

// readLines reads JSON lines: records of one run (AIPerf's per-record
// export) or one run per line (SGLang).
func readLines(b []byte, path string) ([]Run, error) {
	var docs []json.RawMessage
	for i, line := range bytes.Split(b, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if !json.Valid(line) {
			return nil, fmt.Errorf("%s:%d: not a JSON document and not JSON lines: the line does not parse (truncated?): %w", path, i+1, ErrNotPeer)
		}
		docs = append(docs, line)
	}
	if runs, ok, err := readRecords(docs, path); ok || err != nil {
		return runs, err
	}
	var runs []Run
	for i, d := range docs {
		r, err := readDoc(d, fmt.Sprintf("%s:%d", path, i+1))
		if err != nil {
			return nil, err
		}
		runs = append(runs, r...)
	}
	return runs, nil
}

// readDoc reads one JSON object by the first format whose keys match.
func readDoc(d json.RawMessage, src string) ([]Run, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(d, &obj); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object: %w", src, ErrNotPeer)
	}
	for _, u := range unsupported {
		if u.match(obj) {
			return nil, fmt.Errorf("%s: %s: %w; %s", src, u.what, ErrNotPeer, u.instead)
		}
	}
	for _, f := range formats {
		if f.match(obj) {
			runs, err := f.read(obj, src)
			if err != nil {
				return nil, fmt.Errorf("%s: %s result: %w", src, f.tool, err)
			}
			return runs, nil
		}
	}
	return nil, fmt.Errorf("%s: a JSON object with keys %s: %w (%s)", src, keyList(obj, 8), ErrNotPeer, Tools)
}

// unsupported are files of known tools in shapes that hold no run: each
// is named, with the file to give instead.
var unsupported = []struct {
	what, instead string
	match         func(obj map[string]json.RawMessage) bool
}{
	{"an AIPerf timeslice export", "give profile_export.jsonl (per request) or profile_export_aiperf.json (summary) from the same artifact directory",
		func(o map[string]json.RawMessage) bool { return has(o, "timeslices", "input_config") }},
	{"a vLLM PyTorch benchmark-database record (*.pytorch.json)", "give the result JSON vllm bench serve wrote beside it",
		func(o map[string]json.RawMessage) bool { return has(o, "benchmark", "model", "metric") }},
	{"a vLLM sweep failure record", "the run failed and recorded no results; give the run=N.json files that succeeded",
		func(o map[string]json.RawMessage) bool { return has(o, "run_number", "error_type", "error") }},
	{"a GenAI-Perf telemetry export", "give profile_export.json (per request) or profile_export_genai_perf.json (summary)",
		func(o map[string]json.RawMessage) bool {
			return has(o, "telemetry_stats") && !has(o, "request_throughput")
		}},
}

// recordFormat reads a file whose lines or array elements are the
// records of one run (AIPerf's JSONL, LLMPerf's individual responses).
type recordFormat struct {
	tool  string
	match func(first map[string]json.RawMessage) bool
	read  func(docs []json.RawMessage, src string) (Run, error)
}

var recordFormats []recordFormat

func registerRecords(f recordFormat) { recordFormats = append(recordFormats, f) }

// readRecords reads documents (array elements or lines) that are the
// per-request records of one run; ok is false when the first is no
// record format's.
func readRecords(docs []json.RawMessage, path string) ([]Run, bool, error) {
	if len(docs) == 0 {
		return nil, false, nil
	}
	var first map[string]json.RawMessage
	if json.Unmarshal(docs[0], &first) != nil {
		return nil, false, nil
	}
	for _, f := range recordFormats {
		if f.match(first) {
			r, err := f.read(docs, path)
			if err != nil {
				return nil, true, fmt.Errorf("%s: %s records: %w", path, f.tool, err)
			}
			return []Run{r}, true, nil
		}
	}
	return nil, false, nil
}

// has reports whether obj has every key.
func has(obj map[string]json.RawMessage, keys ...string) bool {
	for _, k := range keys {
		if _, ok := obj[k]; !ok {
			return false
		}
	}
	return true
}

// hasAny reports whether obj has one of keys.
func hasAny(obj map[string]json.RawMessage, keys ...string) bool {
	for _, k := range keys {
		if _, ok := obj[k]; ok {
			return true
		}
	}
	return false
}

// keyList names up to n of obj's keys, sorted, for an error message.
func keyList(obj map[string]json.RawMessage, n int) string {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	more := ""
	if len(keys) > n {
		keys, more = keys[:n], fmt.Sprintf(", … (%d in all)", len(obj))
	}
	return strings.Join(keys, ", ") + more
}

func firstBytes(b []byte) string {
	if len(b) > 16 {
		b = b[:16]
	}
	return string(b)
}

// runID is a run's label: the tool's short name and the source's path
// without its extension, keeping a line or element suffix. The path, not
// only the base name, since every run of a sweep is a run=0.json: by base
// name alone, repeats at different rates pooled as shards of one run.
func runID(short, src string) string {
	path, suffix := src, ""
	if i := strings.LastIndexAny(src, ":["); i > len(filepath.Dir(src)) {
		path, suffix = src[:i], src[i:]
	}
	return short + ":" + strings.TrimSuffix(filepath.ToSlash(filepath.Clean(path)), filepath.Ext(path)) + suffix
}

// Figure returns the run's figure of that name, as the tool gave it.
func (r Run) Figure(name string) (float64, bool) {
	for _, f := range r.Figures {
		if f.Name == name {
			return f.Value, true
		}
	}
	return 0, false
}

// Failed counts the run's failed requests.
func (r Run) Failed() int {
	k := 0
	for _, q := range r.Requests {
		if !q.OK {
			k++
		}
	}
	return k
}

// ToolKey is the short name of the run's tool ("vllm", "aiperf"), the
// same for every version.
func (r Run) ToolKey() string {
	k, _, _ := strings.Cut(r.ID, ":")
	return k
}

// pythonNonFinite maps the bare tokens Python's json module writes for
// non-finite floats, which JSON has no room for, to what parses: NaN to
// null, the infinities to the strings a request rate of "inf" uses.
var pythonNonFinite = []struct{ token, with string }{{"-Infinity", `"-inf"`}, {"Infinity", `"inf"`}, {"NaN", "null"}}

// sanitizePython replaces bare NaN, Infinity and -Infinity outside
// strings, so the files Python's json.dump writes (a standard deviation
// of one request is NaN) parse.
func sanitizePython(b []byte) []byte {
	if !bytes.Contains(b, []byte("NaN")) && !bytes.Contains(b, []byte("Infinity")) {
		return b
	}
	out := make([]byte, 0, len(b))
	inString, escaped := false, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			out = append(out, c)
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		if c == '"' {
			inString = true
			out = append(out, c)
			continue
		}
		replaced := false
		for _, tok := range pythonNonFinite {
			if bytes.HasPrefix(b[i:], []byte(tok.token)) {
				out = append(out, tok.with...)
				i += len(tok.token) - 1
				replaced = true
				break
			}
		}
		if !replaced {
			out = append(out, c)
		}
	}
	return out
}

// anyInt is an integer written as a number or, by json.dump's
// default=str, as a string.
type anyInt int64

func (a *anyInt) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "null" {
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("not a number: %s", b)
	}
	*a = anyInt(math.Round(f))
	return nil
}

// Tools names the tools whose result files Read reads, for messages.
const Tools = "vLLM bench serve, SGLang bench_serving, AIPerf, GenAI-Perf, guidellm or LLMPerf"
