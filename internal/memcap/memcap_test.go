package memcap

import (
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// sink keeps allocations alive so the collector cannot free them.
var sink [][]byte

// TestLongCapHoldsAllocationsWithin runs a body that stays under its cap.
func TestLongCapHoldsAllocationsWithin(t *testing.T) {
	Run(t, 256<<20, func(t *testing.T) {
		for range 64 {
			b := make([]byte, 1<<20)
			b[0] = 1
			sink = append(sink, b)
		}
	})
}

// TestLongCapStopsARunawayBody is the cap's own truth: a body that keeps
// 2 GiB under a 256 MiB cap must die of exhausted memory, and the parent
// must say so. The child is this test with a marker set, so that its body
// allocates; the test checks the child's fate without failing itself.
func TestLongCapStopsARunawayBody(t *testing.T) {
	if os.Getenv("MEMCAP_RUNAWAY") != "" {
		Run(t, 256<<20, func(t *testing.T) {
			for range 2048 {
				b := make([]byte, 1<<20)
				b[0] = 1
				sink = append(sink, b)
			}
			t.Log("allocated 2 GiB under a 256 MiB cap")
		})
		return
	}
	if raceEnabled {
		t.Skip("runs without -race")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "MEMCAP_RUNAWAY=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("a runaway body passed under its cap:\n%s", out)
	}
	if !strings.Contains(string(out), "exceeded its memory cap of 256 MiB") {
		t.Fatalf("the parent did not name the cap:\n%s", out)
	}
}

func TestRunPattern(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"TestA", "^TestA$"},
		{"TestA/sub.1", `^TestA$/^sub\.1$`},
	} {
		if got := runPattern(c.in); got != c.want {
			t.Errorf("runPattern(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestLongCapLeavesRoomForThreads starts 64 threads in a body under a
// 128 MiB budget: with cgo linked (package net links it here), each
// thread's stack and malloc arena would count against the cap at glibc's
// defaults (8 MiB and 64 MiB), failing a body that holds almost nothing.
func TestLongCapLeavesRoomForThreads(t *testing.T) {
	Run(t, 128<<20, func(t *testing.T) {
		_ = net.IPv4len
		release := make(chan struct{})
		var started sync.WaitGroup
		for range 64 {
			started.Add(1)
			go func() {
				runtime.LockOSThread()
				started.Done()
				<-release
			}()
		}
		started.Wait()
		close(release)
	})
}
