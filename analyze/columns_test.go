package analyze

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

// TestColumnarReadMatchesRowRead reads the same run directory with arrow-go
// column by column and with parquet-go row by row (trace.ReadResults): the
// columns must be identical, nulls included.
func TestColumnarReadMatchesRowRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	writeSyntheticRun(t, dir, 3000)
	// Add a part with nulls, failures and a warmup row, across a rotation.
	r2 := filepath.Join(t.TempDir(), "r2")
	w, err := trace.NewResultWriter(r2, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range handRows() {
		w.Write(r)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	info, err := trace.ReadRunInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range w.Parts() {
		b, err := os.ReadFile(filepath.Join(r2, p.Path))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, trace.ResultsDir, "z"+filepath.Base(p.Path)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		p.Path = trace.ResultsDir + "/z" + filepath.Base(p.Path)
		info.Parts = append(info.Parts, p)
	}
	if err := trace.WriteJSONAtomic(filepath.Join(dir, trace.RunInfoName), info); err != nil {
		t.Fatal(err)
	}
	rows, err := trace.ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := columnsOf(rows)
	got := &resultColumns{wantIDs: true}
	if err := readResultColumns(context.Background(), dir, got); err != nil {
		t.Fatal(err)
	}
	got.names = nil // the read's interner, not a column
	if got.n != len(rows) || got.n != 3000+len(handRows()) {
		t.Fatalf("arrow read %d rows, parquet-go %d", got.n, len(rows))
	}
	if !reflect.DeepEqual(got, want) {
		gv, wv := reflect.ValueOf(*got), reflect.ValueOf(*want)
		for i := range gv.NumField() {
			if fmt.Sprint(gv.Field(i)) != fmt.Sprint(wv.Field(i)) {
				t.Errorf("column %s differs between the arrow-go and parquet-go reads", gv.Type().Field(i).Name)
			}
		}
	}
}

func TestColumnarReadErrorsNameTheFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	writeSyntheticRun(t, dir, 10)
	bad := filepath.Join(dir, trace.ResultsDir, "part-99999.parquet")
	if err := os.WriteFile(bad, []byte("PAR1 not really"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := readResultColumns(context.Background(), dir, &resultColumns{})
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("corrupt part: %v, want an error naming %s", err, bad)
	}
}
