package datasets

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The fuzz targets feed every input parser arbitrary bytes. Seeds are the
// testdata fixtures (and testdata/fuzz/<Target>/ for cases fuzzing found);
// make test-fuzz runs each for a few seconds, CI included.
//
// Invariants: no panic; every line is a row or a reject, never both; no row
// has a negative length or fewer prefix blocks than its length implies; and
// a reject's reason never quotes the input (checked with a marker that only
// the input contains).

const fuzzMarker = "QQmarkerQQ"

func seedFiles(f *testing.F, patterns ...string) {
	for _, p := range patterns {
		files, _ := filepath.Glob(p)
		for _, file := range files {
			if b, err := os.ReadFile(file); err == nil {
				f.Add(b)
			}
		}
	}
}

func checkRead(t *testing.T, data []byte, opts Options) {
	t.Helper()
	var sink memSink
	st, err := Read(context.Background(), bytes.NewReader(data), opts, &sink)
	if err != nil {
		return // an unreadable source is an error, which is fine
	}
	// A line holds at most one row (ShareGPT aside: a conversation, on one
	// line or many, gives a row per human turn).
	lines := int64(bytes.Count(data, []byte("\n")) + 1)
	if opts.Format != FormatShareGPT && st.Rows+st.Rejects > lines {
		t.Fatalf("%d rows + %d rejects from %d lines", st.Rows, st.Rejects, lines)
	}
	for _, r := range sink.rows {
		if r.InputTokens < 0 || r.OutputTokens < 0 || r.MaxTokens < 0 {
			t.Fatalf("negative lengths: %+v", r.Shape)
		}
	}
	for _, r := range sink.rejects {
		if strings.Contains(r.Reason, fuzzMarker) {
			t.Fatalf("a reject quotes the input: %q", r.Reason)
		}
	}
}

func FuzzReadAzure(f *testing.F) {
	f.Add([]byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n"))
	f.Add([]byte("TIMESTAMP,ContextTokens,GeneratedTokens\n" + fuzzMarker + ",-1,x\n"))
	f.Fuzz(func(t *testing.T, data []byte) { checkRead(t, data, Options{Name: "fuzz", Format: FormatAzure}) })
}

func FuzzReadMooncake(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 600, "output_length": 6, "hash_ids": [0, 1]}` + "\n"))
	f.Add([]byte(`{"timestamp": "` + fuzzMarker + `", "input_length": 1}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkRead(t, data, Options{Name: "fuzz", Format: FormatMooncake})
	})
}

func FuzzReadOpenAILog(f *testing.F) {
	seedFiles(f, "testdata/logs/*.jsonl")
	seedFiles(f, "testdata/logs/*.json") // pretty-printed documents, arrays
	f.Add([]byte(`{"timestamp": 1740823200, "request": {"messages": [{"role": "user", "content": "` + fuzzMarker + `"}]}, "response": {"usage": {"completion_tokens": "` + fuzzMarker + `"}}}` + "\n"))
	maps := map[string]*Mapping{}
	for _, name := range MappingPresets() {
		m, err := LoadMapping(name)
		if err != nil {
			f.Fatal(err)
		}
		maps[name] = m
	}
	salt := testSalt(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, m := range maps {
			var sink memSink
			st, err := Read(context.Background(), bytes.NewReader(data), Options{Name: "fuzz", Format: FormatOpenAILog, Log: LogOptions{Mapping: m, Salt: salt}}, &sink)
			if err != nil {
				continue
			}
			for _, r := range sink.rows {
				if r.InputTokens < 0 || r.OutputTokens < 0 {
					t.Fatalf("negative lengths: %+v", r.Shape)
				}
				if want := (r.InputTokens + int64(st.BlockSize) - 1) / int64(st.BlockSize); len(r.PrefixBlocks) > 0 && int64(len(r.PrefixBlocks)) != want {
					t.Fatalf("%d prefix blocks for %d tokens", len(r.PrefixBlocks), r.InputTokens)
				}
				if strings.Contains(r.Model+r.Adapter+r.SessionID+r.RequestID+r.Tenant, fuzzMarker) {
					t.Fatalf("input text reached an id or name column: %+v", r.Identity)
				}
			}
			for _, r := range sink.rejects {
				if strings.Contains(r.Reason, fuzzMarker) {
					t.Fatalf("a reject quotes the input: %q", r.Reason)
				}
			}
		}
	})
}

func FuzzParseMapping(f *testing.F) {
	for _, name := range MappingPresets() {
		f.Add(mappingPresets[name])
	}
	f.Add("ts: a.b | c.0.d\n# comment\nmodel: m\n")
	f.Fuzz(func(t *testing.T, text string) {
		m, err := parseMapping("fuzz", text)
		if err != nil {
			return
		}
		if len(m.Paths["ts"]) == 0 {
			t.Fatal("a mapping without ts was accepted")
		}
		// Looking fields up in an arbitrary record must not panic.
		rec := map[string]any{"a": map[string]any{"b": []any{1, "x"}}, "c": []any{map[string]any{"d": 2}}}
		for _, field := range LogFields {
			m.lookup(rec, field)
		}
	})
}

func FuzzDetect(f *testing.F) {
	f.Add([]byte("TIMESTAMP,ContextTokens,GeneratedTokens"))
	f.Add([]byte(`{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [0]}`))
	f.Add([]byte(`{"request": {}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		if format, err := Detect(line); err == nil && !contains(Formats, format) {
			t.Fatalf("detected unknown format %q", format)
		}
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func FuzzReadBurstGPT(f *testing.F) {
	seedFiles(f, "testdata/burstgpt/*.csv")
	f.Add([]byte("Timestamp,Request tokens,Response tokens\n" + fuzzMarker + ",1,2\n"))
	f.Fuzz(func(t *testing.T, data []byte) { checkRead(t, data, Options{Name: "fuzz", Format: FormatBurstGPT}) })
}

func FuzzReadShareGPT(f *testing.F) {
	seedFiles(f, "testdata/sharegpt/*.json")
	f.Add([]byte(`{"id": 1, "conversations": [{"from": "human", "value": "` + fuzzMarker + `"}]}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkRead(t, data, Options{Name: "fuzz", Format: FormatShareGPT, Log: LogOptions{Salt: testSalt(t)}})
	})
}
