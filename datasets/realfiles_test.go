package datasets

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGatewayLogsAsWritten (issue 41): request logs exactly as real
// gateways write them, which earlier servetrace refused or misread.
//   - LiteLLM's SpendLogs rows keep messages as the text "{}" unless told
//     to store prompts (the lengths then come from usage) or as the JSON
//     text of the list; given without a mapping, LiteLLM's own keys pick
//     the litellm preset, with a note saying so.
//   - nginx writes $time_local as the response ends, in the Common Log
//     Format's time, beside $request_time, the duration in seconds: the
//     arrival is the end less the duration. A mapping file that starts
//     from a preset and names a field replaces the preset's paths for it.
func TestGatewayLogsAsWritten(t *testing.T) {
	t.Run("LiteLLM SpendLogs without a mapping", func(t *testing.T) {
		rows, m, _ := convertWith(t, []string{"testdata/logs/litellm-spendlogs.jsonl"}, ConvertOptions{})
		if len(rows) != 2 {
			t.Fatalf("%d rows, want 2", len(rows))
		}
		want := []struct {
			ts      time.Time
			in, out int64
			e2e     float64
		}{{time.Date(2025, 1, 14, 11, 6, 14, 123e6, time.UTC), 120, 30, 1333}, {time.Date(2025, 1, 14, 11, 6, 16, 0, time.UTC), 200, 60, 2000}}
		for i, w := range want {
			r := rows[i]
			if !r.Time().Equal(w.ts) || r.InputTokens != w.in || r.OutputTokens != w.out || r.E2EMs == nil || *r.E2EMs != w.e2e || r.Model != "gpt-4o-mini" {
				t.Errorf("row %d: ts %v in %d out %d e2e %v model %q; want %+v", i, r.Time(), r.InputTokens, r.OutputTokens, r.E2EMs, r.Model, w)
			}
		}
		if len(rows[1].PrefixBlocks) == 0 || len(rows[0].PrefixBlocks) != 0 {
			t.Errorf("prefix blocks %v and %v: want none for the row whose messages were not stored, some for the one whose were", rows[0].PrefixBlocks, rows[1].PrefixBlocks)
		}
		if !strings.Contains(strings.Join(m.Notes, "\n"), "read with the litellm mapping preset") {
			t.Errorf("notes %q", m.Notes)
		}
	})
	nginx := []struct {
		ts  time.Time
		e2e float64
	}{{time.Date(2025, 1, 14, 11, 6, 13, 468e6, time.UTC), 532}, {time.Date(2025, 1, 14, 11, 6, 14, 750e6, time.UTC), 1250}}
	for _, c := range []struct {
		mapping string
		shift   float64 // ms the upstream's time is short of nginx's
	}{{"testdata/logs/nginx-access.map", 0}, {"testdata/logs/nginx-upstream.map", 1}} {
		t.Run(filepath.Base(c.mapping), func(t *testing.T) {
			rows, _, _ := convertLog(t, "testdata/logs/nginx-access.jsonl", c.mapping)
			if len(rows) != 2 {
				t.Fatalf("%d rows, want 2", len(rows))
			}
			for i, w := range nginx {
				r := rows[i]
				e2e := w.e2e
				ts := w.ts
				if c.shift > 0 {
					e2e = []float64{500, 1200}[i]
					ts = ts.Add(time.Duration((w.e2e - e2e) * float64(time.Millisecond)))
				}
				if !r.Time().Equal(ts) || r.E2EMs == nil || *r.E2EMs != e2e || r.InputTokens != []int64{120, 300}[i] {
					t.Errorf("row %d: arrival %v, e2e %v, in %d; want %v, %v", i, r.Time(), r.E2EMs, r.InputTokens, ts, e2e)
				}
			}
		})
	}
}

// TestLogTimeShapes: the times logs write, each to its instant; a
// duration given where a time belongs is named as one.
func TestLogTimeShapes(t *testing.T) {
	at := time.Date(2025, 1, 14, 11, 6, 14, 0, time.UTC).UnixMicro()
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"14/Jan/2025:11:06:14 +0000", at},
		{"[14/Jan/2025:12:06:14 +0100]", at},
		{"14/Jan/2025:11:06:14.250 +0000", at + 250e3},
		{"2025-01-14T11:06:14+0000", at},
		{"2025-01-14T11:06:14.5Z", at + 500e3},
		{"Tue, 14 Jan 2025 11:06:14 GMT", at},
		{"Tue, 14 Jan 2025 11:06:14 +0000", at},
		{"2025/01/14 11:06:14", at},
		{"1736852774", at},
	} {
		got, err := parseLogTime(c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	if _, err := parseLogTime("0.532"); err == nil || !strings.Contains(err.Error(), "a duration") {
		t.Errorf("a duration as a time: %v", err)
	}
	_, err := Convert(context.Background(), []string{"testdata/logs/nginx-access.jsonl"}, filepath.Join(t.TempDir(), "x"),
		ConvertOptions{Options: Options{Log: LogOptions{Salt: testSalt(t), Mapping: mustMapping(t, "ts: request_time\nprompt_tokens: usage_prompt\n")}}})
	if !errors.Is(err, ErrNothingConverted) || !strings.Contains(err.Error(), "a duration (nginx's request_time is one), not a time") {
		t.Errorf("request_time as the arrival: %v", err)
	}
}

// mustMapping parses mapping text.
func mustMapping(t *testing.T, text string) *Mapping {
	t.Helper()
	m, err := parseMapping("test", text)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
