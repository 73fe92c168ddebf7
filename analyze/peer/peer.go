// Package peer reads other load tools' result files — vLLM bench serve,
// SGLang bench_serving, AIPerf, GenAI-Perf, guidellm, LLMPerf — into one
// neutral shape, so analysis gives their runs the same metrics and
// intervals as a servetrace run. Formats are told apart by content, never
// by file name; a file of a known tool in a shape this package cannot use
// is named as that tool's.
package peer

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/servetrace/servetrace/internal/regfile"
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
	// Records counts the run's per-request records, -1 for a summary-only
	// file; FailedRecords those that failed. Records left out for having
	// no valid send time are not counted.
	Records, FailedRecords int64
	// Requests are the per-request records as Read returns them, whole;
	// Open leaves them nil, and Each streams them.
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

	// records yields the run's requests, converted but not yet checked,
	// in file order, reading the file again each call; nil for a summary.
	// The request handed to fn is valid during the call only.
	records func(fn func(q *Request) error) error
	// sampled marks a tool that keeps a sample of its requests (guidellm),
	// so its completed count may pass its records; completedFromRecords a
	// file whose completed count, when absent, is its successful records.
	sampled, completedFromRecords bool
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
	// recorded none (then it is TTFT plus the gaps). EndUnknown marks a
	// latency the tool recorded but that was left out as out of range or
	// contradicted: the request's end is then not known.
	E2ENs        int64
	EndUnknown   bool
	InputTokens  int64
	OutputTokens int64
	// Streamed is false for a request served without streaming (no TTFT).
	Streamed bool
	// Status is the HTTP status where the tool recorded one, else 0.
	Status int
	// Cancelled marks a request the tool cancelled; Warmup one it sent
	// before measuring.
	Cancelled, Warmup bool
	// badSend says why SentNs is invalid, where the format can say more
	// than that it is.
	badSend string
}

// LastEventNs is the time of the request's last token event, or its
// latency where the tool recorded one, relative to its send.
func (q *Request) LastEventNs() int64 {
	if q.E2ENs >= 0 {
		return q.E2ENs
	}
	t := q.TTFTNs
	for _, g := range q.GapsNs {
		t += g
	}
	return t
}

// ErrNotPeer is wrapped by Read's error for a file no peer format matches.
var ErrNotPeer = errors.New("not a result file of a supported load tool")

