package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/servetrace/servetrace/trace"
)

// source reads a workload's requests in ts order, calling fn for each; the
// request is valid only during the call (trace.Bucket.Scan's contract).
type source func(ctx context.Context, fn func(*trace.Request) error) error

// The look-ahead of the streamed schedule: what it has read but not yet
// handed to a sender is at most lookAheadUnits, a request counting one unit
// plus one per lookAheadBlocksPerUnit prefix blocks, so that neither many
// small requests nor a few with 128k-token prompts grow memory with the
// workload's length. 16,384 units are 16 s at 1,000 requests a second: a
// session's later turn read after its turn before was done is still sent
// at that done time plus its think time, unless the server answered the
// turn before over 16 s faster than the recorded one.
const (
	lookAheadUnits         = 1 << 14
	lookAheadBlocksPerUnit = 64
)

// streamUnits is the look-ahead runRequests gives its stream, and
// streamDone, when set, sees the stream once the run is over: tests lower
// the one and read the other.
var (
	streamUnits int64 = lookAheadUnits
	streamDone  func(*stream)
)

// sessionIdleNs: a session none of whose turns is in flight or waiting, and
// whose last turn was read this long before the schedule's position, is
// forgotten; a later turn of it starts over at its own time.
const sessionIdleNs = int64(30 * time.Minute)

// workloadCheck is what a first pass over the workload learns: the
// schedule's length (this shard's) and the requests per adapter.
type workloadCheck struct {
	planned  int64
	adapters map[string]int
	// counts: a planned request may have text counted by the tokenizer
	// (a session's history, tool definitions, a schema).
	counts bool
	// graph: some planned request names parents (an agent graph).
	graph bool
}

// checkWorkload reads the whole workload once before anything is sent:
// every row is valid (the reader checks each), the window holds a request,
// and the schedule's length is known. A fault deep in a day-long workload
// is refused at the start, not found mid-run.
func checkWorkload(ctx context.Context, src source, o *Options) (workloadCheck, error) {
	pl, pr := newPlanner(o), newProber(o)
	c := workloadCheck{}
	if len(o.Adapters) > 0 {
		c.adapters = map[string]int{}
	}
	complete := false
	var rows int64
	start := time.Now()
	err := src(ctx, func(q *trace.Request) error {
		if rows++; rows%1_000_000 == 0 && o.Progress != nil {
			fmt.Fprintf(o.Progress, "\rreplay: checking the workload: %d rows read, %.0fs   ", rows, time.Since(start).Seconds())
		}
		if a := q.Adapter; a != "" && c.adapters != nil {
			if _, ok := c.adapters[a]; ok || len(c.adapters) < maxAdapterNames {
				c.adapters[a]++
			}
		}
		if complete {
			return nil // the rest is read for its checks only
		}
		_, keep, stop, err := pl.next(q)
		switch {
		case err != nil:
			return err
		case stop:
			complete = true
		case keep:
			c.planned++
			c.counts = c.counts || countsText(q)
			c.graph = c.graph || len(q.ParentIDs) > 0
			if _, ok := pr.draw(q); ok {
				c.planned++
			}
		}
		return nil
	})
	if rows >= 1_000_000 && o.Progress != nil {
		fmt.Fprintf(o.Progress, "\rreplay: checked the workload: %d rows in %.0fs          \n", rows, time.Since(start).Seconds())
	}
	if err != nil {
		return c, err
	}
	return c, pl.end()
}

// countsText reports whether sending q counts text with the tokenizer: a
// session's history, or the tool definitions or JSON schema its contract
// synthesizes to a token size (a regex, grammar or choice list is sized
// without counting).
func countsText(q *trace.Request) bool {
	if q.SessionID != "" {
		return true
	}
	if len(q.Features) == 0 && q.ToolCount == 0 && q.OutputFormat == "" {
		return false // carries none of them: skip building the list
	}
	for _, f := range carried(q) {
		if f == FeatureTools || f == FeatureSchema {
			return true
		}
	}
	return false
}

