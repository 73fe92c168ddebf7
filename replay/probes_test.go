package replay

import (
	"bytes"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/replay/probe"
	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/tracetest"
)

// TestProbesAreGraded: a third of the requests get a probe beside them,
// the same ones in the check and the schedule; the simulator answers each
// right, and wrong when it corrupts every answer; no probe's answer or
// prompt reaches the run's files.
func TestProbesAreGraded(t *testing.T) {
	wl := workload(t, 120, 2*time.Millisecond)
	run := func(corrupt float64) ([]trace.Result, *trace.RunInfo, string) {
		o := fastSim()
		o.CorruptShare = corrupt
		opts := DefaultOptions()
		opts.Target, opts.Probes, opts.Seed = startSim(t, o), 1.0/3, 5
		dir := filepath.Join(t.TempDir(), "run")
		rows, info := runAndRead(t, wl, dir, opts)
		return rows, info, dir
	}
	rows, info, dir := run(0)
	// The probes expected: the prober's draw over the workload's ids.
	pr := newProber(&Options{Requests: Requests{Probes: 1.0 / 3}, Schedule: Schedule{Seed: 5}})
	want := map[string]*probe.Probe{}
	for _, r := range rows {
		if r.Probe == "" {
			if p := pr.probeFor(&trace.Request{Identity: r.Identity}); p != nil {
				want[probeIDPrefix+r.RequestID] = p
			}
		}
	}
	if len(want) < 25 || len(want) > 55 {
		t.Fatalf("%d of 120 requests drew a probe; want about 40", len(want))
	}
	got := 0
	for _, r := range rows {
		if r.Probe == "" {
			continue
		}
		got++
		p := want[r.RequestID]
		if p == nil || r.Probe != p.Kind {
			t.Errorf("%s: kind %q, not a probe drawn (%v)", r.RequestID, r.Probe, p)
			continue
		}
		if r.Outcome != trace.OutcomeOK || r.ProbeCorrect == nil || !*r.ProbeCorrect {
			t.Errorf("%s (%s): outcome %s, correct %v; the simulator answers probes right", r.RequestID, r.Probe, r.Outcome, r.ProbeCorrect)
		}
	}
	if got != len(want) || info.Scheduled != int64(120+len(want)) {
		t.Errorf("%d probe results, %d scheduled; want %d and %d", got, info.Scheduled, len(want), 120+len(want))
	}
	// Neither a probe's answer nor its prompt is kept anywhere.
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := os.ReadFile(path)
		for _, p := range want {
			if p.Kind == probe.KindCopy && bytes.Contains(b, []byte(p.Expect)) || bytes.Contains(b, []byte(p.Prompt)) {
				t.Errorf("%s holds a probe's %s text", path, p.Kind)
				return fs.SkipAll
			}
		}
		return nil
	})
	bad, _, _ := run(1)
	for _, r := range bad {
		if r.Probe != "" && (r.ProbeCorrect == nil || *r.ProbeCorrect) {
			t.Errorf("%s: correct %v against a server answering every request wrong", r.RequestID, r.ProbeCorrect)
		}
		if r.Probe == "" && r.ProbeCorrect != nil || strings.HasPrefix(r.RequestID, probeIDPrefix) != (r.Probe != "") {
			t.Errorf("%s: probe %q, correct %v", r.RequestID, r.Probe, r.ProbeCorrect)
		}
	}
}

// TestProbeShareIsUniform: over ids as alike as r0 … r9999, the share of
// requests drawing a probe is the share asked, within four standard
// deviations, at several shares and seeds.
func TestProbeShareIsUniform(t *testing.T) {
	for _, c := range []struct {
		share float64
		seed  uint64
	}{{0.3, 0}, {0.3, 2}, {0.05, 7}, {0.9, 1}} {
		pr := newProber(&Options{Requests: Requests{Probes: c.share}, Schedule: Schedule{Seed: c.seed}})
		n, hits := 10_000, 0
		for i := range n {
			if pr.probeFor(&trace.Request{Identity: trace.Identity{RequestID: "r" + strconv.Itoa(i)}}) != nil {
				hits++
			}
		}
		mean, sd := c.share*float64(n), math.Sqrt(float64(n)*c.share*(1-c.share))
		if math.Abs(float64(hits)-mean) > 4*sd {
			t.Errorf("share %g, seed %d: %d of %d drew a probe; want %.0f ± %.0f", c.share, c.seed, hits, n, mean, 4*sd)
		}
	}
}

