package datasets

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
)

func TestShareGPT(t *testing.T) {
	out := filepath.Join(t.TempDir(), "b")
	m, err := Convert(context.Background(), []string{"testdata/sharegpt/sharegpt.json"}, out, ConvertOptions{MaxRejectRatio: -1, Options: Options{Log: LogOptions{Salt: testSalt(t), BlockSize: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	rows, _, err := trace.ReadAll(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || m.Rejects != 2 || m.Sources[0].Format != FormatShareGPT {
		t.Fatalf("%d rows, %d rejects, format %s", len(rows), m.Rejects, m.Sources[0].Format)
	}
	tok, _ := tokenize.Get("cl100k_base")
	enc := func(role, text string) int { return len(tok.Encode(role + "\n" + text + "\n")) }
	a0, a1, b0 := rows[0], rows[1], rows[2]
	// Turn 0 of conv-a: system + human; output the reply's tokens.
	if want := int64(enc("system", "You are a helpful assistant for gardeners.") + enc("user", "When should I plant tomatoes?")); a0.InputTokens != want {
		t.Errorf("turn 0 input %d, want %d", a0.InputTokens, want)
	}
	if a0.OutputTokens != int64(tok.Count("After the last frost, when the soil is warm.")) {
		t.Errorf("turn 0 output %d", a0.OutputTokens)
	}
	// Turn 1 carries the whole history: its first blocks are turn 0's.
	if a1.Turn != 1 || a1.SessionID != a0.SessionID || a1.InputTokens <= a0.InputTokens {
		t.Errorf("turn 1: %d in session %q", a1.Turn, a1.SessionID)
	}
	full := int(a0.InputTokens) / 8
	for i := range full {
		if a1.PrefixBlocks[i] != a0.PrefixBlocks[i] {
			t.Fatalf("block %d of the history differs between turns", i)
		}
	}
	if b0.SessionID == a0.SessionID || b0.Turn != 0 {
		t.Error("conversations merged")
	}
	if len(m.Notes) == 0 || !strings.Contains(strings.Join(m.Notes, " "), "no arrival times") {
		t.Errorf("manifest notes %v lack the missing-times note", m.Notes)
	}
}
