package datasets

import (
	"bufio"
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

// prepareLines reads lines, prepares them on every core (JSON decoding and
// tokenizing dominate), and hands them to emit in input order, so session
// linking and the order check stay sequential. Memory is bounded by the
// batches in flight.
func prepareLines(ctx context.Context, br *bufio.Reader, lr *logReader, emit func(logLine) error) error {
	workers := max(1, runtime.GOMAXPROCS(0))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	todo := make(chan logBatch, workers)
	done := make(chan logBatch, workers)
	readErr := make(chan error, 1)
	go func() {
		defer close(todo)
		if err := readBatches(ctx, br, lr.opts.Name, todo); err != nil {
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

// readBatches cuts the input into batches of logBatchLines non-blank lines
// and sends them on todo, until the end of the input, a read error or ctx
// ends. A line too long travels with its error, to be rejected in order.
func readBatches(ctx context.Context, br *bufio.Reader, name string, todo chan<- logBatch) error {
	lines := lineReader{br: br}
	b := logBatch{}
	send := func() bool {
		select {
		case todo <- b:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for lineNo := int64(1); ; lineNo++ {
		line, err := lines.next()
		if err == io.EOF {
			break
		}
		if err != nil && !errors.Is(err, errLineTooLong) {
			return fmt.Errorf("%s line %d: %w", name, lineNo, err)
		}
		line = bytes.TrimSpace(line)
		if err == nil && len(line) == 0 {
			continue
		}
		b.lines = append(b.lines, logLine{lineNo: lineNo, raw: bytes.Clone(line), err: err})
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
