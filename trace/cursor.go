package trace

import (
	"context"
	"fmt"
	"time"
)

// cursorBatchRows and cursorLookahead size a cursor's read-ahead: batches
// of rows decoded and checked ahead of the merge, so decoding one part runs
// on its own goroutine beside whatever the scan's caller does with the rows.
// A part holds about cursorLookahead+2 batches and its decoder's buffers
// (about 2 MB in all), which matters where many parts overlap in time and
// are open together.
const (
	cursorBatchRows = 512
	cursorLookahead = 2
)

// rowBatch is rows[:n] of a part, checked, and the error that ended the
// part after them (io.EOF at its end), if any.
type rowBatch struct {
	rows []Request
	n    int
	err  error
}

// cursor is the merge's view of one open part: its current row, from
// batches a producer goroutine decodes and checks ahead. The producer owns
// the part file and closes it as it ends.
type cursor struct {
	// ctx ends a wait for the producer's next batch.
	ctx   context.Context
	row   *Request
	order int
	// For errors: the bucket, the part's manifest path and the rows the
	// merge has taken from it.
	dir, path string
	n         int64

	batch   *rowBatch
	pos     int
	batches chan *rowBatch
	free    chan *rowBatch
	stop    chan struct{}
	done    chan struct{}
}

// startCursor starts decoding part (part i of the bucket at dir, at path in
// its manifest); the cursor has no row until its first advance. Once ctx
// ends, advance returns its error rather than wait for a batch.
func startCursor(ctx context.Context, part *partFile[Request], i int, dir, path string) *cursor {
	c := &cursor{ctx: ctx, order: i, dir: dir, path: path,
		batches: make(chan *rowBatch, cursorLookahead), free: make(chan *rowBatch, cursorLookahead+2),
		stop: make(chan struct{}), done: make(chan struct{})}
	part.stop = c.stop
	go c.produce(part)
	return c
}

// produce decodes the part into batches and checks every row: it
// validates (Request.Validate) and its time is not before the row above it
// (parts are written sorted and the merge relies on it). A batch ends at
// the first bad row, carrying the error that names it.
func (c *cursor) produce(part *partFile[Request]) {
	defer close(c.done)
	defer part.close()
	var row int64
	lastTS := int64(0)
	for {
		var b *rowBatch
		select {
		case b = <-c.free:
		default:
			b = &rowBatch{rows: make([]Request, cursorBatchRows)}
		}
		n, err := part.read(b.rows)
		b.n, b.err = n, err
		for i := range n {
			r := &b.rows[i]
			row++
			if err := r.Validate(); err != nil {
				b.n, b.err = i, fmt.Errorf("trace %s: part %s row %d: %w", c.dir, c.path, row, err)
				break
			}
			if row > 1 && r.TS < lastTS {
				b.n, b.err = i, fmt.Errorf("trace %s: part %s row %d: ts %s is before the row above it (%s): a part must be sorted by ts; convert or generate it again", c.dir, c.path, row,
					time.UnixMicro(r.TS).UTC().Format(time.RFC3339Nano), time.UnixMicro(lastTS).UTC().Format(time.RFC3339Nano))
				break
			}
			lastTS = r.TS
		}
		select {
		case c.batches <- b:
		case <-c.stop:
			return
		}
		if b.err != nil {
			return
		}
	}
}

// advance moves to the part's next checked row; io.EOF after the last,
// the context's error if it ends while the next batch is awaited.
func (c *cursor) advance() error {
	for c.batch == nil || c.pos >= c.batch.n {
		if c.batch != nil {
			if c.batch.err != nil {
				return c.batch.err
			}
			// The merge is past every row of the batch: the producer
			// may decode into it again.
			select {
			case c.free <- c.batch:
			default:
			}
			c.batch = nil
		}
		select {
		case c.batch = <-c.batches:
			c.pos = 0
		case <-c.ctx.Done():
			return c.ctx.Err()
		}
	}
	c.row = &c.batch.rows[c.pos]
	c.pos++
	c.n++
	return nil
}

// close stops the producer and waits until it has closed the part.
func (c *cursor) close() {
	close(c.stop)
	<-c.done
}

type cursorHeap []*cursor

func (h cursorHeap) Len() int { return len(h) }
func (h cursorHeap) Less(i, j int) bool {
	if h[i].row.TS != h[j].row.TS {
		return h[i].row.TS < h[j].row.TS
	}
	return h[i].order < h[j].order
}
func (h cursorHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *cursorHeap) Push(x any)   { *h = append(*h, x.(*cursor)) }
func (h *cursorHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}
