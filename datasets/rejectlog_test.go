package datasets

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

// TestFailedConversionKeepsRejects: one fixture per reason class a request
// log is rejected for (testdata/logs/rejects, written for this test in the
// openai preset's shape). Whether nothing converted or too many lines were
// rejected, the conversion fails, leaves no trace (no parts, no manifest,
// nothing staged beside it) but OUT/_rejects.jsonl with every rejected
// line, and its error names each reason with its count and first line.
func TestFailedConversionKeepsRejects(t *testing.T) {
	bi := loadBatchInput(t)
	for _, c := range []struct {
		file    string
		want    string // in the error: count, reason and first line
		rejects int
		errIs   error
	}{
		{"no_ts.jsonl", "3 lines: ts: no timestamp at timestamp | start_time | created_at | @timestamp (the arrival time), nor an end time and a duration to take it from; first at line 1", 3, ErrNothingConverted},
		{"bad_ts.jsonl", "2 lines: ts: not an RFC 3339 date, a common log time or an epoch number; first at line 1", 2, ErrNothingConverted},
		{"no_tokens.jsonl", "2 lines: prompt_tokens: no token count at response.usage.prompt_tokens | response_body.usage.prompt_tokens | response.body.usage.prompt_tokens | usage.prompt_tokens, and no messages or prompt to count; first at line 1", 2, ErrNothingConverted},
		{"bad_json.jsonl", "2 lines: malformed JSON: syntax error at byte 13; first at line 2; 1 line: malformed JSON: invalid JSON; first at line 1", 3, ErrNothingConverted},
		{"string_body.jsonl", "2 lines: request: a string holding JSON that does not parse (invalid JSON); first at line 1", 2, ErrNothingConverted},
		{"cut_short.json", "1 line: malformed JSON: the input ends inside this document (truncated?); first at line 20", 1, ErrTooManyRejects},
		{"negative.jsonl", "1 line: completion_tokens: negative; first at line 1", 1, ErrNothingConverted},
		{"bad_messages.jsonl", "1 line: messages: not an array; first at line 1", 1, ErrNothingConverted},
		{"out_of_range.jsonl", "1 line: temperature", 1, ErrNothingConverted},
		{"disorder.jsonl", "1 line: ts: 2h0m0s earlier than a row before it (more than the disorder allowed); first at line 2", 1, ErrTooManyRejects},
		{"batch_unjoined.jsonl", "1 line: custom_id: not in the batch input batch_input.jsonl (another batch's input?); first at line 1", 1, ErrNothingConverted},
	} {
		t.Run(c.file, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "bucket")
			o := ConvertOptions{Options: Options{Log: LogOptions{Salt: testSalt(t)}}}
			if c.file == "bad_json.jsonl" {
				o.Format = FormatOpenAILog // its first line is what is broken
			}
			if strings.HasPrefix(c.file, "batch") {
				o.Log.BatchInput = bi
			}
			_, err := Convert(context.Background(), []string{filepath.Join("testdata/logs/rejects", c.file)}, out, o)
			if !errors.Is(err, c.errIs) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), filepath.Join(out, trace.RejectsName)) {
				t.Fatalf("error %v\nwant %v with %q and the rejects file's path", err, c.errIs, c.want)
			}
			ents, _ := os.ReadDir(out)
			if len(ents) != 1 || ents[0].Name() != trace.RejectsName {
				t.Errorf("output holds %v; want only %s", ents, trace.RejectsName)
			}
			if rs := rejectLines(t, out); len(rs) != c.rejects {
				t.Errorf("%d rejects in the file, want %d", len(rs), c.rejects)
			}
			if st, err := os.Stat(filepath.Join(out, trace.RejectsName)); err != nil || st.Mode().Perm() != createdPerm(t) {
				t.Errorf("rejects file: %v, %v; want mode %v (0644 less the umask)", st, err, createdPerm(t))
			}
			if side, _ := os.ReadDir(filepath.Dir(out)); len(side) != 1 {
				t.Errorf("beside the output: %v; want nothing staged left", side)
			}
			// What a failed conversion left is no obstacle to the next one.
			if _, err := Convert(context.Background(), []string{"testdata/logs/openai.jsonl"}, out, ConvertOptions{MaxRejectRatio: -1, Options: Options{Log: LogOptions{Salt: testSalt(t)}}}); err != nil {
				t.Errorf("converting into the same output afterwards: %v", err)
			}
		})
	}
}

// createdPerm is the mode every output file gets: 0644 less the umask.
func createdPerm(t *testing.T) os.FileMode {
	p := filepath.Join(t.TempDir(), "probe")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

// TestFailedForceKeepsOldBucket: a failing conversion over an earlier
// bucket (Force) leaves that bucket exactly as it was, its rejects file
// included, and says the new rejects were not written there.
func TestFailedForceKeepsOldBucket(t *testing.T) {
	_, man, out := convertLog(t, "testdata/logs/openai.jsonl", "openai")
	before, _ := os.ReadFile(filepath.Join(out, trace.RejectsName))
	_, err := Convert(context.Background(), []string{"testdata/logs/rejects/no_ts.jsonl"}, out, ConvertOptions{Force: true, Options: Options{Log: LogOptions{Salt: testSalt(t)}}})
	if !errors.Is(err, ErrNothingConverted) || !strings.Contains(err.Error(), "holds an earlier trace, left as it was") {
		t.Fatalf("error %v", err)
	}
	after, _ := os.ReadFile(filepath.Join(out, trace.RejectsName))
	m2, err := trace.ReadManifest(out)
	if err != nil || m2.Rows != man.Rows || string(after) != string(before) {
		t.Errorf("the earlier bucket changed: %v rows %d (was %d), rejects %q (was %q)", err, m2.Rows, man.Rows, after, before)
	}
}

// TestRejectSummaryNamesFilesAndTop: with several inputs each reason names
// the file of its first line; past three reasons the rest are counted.
func TestRejectSummaryNamesFilesAndTop(t *testing.T) {
	l := newRejectLog(discardSink{}, filepath.Join(t.TempDir(), "o"), "")
	defer l.discard()
	for i, r := range []trace.Reject{
		{File: "a.jsonl", Line: 3, Reason: "x: bad 1"}, {File: "b.jsonl", Line: 1, Reason: "x: bad 2"}, {File: "a.jsonl", Line: 4, Reason: "y"},
		{File: "b.jsonl", Line: 2, Reason: "z"}, {File: "b.jsonl", Line: 5, Reason: "w"}, {File: "b.jsonl", Line: 6, Reason: "w"}, {File: "a.jsonl", Line: 9, Reason: "x: bad 77"},
	} {
		if err := l.Reject(r); err != nil {
			t.Fatal(i, err)
		}
	}
	want := "3 lines: x: bad 1; first at a.jsonl line 3; 2 lines: w; first at b.jsonl line 5; 1 line: y; first at a.jsonl line 4; and 1 line for 1 other reason"
	if got := l.summary(); got != want {
		t.Errorf("summary\n%s\nwant\n%s", got, want)
	}
}

type discardSink struct{}

func (discardSink) Write(trace.Request) error { return nil }
func (discardSink) Reject(trace.Reject) error { return nil }
