package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryCommandTimesEveryBadInput gives every command that reads a file
// or directory four kinds of bad input — empty, truncated, binary and one
// huge line — in the place of its real input, and asks for a clear failure:
// a non-zero exit, a short message naming the input, never a panic or a
// stack trace.
func TestEveryCommandTimesEveryBadInput(t *testing.T) {
	dir := t.TempDir()
	valid := map[string][]byte{
		"csv":   []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n"),
		"json":  []byte(`{"schema_version": 1, "run_id": "r", "complete": true, "outcomes": {"ok": 1}}`),
		"jsonl": []byte(`{"timestamp": 0, "input_length": 1, "output_length": 1}` + "\n"),
	}
	shapes := map[string]func(valid []byte) []byte{
		"empty":     func([]byte) []byte { return nil },
		"truncated": func(v []byte) []byte { return v[:len(v)/2] },
		"binary":    func([]byte) []byte { return []byte{0x00, 0xff, 0xfe, 0x00, 0x1f, 0x8b, 0x08, 0x00, 0xde, 0xad} },
		"huge line": func([]byte) []byte { return bytes.Repeat([]byte("x"), 20<<20) },
	}
	// Each command reads its input from a file (kind: the valid shape it
	// expects) or from a file inside a directory it is given.
	type command struct {
		name string
		kind string
		file string // file name inside the input directory, "" for a plain file
		args func(in, out string) []string
	}
	commands := []command{
		{"convert", "csv", "", func(in, out string) []string { return []string{"convert", in, "--out", out} }},
		{"convert mooncake", "jsonl", "", func(in, out string) []string { return []string{"convert", in, "--format", "mooncake", "--out", out} }},
		{"convert openai-log", "jsonl", "", func(in, out string) []string { return []string{"convert", in, "--format", "openai-log", "--out", out} }},
		{"fit", "json", "_manifest.json", func(in, out string) []string { return []string{"fit", in, "--out", out + ".json"} }},
		{"generate", "json", "", func(in, out string) []string { return []string{"generate", in, "--out", out} }},
		{"export", "json", "_manifest.json", func(in, out string) []string { return []string{"export", in, "--format", "azure"} }},
		{"replay", "json", "_manifest.json", func(in, out string) []string {
			return []string{"replay", in, "--target", "http://127.0.0.1:1", "--out", out}
		}},
		{"analyze", "json", "run.json", func(in, out string) []string { return []string{"analyze", in} }},
		{"analyze vllm result", "json", "", func(in, out string) []string { return []string{"analyze", in} }},
		{"analyze compare", "json", "run.json", func(in, out string) []string { return []string{"analyze", "compare", in, in} }},
		{"analyze envelope", "json", "run.json", func(in, out string) []string { return []string{"analyze", "envelope", in} }},
		{"sim calibrate", "json", "run.json", func(in, out string) []string { return []string{"sim", "calibrate", in} }},
	}
	for _, c := range commands {
		for shape, make := range shapes {
			t.Run(c.name+"/"+shape, func(t *testing.T) {
				base := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+"-"+strings.ReplaceAll(shape, " ", "-"))
				content := make(valid[c.kind])
				in := base + "." + c.kind
				if c.file != "" {
					in = base
					if err := os.MkdirAll(in, 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(in, c.file), content, 0o644); err != nil {
						t.Fatal(err)
					}
				} else if err := os.WriteFile(in, content, 0o644); err != nil {
					t.Fatal(err)
				}
				code, _, errOut := runCLI(t, c.args(in, base+"-out")...)
				if code == 0 {
					t.Fatalf("exit 0 on %s input", shape)
				}
				if strings.Contains(errOut, "panic") || strings.Contains(errOut, "goroutine ") || strings.Contains(errOut, ".go:") {
					t.Fatalf("a panic or stack trace:\n%s", errOut)
				}
				msg := strings.TrimSpace(errOut)
				if msg == "" || strings.Count(msg, "\n") > 2 || len(msg) > 600 {
					t.Fatalf("not a short clear message (%d bytes):\n%s", len(msg), msg)
				}
				if !strings.Contains(msg, filepath.Base(in)) {
					t.Errorf("the message does not name the input %s: %s", filepath.Base(in), msg)
				}
			})
		}
	}
}
