package datasets

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

func TestBurstGPT(t *testing.T) {
	anchor := time.Date(2023, 5, 1, 0, 0, 0, 0, time.UTC)
	conv := func(file string) ([]trace.Request, *trace.Manifest, string) {
		t.Helper()
		out := filepath.Join(t.TempDir(), "b")
		m, err := Convert(context.Background(), []string{file}, out, ConvertOptions{MaxRejectRatio: -1, Options: Options{Start: anchor, Log: LogOptions{Salt: testSalt(t)}}})
		if err != nil {
			t.Fatal(err)
		}
		rows, _, err := trace.ReadAll(context.Background(), out)
		if err != nil {
			t.Fatal(err)
		}
		return rows, m, out
	}
	rows, m, out := conv("testdata/burstgpt/burstgpt_v1.csv")
	if len(rows) != 4 || m.Rejects != 1 || m.Sources[0].Format != FormatBurstGPT {
		t.Fatalf("%d rows, %d rejects, format %s", len(rows), m.Rejects, m.Sources[0].Format)
	}
	// Whole seconds: the manifest says so, since fits on such times describe
	// the quantizer.
	if m.Sources[0].TimeResolutionUs != 1e6 || !m.TimesRelative {
		t.Errorf("time resolution %d µs, relative %v; want 1 s and relative", m.Sources[0].TimeResolutionUs, m.TimesRelative)
	}
	r := rows[2]
	if r.Time() != anchor.Add(118*time.Second) || r.Model != "GPT-4" || r.InputTokens != 417 || r.OutputTokens != 276 || r.Features[0] != "conversation_log" {
		t.Errorf("row 3: %v %s %d/%d %v", r.Time(), r.Model, r.InputTokens, r.OutputTokens, r.Features)
	}
	if rows[3].OutputTokens != 0 || rows[3].Features[0] != "api_log" {
		t.Errorf("a failure (0 response tokens) is kept as it is: %+v", rows[3].Shape)
	}
	rej, _ := os.ReadFile(filepath.Join(out, trace.RejectsName))
	if !strings.Contains(string(rej), "Request tokens is not a whole number") {
		t.Errorf("rejects: %s", rej)
	}

	rows, _, _ = conv("testdata/burstgpt/burstgpt_sessions.csv")
	s1 := []trace.Request{rows[0], rows[2], rows[3]}
	for i, r := range s1 {
		if r.SessionID != s1[0].SessionID || r.Turn != int32(i) || r.SessionID == "s-1" {
			t.Errorf("session s-1 turn %d: %q/%d", i, r.SessionID, r.Turn)
		}
	}
	if rows[1].SessionID == s1[0].SessionID {
		t.Error("two sessions merged")
	}
	// Think time: turn 1 at 30 s after turn 0 ended at 12.5 s; turn 2 at 41 s
	// after turn 1 ended at 33 s.
	if *s1[1].ThinkTimeMs != 17500 || *s1[2].ThinkTimeMs != 8000 || *s1[0].E2EMs != 2500 {
		t.Errorf("think times %v, %v; e2e %v", *s1[1].ThinkTimeMs, *s1[2].ThinkTimeMs, *s1[0].E2EMs)
	}
}
