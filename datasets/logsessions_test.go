package datasets

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/internal/memcap"
	"github.com/servetrace/servetrace/trace"
)

// loggedRow is a prepared row of logged session id session, arriving at
// ts and ending e2e later.
func loggedRow(i int, session string, ts int64, e2e time.Duration) prepared {
	ms := float64(e2e.Milliseconds())
	req := trace.Request{Identity: trace.Identity{RequestID: "r-" + strconv.Itoa(i), SessionID: session, Model: "m"}, TS: ts,
		Shape: trace.Shape{InputTokens: 10, OutputTokens: 5, MaxTokens: 5, N: 1, API: trace.APIChat}, E2EMs: &ms}
	return prepared{req: req, endUs: ts + e2e.Microseconds(), logged: true}
}

func newTestLogReader(t testing.TB) *logReader {
	t.Helper()
	lr, _, err := newLogReader(Options{Name: "log", Log: LogOptions{Salt: testSalt(t)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	return lr
}

// TestSessionExpiryHoldsOnlyTheWindow (issue 46, 10): the session linker
// forgets a session idle past the window whatever other rows say. Rows a
// minute apart, each its own session ending a second after it arrives,
// and the first ending six days later (a valid row: e2e under a week):
// by the 600th row, the sessions ended within the 30-minute window of
// the last arrival are held (rows 569 to 599: 31), and the first, whose
// end counts at most an hour past its arrival, is forgotten too. Before,
// the first row's entry stopped expiry and all 600 were held.
func TestSessionExpiryHoldsOnlyTheWindow(t *testing.T) {
	lr := newTestLogReader(t)
	t0 := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for i := range 600 {
		e2e := time.Second
		if i == 0 {
			e2e = 6 * 24 * time.Hour
		}
		if _, err := lr.finish(loggedRow(i, "s-"+strconv.Itoa(i), t0+int64(i)*60e6, e2e)); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
	}
	if len(lr.sessions) != 31 || len(lr.expiry) != 31 {
		t.Errorf("%d sessions held, %d expiry entries; want the 31 of the last 30 minutes", len(lr.sessions), len(lr.expiry))
	}
}

// TestRejectedRowRegistersNothing (issue 46, 10): a row that fails its
// check is rejected before it is ordered or linked: its session is not
// held, and its far-future arrival does not make the rows after it out of
// order. Before, the rejected row entered the session table and the
// expiry list, and the next row was rejected as 30 days out of order.
func TestRejectedRowRegistersNothing(t *testing.T) {
	lr := newTestLogReader(t)
	t0 := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	if _, err := lr.finish(loggedRow(0, "kept", t0, time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := lr.finish(loggedRow(1, "refused", t0+30*24*3600e6, 8*24*time.Hour)) // e2e past a week
	var re *rowError
	if !errors.As(err, &re) {
		t.Fatalf("a row with an e2e of 8 days: error %v; want it rejected", err)
	}
	if _, err := lr.finish(loggedRow(2, "after", t0+60e6, time.Second)); err != nil {
		t.Errorf("the row after the rejected one: %v", err)
	}
	for _, s := range lr.sessions {
		if s.requestID == "r-1" {
			t.Errorf("the rejected row's session is held")
		}
	}
	if len(lr.sessions) != 2 || len(lr.expiry) != 2 {
		t.Errorf("%d sessions held, %d expiry entries; want the 2 accepted rows'", len(lr.sessions), len(lr.expiry))
	}
}

// TestLongSessionLinkerMemoryBounded (issue 46, 10): 2M rows 100 ms apart,
// each its own session, the first ending six days after it arrives, go
// through the linker within 128 MiB: it holds the sessions of the last
// 30 minutes (18,000), not every one. Before, nothing expired after the
// first row and the 2M sessions (about 400 MB) passed the cap.
func TestLongSessionLinkerMemoryBounded(t *testing.T) {
	memcap.Run(t, 128<<20, func(t *testing.T) {
		lr := newTestLogReader(t)
		t0 := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
		const rows = 2_000_000
		for i := range rows {
			e2e := 500 * time.Millisecond
			if i == 0 {
				e2e = 6 * 24 * time.Hour
			}
			if _, err := lr.finish(loggedRow(i, "s-"+strconv.Itoa(i), t0+int64(i)*100e3, e2e)); err != nil {
				t.Fatalf("row %d: %v", i, err)
			}
		}
		if n := len(lr.sessions); n > 18_010 {
			t.Errorf("%d sessions held after %d rows; want those of the last 30 minutes, about 18,000", n, rows)
		}
	})
}

// TestLongSessionLinkerHoldsAtMostItsCap (issue 46, round 4, item 1, the
// class): 2M conversations open at once (one instant, each its own
// logged session) go through the linker within 256 MiB: past its cap
// (here 10,000) it forgets the entry that would expire soonest, and
// says how many it forgot. Before, expiry alone bounded the sessions, and
// rows of one instant never expire: all 2M (some 300 MB) were held.
func TestLongSessionLinkerHoldsAtMostItsCap(t *testing.T) {
	memcap.Run(t, 256<<20, func(t *testing.T) {
		lr := newTestLogReader(t)
		lr.maxSessions = 10_000
		t0 := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
		const rows = 2_000_000
		req := trace.Request{TS: t0}
		for i := range rows {
			req.SessionID, req.RequestID = fmt.Sprintf("%016x", i), "r"
			lr.linkLogged(&req, t0+1000)
		}
		if len(lr.sessions) > 10_000 || lr.forgotten != rows-10_000 {
			t.Errorf("%d sessions held, %d forgotten; want at most 10,000 held and %d forgotten", len(lr.sessions), lr.forgotten, rows-10_000)
		}
		want := fmt.Sprintf("%d conversations were forgotten", rows-10_000)
		if notes := lr.sessionNotes(); len(notes) != 1 || !strings.Contains(notes[0], want) {
			t.Errorf("notes %q; want one saying %q", notes, want)
		}
	})
}

// TestSessionCapHoldsPastStaleEntries: a conversation touched again
// leaves a stale entry in the queue; when it is due soonest, that entry
// heads the queue. Alternating it with new conversations once held every
// new one (20,001 for a cap of 1,000), the forgetting stopping at the
// stale head.
func TestSessionCapHoldsPastStaleEntries(t *testing.T) {
	lr := newTestLogReader(t)
	lr.maxSessions = 1000
	t0 := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	again := trace.Request{TS: t0, Identity: trace.Identity{SessionID: "000000000000000x", RequestID: "r"}}
	for i := range 20_000 {
		lr.linkLogged(&again, t0+1+int64(i))
		fresh := trace.Request{TS: t0, Identity: trace.Identity{SessionID: fmt.Sprintf("%016x", i), RequestID: "r"}}
		lr.linkLogged(&fresh, t0+1_000_000)
	}
	if len(lr.sessions) > 1000 {
		t.Errorf("%d sessions held under a cap of 1,000", len(lr.sessions))
	}
}

// TestLongSessionExpiryQueueIsBounded (the class): one conversation of
// 6M turns at one instant holds one session and an expiry queue of a few
// entries, within 256 MiB. Before, each turn queued a new expiry entry
// and the older ones, no longer its expiry, waited for their time, which
// at one instant never came: 6M entries (192 MB, and its growth).
func TestLongSessionExpiryQueueIsBounded(t *testing.T) {
	memcap.Run(t, 256<<20, func(t *testing.T) {
		lr := newTestLogReader(t)
		t0 := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
		req := trace.Request{TS: t0, Identity: trace.Identity{SessionID: "0123456789abcdef", RequestID: "r"}}
		const turns = 6_000_000
		for i := range turns {
			lr.linkLogged(&req, t0+int64(i%7))
		}
		if len(lr.sessions) != 1 || len(lr.expiry) > 1024+2 || req.Turn != turns-1 {
			t.Errorf("%d sessions, %d expiry entries, last turn %d; want 1 session, at most 1026 entries, turn %d", len(lr.sessions), len(lr.expiry), req.Turn, turns-1)
		}
	})
}
