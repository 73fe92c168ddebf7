package datasets

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/anon"
)

// TestExportRoundTripAzure: the bundled Azure sample → bucket → export
// gives the source file back, byte for byte.
func TestExportRoundTripAzure(t *testing.T) {
	d, _ := Lookup("azure-code-2023")
	src, _ := io.ReadAll(d.Open())
	out := filepath.Join(t.TempDir(), "b")
	if _, err := Convert(context.Background(), []string{"azure-code-2023"}, out, ConvertOptions{}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, err := Export(context.Background(), out, &buf, FormatAzure, ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), src) {
		t.Fatalf("exported %d rows, %d bytes; differs from the %d-byte source", n, buf.Len(), len(src))
	}
}

type mooncakeRow struct {
	Timestamp    int64   `json:"timestamp"`
	InputLength  int64   `json:"input_length"`
	OutputLength int64   `json:"output_length"`
	HashIDs      []int64 `json:"hash_ids"`
}

func readMooncakeRows(t *testing.T, r io.Reader) []mooncakeRow {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var rows []mooncakeRow
	for sc.Scan() {
		var m mooncakeRow
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, m)
	}
	return rows
}

// TestExportRoundTripMooncake: the bundled Mooncake sample → bucket →
// export gives the original rows back; with dense ids the sharing
// structure is identical (a bijection between old and new ids), and a
// bucket whose ids were salted hashes gets Mooncake-style ids back.
func TestExportRoundTripMooncake(t *testing.T) {
	d, _ := Lookup("mooncake-synthetic")
	src := readMooncakeRows(t, d.Open())
	out := filepath.Join(t.TempDir(), "b")
	if _, err := Convert(context.Background(), []string{"mooncake-synthetic"}, out, ConvertOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, dense := range []bool{false, true} {
		var buf bytes.Buffer
		if _, err := Export(context.Background(), out, &buf, FormatMooncake, ExportOptions{DenseIDs: dense}); err != nil {
			t.Fatal(err)
		}
		got := readMooncakeRows(t, &buf)
		if len(got) != len(src) {
			t.Fatalf("dense %v: %d rows, source %d", dense, len(got), len(src))
		}
		fwd, back := map[int64]int64{}, map[int64]int64{}
		for i := range src {
			s, g := src[i], got[i]
			if s.Timestamp != g.Timestamp || s.InputLength != g.InputLength || s.OutputLength != g.OutputLength || len(s.HashIDs) != len(g.HashIDs) {
				t.Fatalf("dense %v row %d: %+v, source %+v", dense, i, g, s)
			}
			for k := range s.HashIDs {
				a, b := s.HashIDs[k], g.HashIDs[k]
				if !dense && a != b {
					t.Fatalf("row %d block %d: id %d, source %d", i, k, b, a)
				}
				if x, ok := fwd[a]; ok && x != b {
					t.Fatalf("row %d: source id %d maps to %d and %d: sharing changed", i, a, x, b)
				}
				if x, ok := back[b]; ok && x != a {
					t.Fatalf("row %d: new id %d stands for %d and %d: sharing changed", i, b, x, a)
				}
				fwd[a], back[b] = b, a
			}
		}
	}
	// Salted-hash ids (a converted log) come back dense from 0.
	bkt := filepath.Join(t.TempDir(), "salted")
	w, _ := trace.NewBucketWriter(bkt, trace.WriterOptions{})
	s := anon.RandomSalt()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	shared := s.PrefixBlocks([]int{1, 2, 3, 4, 5, 6}, 4)
	for i := range 3 {
		w.Write(trace.Request{Identity: trace.Identity{RequestID: string(rune('a' + i))}, TS: t0.Add(time.Duration(i) * time.Second).UnixMicro(),
			Shape: trace.Shape{InputTokens: 6, OutputTokens: 1, API: trace.APIChat, PrefixBlocks: shared}})
	}
	w.Close(&trace.Manifest{})
	var buf bytes.Buffer
	if _, err := Export(context.Background(), bkt, &buf, FormatMooncake, ExportOptions{DenseIDs: true}); err != nil {
		t.Fatal(err)
	}
	for i, r := range readMooncakeRows(t, &buf) {
		if len(r.HashIDs) != 2 || r.HashIDs[0] != 0 || r.HashIDs[1] != 1 || r.Timestamp != int64(i)*1000 {
			t.Errorf("row %d: %+v, want ids [0 1] at %d ms", i, r, i*1000)
		}
	}
}

func TestDenseIDsBounded(t *testing.T) {
	d := newDenseIDs(ExportOptions{DenseIDs: true, MaxDenseIDs: 2})
	if d.id(100) != 0 || d.id(200) != 1 || d.id(100) != 0 || d.id(300) != 2 {
		t.Fatal("first-appearance numbering")
	}
	// 200 was least recently seen and was evicted: it gets a new number.
	if got := d.id(200); got != 3 || len(d.ids) != 2 {
		t.Errorf("evicted id renumbered %d (map %d), want 3 with 2 entries", got, len(d.ids))
	}
}

// TestLongExportVLLMCustom exports the Mooncake sample as a vllm bench custom
// dataset: each prompt has exactly the row's input tokens in the chosen
// tokenizer, output_tokens is the row's, and rows whose first blocks are
// equal begin with the same text.
func TestLongExportVLLMCustom(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a long check: runs without -race in make test-timing")
	}
	out := filepath.Join(t.TempDir(), "b")
	if _, err := Convert(context.Background(), []string{"mooncake-synthetic"}, out, ConvertOptions{}); err != nil {
		t.Fatal(err)
	}
	d, _ := Lookup("mooncake-synthetic")
	src := readMooncakeRows(t, d.Open())[:60] // rows 49 and 58 reuse the first blocks of rows 42 and 15
	var buf bytes.Buffer
	if _, err := Export(context.Background(), out, &buf, FormatVLLMCustom, ExportOptions{Tokenizer: "cl100k_base"}); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenize.Get("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&buf)
	dec.DisallowUnknownFields()
	firstBlock := map[int64]string{} // first block id → first 100 characters
	shared := 0
	for i, s := range src {
		var line struct {
			Prompt       string `json:"prompt"`
			OutputTokens int64  `json:"output_tokens"`
		}
		if err := dec.Decode(&line); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if line.OutputTokens != s.OutputLength {
			t.Fatalf("line %d: output_tokens %d, row has %d", i+1, line.OutputTokens, s.OutputLength)
		}
		if i < 15 { // counting is the slow part
			if n := tok.Count(line.Prompt); int64(n) != s.InputLength {
				t.Fatalf("line %d: %d prompt tokens, row has %d", i+1, n, s.InputLength)
			}
		}
		if len(s.HashIDs) > 1 {
			head := line.Prompt[:100]
			if prev, ok := firstBlock[s.HashIDs[0]]; ok {
				shared++
				if prev != head {
					t.Fatalf("line %d shares its first block with an earlier row but not its text", i+1)
				}
			}
			firstBlock[s.HashIDs[0]] = head
		}
	}
	if shared == 0 {
		t.Fatal("no two rows shared a first block: the sharing check checked nothing")
	}
}
