package replay

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/replay/pacing"
)

// TestHeapBoundLiftsUnderGCPressure: when live state outgrows the heap
// bound, the collector would run flat out; the health sampler sees its CPU
// share stay high and lifts the bound, and says so in client.jsonl.
func TestHeapBoundLiftsUnderGCPressure(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(old)
	gen := pacing.SetHeapBound(32 << 20) // a bound of its own: no watcher of an earlier one acts on it
	defer pacing.EndHeapBound(gen)
	dir := t.TempDir()
	h, err := newHealthSampler(dir)
	if err != nil {
		t.Fatal(err)
	}
	h.bound(gen)
	// 96 MB that stays live, then churn: far past a 32 MB bound.
	keep := make([][]byte, 0, 96)
	for range 96 {
		keep = append(keep, make([]byte, 1<<20))
	}
	deadline := time.Now().Add(20 * time.Second)
	var sink []byte
	for pacing.HeapBound() != 0 && time.Now().Before(deadline) {
		for range 1000 {
			sink = make([]byte, 64<<10)
		}
		sink[0] = 1
	}
	h.finish()
	b, err := os.ReadFile(filepath.Join(dir, "client.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if pacing.HeapBound() != 0 {
		t.Fatalf("the bound was not lifted in 20 s with %d MB live over a 32 MB bound; client.jsonl:\n%s", len(keep), b)
	}
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("memory limit %d after lifting, want none", got)
	}

	if !strings.Contains(string(b), "the collector used") || !strings.Contains(string(b), "bound lifted") {
		t.Errorf("client.jsonl does not say the CPU-share valve lifted the bound:\n%s", b)
	}
}
