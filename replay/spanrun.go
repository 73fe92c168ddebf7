package replay

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/spans"
	"github.com/servetrace/servetrace/trace"
)

// SpansName is the run directory's copy of the request spans its span
// receiver kept, as OTLP/JSON lines.
const SpansName = "spans.otlp.jsonl"

// spanRun is a run's span receiver (Watch.CollectSpans): it takes the
// server's request spans during the run and, at its end, waits for the
// last batch and writes the phases. A nil spanRun does nothing.
type spanRun struct {
	c    *spans.Collector
	recv *spans.Receiver
	f    *os.File
}

// listenSpans starts the receiver on CollectSpans for the run's spans, at
// most planned of them. It creates nothing: a port that is taken fails
// the run before its run dir is touched.
func (r *Runner) listenSpans(planned int64) (*spanRun, error) {
	if r.opts.CollectSpans == "" {
		return nil, nil
	}
	c := spans.NewCollector(r.opts.RunID, int(min(max(planned, 1), 1<<30)))
	recv, err := spans.Listen(r.opts.CollectSpans, c, r.opts.AllowRemoteSpans)
	if err != nil {
		return nil, opterr.New("CollectSpans", r.opts.CollectSpans, "%v", err)
	}
	if r.opts.Progress != nil {
		fmt.Fprintf(r.opts.Progress, "receiving the server's spans on %s (OTLP over gRPC, and HTTP at /v1/traces)\n", recv.Addr())
	}
	return &spanRun{c: c, recv: recv}, nil
}

// writeKept creates runDir/SpansName for the spans the receiver keeps. No
// span is kept before the run sends its first request (expect).
func (s *spanRun) writeKept(runDir string) error {
	if s == nil {
		return nil
	}
	f, err := trace.CreateFile(filepath.Join(runDir, SpansName))
	if err != nil {
		return fmt.Errorf("span receiver: %w", err)
	}
	s.f = f
	s.c.WriteKept(f)
	return nil
}

// close stops the receiver of a run that did not start.
func (s *spanRun) close() {
	if s == nil {
		return
	}
	s.recv.Close()
	if s.f != nil {
		s.f.Close()
	}
}

// expect names a request the run sends, whose span the receiver may
// keep: a span of a request the run did not send is made up.
func (s *spanRun) expect(requestID string) {
	if s != nil {
		s.c.Expect(requestID)
	}
}

// finish waits up to wait for the spans of the run's ok requests
// (engines export in batches, seconds after a request ends; not at all
// once ctx is done), stops the receiver, writes the phases and records
// what became of the spans in info.
func (s *spanRun) finish(ctx context.Context, runDir string, info *trace.RunInfo, wait time.Duration, note func(string)) error {
	if s == nil {
		return nil
	}
	ok := info.Outcomes[trace.OutcomeOK]
	if ctx.Err() == nil {
		wctx, cancel := context.WithTimeout(ctx, wait)
		s.c.WaitFor(wctx, int(ok))
		cancel()
	}
	s.recv.Close()
	counts := s.c.Counts()
	info.Spans = &counts
	err := s.c.Err()
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", SpansName, err)
	}
	if counts.Kept < ok {
		note(fmt.Sprintf("the server's spans of %d of %d ok requests arrived within %s (engines export in batches; raise the spans wait, or check the engine's OTLP endpoint)", counts.Kept, ok, wait))
	}
	if counts.OtherRuns > 0 {
		note(fmt.Sprintf("%d request spans of other traffic or another run were counted and dropped", counts.OtherRuns))
	}
	if counts.UnknownRequests > 0 {
		note(fmt.Sprintf("%d request spans under this run's trace ids named no request it sent (made up) and were dropped", counts.UnknownRequests))
	}
	if n := s.c.Dropped(); n > 0 {
		note(fmt.Sprintf("%s keeps only llm_request's own attributes: %d other attributes, events and links of the kept spans (prompt or answer text among them, if the server sent any), and every span's resource and scope, were not kept", SpansName, n))
	}
	if n := s.c.Unwritten(); n > 0 {
		note(fmt.Sprintf("%s reached its bound of %d MiB: %d kept spans were not written to it (their phases were)", SpansName, spans.MaxKeptFileBytes>>20, n))
	}
	if len(counts.Invalid) > 0 {
		note(fmt.Sprintf("request spans with a phase out of bounds were dropped: %v", counts.Invalid))
	}
	return trace.WriteServerPhases(runDir, s.c.Phases())
}
