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

// logBatchLines is how many lines a worker prepares at a time.
const logBatchLines = 128

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
}

// prepareLines reads records (src: one per line, or whole JSON documents),
// prepares them on every core (JSON decoding and tokenizing dominate), and
// hands them to emit in input order, so session linking and the order
// check stay sequential. Memory is bounded by the batches in flight.
func prepareLines(ctx context.Context, src recordSource, lr *logReader, emit func(logLine) error) error {
	workers := max(1, runtime.GOMAXPROCS(0))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	todo := make(chan logBatch, workers)
	done := make(chan logBatch, workers)
	readErr := make(chan error, 1)
	go func() {
		defer close(todo)
		if err := readBatches(ctx, src, lr.opts.Name, todo); err != nil {
			readErr <- err
		}
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { lr.prepareBatches(ctx, todo, done) })
	}
	go func() { wg.Wait(); close(done) }()
	if err := emitInOrder(ctx, done, emit); err != nil {
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

// readBatches cuts the input into batches of logBatchLines records and
// sends them on todo, until the end of the input, a read error or ctx
// ends. A record to reject travels with its error, to be rejected in order.
func readBatches(ctx context.Context, src recordSource, name string, todo chan<- logBatch) error {
	b := logBatch{}
	send := func() bool {
		select {
		case todo <- b:
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
			return fmt.Errorf("%s line %d: %w", name, lineNo, err)
		}
		b.lines = append(b.lines, logLine{lineNo: lineNo, raw: bytes.Clone(rec), err: err})
		if len(b.lines) == logBatchLines {
			if !send() {
				return nil
			}
			b = logBatch{seq: b.seq + 1}
		}
	}
	if len(b.lines) > 0 {
		send()
	}
	return nil
}

// prepareBatches prepares each line of each batch from todo (dropping its
// raw bytes) and passes the batch on to done, until todo closes or ctx
// ends.
func (lr *logReader) prepareBatches(ctx context.Context, todo <-chan logBatch, done chan<- logBatch) {
	for b := range todo {
		for i := range b.lines {
			l := &b.lines[i]
			if l.err == nil {
				l.p, l.err = lr.prepareLine(l.raw, l.lineNo)
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
// order, holding any batch that arrives early. It returns emit's first
// error, or nil when done closes or ctx ends.
func emitInOrder(ctx context.Context, done <-chan logBatch, emit func(logLine) error) error {
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
		}
		if next&7 == 0 && ctx.Err() != nil {
			return nil
		}
	}
	return nil
}
