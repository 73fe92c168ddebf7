package datasets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
)

// A batch of lines, the unit of parallel work, closes at logBatchLines
// lines or before its bytes pass logBatchBytes, whichever comes first; a
// line longer than logBatchBytes (up to MaxLineBytes) is a batch of its
// own. Few lines a batch would starve the workers of long runs; a bound
// on lines alone would let 128 hostile lines of 16 MiB each make one batch.
const (
	logBatchLines = 128
	logBatchBytes = 8 << 20
)

// logLine is one input line, prepared (or failed) by a worker.
type logLine struct {
	lineNo int64
	raw    []byte
	p      prepared
	err    error
}

// logBatch is a run of consecutive lines, the unit of parallel work.
type logBatch struct {
	seq   int
	lines []logLine
	bytes int // of the lines' raw bytes
}

// prepareLines reads records (src: one per line, or whole JSON documents),
// prepares them on every core (JSON decoding and tokenizing dominate), and
// hands them to emit in input order, so session linking and the order
// check stay sequential.
func prepareLines(ctx context.Context, src recordSource, lr *logReader, emit func(logLine) error) error {
	return linePipeline{name: lr.opts.Name, workers: max(1, runtime.GOMAXPROCS(0)), prepare: lr.prepareLine}.run(ctx, src, emit)
}

// linePipeline is prepareLines' machinery: how many workers, and what
// each does to a line.
type linePipeline struct {
	name    string
	workers int
	prepare func(raw []byte, lineNo int64) (prepared, error)
	// full, when set, is called each time the reader waits for the
	// emitter to make room (tests).
	full func()
}

// run reads, prepares and emits. A batch holds one of 2×workers+1 slots
// from when the reader starts it until its lines are emitted, so however
// long one batch takes, the others prepared meanwhile wait for it in no
// more than those slots: the bytes in flight are at most 2×workers+1
// times the larger of logBatchBytes and the longest line.
func (p linePipeline) run(ctx context.Context, src recordSource, emit func(logLine) error) error {
	workers := p.workers
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	todo := make(chan logBatch, workers)
	done := make(chan logBatch, workers)
	slots := make(chan struct{}, 2*workers+1)
	readErr := make(chan error, 1)
	go func() {
		defer close(todo)
		if err := p.readBatches(ctx, src, slots, todo); err != nil {
			readErr <- err
		}
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { prepareBatches(ctx, p.prepare, todo, done) })
	}
	go func() { wg.Wait(); close(done) }()
	if err := emitInOrder(ctx, done, slots, emit); err != nil {
		cancel()
		for range done { // let the workers finish
		}
		return err
	}
	select {
	case err := <-readErr:
		return err
	default:
	}
	return ctx.Err()
}

// recordSource yields a log's records with the line each starts on: io.EOF
// at the end; errLineTooLong or a rowError for a record to reject in its
// place; any other error stops the read. The bytes are valid until the
// next call.
type recordSource interface {
	next() (rec []byte, lineNo int64, err error)
}

// lineRecords is a JSONL log's records: its non-blank lines.
type lineRecords struct {
	lines lineReader
	n     int64
}

func (l *lineRecords) next() ([]byte, int64, error) {
	for {
		line, err := l.lines.next()
		if err == io.EOF {
			return nil, l.n, err
		}
		l.n++
		if err != nil {
			return nil, l.n, err
		}
		if line = bytes.TrimSpace(line); len(line) > 0 {
			return line, l.n, nil
		}
	}
}

// recordError reports whether err rejects one record rather than stopping
// the read.
func recordError(err error) bool {
	var re *rowError
	return errors.Is(err, errLineTooLong) || errors.As(err, &re)
}

// readBatches cuts the input into batches (logBatchLines, logBatchBytes)
// and sends them on todo, taking a slot for each before it starts it,
// until the end of the input, a read error or ctx ends. A record to
// reject travels with its error, to be rejected in order.
func (p linePipeline) readBatches(ctx context.Context, src recordSource, slots chan struct{}, todo chan<- logBatch) error {
	b := logBatch{}
	open := false // b holds a slot
	take := func() bool {
		select {
		case slots <- struct{}{}:
			return true
		default:
		}
		if p.full != nil {
			p.full()
		}
		select {
		case slots <- struct{}{}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	send := func() bool {
		select {
		case todo <- b:
			b, open = logBatch{seq: b.seq + 1}, false
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		rec, lineNo, err := src.next()
		if err == io.EOF {
			break
		}
		if err != nil && !recordError(err) {
			return fmt.Errorf("%s line %d: %w", p.name, lineNo, err)
		}
		if open && b.bytes+len(rec) > logBatchBytes && !send() {
			return nil
		}
		if !open {
			if !take() {
				return nil
			}
			open = true
		}
		b.lines = append(b.lines, logLine{lineNo: lineNo, raw: bytes.Clone(rec), err: err})
		b.bytes += len(rec)
		if len(b.lines) == logBatchLines && !send() {
			return nil
		}
	}
	if open {
		send()
	}
	return nil
}

// prepareBatches prepares each line of each batch from todo (dropping its
// raw bytes) and passes the batch on to done, until todo closes or ctx
// ends.
func prepareBatches(ctx context.Context, prepare func([]byte, int64) (prepared, error), todo <-chan logBatch, done chan<- logBatch) {
	for b := range todo {
		for i := range b.lines {
			l := &b.lines[i]
			if l.err == nil {
				l.p, l.err = prepare(l.raw, l.lineNo)
			}
			l.raw = nil
		}
		select {
		case done <- b:
		case <-ctx.Done():
			return
		}
	}
}

// emitInOrder hands the lines of the batches from done to emit in input
// order, holding any batch that arrives early, and frees each batch's
// slot once its lines are emitted. It returns emit's first error, or nil
// when done closes or ctx ends.
func emitInOrder(ctx context.Context, done <-chan logBatch, slots <-chan struct{}, emit func(logLine) error) error {
	pending := map[int]logBatch{}
	next := 0
	for b := range done {
		pending[b.seq] = b
		for {
			nb, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			next++
			for _, l := range nb.lines {
				if err := emit(l); err != nil {
					return err
				}
			}
			<-slots
		}
		if next&7 == 0 && ctx.Err() != nil {
			return nil
		}
	}
	return nil
}
