package sim

import (
	"sync"
	"time"
)

// requestTimes are the engine clock's readings of one request: its
// arrival, the start of the iteration that first scheduled it, its first
// token and the token that finished its last choice. Every phase the
// simulator reports (Phases, the llm_request span) is a difference of
// two of them, so the phases add up exactly.
type requestTimes struct {
	arrival, scheduled, firstToken, finish time.Time
	// cachedTokens are the prompt tokens the prefix cache served at the
	// request's (last) admission: usage's cached_tokens.
	cachedTokens int
}

// requestPhases splits a request's time at the engine into the phases
// vLLM's llm_request span reports.
type requestPhases struct {
	queue   time.Duration // arrival to first scheduled
	prefill time.Duration // first scheduled to the first token
	decode  time.Duration // the first token to the last
}

// phases returns the request's phases. Each is one subtraction of the
// clock's readings, so queue + prefill + decode is finish − arrival to
// the nanosecond.
func (t requestTimes) phases() requestPhases {
	return requestPhases{queue: t.scheduled.Sub(t.arrival), prefill: t.firstToken.Sub(t.scheduled), decode: t.finish.Sub(t.firstToken)}
}

// ttft is arrival to the first token, the sum of queue and prefill.
func (p requestPhases) ttft() time.Duration { return p.queue + p.prefill }

// inference is first scheduled to the last token, prefill plus decode.
func (p requestPhases) inference() time.Duration { return p.prefill + p.decode }

// e2e is arrival to the last token: every phase added, never measured
// apart, so that it equals their sum exactly.
func (p requestPhases) e2e() time.Duration { return p.queue + p.prefill + p.decode }

// finishChoice counts one finished choice of s's request at now and, when
// it was the request's last, returns the request's clock readings (nil
// before). The engine goroutine calls it, from emit.
func (s *seq) finishChoice(now time.Time) *requestTimes {
	r := s
	if s.parent != nil {
		r = s.parent
	}
	r.choicesDone++
	if r.choicesDone < max(r.n, 1) {
		return nil
	}
	return &requestTimes{arrival: r.arrival, scheduled: r.scheduledAt, firstToken: r.firstAt, finish: now, cachedTokens: r.cachedHits}
}

// logFinished keeps a finished request's phases for Phases and exports
// its span, when spans are on (and does nothing otherwise). The handler calls it before the client can
// see the response end, so a client that has read every response finds
// every request logged, and every span ended (in the exporter's batch).
func (g *generation) logFinished() {
	if g.times == nil {
		return // not finished in the engine: no phases to tell
	}
	if g.s.spans == nil {
		return // no span to export, and no account kept to hold one to
	}
	p := g.times.phases()
	g.s.phases.add(g.id, p)
	g.s.spans.finished(g, p)
}

// phaseLogSize bounds the finished requests whose phases Phases can
// return: the log keeps the latest, so a long run holds a fixed memory.
const phaseLogSize = 4096

// phaseLog keeps the phases of the latest finished requests by response
// id, forgetting the oldest past its capacity. Response ids are unique
// per server (a request counter), so an id is never logged twice. It is
// safe for concurrent use.
type phaseLog struct {
	mu    sync.Mutex
	order []string // ids, oldest at next once full
	next  int
	byID  map[string]requestPhases
}

func newPhaseLog(capacity int) *phaseLog {
	return &phaseLog{order: make([]string, 0, capacity), byID: make(map[string]requestPhases, capacity)}
}

func (l *phaseLog) add(id string, p requestPhases) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.order) < cap(l.order) {
		l.order = append(l.order, id)
	} else {
		delete(l.byID, l.order[l.next])
		l.order[l.next] = id
		l.next = (l.next + 1) % len(l.order)
	}
	l.byID[id] = p
}

func (l *phaseLog) get(id string) (requestPhases, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.byID[id]
	return p, ok
}

// Phases returns the simulator's own account of a finished request, by
// its response id ("chatcmpl-7", "cmpl-8"): queue (arrival to first
// scheduled), prefill (to the first token) and decode (to the last
// token of its last choice), read from the engine's clock. They are what
// its llm_request span reports, so a test can hold the span to the
// engine, and is kept only while spans are exported (OTLPTracesEndpoint),
// off the request path otherwise. ok is false for a request not finished,
// aborted, or older than the latest 4,096 finished, and without export.
func (s *Server) Phases(responseID string) (queue, prefill, decode time.Duration, ok bool) {
	if s.phases == nil {
		return 0, 0, 0, false
	}
	p, ok := s.phases.get(responseID)
	return p.queue, p.prefill, p.decode, ok
}

// Phases is the running server's Server.Phases.
func (rs *Running) Phases(responseID string) (queue, prefill, decode time.Duration, ok bool) {
	return rs.sim.Phases(responseID)
}
