package pacing

import (
	"testing"
	"time"
)

// TestWakeMarginIsTheMedianLateness: after each full window the margin is
// the window's median wake-up delay (the upper middle value), kept within
// its bounds; before the first window fills it is the initial margin.
func TestWakeMarginIsTheMedianLateness(t *testing.T) {
	us := func(v int64) int64 { return v * int64(time.Microsecond) }
	cases := []struct {
		name   string
		late   func(i int) int64 // the i-th sleep's lateness
		sleeps int
		want   int64
	}{
		{"window not full", func(int) int64 { return us(10) }, marginWindow - 1, initialMargin},
		// 0..63 µs in a shuffled order: the upper middle value is 32 µs.
		{"median of a window", func(i int) int64 { return us(int64(i*37) % marginWindow) }, marginWindow, us(32)},
		{"a few stalls move it not", func(i int) int64 {
			if i%10 == 0 {
				return us(3000)
			}
			return us(20)
		}, marginWindow, us(20)},
		{"the latest window counts", func(i int) int64 {
			if i < marginWindow {
				return us(150)
			}
			return us(12)
		}, 2 * marginWindow, us(12)},
		{"at least minMargin", func(int) int64 { return 0 }, marginWindow, minMargin},
		{"negative lateness is none", func(int) int64 { return -us(40) }, marginWindow, minMargin},
		{"at most maxMargin", func(int) int64 { return us(900) }, marginWindow, maxMargin},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWakeMargin(initialMargin)
			for i := range c.sleeps {
				w.woke(c.late(i))
			}
			if got := w.get(); got != c.want {
				t.Errorf("margin %v, want %v", time.Duration(got), time.Duration(c.want))
			}
		})
	}
}
