package datasets

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// FormatOpenAILog is a log of OpenAI-style requests and responses (a
// gateway's or a server's), read through a Mapping: JSONL, or whole JSON
// documents over many lines (pretty-printed, one after another, or in an
// array).
const FormatOpenAILog = "openai-log"

// FormatOpenAIBatch is an OpenAI Batch API output file, read as a log
// through the openai-batch mapping unless another is given; the request
// side comes from the batch input (LogOptions.BatchInput).
const FormatOpenAIBatch = "openai-batch"

// rowError is a reason to reject one log line: the field and what is wrong,
// never the value.
type rowError struct{ field, reason string }

func (e *rowError) Error() string {
	if e.field == "" {
		return e.reason
	}
	return e.field + ": " + e.reason
}

func bad(field, format string, args ...any) error {
	return &rowError{field, fmt.Sprintf(format, args...)}
}

// logReader converts one log source: rows are prepared independently
// (prepare.go), then finished in input order, which checks their order and
// links their sessions (logsessions.go).
type logReader struct {
	opts     Options
	lo       LogOptions
	sessions map[sessionKey]*sessionState
	expiry   expiryHeap
	latestUs int64
	// csv is set for CSV input, where every value is text.
	csv bool
	// skips counts the lines skipped, by why.
	skips map[string]int64
	// media counts, over the rows converted, what could not be measured
	// of their images and audio.
	media mediaStats
	// decoding is what the records being decoded may hold at once.
	decoding *decodeBudget
	// maxSessions bounds the session entries held (maxSessionEntries);
	// forgotten counts those forgotten past it.
	maxSessions int
	forgotten   int64
}

// newLogReader fills in the log options' defaults and returns a reader for
// one source, with the Stats its rows are counted in.
func newLogReader(opts Options, csv bool) (*logReader, Stats, error) {
	lo := opts.Log
	if err := lo.defaults(); err != nil {
		return nil, Stats{}, err
	}
	lr := &logReader{opts: opts, lo: lo, sessions: map[sessionKey]*sessionState{}, csv: csv, skips: map[string]int64{}, decoding: newDecodeBudget(), maxSessions: maxSessionEntries}
	st := Stats{BlockSize: lo.BlockSize, PrefixSalted: true, Tokenizer: lo.Tokenizer.Name(), Salt: lo.Salt}
	return lr, st, nil
}

func readOpenAILog(ctx context.Context, br *bufio.Reader, opts Options, sink Sink) (Stats, error) {
	lr, st, err := newLogReader(opts, false)
	if err != nil {
		return Stats{}, err
	}
	src, err := jsonLogRecords(br)
	if err != nil {
		return Stats{}, fmt.Errorf("%s: %w", opts.Name, err)
	}
	err = prepareLines(ctx, src, lr, func(l logLine) error {
		var req trace.Request
		err := l.err
		if err == nil {
			req, err = lr.finish(l.p)
		}
		return lr.settle(&st, sink, l.lineNo, req, err)
	})
	st.Notes = append(st.Notes, lr.media.notes(opts.Name)...)
	st.Notes = append(st.Notes, lr.sessionNotes()...)
	if len(lr.skips) > 0 {
		var n int64
		for _, k := range lr.skips {
			n += k
		}
		st.Notes = append(st.Notes, fmt.Sprintf("%s: %d Batch API requests failed and are not in the trace (a batch records no arrival time for them): %s", opts.Name, n, ReasonsText(lr.skips)))
	}
	return st, err
}

// validRow checks a converted row against the record's ranges
// (trace.Request.Validate), as a rowError that rejects its line.
func validRow(req *trace.Request) error {
	if err := req.Validate(); err != nil {
		return &rowError{reason: err.Error()}
	}
	return nil
}

// skipped is a line that is no request to convert and no fault: counted
// by why in a manifest note.
type skipped struct{ why string }

func (s skipped) Error() string { return s.why }

// failedBatchRequest says why a Batch API output line is a request that
// failed (its error's code, or its response's status), or "" for one that
// succeeded. Such a line has no completion, so no time: it is no row, and
// no fault of the file either.
func failedBatchRequest(rec map[string]any) string {
	if e, ok := rec["error"].(map[string]any); ok {
		if code, ok := e["code"].(string); ok && code != "" {
			return code
		}
		return "error"
	}
	resp, _ := rec["response"].(map[string]any)
	if resp == nil {
		return "no response"
	}
	if n, ok := resp["status_code"].(json.Number); ok {
		if code, err := n.Int64(); err == nil && code >= 400 {
			return fmt.Sprintf("status %d", code)
		}
	}
	return ""
}

