package procstat

import "testing"

// TestPeakRSSSeesAnAllocation: touching 64 MB raises the peak by at
// least that much.
func TestPeakRSSSeesAnAllocation(t *testing.T) {
	before := PeakRSS()
	if before == 0 {
		t.Skip("no /proc/self/status")
	}
	b := make([]byte, 64<<20)
	for i := range b {
		b[i] = 1
	}
	if after := PeakRSS(); after-before < 60<<20 {
		t.Errorf("peak %d → %d bytes after touching 64 MB", before, after)
	}
	_ = b[len(b)-1]
}
