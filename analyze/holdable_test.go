package analyze

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

// TestHeldAnalysesRefuseRunsPastTheirRows: a comparison and an envelope
// hold every row, so runs of more rows than InMemoryRows are refused from
// the parts' footers, naming the bound; before, they were held whatever
// their size.
func TestHeldAnalysesRefuseRunsPastTheirRows(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir, "run", listRows(50, nil), 1)
	if _, err := Compare([]string{dir}, []string{dir}, CompareOptions{InMemoryRows: 20}); err == nil || !strings.Contains(err.Error(), "InMemoryRows") || !strings.Contains(err.Error(), "50 rows") {
		t.Errorf("compare of 50 rows under 20: %v", err)
	}
	if _, err := FindEnvelope([]string{dir}, EnvelopeOptions{Options: Options{InMemoryRows: 20}}); err == nil || !strings.Contains(err.Error(), "50 rows") {
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
	if _, err := resultRows([]string{dir}, peerFiles{}); err == nil || !strings.Contains(err.Error(), "holds 50 rows, run.json says 1") {
		t.Errorf("an edited count: %v", err)
	}
}
