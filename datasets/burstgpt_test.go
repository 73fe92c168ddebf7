package datasets

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/internal/memcap"
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

// countSink counts rows and rejects, keeping none.
type countSink struct{ rows, rejects int64 }

func (c *countSink) Write(trace.Request) error { c.rows++; return nil }
func (c *countSink) Reject(trace.Reject) error { c.rejects++; return nil }

// burstGPTSessionRows is a BurstGPT trace of n rows, each of its own
// session, whose id is over 1000 bytes long.
type burstGPTSessionRows struct {
	n, i int
	buf  []byte
}

func (r *burstGPTSessionRows) Read(p []byte) (int, error) {
	if r.i == 0 && len(r.buf) == 0 {
		r.buf = append(r.buf, "Timestamp,Session ID,Request tokens,Response tokens\n"...)
	}
	for len(r.buf) < len(p) && r.i < r.n {
		r.i++
		r.buf = strconv.AppendInt(r.buf, int64(r.i/1000), 10)
		r.buf = append(r.buf, ',')
		r.buf = append(r.buf, longSessionID...)
		r.buf = strconv.AppendInt(r.buf, int64(r.i), 10)
		r.buf = append(r.buf, ",10,5\n"...)
	}
	if len(r.buf) == 0 {
		return 0, io.EOF
	}
	k := copy(p, r.buf)
	r.buf = r.buf[k:]
	return k, nil
}

var longSessionID = strings.Repeat("s", 1000)

// TestLongBurstGPTSessionsAreBounded (issue 46, round 4, item 1): a
// BurstGPT trace of 400,000 sessions with ids of 1000-odd bytes converts
// within 320 MiB: the reader holds its sessions by a 64-bit keyed id,
// never the raw one, and at most 2^20 of them
// (TestBurstGPTSessionsForgetTheLeastRecent). Before, every session's raw
// id stayed a map key (some 420 MB).
func TestLongBurstGPTSessionsAreBounded(t *testing.T) {
	memcap.Run(t, 320<<20, func(t *testing.T) {
		const n = 400_000
		var sink countSink
		st, err := Read(context.Background(), &burstGPTSessionRows{n: n}, Options{Name: "sessions.csv", Format: FormatBurstGPT, Log: LogOptions{Salt: testSalt(t)}}, &sink)
		if err != nil || st.Rows != n || sink.rows != n {
			t.Fatalf("%d rows (%d at the sink), error %v; want %d", st.Rows, sink.rows, err, n)
		}
	})
}

// TestBurstGPTSessionsForgetTheLeastRecent: past its bound, the session
// table forgets the session least recently seen; a session seen again
// after that starts at turn 0.
func TestBurstGPTSessionsForgetTheLeastRecent(t *testing.T) {
	b := newBurstSessions(3)
	for _, c := range []struct {
		key       int64
		turn      int32 // the turn this row gets
		forgotten int64
	}{
		{1, 0, 0}, {2, 0, 0}, {1, 1, 0}, {3, 0, 0},
		{4, 0, 1}, // 2 is the least recent: forgotten
		{1, 2, 1}, // 1 is held
		{2, 0, 2}, // 2 again: a new session; 3 forgotten
		{3, 0, 3}, // 4 forgotten
		{1, 3, 3},
	} {
		e := b.seen(c.key)
		e.turn++
		if e.turn != c.turn || b.forgotten != c.forgotten {
			t.Fatalf("session %d: turn %d, %d forgotten; want turn %d, %d forgotten", c.key, e.turn, b.forgotten, c.turn, c.forgotten)
		}
	}
	if len(b.index) != 3 {
		t.Errorf("%d sessions held; want 3", len(b.index))
	}
}