// maxAdapterNames bounds the adapters counted for ranking: beyond it, new
// names are not ranked (the server's adapters cycle over the first).
const maxAdapterNames = 1 << 16

// errStopScan ends the workload's scan when the schedule is complete.
var errStopScan = errors.New("schedule complete")

// stream reads the workload and plans it on its own goroutine, holding at
// most the look-ahead: the scheduler takes the unchained requests from
// items, in send order; the prefetcher sees the same requests on toBuild.
// In open loop it chains each session's later turns to the turn before
// (chain). Every request it plans ends in exactly one of: handed to a
// sender (release), left in items or in a chain when the run stops
// (remaining), or passed to drop while the stream drains.
type stream struct {
	src     source
	pl      *planner
	probes  *prober // nil: no probes
	graph   *graph  // nil: no request waits on a parent (or closed loop)
	chained bool    // open loop: a session's later turns follow the turn before
	items   chan *planned
	toBuild chan *planned // nil without a prefetcher
	units   int64
	budget  *semaphore.Weighted
	held    atomic.Int64 // units held now
	maxHeld atomic.Int64 // most units ever held, for the tests

	// onIdle is called with a later turn of a session whose turn before
	// is done (at doneNs): the stream read it after that. Set before the
	// clock starts; called from the stream's goroutine.
	onIdle func(p *planned, doneNs int64)
	// onReleased is called with a request of the agent graph whose
	// parents are all done, the last at readyNs, or with why it cannot be
	// sent. Set, like onIdle, before the stream reads such a request.
	onReleased func(released)
	// drop records a request planned after the run stopped (open loop:
	// not sent); nil to stop reading instead (closed loop: not
	// scheduled). Set before halt.
	drop func(p *planned)

	stopped  chan struct{} // closed by halt
	stopOnce sync.Once
	stopCtx  context.Context // done when stopped
	cancel   context.CancelFunc
	mu       sync.Mutex // held while a request is placed; halt takes it
	draining bool

	chains map[string]*chain
	byAge  []ageEntry // every chain once, in the order entered, for forgetting

	// full is closed the first time the stream waits for its look-ahead
	// to free, or when it ends: before the clock starts nothing is sent,
	// so from then on it has read all it may.
	full     chan struct{}
	fullOnce sync.Once
	planned  atomic.Int64 // requests planned so far
	lastNs   atomic.Int64 // the last planned request's scheduled time
	err      error        // set before items is closed
	done     chan struct{}
}

// chain is one session in open loop: its conversation, and its turns
// read but not yet sent, in turn order.
type chain struct {
	id      string
	conv    session
	mu      sync.Mutex
	waiting []*planned
	busy    bool  // a turn is scheduled, in flight, or waiting for its time
	doneNs  int64 // when the last turn finished, while not busy
	readNs  int64 // the scheduled time of the last turn read
}

// newStream starts reading src into the schedule opts describes; withBuild
// adds the prefetcher's feed, and chained links sessions (open loop).
func newStream(ctx context.Context, src source, o *Options, chained, withBuild, withGraph bool, units int64) *stream {
	s := &stream{src: src, pl: newPlanner(o), probes: newProber(o), chained: chained, units: units, budget: semaphore.NewWeighted(units),
		items: make(chan *planned, units), stopped: make(chan struct{}), chains: map[string]*chain{},
		full: make(chan struct{}), done: make(chan struct{})}
	if withBuild {
		s.toBuild = make(chan *planned, units)
	}
	if withGraph && chained {
		s.graph = newGraph()
	}
	// Reading outlives an interrupt: what the run did not send is still
	// recorded as not sent. halt stops it.
	base := context.WithoutCancel(ctx)
	s.stopCtx, s.cancel = context.WithCancel(base)
	go s.run(base)
	return s
}

