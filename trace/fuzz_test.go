package trace

import (
	"context"
	"math"
	"path/filepath"
	"testing"
)

// FuzzBucketReadChecks writes rows with fuzzed values into a part, as a
// user's own tool could, and reads the bucket back: the reader must never
// panic, and whatever it passes on must satisfy the record's ranges and be
// in time order.
func FuzzBucketReadChecks(f *testing.F) {
	f.Add(int64(1704067200000000), int64(1704067200000001), int64(100), int64(5), 1.0, 0.5, 20.0, 100.0, "r1", "gpt", "chat")
	f.Add(int64(1704067200000001), int64(1704067200000000), int64(1e18), int64(-1), math.NaN(), math.Inf(1), -3.0, 1e300, "a\x00b", "\x1b[31m", "x")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, ts1, ts2, in, out int64, temp, topP, think, cancel float64, id, model, api string) {
		rows := []Request{
			{Identity: Identity{RequestID: id, Model: model}, TS: ts1, Shape: Shape{InputTokens: in, OutputTokens: out, API: api},
				Temperature: &temp, TopP: &topP, ThinkTimeMs: &think, CancelAfterMs: &cancel},
			{Identity: Identity{RequestID: "b"}, TS: ts2, Shape: Shape{InputTokens: 3, OutputTokens: 1, API: APIChat}},
		}
		rel := "date=2024-01-01/hour=00/part-fz-00000.parquet"
		if err := writePartFile(filepath.Join(dir, rel), rows, 10); err != nil {
			t.Skip()
		}
		m := &Manifest{SchemaVersion: SchemaVersion, Kind: "trace", Rows: 2, Parts: []Part{{Path: rel, Rows: 2}}}
		if err := WriteJSONAtomic(filepath.Join(dir, ManifestName), m); err != nil {
			t.Fatal(err)
		}
		got, _, err := ReadAll(context.Background(), dir)
		if err != nil {
			return
		}
		for i := range got {
			if err := got[i].Validate(); err != nil {
				t.Fatalf("row %d passed on with %v", i, err)
			}
			if i > 0 && got[i].TS < got[i-1].TS {
				t.Fatalf("rows out of order: %d then %d", got[i-1].TS, got[i].TS)
			}
		}
	})
}
