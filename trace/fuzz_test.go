package trace

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzRequestValidate: whatever values a row holds, Validate either names
// the column at fault or passes a row every later stage can handle: JSON
// encodes it (no NaN or infinity), its times convert to nanoseconds without
// overflow, and its strings carry no control character.
func FuzzRequestValidate(f *testing.F) {
	f.Add(int64(1704067200000000), int64(100), int64(5), int64(16), int32(1), 1.0, 0.5, 20.0, 100.0, 5.0, "r1", "gpt", "chat", "warmup")
	f.Add(int64(math.MaxInt64), int64(1e18), int64(-1), int64(0), int32(-3), math.NaN(), math.Inf(1), -3.0, 1e300, math.Inf(-1), "a\x00b", "\x1b[31m", "x", "\xff")
	f.Fuzz(func(t *testing.T, ts, in, out, maxTok int64, n int32, temp, topP, think, cancel, ttft float64, id, model, api, phase string) {
		r := Request{Identity: Identity{RequestID: id, Model: model}, TS: ts, Shape: Shape{InputTokens: in, OutputTokens: out, MaxTokens: maxTok, API: api, N: n},
			Temperature: &temp, TopP: &topP, ThinkTimeMs: &think, CancelAfterMs: &cancel, TTFTMs: &ttft, Phase: phase}
		err := r.Validate()
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field == "" || fe.Reason == "" {
				t.Fatalf("Validate returned %v, not a FieldError naming a column", err)
			}
			return
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatalf("a valid row does not encode: %v", err)
		}
		for _, ms := range []float64{think, cancel, ttft} {
			if ns := ms * 1e6; !(ns >= 0 && ns < math.MaxInt64/4) {
				t.Fatalf("a valid row's time %v ms overflows nanoseconds", ms)
			}
		}
		for _, v := range []string{id, model, api, phase} {
			if !utf8.ValidString(v) || strings.IndexFunc(v, func(c rune) bool { return c < 0x20 || c == 0x7f }) >= 0 {
				t.Fatalf("a valid row holds %q", v)
			}
		}
	})
}

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
