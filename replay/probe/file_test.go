package probe

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/servetrace/servetrace/internal/regfile"
)

// TestReadFile reads the good fixture: defaults filled in, empty and blank
// lines skipped, and each probe grading as its grader says.
func TestReadFile(t *testing.T) {
	got, err := ReadFile(filepath.Join("testdata", "good.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Probe{
		{Kind: KindUser, Prompt: "What is the capital of France? Reply with one word.", Expect: "Paris", Grader: GraderExact, MaxTokens: 256},
		{Kind: KindUser, Prompt: "In which year did the Berlin Wall fall? Reply with the year only.", Expect: "1989|nineteen eighty-nine", Grader: GraderRegex, MaxTokens: 16},
		{Kind: KindUser, Prompt: `Reply with a JSON object whose field "result" holds an object with "sum": 2 + 2.`, Expect: "4", Grader: GraderJSONField, Field: "result.sum", MaxTokens: 64},
		{Kind: KindUser, Prompt: "Say hello.", Expect: "(?i)hello[.!]?", Grader: GraderRegex, MaxTokens: 32768},
		{Kind: KindUser, Prompt: "Spell cat backwards.", Expect: "tac", Grader: GraderExact, MaxTokens: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("%d probes, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g := got[i]
		g.re = nil
		if g != want[i] {
			t.Errorf("probe %d\n got %+v\nwant %+v", i, g, want[i])
		}
	}
	grades := []struct {
		probe  int
		answer string
		want   bool
	}{
		{0, "Paris", true}, {0, "paris", false},
		{1, "1989", true}, {1, "nineteen eighty-nine", true}, {1, "1989 or so", false},
		{2, "```json\n{\"result\": {\"sum\": 4}}\n```", true}, {2, `{"result": {"sum": 5}}`, false},
		{3, "Hello!", true}, {3, "Hello there", false},
		{4, "`tac`", true}, {4, "cat", false},
	}
	for _, g := range grades {
		if got[g.probe].Grade(g.answer) != g.want {
			t.Errorf("probe %d: Grade(%q) = %v", g.probe, g.answer, !g.want)
		}
	}
}

// TestReadFileErrors: each bad fixture has its bad line at line 3; the
// error names the file and line and says what would fix it, and quotes
// neither the prompt nor the answer.
func TestReadFileErrors(t *testing.T) {
	tests := []struct{ file, want string }{
		{"bad_json", "not valid JSON"},
		{"unterminated", "does not end on this line"},
		{"not_object", "a JSON array, not an object"},
		{"two_values", "more than one JSON value on the line"},
		{"no_prompt", `no "prompt"`},
		{"empty_prompt", `"prompt" is empty`},
		{"prompt_not_string", `"prompt" is a JSON number; it must be a string`},
		{"no_expected", `no "expected"`},
		{"unknown_grader", `"grader" is "fuzzy"; use exact, regex or json-field`},
		{"bad_regex", `"expected" is not an RE2 pattern (missing closing ))`},
		{"long_regex", `"expected" is a pattern of 4097 bytes; a regex probe's may have at most 4096`},
		{"huge_regex_program", `"expected" compiles to 3008 instructions; a regex probe's pattern may compile to at most 2048`},
		{"json_field_no_field", `grader json-field needs "field"`},
		{"field_without_json_field", `"field" is set but "grader" is exact; set "grader": "json-field"`},
		{"bad_field_path", `"field" "a..b" has an empty part`},
		{"max_tokens_zero", `"max_tokens" is 0; use 1 to 32768`},
		{"max_tokens_large", `"max_tokens" is 40000; use 1 to 32768`},
		{"max_tokens_fraction", `"max_tokens" is a JSON number 1.5; it must be an integer`},
		{"unknown_field", `unknown field "expect"; the fields are prompt, expected`},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", "bad", tc.file+".jsonl")
			probes, err := ReadFile(path)
			if err == nil {
				t.Fatalf("no error; read %d probes", len(probes))
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, path+":3: ") || !strings.Contains(msg, tc.want) {
				t.Errorf("error %q, want %q and %q", msg, path+":3: ", tc.want)
			}
			if strings.Contains(msg, "SECRET") {
				t.Errorf("error %q quotes the probe", msg)
			}
		})
	}
}

// TestReadBounds: the limits on probes and line length, blank files, byte
// order marks and CRLF line ends, and read errors.
func TestReadBounds(t *testing.T) {
	const line = `{"prompt": "p", "expected": "e"}` + "\n"
	long := func(n int) string { // a good line of n bytes
		pad := n - len(`{"prompt": "", "expected": "e"}`)
		return `{"prompt": "` + strings.Repeat("p", pad) + `", "expected": "e"}`
	}
	tests := []struct {
		name, text string
		probes     int
		err        string
	}{
		{"one more than the most probes", strings.Repeat(line, maxFileProbes+1), 0, "f.jsonl:100001: more than 100000 probes"},
		{"the most probes, blank lines around", "\n" + strings.Repeat(line, maxFileProbes) + "\n \n", maxFileProbes, ""},
		{"a line of 1 MiB", line + long(maxLineBytes) + "\r\n", 2, ""},
		{"a line a byte over 1 MiB", line + long(maxLineBytes+1) + "\n" + line, 0, "f.jsonl:2: line longer than 1 MiB"},
		{"a line of 3 MiB", line + "\n" + long(3*maxLineBytes) + "\n", 0, "f.jsonl:3: line longer than 1 MiB"},
		{"past the most bytes", strings.Repeat(long(maxLineBytes)+"\n", maxFileBytes/maxLineBytes+1), 0, "f.jsonl:64: the file passes 64 MiB"},
		{"empty", "", 0, "f.jsonl: no probes"},
		{"blank lines only", "\n \r\n\t\n", 0, "f.jsonl: no probes"},
		{"byte order mark and CRLF", "\uFEFF" + strings.ReplaceAll(line+line, "\n", "\r\n"), 2, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			probes, err := read(strings.NewReader(tc.text), "f.jsonl")
			switch {
			case tc.err == "" && (err != nil || len(probes) != tc.probes):
				t.Errorf("%d probes, %v; want %d", len(probes), err, tc.probes)
			case tc.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.err)):
				t.Errorf("error %v, want %q", err, tc.err)
			}
		})
	}
	errRead := errors.New("disk on fire")
	if _, err := read(iotest.ErrReader(errRead), "f.jsonl"); !errors.Is(err, errRead) || !strings.HasPrefix(err.Error(), "f.jsonl:1: reading") {
		t.Errorf("read error: %v", err)
	}
}

// TestReadFileNotAFile: a missing path and a directory are refused, naming
// the path.
func TestReadFileNotAFile(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.jsonl")
	if _, err := ReadFile(missing); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := ReadFile(dir); !errors.Is(err, regfile.ErrNotRegular) || !strings.Contains(err.Error(), dir) {
		t.Errorf("directory: %v", err)
	}
}