// format reads one document (an object) of a tool's, or says it is not
// this format.
type format struct {
	tool string
	// match reports whether an object's keys are this format's.
	match func(o object) bool
	// read converts one matched object into runs.
	read func(o object) ([]Run, error)
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

// Open reads every run of a peer tool's result file (a JSON document, a
// JSON array of documents, or JSON lines) without holding its
// per-request records: each run's figures and settings, its records
// counted and checked once (what Records, FailedRecords and the notes
// say), to be streamed by Each. The file is read by byte ranges, so its
// size does not bound memory.
func Open(path string) ([]Run, error) {
	if err := regfile.Check(path); err != nil {
		return nil, fmt.Errorf("read result file: %w", err)
	}
	j := &jsonFile{path: path}
	runs, err := j.runs()
	if err != nil {
		return nil, err
	}
	for i := range runs {
		if err := runs[i].finish(); err != nil {
			return nil, runs[i].readError(err)
		}
	}
	return runs, nil
}

// readError names the run a failure to read its records came from.
func (r *Run) readError(err error) error {
	if strings.HasPrefix(err.Error(), r.Source) {
		return fmt.Errorf("%s records: %w", r.Tool, err)
	}
	return fmt.Errorf("%s: %s records: %w", r.Source, r.Tool, err)
}

// Detect tells the runs of a result file, as Open does, without reading
// their records: the runs' figures and settings, and whether each has
// per-request records (HasRecords), for choosing which files to read.
func Detect(path string) ([]Run, error) {
	if err := regfile.Check(path); err != nil {
		return nil, fmt.Errorf("read result file: %w", err)
	}
	return (&jsonFile{path: path}).runs()
}

// Read is Open with every run's records read into Requests, in send
// order (file order among equal sends): for small files and tests.
func Read(path string) ([]Run, error) {
	runs, err := Open(path)
	if err != nil {
		return nil, err
	}
	for i := range runs {
		r := &runs[i]
		if r.records == nil {
			continue
		}
		r.Requests = []Request{}
		err := r.Each(func(batch []Request) error {
			for _, q := range batch {
				q.GapsNs = slices.Clone(q.GapsNs)
				r.Requests = append(r.Requests, q)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		slices.SortStableFunc(r.Requests, func(a, b Request) int { return cmp.Compare(a.SentNs, b.SentNs) })
	}
	return runs, nil
}

// HasRecords reports whether the run holds per-request records (not a
// summary only).
func (r *Run) HasRecords() bool { return r.records != nil || r.Requests != nil }

// eachBatch is how many requests Each hands over at a time.
const eachBatch = 4096

// Each calls fn with the run's requests, each checked (what is out of
// range or contradicted is cleared, as Open counted), in file order and
// in batches; a batch and its requests' gaps are valid during the call
// only. It reads the file again each call.
func (r *Run) Each(fn func(batch []Request) error) error {
	if r.records == nil {
		if r.Requests != nil {
			return fn(r.Requests)
		}
		return nil
	}
	var t tally
	var record int64
	batch := make([]Request, 0, eachBatch)
	gaps := make([]int64, 0, 8*eachBatch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := fn(batch)
		batch, gaps = batch[:0], gaps[:0]
		return err
	}
	var fnErr error
	err := r.records(func(q *Request) error {
		record++
		if !t.check(q, record) {
			return nil
		}
		c := *q
		from := len(gaps)
		gaps = append(gaps, q.GapsNs...)
		c.GapsNs = gaps[from:len(gaps):len(gaps)]
		if len(q.GapsNs) == 0 {
			c.GapsNs = nil
		}
		batch = append(batch, c)
		if len(batch) == eachBatch {
			fnErr = flush()
			return fnErr
		}
		return nil
	})
	switch {
	case fnErr != nil:
		return fnErr
	case err != nil:
		return r.readError(err)
	}
	return flush()
}

// finish reads a run's records once: counts them, checks them and the
// run's own figures, and says in notes what was left out.
func (r *Run) finish() error {
	if r.records == nil {
		return nil
	}
	var t tally
	var m means
	var record, n, failed int64
	err := r.records(func(q *Request) error {
		record++
		if !t.check(q, record) {
			return nil
		}
		n++
		if !q.OK {
			failed++
		}
		m.add(q)
		return nil
	})
	if err != nil {
		return err
	}
	r.Records, r.FailedRecords = n, failed
	r.runChecks(n - failed)
	r.Notes = append(r.Notes, t.notes(r.Source)...)
	r.Notes = append(r.Notes, r.meanNotes(&m, &t)...)
	return nil
}

// runs reads the file's documents into runs: a file whose first document
// is a per-request record (AIPerf's JSON lines, LLMPerf's array) is one
// run of them all; otherwise each document is read by its format.
func (j *jsonFile) runs() ([]Run, error) {
	r, err := j.readerAt(0, 1)
	if err != nil {
		return nil, err
	}
	defer r.close()
	c, err := r.peek()
	if err == io.EOF {
		return nil, fmt.Errorf("%s: empty file: %w", j.path, ErrNotPeer)
	}
	if err != nil {
		return nil, fmt.Errorf("read result file: %w", err)
	}
	switch c {
	case '[':
		return j.arrayRuns(r)
	case '{':
		return j.objectRuns(r)
	}
	head, _ := r.br.Peek(16)
	return nil, fmt.Errorf("%s: not JSON (starts with %q): %w", j.path, head, ErrNotPeer)
}

// arrayRuns reads a JSON array of documents.
func (j *jsonFile) arrayRuns(r *reader) ([]Run, error) {
	cutErr := func(err error) error {
		return fmt.Errorf("%s: a JSON array that does not parse (%v): truncated? (%w)", j.path, err, ErrNotPeer)
	}
	if err := r.expect('['); err != nil {
		return nil, cutErr(err)
	}
	var runs []Run
	for i := 0; ; i++ {
		c, err := r.peek()
		if err != nil {
			return nil, cutErr(errCut)
		}
		if c == ']' {
			break
		}
		if i > 0 {
			if err := r.expect(','); err != nil {
				return nil, cutErr(err)
			}
			if c, err = r.peek(); err != nil {
				return nil, cutErr(errCut)
			}
		}
		src := fmt.Sprintf("%s[%d]", j.path, i)
		if c != '{' {
			return nil, fmt.Errorf("%s: not a JSON object: %w", src, ErrNotPeer)
		}
		o, err := r.scanObject(j, src)
		if err != nil {
			return nil, cutErr(err)
		}
		if i == 0 {
			if run, ok, err := j.recordRun(o, layoutArray); ok || err != nil {
				return []Run{run}, err
			}
		}
		rs, err := readDoc(o)
		if err != nil {
			return nil, err
		}
		runs = append(runs, rs...)
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("%s: an empty JSON array: %w", j.path, ErrNotPeer)
	}
	return runs, nil
}

// objectRuns reads one JSON document or JSON lines (one document a line).
func (j *jsonFile) objectRuns(r *reader) ([]Run, error) {
	first, err := r.scanObject(j, j.path)
	if err != nil {
		return nil, fmt.Errorf("%s:%d: not a JSON document and not JSON lines: %v: %w", j.path, r.line, err, ErrNotPeer)
	}
	next, err := r.peek()
	if err == io.EOF { // one document
		if run, ok, err := j.recordRun(first, layoutOne); ok || err != nil {
			return []Run{run}, err
		}
		return readDoc(first)
	}
	if err != nil {
		return nil, fmt.Errorf("read result file: %w", err)
	}
	// JSON lines: each document is named by its line.
	first.src = fmt.Sprintf("%s:%d", j.path, first.line)
	if next != '{' {
		return nil, fmt.Errorf("%s:%d: not a JSON document and not JSON lines: the line does not parse (truncated?): %w", j.path, r.line, ErrNotPeer)
	}
	if run, ok, err := j.recordRun(first, layoutLines); ok || err != nil {
		return []Run{run}, err
	}
	runs, err := readDoc(first)
	if err != nil {
		return nil, err
	}
	for {
		c, err := r.peek()
		if err == io.EOF {
			return runs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read result file: %w", err)
		}
		line := r.line
		if c != '{' {
			return nil, fmt.Errorf("%s:%d: not a JSON document and not JSON lines: the line does not parse (truncated?): %w", j.path, line, ErrNotPeer)
		}
		o, err := r.scanObject(j, fmt.Sprintf("%s:%d", j.path, line))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: not a JSON document and not JSON lines: the line does not parse (truncated?): %w", j.path, line, ErrNotPeer)
		}
		rs, err := readDoc(o)
		if err != nil {
			return nil, err
		}
		runs = append(runs, rs...)
	}
}

// readDoc reads one JSON object by the first format whose keys match.
func readDoc(o object) ([]Run, error) {
	for _, u := range unsupported {
		if u.match(o) {
			return nil, fmt.Errorf("%s: %s: %w; %s", o.src, u.what, ErrNotPeer, u.instead)
		}
	}
	for _, f := range formats {
		if f.match(o) {
			runs, err := f.read(o)
			if err != nil {
				return nil, fmt.Errorf("%s: %s result: %w", o.src, f.tool, err)
			}
			return runs, nil
		}
	}
	return nil, fmt.Errorf("%s: a JSON object with keys %s: %w (%s)", o.src, o.keyList(8), ErrNotPeer, Tools)
}

// unsupported are files of known tools in shapes that hold no run: each
// is named, with the file to give instead.
var unsupported = []struct {
	what, instead string
	match         func(o object) bool
}{
	{"an AIPerf timeslice export", "give profile_export.jsonl (per request) or profile_export_aiperf.json (summary) from the same artifact directory",
		func(o object) bool { return o.has("timeslices", "input_config") }},
	{"a vLLM PyTorch benchmark-database record (*.pytorch.json)", "give the result JSON vllm bench serve wrote beside it",
		func(o object) bool { return o.has("benchmark", "model", "metric") }},
	{"a vLLM sweep failure record", "the run failed and recorded no results; give the run=N.json files that succeeded",
		func(o object) bool { return o.has("run_number", "error_type", "error") }},
	{"a GenAI-Perf telemetry export", "give profile_export.json (per request) or profile_export_genai_perf.json (summary)",
		func(o object) bool { return o.has("telemetry_stats") && !o.has("request_throughput") }},
}

// recordFormat reads a file whose lines or array elements are the
// records of one run (AIPerf's JSONL, LLMPerf's individual responses).
type recordFormat struct {
	tool  string
	match func(first object) bool
	// read makes the run of the file's records, docs.
	read func(docs recordDocs, src string) (Run, error)
}

var recordFormats []recordFormat

func registerRecords(f recordFormat) { recordFormats = append(recordFormats, f) }

// layout is how a file holds its documents.
type layout int

const (
	layoutOne   layout = iota // one JSON document
	layoutLines               // JSON lines
	layoutArray               // a JSON array of documents
)

// recordDocs are the documents of a file of per-request records, read
// from the file each time.
type recordDocs struct {
	file   *jsonFile
	layout layout
}

// each calls fn with each document's bytes (valid during the call) and
// where it is, "FILE:LINE" or "element N", in file order.
func (d recordDocs) each(fn func(raw []byte, where string) error) error {
	r, err := d.file.readerAt(0, 1)
	if err != nil {
		return err
	}
	defer r.close()
	if d.layout == layoutArray {
		if err := r.expect('['); err != nil {
			return err
		}
	}
	for i := 0; ; i++ {
		c, err := r.peek()
		if err == io.EOF && d.layout != layoutArray {
			return nil
		}
		if err != nil {
			return errCut
		}
		if d.layout == layoutArray {
			if c == ']' {
				return nil
			}
			if i > 0 {
				if err := r.expect(','); err != nil {
					return err
				}
			}
		}
		where := fmt.Sprintf("element %d", i)
		if d.layout != layoutArray {
			where = fmt.Sprintf("%s:%d", d.file.path, r.line)
		}
		v, err := r.skipValue(maxElementBytes)
		if err != nil {
			if d.layout == layoutArray {
				return fmt.Errorf("%s: a JSON array that does not parse (%v): truncated? (%w)", d.file.path, err, ErrNotPeer)
			}
			return fmt.Errorf("%s: not a JSON document and not JSON lines: the line does not parse (%v): truncated? (%w)", where, err, ErrNotPeer)
		}
		if v.raw == nil {
			return fmt.Errorf("%s: a record of more than %d bytes", where, maxElementBytes)
		}
		if err := fn(v.raw, where); err != nil {
			return err
		}
		if d.layout == layoutOne {
			return nil
		}
	}
}

// recordRun reads the file as one run of per-request records when its
// first document is a record format's; ok is false when it is not.
func (j *jsonFile) recordRun(first object, l layout) (Run, bool, error) {
	for _, f := range recordFormats {
		if f.match(first) {
			r, err := f.read(recordDocs{file: j, layout: l}, j.path)
			if err != nil {
				return r, true, fmt.Errorf("%s: %s records: %w", j.path, f.tool, err)
			}
			return r, true, nil
		}
	}
	return Run{}, false, nil
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
	if r.Requests == nil {
		return int(r.FailedRecords)
	}
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

// UnmarshalJSON reads the integer; a value past ±2^53, or not finite, is
// invalid, for the checks to count.
func (a *anyInt) UnmarshalJSON(b []byte) error {
	f, present, err := parseNumber(b)
	if err != nil {
		return err
	}
	switch {
	case !present:
	case !(math.Abs(f) <= 1<<53):
		*a = invalid
	default:
		*a = anyInt(math.Round(f))
	}
	return nil
}

// Tools names the tools whose result files Read reads, for messages.
const Tools = "vLLM bench serve, SGLang bench_serving, AIPerf, GenAI-Perf, guidellm or LLMPerf"