func (s *stream) run(ctx context.Context) {
	defer close(s.done)
	defer s.markFull()
	defer func() {
		close(s.items)
		if s.toBuild != nil {
			close(s.toBuild)
		}
	}()
	err := s.src(ctx, func(q *trace.Request) error {
		at, keep, stop, err := s.pl.next(q)
		switch {
		case err != nil:
			return err
		case stop:
			return errStopScan
		case !keep:
			return nil
		}
		req := *q // the reader's row is valid only during its call
		p := &planned{req: &req, scheduledNs: at.scheduledNs, warmup: at.warmup}
		var probe *planned
		if pr := s.probes.probeFor(q); pr != nil {
			pq := probeRequest(q, pr)
			probe = &planned{req: &pq, scheduledNs: at.scheduledNs, warmup: at.warmup, probe: pr}
		}
		if s.graph != nil {
			// A request of the graph may wait for its parents: its probe
			// waits with it (place).
			p.beside, probe = probe, nil
		}
		if err := s.place(p); err != nil {
			return err
		}
		if probe != nil {
			return s.place(probe)
		}
		return nil
	})
	if errors.Is(err, errStopScan) {
		err = nil
	}
	if err == nil {
		err = s.pl.end() // nothing in the window
	}
	s.err = err
}

// place puts a planned request where it goes: a drained one to drop, a
// later turn to its session, the rest to the scheduler and prefetcher.
func (s *stream) place(p *planned) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return s.dropOrStop(p)
	}
	// A probe beside p holds a unit of the look-ahead with it.
	p.cost = min(s.units, 1+int64(len(p.req.PrefixBlocks))/lookAheadBlocksPerUnit+besides(p))
	if !s.budget.TryAcquire(p.cost) {
		s.markFull()
		if s.budget.Acquire(s.stopCtx, p.cost) != nil {
			return s.dropOrStop(p)
		}
	}
	s.hold(p.cost)
	s.planned.Add(1 + besides(p))
	s.lastNs.Store(p.scheduledNs)
	if s.graph != nil && p.probe == nil {
		held, ready, follows, failed, sess := s.graph.add(p)
		switch {
		case held:
			return nil // sent when its parents are done, its probe with it
		case failed != "" || follows:
			s.onReleased(released{p: p, readyNs: ready, failed: failed, sess: sess})
			return nil
		}
	}
	// Not the graph's: the probe beside p goes by the scheduler, as p
	// does, with its own unit.
	probe := p.beside
	if probe != nil {
		p.beside = nil
		p.cost--
		probe.cost = 1
	}
	if err := s.schedule(p); err != nil || probe == nil {
		return err
	}
	return s.schedule(probe)
}

// besides is 1 for a request with a probe beside it, else 0.
func besides(p *planned) int64 {
	if p.beside != nil {
		return 1
	}
	return 0
}

// schedule hands p, placed, to its session or to the scheduler and the
// prefetcher.
func (s *stream) schedule(p *planned) error {
	if s.chained && p.req.SessionID != "" && p.probe == nil {
		if c := s.chains[p.req.SessionID]; c != nil {
			s.follow(c, p)
			return nil
		}
		s.forgetIdle()
		c := &chain{id: p.req.SessionID, busy: true, readNs: p.scheduledNs}
		s.chains[c.id] = c
		s.byAge = append(s.byAge, ageEntry{c, p.scheduledNs})
		p.chain = c
	}
	select {
	case s.items <- p:
	default:
		s.markFull()
		select {
		case s.items <- p:
		case <-s.stopped:
			s.unplace(p)
			return s.dropOrStop(p)
		}
	}
	if s.toBuild != nil {
		select {
		case s.toBuild <- p:
		case <-s.stopped:
		}
	}
	return nil
}

// follow adds a later turn p to its session c: it waits for the turn
// before, or, when that is done already, goes to onIdle.
func (s *stream) follow(c *chain, p *planned) {
	p.chain, p.chained = c, true
	c.mu.Lock()
	c.readNs = p.scheduledNs
	if c.busy || len(c.waiting) > 0 {
		// In turn order; turns read out of it go after those of their
		// turn already read.
		i, _ := slices.BinarySearchFunc(c.waiting, p, func(a, b *planned) int {
			if a.req.Turn <= b.req.Turn {
				return -1
			}
			return 1
		})
		c.waiting = slices.Insert(c.waiting, i, p)
		c.mu.Unlock()
		return
	}
	c.busy = true
	done := c.doneNs
	c.mu.Unlock()
	s.onIdle(p, done)
}

