package replay

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestSendersReuseIdleGoroutines: sends one after another run on a few
// kept goroutines, not one each.
func TestSendersReuseIdleGoroutines(t *testing.T) {
	s := newSenders()
	const n = 200
	for range n {
		done := make(chan struct{})
		s.Go(func() { close(done) })
		<-done
	}
	s.stop()
	// A send can come before the last sender is back waiting, so a few
	// more may start; one per send would be n.
	if got := s.started.Load(); got > n/4 {
		t.Errorf("%d goroutines started for %d sends one after another, want a few", got, n)
	}
}

// TestSendersNeverWaitForABusyOne: with every sender busy, Go starts
// another rather than wait; stop waits for all sends, then ends the
// senders.
func TestSendersNeverWaitForABusyOne(t *testing.T) {
	before := runtime.NumGoroutine()
	s := newSenders()
	const n = 20
	release := make(chan struct{})
	var running sync.WaitGroup
	running.Add(n)
	finished := 0
	var mu sync.Mutex
	for range n {
		s.Go(func() {
			running.Done()
			<-release
			mu.Lock()
			finished++
			mu.Unlock()
		})
	}
	running.Wait() // all n run at once: none waited for another
	if got := s.started.Load(); got != n {
		t.Errorf("%d goroutines for %d sends held at once, want %d", got, n, n)
	}
	close(release)
	s.stop()
	if finished != n {
		t.Errorf("stop returned with %d of %d sends finished", finished, n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := runtime.NumGoroutine(); got > before {
		t.Errorf("%d goroutines after stop, %d before: the idle senders did not end", got, before)
	}
}

// TestSendersFollowTheSendsInFlight: after a burst, the senders it
// started end once idle, and the ones left are about as many as the sends
// in flight, here one at a time.
func TestSendersFollowTheSendsInFlight(t *testing.T) {
	s := newSenders()
	s.idleAfter = 20 * time.Millisecond
	const burst = 20
	release := make(chan struct{})
	var running sync.WaitGroup
	running.Add(burst)
	for range burst {
		s.Go(func() { running.Done(); <-release })
	}
	running.Wait()
	close(release)
	// Sends one at a time, as a light load, until the burst's senders
	// have ended.
	deadline := time.Now().Add(10 * time.Second)
	for s.live.Load() > 2 && time.Now().Before(deadline) {
		done := make(chan struct{})
		s.Go(func() { close(done) })
		<-done
		time.Sleep(time.Millisecond)
	}
	if n := s.live.Load(); n > 2 {
		t.Errorf("%d senders still running for one send at a time, %d after the burst", n, burst)
	}
	s.stop()
	for s.live.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := s.live.Load(); n != 0 {
		t.Errorf("%d senders running after stop", n)
	}
}
