package spans

import (
	"fmt"
	"testing"
)

// TestInvalidReasonsBounded: reasons may quote values, so a sender could
// make one per span; past maxInvalidReasons they are pooled, every span
// still counted.
func TestInvalidReasonsBounded(t *testing.T) {
	c := NewCollector("run", 10)
	for i := range 1000 {
		c.mu.Lock()
		c.countInvalid(fmt.Sprintf("e2e %d out of bounds", i))
		c.mu.Unlock()
	}
	got := c.Counts().Invalid
	var total int64
	for _, v := range got {
		total += v
	}
	if len(got) != maxInvalidReasons+1 || total != 1000 || got[otherReasons] != 1000-maxInvalidReasons {
		t.Errorf("%d reasons, %d spans, %d pooled; want %d, 1000, %d", len(got), total, got[otherReasons], maxInvalidReasons+1, 1000-maxInvalidReasons)
	}
}
