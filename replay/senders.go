package replay

import (
	"sync"
	"sync/atomic"
)

// senders runs the open loop's sends, each on a goroutine kept for the
// run: an idle one takes the next send, else a new one starts. A goroutine
// started per send begins on a small stack and grows it, copying, to an
// HTTP exchange's depth on every request; a kept one grew it once.
type senders struct {
	work    chan func() // unbuffered: a send to it succeeds only for an idle goroutine
	wg      sync.WaitGroup
	started atomic.Int64 // goroutines started
}

func newSenders() *senders { return &senders{work: make(chan func())} }

// Go runs f on an idle sender, or a new one.
func (s *senders) Go(f func()) {
	s.wg.Add(1)
	select {
	case s.work <- f:
	default:
		s.started.Add(1)
		go s.loop(f)
	}
}

// loop runs f, then whatever Go hands it, until stop.
func (s *senders) loop(f func()) {
	for ok := true; ok; f, ok = <-s.work {
		f()
		s.wg.Done()
	}
}

// stop waits for every send handed to Go and ends the idle senders; Go
// must not be called after.
func (s *senders) stop() {
	s.wg.Wait()
	close(s.work)
}
