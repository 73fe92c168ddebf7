package sim

import (
	"container/list"
	"errors"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/servetrace/servetrace/internal/promtext"
)

// CostModel gives the duration of one engine iteration from what it
// computes: a fixed part (reading the weights, launching kernels), prompt
// tokens prefilled, sequences decoding one token each, and KV-cache tokens
// those decodes attend over.
type CostModel struct {
	IterBase        time.Duration
	PerPrefillToken time.Duration
	PerDecodeSeq    time.Duration
	PerKVToken      time.Duration
}

// Iteration returns the duration of an iteration. An empty iteration costs
// nothing: the engine does not run one.
func (c CostModel) Iteration(prefillTokens, decodeSeqs, kvTokens int) time.Duration {
	if prefillTokens == 0 && decodeSeqs == 0 {
		return 0
	}
	return c.IterBase + time.Duration(prefillTokens)*c.PerPrefillToken + time.Duration(decodeSeqs)*c.PerDecodeSeq + time.Duration(kvTokens)*c.PerKVToken
}

// EngineOptions configures the batching engine.
type EngineOptions struct {
	Cost CostModel
	// MaxNumBatchedTokens bounds the tokens computed in one iteration
	// (decodes count one each; prefills are chunked to fit).
	MaxNumBatchedTokens int
	// MaxNumSeqs bounds the sequences running at once.
	MaxNumSeqs int
	// KVBlocks blocks of BlockSize tokens make up the KV cache.
	KVBlocks  int
	BlockSize int
	// MaxWaiting bounds the waiting queue; past it requests are refused.
	MaxWaiting int
	// PrefixCaching reuses cached full blocks of identical prompt prefixes.
	PrefixCaching bool
}

// errQueueFull is returned by submit when the waiting queue is full.
var errQueueFull = errors.New("the waiting queue is full")

// errTooLargeForCache is returned by submit for a sequence the whole KV
// cache could never hold.
var errTooLargeForCache = errors.New("the request needs more KV cache than the engine has")

// tokenEvent is what the engine tells a request's handler after an
// iteration: tokens produced, and whether the sequence is finished.
type tokenEvent struct {
	tokens int
	done   bool
	reason string // finish reason when done
}

// seq is one request inside the engine.
type seq struct {
	id          uint64
	promptLen   int
	blockHashes []uint64 // chained hashes of the prompt's full blocks
	maxTokens   int
	stopAt      int // generate this many tokens; == maxTokens unless stopping early
	arrival     time.Time

	// Engine-owned state.
	computed   int // tokens whose KV is computed (prefill progress)
	target     int // tokens to prefill before decoding: promptLen, or promptLen+generated after preemption
	generated  int
	blocks     []*block
	cachedHits int // prompt tokens served from the prefix cache
	firstAt    time.Time
	lastAt     time.Time

	out      chan tokenEvent // buffered; the engine never blocks on it
	aborted  atomic.Bool
	finished bool // engine-owned: retired after its last token
}

// block is one KV-cache block.
type block struct {
	ref    int
	hash   uint64
	cached bool          // registered in the prefix cache under hash
	lru    *list.Element // position in the evictable list, when ref == 0 and cached
}

// kvCache allocates blocks and keeps the prefix cache.
type kvCache struct {
	total     int
	free      []*block
	byHash    map[uint64]*block
	evictable *list.List // cached blocks with ref 0, least recently released first
	used      int        // blocks with ref > 0
}

func newKVCache(n int) *kvCache {
	c := &kvCache{total: n, byHash: map[uint64]*block{}, evictable: list.New()}
	c.free = make([]*block, n)
	for i := range c.free {
		c.free[i] = &block{}
	}
	return c
}

// alloc returns a fresh block, evicting the least recently used cached one
// when no free block is left; nil when every block is referenced.
func (c *kvCache) alloc() *block {
	var b *block
	if n := len(c.free); n > 0 {
		b, c.free = c.free[n-1], c.free[:n-1]
	} else if e := c.evictable.Front(); e != nil {
		b = c.evictable.Remove(e).(*block)
		delete(c.byHash, b.hash)
		*b = block{}
	} else {
		return nil
	}
	b.ref = 1
	c.used++
	return b
}

// available is how many blocks alloc can still return.
func (c *kvCache) available() int { return len(c.free) + c.evictable.Len() }

// lookup takes a reference on the cached block with this hash, if any.
func (c *kvCache) lookup(h uint64) *block {
	b, ok := c.byHash[h]
	if !ok {
		return nil
	}
	if b.ref == 0 {
		c.evictable.Remove(b.lru)
		b.lru = nil
		c.used++
	}
	b.ref++
	return b
}

