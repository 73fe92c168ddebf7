package analyze

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestLabelRegionsDataDriven runs the cases of testdata/regions.txt: each
// is a run's windows, one per line, and below "----" the region each
// window must get and the recovery measured, worked out by hand from the
// rules of labelRegions (a rise in flight past twice the Poisson noise or a
// queue that grows by 2 and 10% is saturated; recovering until back within
// 10% of the steady medians; leading windows slower than steady are cold
// past 1.5× and warm past 1.1×).
//
// A window line is: sent completed in_flight waiting ttft_p50_ms
// ttft_p99_ms p50_lo_ms [slo], "-" where the window holds no figure and
// "slo" where it breaks the SLO. A case's first line is "case NAME" and,
// optionally, "slo" after the name to measure recovery by the SLO.
func TestLabelRegionsDataDriven(t *testing.T) {
	b, err := os.ReadFile("testdata/regions.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range parseRegionCases(t, string(b)) {
		t.Run(c.name, func(t *testing.T) {
			ser := &Series{Windows: c.windows}
			labelRegions(ser, c.slo, c.p50Lo)
			var got []string
			for _, w := range ser.Windows {
				got = append(got, w.Region)
			}
			gotText := strings.Join(got, " ") + "\n" + recoveryText(ser.Recovery)
			if gotText != c.want {
				t.Errorf("got\n%s\nwant\n%s", gotText, c.want)
			}
		})
	}
}

type regionCase struct {
	name    string
	slo     bool
	windows []Window
	p50Lo   []float64
	want    string
}

// recoveryText is the recovery as the cases state it, window starts in s.
func recoveryText(r *Recovery) string {
	if r == nil {
		return "recovery: none"
	}
	f := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return strconv.FormatFloat(*p, 'g', -1, 64)
	}
	return fmt.Sprintf("recovery: break %g drop %s recovered %s", r.FirstBreakS, f(r.LoadDropS), f(r.RecoveredS))
}

func parseRegionCases(t *testing.T, text string) []regionCase {
	t.Helper()
	var cases []regionCase
	var c *regionCase
	inWant := false
	num := func(line int, s string) *float64 {
		if s == "-" {
			return nil
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("testdata/regions.txt:%d: %q is not a number", line, s)
		}
		return &v
	}
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
			continue
		case strings.HasPrefix(line, "case "):
			f := strings.Fields(line)
			cases = append(cases, regionCase{name: f[1], slo: len(f) > 2 && f[2] == "slo"})
			c, inWant = &cases[len(cases)-1], false
		case c == nil:
			t.Fatalf("testdata/regions.txt:%d: a line before the first case", n)
		case line == "----":
			inWant = true
		case inWant:
			c.want += line
			if strings.HasPrefix(line, "recovery:") {
				break
			}
			c.want += "\n"
		default:
			f := strings.Fields(line)
			if len(f) < 7 {
				t.Fatalf("testdata/regions.txt:%d: a window needs 7 fields, has %d", n, len(f))
			}
			w := Window{StartS: float64(len(c.windows))}
			w.Sent, w.Completed, w.InFlight = int(*num(n, f[0])), int(*num(n, f[1])), int(*num(n, f[2]))
			w.Waiting, w.TTFTP50Ms, w.TTFTP99Ms = num(n, f[3]), num(n, f[4]), num(n, f[5])
			w.BreaksSLO = len(f) > 7 && f[7] == "slo"
			c.windows = append(c.windows, w)
			c.p50Lo = append(c.p50Lo, *num(n, f[6]))
		}
	}
	return cases
}
