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

// FormatOpenAILog is a JSONL log of OpenAI-style requests and responses
// (a gateway's or a server's), read through a Mapping.
const FormatOpenAILog = "openai-log"

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
	expiry   []sessionExpiry
	latestUs int64
	// csv is set for CSV input, where every value is text.
	csv bool
}

// newLogReader fills in the log options' defaults and returns a reader for
// one source, with the Stats its rows are counted in.
func newLogReader(opts Options, csv bool) (*logReader, Stats, error) {
	lo := opts.Log
	if err := lo.defaults(); err != nil {
		return nil, Stats{}, err
	}
	lr := &logReader{opts: opts, lo: lo, sessions: map[sessionKey]*sessionState{}, csv: csv}
	st := Stats{BlockSize: lo.BlockSize, PrefixSalted: true, Tokenizer: lo.Tokenizer.Name(), Salt: lo.Salt}
	return lr, st, nil
}

func readOpenAILog(ctx context.Context, br *bufio.Reader, opts Options, sink Sink) (Stats, error) {
	lr, st, err := newLogReader(opts, false)
	if err != nil {
		return Stats{}, err
	}
	err = prepareLines(ctx, br, lr, func(l logLine) error {
		var req trace.Request
		err := l.err
		if err == nil {
			req, err = lr.finish(l.p)
		}
		return lr.settle(&st, sink, l.lineNo, req, err)
	})
	return st, err
}

// settle writes a converted row to the sink, or rejects its line when the
// row is bad (a rowError, or a line too long to read); any other error
// stops the read.
func (lr *logReader) settle(st *Stats, sink Sink, line int64, req trace.Request, err error) error {
	var re *rowError
	switch {
	case err == nil:
		return st.accept(sink, lr.opts.Name, line, req)
	case errors.As(err, &re):
		return st.reject(sink, lr.opts.Name, line, re.Error())
	case errors.Is(err, errLineTooLong):
		return st.reject(sink, lr.opts.Name, line, err.Error())
	}
	return fmt.Errorf("%s line %d: %w", lr.opts.Name, line, err)
}

// prepareLine decodes a JSON line and prepares it (safe to run in parallel).
func (lr *logReader) prepareLine(line []byte, lineNo int64) (prepared, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var rec map[string]any
	if err := dec.Decode(&rec); err != nil {
		return prepared{}, bad("", "malformed JSON: %s", jsonReason(err))
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

// finish checks the row's order and links its session, in input order.
func (lr *logReader) finish(p prepared) (trace.Request, error) {
	req := p.req
	if req.TS < lr.latestUs-lr.lo.MaxDisorder.Microseconds() {
		return req, bad("ts", "%s earlier than a row before it (more than the disorder allowed)", time.Duration(lr.latestUs-req.TS)*time.Microsecond)
	}
	lr.latestUs = max(lr.latestUs, req.TS)
	switch {
	case p.logged:
		lr.linkLogged(&req, p.endUs)
	case len(p.prefix) > 1:
		lr.linkByPrefix(&req, p.prefix, p.withReply, p.endUs)
	}
	return req, nil
}