// register makes a computed full block findable by its prefix hash.
func (c *kvCache) register(b *block, h uint64) {
	if b.cached {
		return
	}
	if _, taken := c.byHash[h]; taken {
		return // an identical block is already cached; keep this one private
	}
	b.hash, b.cached = h, true
	c.byHash[h] = b
}

// release drops a reference; an unreferenced cached block stays findable
// until evicted, an uncached one is freed.
func (c *kvCache) release(b *block) {
	b.ref--
	if b.ref > 0 {
		return
	}
	c.used--
	if b.cached {
		b.lru = c.evictable.PushBack(b)
		return
	}
	*b = block{}
	c.free = append(c.free, b)
}

// engineStats are read by /metrics; the engine writes them under mu.
type engineStats struct {
	running, waiting int
	kvUsage          float64
	usedBlocks       int    // blocks referenced by a sequence
	prefixQueries    uint64 // prompt tokens looked up in the prefix cache
	prefixHits       uint64 // of those, tokens found
	preemptions      uint64
	aborted          uint64
	iterations       uint64
	// overrun is how late iterations ended past their planned end: the
	// simulator's own health (a saturated simulator is not a slow model).
	overrun promtext.Histogram
}

// engine runs the batching loop in its own goroutine.
type engine struct {
	opts     EngineOptions
	kv       *kvCache
	submitC  chan *seq
	abortC   chan *seq
	stopC    chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	seed     maphash.Seed
	busy     *busyMeter

	waitingN atomic.Int64 // submitted and not yet admitted, for the queue bound

	mu    sync.Mutex
	stats engineStats

	// Engine-goroutine state.
	waiting *list.List // of *seq
	running []*seq
}

func newEngine(o EngineOptions) *engine {
	e := &engine{opts: o, kv: newKVCache(o.KVBlocks), submitC: make(chan *seq, 1024), abortC: make(chan *seq, 1024),
		stopC: make(chan struct{}), seed: maphash.MakeSeed(), waiting: list.New(), busy: newBusyMeter()}
	e.stats.overrun = promtext.NewHistogram(1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 7.5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1)
	e.wg.Go(e.loop)
	return e
}

func (e *engine) stop() {
	e.stopOnce.Do(func() { close(e.stopC) })
	e.wg.Wait()
}

// hashBlocks returns the chained hashes of the prompt's full blocks: block
// i's hash covers every token up to its end, so equal hashes mean equal
// prefixes.
func (e *engine) hashBlocks(ids []int) []uint64 {
	b := e.opts.BlockSize
	out := make([]uint64, 0, len(ids)/b)
	var h maphash.Hash
	h.SetSeed(e.seed)
	buf := make([]byte, 8)
	for i := 0; i+b <= len(ids); i += b {
		for _, id := range ids[i : i+b] {
			for k := range 8 {
				buf[k] = byte(uint64(id) >> (8 * k))
			}
			h.Write(buf)
		}
		out = append(out, h.Sum64()) // the running hash chains every earlier block
	}
	return out
}

// submit queues a sequence, or refuses it when the queue is full or the
// cache could never hold it.
func (e *engine) submit(s *seq) error {
	need := (s.promptLen + s.maxTokens + e.opts.BlockSize - 1) / e.opts.BlockSize
	if need > e.opts.KVBlocks {
		return errTooLargeForCache
	}
	if e.waitingN.Add(1) > int64(e.opts.MaxWaiting) {
		e.waitingN.Add(-1)
		return errQueueFull
	}
	s.target = s.promptLen
	s.out = make(chan tokenEvent, s.maxTokens+2)
	e.submitC <- s
	return nil
}

// abort asks the engine to drop a sequence at its next iteration boundary.
func (e *engine) abort(s *seq) {
	if s.aborted.CompareAndSwap(false, true) {
		e.abortC <- s
	}
}

func (e *engine) loop() {
	for {
		// Take in what arrived; sleep when there is nothing to do.
		if len(e.running) == 0 && e.waiting.Len() == 0 {
			select {
			case s := <-e.submitC:
				e.waiting.PushBack(s)
			case s := <-e.abortC:
				e.drop(s)
			case <-e.stopC:
				return
			}
		}
		e.drain()
		select {
		case <-e.stopC:
			return
		default:
		}
		e.iterate()
	}
}

// drain moves submissions and aborts that arrived into the engine's state.
func (e *engine) drain() {
	for {
		select {
		case s := <-e.submitC:
			e.waiting.PushBack(s)
		case s := <-e.abortC:
			e.drop(s)
		default:
			return
		}
	}
}

