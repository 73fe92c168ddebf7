package procstat

import (
	"strings"
	"testing"
)

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

// TestPeakRoundTrip: what ReportPeak writes among other lines,
// PeakFromOutput reads back; output without it reads as 0.
func TestPeakRoundTrip(t *testing.T) {
	var b strings.Builder
	b.WriteString("sent 10 lateness_p99_ms 0.1\n")
	ReportPeak(&b)
	b.WriteString("PASS\n")
	if got, want := PeakFromOutput([]byte(b.String())), PeakRSS()>>10; got <= 0 || got > want {
		t.Errorf("read %d kB back from %q, peak now %d kB", got, b.String(), want)
	}
	if got := PeakFromOutput([]byte("PASS\n")); got != 0 {
		t.Errorf("no report read as %d", got)
	}
}
