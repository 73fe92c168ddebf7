package datasets

import (
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Progress is how far a conversion is in one input, reported while it is
// read (ConvertOptions.Progress).
type Progress struct {
	// Input is the input's name; Stage is "converting", or "counting
	// tenants" in the first pass of MinTenantRequests.
	Input, Stage string
	// Read is the bytes of the input read so far, as stored (compressed
	// where it is); Size is its size, or -1 where it is not known.
	Read, Size int64
	// Rows and Rejects are the input's so far.
	Rows, Rejects int64
}

// defaultProgressEvery is how often a conversion reports its progress
// where ConvertOptions.ProgressEvery is not set.
const defaultProgressEvery = 10 * time.Second

// progressReport is how convertOne reports; fn nil: not at all.
type progressReport struct {
	fn    func(Progress)
	every time.Duration
	stage string
	open  func(io.Reader) io.Reader // tests
}

// countingReader counts the bytes read through it, for reports made on
// another goroutine.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n.Add(int64(k))
	return k, err
}

// watch reports an input's progress every pr.every, from its own
// goroutine, until the returned func is called: a long input says how
// far it is, without the readers knowing.
func (pr progressReport) watch(input string, size int64, read *countingReader, cs *countingSink) (stop func()) {
	if pr.fn == nil {
		return func() {}
	}
	every := pr.every
	if every <= 0 {
		every = defaultProgressEvery
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				pr.fn(Progress{Input: input, Stage: pr.stage, Read: read.n.Load(), Size: size, Rows: cs.rows.Load(), Rejects: cs.rejects.Load()})
			}
		}
	})
	return func() { close(quit); wg.Wait() }
}
