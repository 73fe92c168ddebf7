package trace

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
)

// TestEachSentRequest writes a run of three parts whose results were
// sent or not, and reads back exactly the ids of those sent, in order.
func TestEachSentRequest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	w, err := NewResultWriter(dir, 4)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 10 {
		res := Result{RunID: "r", ScheduledNs: int64(i), Outcome: OutcomeOK}
		res.RequestID = fmt.Sprintf("q%d", i)
		if i%3 == 0 {
			res.Outcome = OutcomeNotSent
		} else {
			res.SentNs = Ptr(int64(i))
			want = append(want, res.RequestID)
		}
		if err := w.Write(res); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if n := len(w.Parts()); n != 3 {
		t.Fatalf("%d parts, want 3", n)
	}
	var got []string
	if err := EachSentRequest(dir, func(id string) { got = append(got, id) }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("sent requests %v, want %v", got, want)
	}
}