// drop removes an aborted sequence and frees its blocks. A sequence that
// already finished (its client left just after the last token) is not an
// abort.
func (e *engine) drop(s *seq) {
	if s.finished {
		return
	}
	for el := e.waiting.Front(); el != nil; el = el.Next() {
		if el.Value.(*seq) == s {
			e.waiting.Remove(el)
			e.waitingN.Add(-1)
			break
		}
	}
	for i, r := range e.running {
		if r == s {
			e.running = append(e.running[:i], e.running[i+1:]...)
			break
		}
	}
	e.freeBlocks(s)
	e.mu.Lock()
	e.stats.aborted++
	e.mu.Unlock()
	// A drop can come in the engine's idle wait, after which nothing else
	// would republish the gauges.
	e.publish()
}

func (e *engine) freeBlocks(s *seq) {
	for _, b := range s.blocks {
		e.kv.release(b)
	}
	s.blocks = nil
}

// ensureBlocks allocates blocks so s can hold n tokens; false if the cache
// has none left.
func (e *engine) ensureBlocks(s *seq, n int) bool {
	for len(s.blocks)*e.opts.BlockSize < n {
		b := e.kv.alloc()
		if b == nil {
			return false
		}
		s.blocks = append(s.blocks, b)
	}
	return true
}

// preempt frees the youngest running sequence's blocks and puts it back at
// the front of the queue, to be recomputed (prompt and output so far).
func (e *engine) preempt() *seq {
	n := len(e.running)
	if n == 0 {
		return nil
	}
	v := e.running[n-1]
	e.running = e.running[:n-1]
	e.freeBlocks(v)
	v.computed, v.target = 0, v.promptLen+v.generated
	e.waiting.PushFront(v)
	e.waitingN.Add(1)
	e.mu.Lock()
	e.stats.preemptions++
	e.mu.Unlock()
	return v
}

// plan is one iteration's work.
type plan struct {
	decodes  []*seq
	prefills []*seq
	chunks   []int
	kvTokens int
	prefill  int
}

func (e *engine) iterate() {
	start := time.Now()
	var p plan
	budget := e.opts.MaxNumBatchedTokens
	// Decodes first: every running sequence past its prefill gets a token,
	// preempting the youngest when the cache runs out.
	for i := 0; i < len(e.running); i++ {
		s := e.running[i]
		if s.computed < s.target {
			continue
		}
		for !e.ensureBlocks(s, s.computed+1) {
			if v := e.preempt(); v == s || v == nil {
				s = nil
				break
			}
		}
		if s == nil {
			break // s itself was preempted; everything after it too
		}
		p.decodes = append(p.decodes, s)
		p.kvTokens += s.computed
		budget--
	}
	// Chunked prefills of running sequences, then admissions in FCFS order.
	for _, s := range e.running {
		if budget <= 0 {
			break
		}
		if s.computed < s.target { // still prefilling, so not among the decodes
			if chunk := e.prefillChunk(s, budget); chunk > 0 {
				p.prefills, p.chunks = append(p.prefills, s), append(p.chunks, chunk)
				budget -= chunk
			}
		}
	}
	for budget > 0 && len(e.running) < e.opts.MaxNumSeqs && e.waiting.Len() > 0 {
		s := e.waiting.Front().Value.(*seq)
		if !e.admit(s) {
			break
		}
		e.waiting.Remove(e.waiting.Front())
		e.waitingN.Add(-1)
		e.running = append(e.running, s)
		if chunk := e.prefillChunk(s, budget); chunk > 0 {
			p.prefills, p.chunks = append(p.prefills, s), append(p.chunks, chunk)
			budget -= chunk
		}
	}
	for _, c := range p.chunks {
		p.prefill += c
	}
	cost := e.opts.Cost.Iteration(p.prefill, len(p.decodes), p.kvTokens)
	e.publish()
	if cost == 0 && len(p.decodes) == 0 && len(p.prefills) == 0 {
		// Nothing could run (the queue head does not fit): wait for a change.
		select {
		case s := <-e.submitC:
			e.waiting.PushBack(s)
		case s := <-e.abortC:
			e.drop(s)
		case <-e.stopC:
		case <-time.After(10 * time.Millisecond):
		}
		return
	}
	end := start.Add(cost)
	if cost == 0 {
		runtime.Gosched() // a free iteration still lets the process's other goroutines run
	}
	sleepUntilTime(end)
	overrun := time.Since(end)
	e.commit(&p)
	e.busy.add(time.Now(), time.Since(start))
	e.mu.Lock()
	e.stats.iterations++
	e.stats.overrun.Observe(overrun.Seconds())
	e.mu.Unlock()
	e.publish()
}

