package pacing

import (
	"slices"
	"sync"
	"sync/atomic"
)

// wakeMargin is how long before a due time a precise sleep ends: the
// median of how late the long sleeps woke, set anew after every
// marginWindow of them from those alone, within [minMargin, maxMargin].
// Spinning costs the client CPU and waking late costs lateness; the
// median splits the kernel's wake-up delay between them, and follows it
// as the machine's load changes.
type wakeMargin struct {
	mu     sync.Mutex
	late   [marginWindow]int64
	n      int
	margin atomic.Int64
}

const (
	marginWindow = 64
	minMargin    = int64(5e3)   // 5 µs
	maxMargin    = int64(200e3) // 200 µs
)

func newWakeMargin(initial int64) *wakeMargin {
	w := &wakeMargin{}
	w.margin.Store(initial)
	return w
}

// get is the margin now.
func (w *wakeMargin) get() int64 { return w.margin.Load() }

// woke records a sleep that woke late ns after the time it asked for.
func (w *wakeMargin) woke(late int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.late[w.n%marginWindow] = late // an early one sorts low; the clamp keeps minMargin
	w.n++
	if w.n%marginWindow != 0 {
		return
	}
	s := w.late
	slices.Sort(s[:])
	// The median of an even window: the upper of the two middle values.
	w.margin.Store(min(maxMargin, max(minMargin, s[marginWindow/2])))
}
