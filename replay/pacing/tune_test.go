package pacing

import (
	"runtime"
	"testing"
)

// TestTuneProcsGivesTheSchedulerASecondProcessor: one processor becomes
// two for the run and one again after; more are left alone, and so is a
// GOMAXPROCS the user set.
func TestTuneProcsGivesTheSchedulerASecondProcessor(t *testing.T) {
	cases := []struct {
		name        string
		procs, want int
		env         string
	}{
		{"one processor", 1, 2, ""},
		{"two already", 2, 2, ""},
		{"four", 4, 4, ""},
		{"the user's one", 1, 1, "1"},
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("GOMAXPROCS", c.env)
			runtime.GOMAXPROCS(c.procs)
			restore := tuneProcs()
			if got := runtime.GOMAXPROCS(0); got != c.want {
				t.Errorf("GOMAXPROCS %d while tuned, want %d", got, c.want)
			}
			restore()
			if got := runtime.GOMAXPROCS(0); got != c.procs {
				t.Errorf("GOMAXPROCS %d after, want %d restored", got, c.procs)
			}
		})
	}
}
