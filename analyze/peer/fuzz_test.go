package peer

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

// FuzzOpen feeds arbitrary bytes, as a result file, to Open: it must
// refuse them naming the file, or give runs whose every request, as Each
// streams it, holds the ceilings and rules the checks enforce, as many
// as Records counted. Seeds: every fixture of testdata/.
func FuzzOpen(f *testing.F) {
	filepath.WalkDir("testdata", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.Contains(p, string(filepath.Separator)+"fuzz"+string(filepath.Separator)) {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
		return nil
	})
	f.Add([]byte(`{"ttfts": [NaN, -Infinity, 1e400], "itls": [[], [1e-9], null], "input_lens": ["7", 1e30, -1], "output_lens": [1, 2, 3]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "result.json")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		runs, err := Open(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) && !errors.Is(err, ErrNotPeer) {
				t.Fatalf("an error that names no file: %v", err)
			}
			return
		}
		week := int64(trace.MaxClientMs) * 1e6
		inRange := func(v, hi int64) bool { return v == -1 || v >= 0 && v <= hi }
		for _, r := range runs {
			var n int64
			err := r.Each(func(batch []Request) error {
				for _, q := range batch {
					n++
					if q.SentNs < 0 || q.SentNs > week || !inRange(q.InputTokens, trace.MaxTokens) || !inRange(q.OutputTokens, trace.MaxTokens) {
						t.Fatalf("%s: a request out of range: %+v", r.Source, q)
					}
					if !q.OK {
						continue
					}
					if !inRange(q.TTFTNs, week) || !inRange(q.E2ENs, week) || q.TTFTNs >= 0 && q.E2ENs >= 0 && q.E2ENs < q.TTFTNs {
						t.Fatalf("%s: times out of range: %+v", r.Source, q)
					}
					for _, g := range q.GapsNs {
						if g < 0 || g > week {
							t.Fatalf("%s: a gap out of range: %+v", r.Source, q)
						}
					}
					if q.OutputTokens >= 0 && int64(len(q.GapsNs)) > max(q.OutputTokens-1, 0) {
						t.Fatalf("%s: more gaps than tokens: %+v", r.Source, q)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%s: read again: %v", r.Source, err)
			}
			if r.HasRecords() && n != r.Records {
				t.Fatalf("%s: %d requests streamed, %d counted", r.Source, n, r.Records)
			}
		}
	})
}