// admit takes prefix-cache hits for a new (or preempted) sequence and
// checks that its first chunk fits; false leaves it waiting.
func (e *engine) admit(s *seq) bool {
	if e.opts.PrefixCaching && s.computed == 0 && len(s.blocks) == 0 && s.generated == 0 {
		// Look up full prompt blocks in order; stop at the first miss. The
		// last prompt token is always computed, as vLLM does.
		maxHit := (s.promptLen - 1) / e.opts.BlockSize
		hits := 0
		for i := 0; i < min(maxHit, len(s.blockHashes)); i++ {
			b := e.kv.lookup(s.blockHashes[i])
			if b == nil {
				break
			}
			s.blocks = append(s.blocks, b)
			hits++
		}
		s.computed = hits * e.opts.BlockSize
		s.cachedHits = s.computed
		e.mu.Lock()
		e.stats.prefixQueries += uint64(s.promptLen)
		e.stats.prefixHits += uint64(s.computed)
		e.mu.Unlock()
	}
	// Leave room for the rest of the prompt's first chunk.
	need := min(s.target, s.computed+e.opts.MaxNumBatchedTokens)
	blocksNeeded := (need+e.opts.BlockSize-1)/e.opts.BlockSize - len(s.blocks)
	if blocksNeeded > e.kv.available() {
		e.freeBlocks(s)
		s.computed, s.cachedHits = 0, 0
		return false
	}
	return true
}

// prefillChunk reserves blocks for the next prefill chunk of s within the
// budget and returns its size (0 if no block is free).
func (e *engine) prefillChunk(s *seq, budget int) int {
	chunk := min(budget, s.target-s.computed)
	for chunk > 0 && !e.ensureBlocks(s, s.computed+chunk) {
		chunk = len(s.blocks)*e.opts.BlockSize - s.computed
	}
	return max(chunk, 0)
}

// commit applies an iteration's results and tells the handlers.
func (e *engine) commit(p *plan) {
	now := time.Now()
	emit := func(s *seq) {
		s.generated++
		if s.firstAt.IsZero() {
			s.firstAt = now
		}
		s.lastAt = now
		done := s.generated >= s.stopAt
		reason := ""
		if done {
			reason = "length"
			if s.stopAt < s.maxTokens {
				reason = "stop"
			}
		}
		s.out <- tokenEvent{tokens: 1, done: done, reason: reason}
	}
	for _, s := range p.decodes {
		if s.aborted.Load() {
			continue
		}
		s.computed++
		emit(s)
	}
	for i, s := range p.prefills {
		if s.aborted.Load() {
			continue
		}
		s.computed += p.chunks[i]
		if s.computed >= s.target {
			if e.opts.PrefixCaching {
				for j, h := range s.blockHashes {
					if j < len(s.blocks) {
						e.kv.register(s.blocks[j], h)
					}
				}
			}
			if s.generated == 0 {
				emit(s) // the first token comes with the last prefill chunk
			}
		}
	}
	// Retire finished sequences.
	kept := e.running[:0]
	for _, s := range e.running {
		if s.generated >= s.stopAt || s.aborted.Load() {
			if !s.aborted.Load() {
				e.freeBlocks(s)
				s.finished = true
			}
			continue
		}
		kept = append(kept, s)
	}
	clear(e.running[len(kept):])
	e.running = kept
}

// publish copies the gauges for /metrics.
func (e *engine) publish() {
	e.mu.Lock()
	e.stats.running, e.stats.waiting = len(e.running), int(e.waitingN.Load())
	e.stats.kvUsage = float64(e.kv.used) / float64(e.kv.total)
	e.stats.usedBlocks = e.kv.used
	e.mu.Unlock()
}

// snapshot returns a copy of the engine's statistics.
func (e *engine) snapshot() engineStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	s.overrun = e.stats.overrun.Clone()
	return s
}

// referencedBlocks counts blocks in use, as last published by the engine.
func (e *engine) referencedBlocks() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats.usedBlocks
}

// sleepUntilTime sleeps to about a millisecond before t (timers round up
// to about a millisecond), yields until 200 µs before t, then spins. A
// yield puts the engine at the back of the global run queue, behind every
// runnable handler, so the last stretch spins without yielding; that costs
// at most 200 µs of CPU per iteration.
func sleepUntilTime(t time.Time) {
	if d := time.Until(t) - time.Millisecond; d > 0 {
		time.Sleep(d)
	}
	for time.Until(t) > 200*time.Microsecond {
		runtime.Gosched()
	}
	for time.Now().Before(t) {
	}
}