// TestProbeGradedOffTheSendPath (issue 46 item 9): grading a probe's
// answer does not hold the sender: in closed loop with one worker, the
// request after a probe reaches the server while that probe's grade is
// still running (a grade inline on the send path held it: a 900 KB
// pattern made five requests take 138 s).
func TestProbeGradedOffTheSendPath(t *testing.T) {
	arrived := make(chan string, 16)
	srv := newListener(t, func(l *listener, w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			arrived <- strings.TrimPrefix(r.Header.Get("X-Request-Id"), "run-")
		}
		okServer(w, r)
	})
	reqs := make([]trace.Request, 2)
	for i := range reqs {
		reqs[i] = trace.Request{Identity: trace.Identity{RequestID: "r" + strconv.Itoa(i)}, TS: time.Date(2025, 1, 1, 0, 0, 0, i*1000, time.UTC).UnixMicro(),
			Shape: trace.Shape{InputTokens: 4, OutputTokens: 3, MaxTokens: 3, API: trace.APIChat, Stream: true, N: 1}}
	}
	graded := make(chan bool, 4)
	defer func(g func(*trace.Result, *probe.Probe, []byte)) { gradeProbe = g }(gradeProbe)
	first := true
	gradeProbe = func(res *trace.Result, p *probe.Probe, answer []byte) {
		if first { // the first probe's grade waits for the next request to arrive
			first = false
			timeout := time.After(10 * time.Second)
			for seen := false; !seen; {
				select {
				case id := <-arrived:
					seen = id == "r1"
				case <-timeout:
					graded <- false
					res.ProbeCorrect = new(true)
					return
				}
			}
			graded <- true
		}
		res.ProbeCorrect = new(true)
	}
	opts := DefaultOptions()
	opts.Target, opts.RunID, opts.Concurrency, opts.Probes = srv.srv.URL, "run", 1, 1
	rows, _ := runAndRead(t, tracetest.WriteWorkload(t, reqs), filepath.Join(t.TempDir(), "run"), opts)
	if len(rows) != 4 {
		t.Fatalf("%d rows; want 2 requests and their probes", len(rows))
	}
	if !<-graded {
		t.Error("the request after a probe was not sent while the probe's grade ran: grading holds the sender")
	}
}

// TestProbeAnswerCutIsWrong (issue 46 item 9): a probe's answer longer
// than the text kept (maxKeptReply) is graded wrong, unread, and noted,
// though its first maxKeptReply bytes are the expected answer.
func TestProbeAnswerCutIsWrong(t *testing.T) {
	piece := strings.Repeat("a", 64<<10)
	srv := newListener(t, func(l *listener, w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			okServer(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for range maxKeptReply/len(piece) + 1 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", piece)
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	})
	q := trace.Request{Identity: trace.Identity{RequestID: "r"}, TS: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro(),
		Shape: trace.Shape{InputTokens: 4, OutputTokens: 3, MaxTokens: 3, API: trace.APIChat, Stream: true, N: 1}}
	opts := DefaultOptions()
	opts.Target, opts.RunID, opts.Probes = srv.srv.URL, "run", 1
	opts.UserProbes = []probe.Probe{{Kind: probe.KindUser, Prompt: "say a lot", Expect: strings.Repeat("a", maxKeptReply), Grader: probe.GraderExact, MaxTokens: 16}}
	rows, info := runAndRead(t, tracetest.WriteWorkload(t, []trace.Request{q}), filepath.Join(t.TempDir(), "run"), opts)
	for _, r := range rows {
		if r.Probe != "" && (r.Outcome != trace.OutcomeOK || r.ProbeCorrect == nil || *r.ProbeCorrect) {
			t.Errorf("%s: %s, correct %v; want ok and graded wrong", r.RequestID, r.Outcome, r.ProbeCorrect)
		}
	}
	if !strings.Contains(strings.Join(info.Notes, "\n"), "probe answers of 1 MiB or more were graded wrong, unread") {
		t.Errorf("notes %q; want the cut answer noted", info.Notes)
	}
}