// jsonLogRecords chooses how to cut a JSON log into records: by lines
// when it is JSONL (its first line is a whole JSON document, or, where
// that line is corrupt, the next starts another object), so a corrupt line
// costs only itself; else by documents (jsonDocs), which reads records
// pretty-printed over many lines, one after another or in an array.
func jsonLogRecords(br *bufio.Reader) (recordSource, error) {
	head, complete, err := peekHead(br)
	if err != nil {
		return nil, err
	}
	bom := bytes.HasPrefix(head, []byte("\xef\xbb\xbf"))
	head = bytes.TrimPrefix(head, []byte("\xef\xbb\xbf"))
	var first, second []byte
	cut := false // the peek ended inside the first line
	for rest := head; len(rest) > 0 && second == nil; {
		line, after, found := bytes.Cut(rest, []byte("\n"))
		if !found && !complete {
			cut = first == nil
			break
		}
		if line = bytes.TrimSpace(line); len(line) > 0 {
			if first == nil {
				first = line
			} else {
				second = line
			}
		}
		rest = after
	}
	starts := bytes.TrimLeft(head, " \t\r\n")
	jsonl := len(first) > 0 && first[0] == '{' && (json.Valid(first) || len(second) > 0 && second[0] == '{') ||
		cut && len(starts) > 0 && starts[0] == '{' // a first line longer than the peek: JSONL, as it always was
	if jsonl {
		return &lineRecords{lines: lineReader{br: br}}, nil
	}
	if bom {
		br.Discard(3)
	}
	return newJSONDocs(br), nil
}

// settle writes a converted row to the sink, or rejects its line when the
// row is bad (a rowError, or a line too long to read); any other error
// stops the read.
func (lr *logReader) settle(st *Stats, sink Sink, line int64, req trace.Request, err error) error {
	var re *rowError
	switch {
	case err == nil:
		return st.accept(sink, lr.opts.Name, line, &req)
	case errors.As(err, &re):
		return st.reject(sink, lr.opts.Name, line, re.Error())
	case errors.Is(err, errLineTooLong):
		return st.reject(sink, lr.opts.Name, line, err.Error())
	case errors.As(err, new(skipped)):
		lr.skips[err.(skipped).why]++
		return nil
	}
	return fmt.Errorf("%s line %d: %w", lr.opts.Name, line, err)
}

// prepareLine decodes a JSON record, joins its batch input where there is
// one, and prepares it (safe to run in parallel), within its share of the
// decode budget: the line's tokens and the most a batch input line holds.
func (lr *logReader) prepareLine(line []byte, lineNo int64) (prepared, error) {
	tokens := jsonTokens(line)
	if bi := lr.lo.BatchInput; bi != nil {
		tokens += bi.maxTokens
	}
	release, err := lr.decoding.take(tokens)
	if err != nil {
		return prepared{}, err
	}
	defer release()
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var rec map[string]any
	if err := dec.Decode(&rec); err != nil {
		return prepared{}, bad("", "malformed JSON: %s", jsonReason(err))
	}
	if rec == nil {
		return prepared{}, bad("", "malformed JSON: null, not an object")
	}
	if lr.lo.skipFailedBatch {
		if why := failedBatchRequest(rec); why != "" {
			return prepared{}, skipped{why}
		}
	}
	if bi := lr.lo.BatchInput; bi != nil {
		if err := bi.join(rec); err != nil {
			return prepared{}, err
		}
	}
	return lr.prepare(rec, lineNo)
}

// convertRecord turns one decoded record into a request, or a rowError.
func (lr *logReader) convertRecord(rec map[string]any, lineNo int64) (trace.Request, error) {
	p, err := lr.prepare(rec, lineNo)
	if err != nil {
		return trace.Request{}, err
	}
	return lr.finish(p)
}

// finish checks the row and its order and links its session, in input
// order. A row that fails its check is rejected before it is ordered or
// linked, so it moves neither the order check nor the session table.
func (lr *logReader) finish(p prepared) (trace.Request, error) {
	req := p.req
	if !p.held && req.TS < lr.latestUs-lr.lo.MaxDisorder.Microseconds() {
		return req, bad("ts", "%s earlier than a row before it (more than the disorder allowed)", time.Duration(lr.latestUs-req.TS)*time.Microsecond)
	}
	if err := validRow(&req); err != nil {
		return req, err
	}
	lr.media.add(p.media)
	lr.latestUs = max(lr.latestUs, req.TS)
	switch {
	case p.logged:
		lr.linkLogged(&req, p.endUs)
	case len(p.prefix) > 1:
		lr.linkByPrefix(&req, &p)
	}
	return req, nil
}
