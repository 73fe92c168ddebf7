package pacing

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// nice is the calling thread's nice value (Linux's getpriority system
// call answers 20 − nice).
func nice(t *testing.T) int {
	t.Helper()
	p, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	if err != nil {
		t.Fatal(err)
	}
	return 20 - p
}

// TestInBackgroundRunsAtTheLowestPriority: f runs, before InBackground
// returns, on a thread of its own at backgroundNice, and the caller's
// thread keeps its priority.
func TestInBackgroundRunsAtTheLowestPriority(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, caller := nice(t), unix.Gettid()
	ran, niceInside, tid := false, 0, 0
	InBackground(func() {
		// Not nice(t): t.Fatal is for the test's goroutine only.
		p, _ := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
		ran, niceInside, tid = true, 20-p, unix.Gettid()
	})
	if !ran {
		t.Fatal("f had not run when InBackground returned")
	}
	if tid == caller || niceInside != backgroundNice {
		t.Errorf("f ran on thread %d (the caller's %d) at nice %d, want another thread at %d", tid, caller, niceInside, backgroundNice)
	}
	if after := nice(t); after != before {
		t.Errorf("the caller's nice went from %d to %d", before, after)
	}
}

// TestBackgroundThreadKeepsOneLowPriorityThread: every function given to
// a BackgroundThread runs, before run returns, on the same thread, not
// the caller's, at backgroundNice.
func TestBackgroundThreadKeepsOneLowPriorityThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	caller := unix.Gettid()
	bg := NewBackgroundThread()
	defer bg.Close()
	var tids, nices []int
	for range 3 {
		bg.Run(func() {
			p, _ := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
			tids, nices = append(tids, unix.Gettid()), append(nices, 20-p)
		})
	}
	if len(tids) != 3 {
		t.Fatalf("%d of 3 functions had run when run returned", len(tids))
	}
	for i := range tids {
		if tids[i] != tids[0] || tids[i] == caller || nices[i] != backgroundNice {
			t.Errorf("run %d: thread %d at nice %d; want thread %d (not the caller's %d) at %d", i, tids[i], nices[i], tids[0], caller, backgroundNice)
		}
	}
}
