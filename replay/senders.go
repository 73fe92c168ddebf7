package replay

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// senders runs the open loop's sends, each on a goroutine kept between
// sends: the most recently idle one takes the next send, else a new one
// starts. A goroutine started per send begins on a small stack and grows
// it, copying, to an HTTP exchange's depth on every request; a kept one
// grew it once. The most recently idle goes first so that those a burst
// started sit unused at the bottom, and one idle for idleAfter ends: the
// goroutines follow the sends in flight, not the largest burst of the
// run (a day-long replay's goroutine count, which its soak test watches
// for leaks, would otherwise only grow).
type senders struct {
	idleAfter time.Duration
	mu        sync.Mutex
	idle      []*sender // waiting for a send, the most recently idle last
	stopped   bool
	wg        sync.WaitGroup
	started   atomic.Int64 // goroutines started
	live      atomic.Int64 // goroutines running now
}

// sender is one kept goroutine's mailbox: Go hands it a send only after
// taking it off the idle stack, so one slot is enough and never blocks.
type sender struct{ work chan func() }

// senderIdle is how long a sender waits for a send before it ends.
const senderIdle = 2 * time.Second

func newSenders() *senders { return &senders{idleAfter: senderIdle} }

// Go runs f on the most recently idle sender, or a new one.
func (s *senders) Go(f func()) {
	s.wg.Add(1)
	s.mu.Lock()
	if n := len(s.idle); n > 0 {
		w := s.idle[n-1]
		s.idle[n-1] = nil
		s.idle = s.idle[:n-1]
		s.mu.Unlock()
		w.work <- f
		return
	}
	s.mu.Unlock()
	s.started.Add(1)
	s.live.Add(1)
	go s.loop(&sender{work: make(chan func(), 1)}, f)
}

// loop runs f, then whatever Go hands w, until stop or until it has
// waited idleAfter for a send.
func (s *senders) loop(w *sender, f func()) {
	defer s.live.Add(-1)
	timer := time.NewTimer(s.idleAfter)
	defer timer.Stop()
	for ok := true; ok; {
		f()
		s.wg.Done()
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			return
		}
		s.idle = append(s.idle, w)
		s.mu.Unlock()
		timer.Reset(s.idleAfter)
		select {
		case f, ok = <-w.work:
		case <-timer.C:
			if s.retire(w) {
				return
			}
			// Go took it off the stack as the timer fired: its send
			// is on the way.
			f, ok = <-w.work
		}
	}
}

// retire takes w off the idle stack, if it is still there.
func (s *senders) retire(w *sender) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.Index(s.idle, w)
	if i < 0 {
		return false
	}
	s.idle = slices.Delete(s.idle, i, i+1)
	return true
}

// stop waits for every send handed to Go and ends the idle senders; Go
// must not be called after.
func (s *senders) stop() {
	s.wg.Wait()
	s.mu.Lock()
	s.stopped = true
	idle := s.idle
	s.idle = nil
	s.mu.Unlock()
	for _, w := range idle {
		close(w.work)
	}
}
