package analyze

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// TestHeldAnalysesRefuseRunsPastTheirRows: a comparison and an envelope
// hold every row, so runs of more rows than InMemoryRows are refused from
// the parts' footers, naming the bound; before, they were held whatever
// their size.
func TestHeldAnalysesRefuseRunsPastTheirRows(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir, "run", listRows(50, nil), 1)
	if _, err := Compare([]string{dir}, []string{dir}, CompareOptions{InMemoryRows: 20}); err == nil || !strings.Contains(err.Error(), "InMemoryRows") || !strings.Contains(err.Error(), "50 result rows") {
		t.Errorf("compare of 50 rows under 20: %v", err)
	}
	if _, err := FindEnvelope([]string{dir}, EnvelopeOptions{Options: Options{InMemoryRows: 20}}); err == nil || !strings.Contains(err.Error(), "50 result rows") {
		t.Errorf("envelope of 50 rows under 20: %v", err)
	}
	if _, err := Compare([]string{dir}, []string{dir}, CompareOptions{InMemoryRows: 100}); err != nil {
		t.Errorf("compare of 50 rows under 100: %v", err)
	}
}

// TestRowCountsComeFromTheFooters: a run.json edited to list fewer rows
// than a part holds must not have the part held as small: the mismatch is
// refused before the rows are read.
func TestRowCountsComeFromTheFooters(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir, "run", listRows(50, nil), 1)
	path := filepath.Join(dir, trace.RunInfoName)
	b, _ := os.ReadFile(path)
	var ri map[string]any
	json.Unmarshal(b, &ri)
	ri["parts"].([]any)[0].(map[string]any)["rows"] = 1
	b, _ = json.Marshal(ri)
	os.WriteFile(path, b, 0o644)
	if _, _, err := heldRows([]string{dir}, peerFiles{}); err == nil || !strings.Contains(err.Error(), "holds 50 rows, run.json says 1") {
		t.Errorf("an edited count: %v", err)
	}
}

// TestRowLimitAdviceNamesTheHeldFigure: where token times bring runs over
// the row limit, every refusal says the rows and what they count as apart
// and advises the held figure: 10 rows of 1,060 token times (and an empty
// prefix list each, one null value in the footer) count as 10 +
// ⌊10,610 / 53⌋ = 210. Before, a time series said the runs "hold 210"
// (rows they do not have), a comparison of repeats advised raising the
// limit to the 20 rows (too few to hold them), and rows alone over the
// limit printed one figure twice.
func TestRowLimitAdviceNamesTheHeldFigure(t *testing.T) {
	times := make([]int64, 1060)
	for i := range times {
		times[i] = 2e6 + int64(i)
	}
	long := func(_ int, r *trace.Result) { r.TokenTimesNs = times }
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	writeRun(t, a, "a", listRows(10, long), 1)
	writeRun(t, b, "b", listRows(10, long), 1)
	plain := filepath.Join(t.TempDir(), "plain")
	writeRun(t, plain, "plain", listRows(50, nil), 1)
	for _, c := range []struct {
		name    string
		err     func() error
		want    string
		wantNot string
	}{
		{"an envelope", func() error {
			_, err := FindEnvelope([]string{a}, EnvelopeOptions{Options: Options{InMemoryRows: 100}})
			return err
		}, "these runs hold 10 result rows, whose token times and prefix blocks count as 210 held rows: raise it to 210", ""},
		{"a time series", func() error {
			_, err := Analyze([]string{a}, Options{InMemoryRows: 100, Window: time.Second})
			return err
		}, "these runs hold 10 result rows, whose token times and prefix blocks count as 210 held rows: raise the limit to 210", ""},
		{"repeats streamed", func() error {
			_, err := Analyze([]string{a, b}, Options{InMemoryRows: 100})
			return err
		}, "these runs hold 20 result rows, whose token times and prefix blocks count as 420 held rows: raise the limit to 420", ""},
		{"rows alone over", func() error {
			_, err := Compare([]string{plain}, []string{plain}, CompareOptions{InMemoryRows: 20})
			return err
		}, "these runs hold 50 result rows, whose token times and prefix blocks count as 52 held rows: raise it to 52", "(50 counting"},
	} {
		err := c.err()
		if err == nil || !strings.Contains(err.Error(), c.want) || (c.wantNot != "" && strings.Contains(err.Error(), c.wantNot)) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
	}
}