// ageEntry is a chain and the schedule's position when it entered byAge.
type ageEntry struct {
	c  *chain
	at int64
}

// forgetIdle forgets the sessions that have had nothing in flight or
// waiting, and no turn read, for sessionIdleNs of schedule; one that has is
// looked at again sessionIdleNs later.
func (s *stream) forgetIdle() {
	position := s.lastNs.Load() // the last request read
	for len(s.byAge) > 0 && position-s.byAge[0].at >= sessionIdleNs {
		c := s.byAge[0].c
		s.byAge = s.byAge[1:]
		c.mu.Lock()
		keep := c.busy || len(c.waiting) > 0 || position-c.readNs < sessionIdleNs
		c.mu.Unlock()
		if keep {
			s.byAge = append(s.byAge, ageEntry{c, position})
			continue
		}
		delete(s.chains, c.id)
	}
}

// dropOrStop handles a request planned after the run stopped.
func (s *stream) dropOrStop(p *planned) error {
	if s.drop == nil {
		return errStopScan
	}
	s.planned.Add(1 + besides(p))
	s.lastNs.Store(p.scheduledNs)
	s.drop(p) // and its probe
	return nil
}

// unplace undoes place's counting for a request it could not hand on.
func (s *stream) unplace(p *planned) {
	s.planned.Add(-1)
	s.release(p)
	if p.chain != nil {
		delete(s.chains, p.chain.id)
		p.chain = nil
	}
}

func (s *stream) hold(n int64) {
	h := s.held.Add(n)
	for {
		m := s.maxHeld.Load()
		if h <= m || s.maxHeld.CompareAndSwap(m, h) {
			return
		}
	}
}

// release returns what p held of the look-ahead, once it is handed to a
// sender (or recorded as never sent).
func (s *stream) release(p *planned) {
	if p.cost > 0 {
		s.held.Add(-p.cost)
		s.budget.Release(p.cost)
		p.cost = 0
	}
}

// halt stops the stream's hand-offs: from now on it passes what it plans
// to drop (or stops reading without drop), never to a session or the
// scheduler. It returns once the stream no longer touches sessions.
func (s *stream) halt() {
	s.stopOnce.Do(func() {
		close(s.stopped)
		s.cancel()
		s.mu.Lock()
		s.draining = true
		s.mu.Unlock()
	})
}

// remaining returns, after halt and once no sender runs, the requests
// planned but never handed to a sender: those left for the scheduler and
// the later turns still waiting in their sessions. The stream's own
// goroutine may still be draining the workload into drop.
func (s *stream) remaining() []*planned {
	var out []*planned
	for {
		select {
		case p, ok := <-s.items:
			if !ok {
				return s.waitingTurns(out)
			}
			out = append(out, p)
		default:
			return s.waitingTurns(out)
		}
	}
}

func (s *stream) waitingTurns(out []*planned) []*planned {
	for _, c := range s.chains {
		out = append(out, c.drain()...)
	}
	if s.graph != nil {
		out = append(out, s.graph.drain()...)
	}
	return out
}

// next returns a chain's next waiting turn once turn before is done at
// doneNs, or nil, marking the session idle since doneNs.
func (c *chain) next(doneNs int64) *planned {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiting) == 0 {
		c.busy, c.doneNs = false, doneNs
		return nil
	}
	p := c.waiting[0]
	c.waiting = c.waiting[1:]
	return p
}

// drain takes every waiting turn of the chain: the turn before could not
// be sent, so neither can they.
func (c *chain) drain() []*planned {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.waiting
	c.waiting = nil
	return out
}

// markFull closes full, once.
func (s *stream) markFull() { s.fullOnce.Do(func() { close(s.full) }) }
