package sim

import (
	"container/list"
	"errors"
	"hash/maphash"
	"iter"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/servetrace/servetrace/internal/promtext"
)

// CostModel gives the duration of one engine iteration from what it
// computes: a fixed part (reading the weights, launching kernels), prompt
// tokens prefilled, sequences decoding one token each, and KV-cache tokens
// those decodes attend over; then what the request features add (see
// iterWork): images encoded, LoRA adapters loaded and applied, grammar
// masks, logprobs and draft tokens verified. A zero field costs nothing.
// The feature fields are omitted from JSON when zero, so a calibration
// (which fits the first four) reads as before.
type CostModel struct {
	IterBase        time.Duration
	PerPrefillToken time.Duration
	PerDecodeSeq    time.Duration
	PerKVToken      time.Duration

	// EncoderPerImageToken is the vision encoder's time per image token.
	// An image is encoded in the iteration that schedules its request's
	// first prefill chunk, stalling that whole iteration as the encoder
	// does in vLLM's model runner, unless the encoder cache (keyed by the
	// image bytes' hash) holds it. Its tokens are prefilled as prompt
	// tokens besides.
	EncoderPerImageToken time.Duration `json:",omitempty"`
	// LoRALoadCost is the time to load an adapter into a GPU slot; it is
	// added to the iteration that admits the first request needing it, as
	// vLLM loads adapters synchronously before a step.
	LoRALoadCost time.Duration `json:",omitempty"`
	// LoRAPerAdapter is added per distinct adapter in an iteration's batch
	// (reading its weights and the extra kernels).
	LoRAPerAdapter time.Duration `json:",omitempty"`
	// GrammarCompileCost is the time to compile an output constraint
	// (JSON schema, regex, grammar, choice list) on its first use. The
	// compile runs beside the engine, as vLLM's does: only the request
	// waits, not the batch. Compiled constraints are cached by the hash
	// of their canonical text.
	GrammarCompileCost time.Duration `json:",omitempty"`
	// GrammarMaskPerToken is the time to compute the token mask of one
	// token of a constrained sequence, added per such token decoded.
	GrammarMaskPerToken time.Duration `json:",omitempty"`
	// LogprobsPerToken is the time to compute and detokenize the logprobs
	// of one token of a sequence that asked for them.
	LogprobsPerToken time.Duration `json:",omitempty"`
	// PerDraftToken is the time to propose and verify one speculative
	// draft token: each decoding sequence adds SpecTokens of them per
	// iteration, like prefill tokens.
	PerDraftToken time.Duration `json:",omitempty"`
}

// Iteration returns the duration of an iteration. An empty iteration costs
// nothing: the engine does not run one.
func (c CostModel) Iteration(prefillTokens, decodeSeqs, kvTokens int) time.Duration {
	if prefillTokens == 0 && decodeSeqs == 0 {
		return 0
	}
	return c.IterBase + time.Duration(prefillTokens)*c.PerPrefillToken + time.Duration(decodeSeqs)*c.PerDecodeSeq + time.Duration(kvTokens)*c.PerKVToken
}

// iterWork is what an iteration's request features add to its cost.
type iterWork struct {
	encoderTokens int // image tokens encoded (encoder cache misses)
	loraLoads     int // adapters loaded into a slot
	adapters      int // distinct adapters in the batch
	maskTokens    int // tokens of constrained sequences produced
	logprobTokens int // tokens of sequences asking logprobs produced
	draftTokens   int // speculative draft tokens verified
}

// charges splits the features' cost by cause, so the engine's statistics
// (and the tests) can account for each.
type charges struct {
	encoder, loraLoad, loraAdapters, grammarMask, logprobs, drafts time.Duration
}

func (c CostModel) features(w iterWork) charges {
	return charges{
		encoder:      time.Duration(w.encoderTokens) * c.EncoderPerImageToken,
		loraLoad:     time.Duration(w.loraLoads) * c.LoRALoadCost,
		loraAdapters: time.Duration(w.adapters) * c.LoRAPerAdapter,
		grammarMask:  time.Duration(w.maskTokens) * c.GrammarMaskPerToken,
		logprobs:     time.Duration(w.logprobTokens) * c.LogprobsPerToken,
		drafts:       time.Duration(w.draftTokens) * c.PerDraftToken,
	}
}

func (ch charges) total() time.Duration {
	return ch.encoder + ch.loraLoad + ch.loraAdapters + ch.grammarMask + ch.logprobs + ch.drafts
}

func (ch *charges) add(o charges) {
	ch.encoder += o.encoder
	ch.loraLoad += o.loraLoad
	ch.loraAdapters += o.loraAdapters
	ch.grammarMask += o.grammarMask
	ch.logprobs += o.logprobs
	ch.drafts += o.drafts
}

// EngineOptions configures the batching engine.
type EngineOptions struct {
	Cost CostModel
	// MaxNumBatchedTokens bounds the tokens computed in one iteration
	// (decodes count one each, plus their draft tokens under speculative
	// decoding; prefills are chunked to fit).
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
// iteration: tokens produced for one choice, and whether that choice is
// finished.
type tokenEvent struct {
	choice int
	tokens int
	done   bool
	reason string // finish reason when done
	// times are the request's clock readings, on the event that finishes
	// its last choice; nil on every other event.
	times *requestTimes
}

// outbox carries a request's token events from the engine to its handler.
// It grows as needed rather than being sized up front, so the engine never
// blocks on a slow handler and a request with many choices and a large
// max_tokens costs memory only for the events actually waiting.
type outbox struct {
	mu     sync.Mutex
	events []tokenEvent
	ready  chan struct{} // holds a token while events wait
}

func newOutbox() *outbox { return &outbox{ready: make(chan struct{}, 1)} }

func (o *outbox) push(ev tokenEvent) {
	o.mu.Lock()
	o.events = append(o.events, ev)
	o.mu.Unlock()
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// take returns the waiting events (possibly none), reusing buf's storage.
func (o *outbox) take(buf []tokenEvent) []tokenEvent {
	o.mu.Lock()
	buf, o.events = o.events, buf[:0]
	o.mu.Unlock()
	return buf
}

// imageRef is an image the vision encoder must encode: its bytes' hash
// (the encoder cache key) and its tokens.
type imageRef struct {
	hash   uint64
	tokens int
}

// seq is one sequence inside the engine: a request, or one of the n
// choices of a request, each decoding on its own.
type seq struct {
	id          uint64
	promptLen   int
	blockHashes []uint64 // chained hashes of the prompt's full blocks
	maxTokens   int
	stopAt      int // generate this many tokens; == maxTokens unless stopping early
	arrival     time.Time

	// What the request asks beyond its length, each charged by the cost
	// model.
	adapter     string     // LoRA adapter, "" for the base model
	images      []imageRef // for the vision encoder
	constrained bool       // structured output: compile a grammar, mask each token
	grammar     uint64     // hash of the constraint's canonical text
	logprobs    bool
	n           int   // choices; n > 1 forks after the prefill
	stopAts     []int // each choice's stopAt when n > 1
	choice      int   // this sequence's choice index

	// Engine-owned state.
	computed   int // tokens whose KV is computed (prefill progress)
	target     int // tokens to prefill before decoding: promptLen, or promptLen+generated after preemption
	generated  int
	blocks     []*block
	cachedHits int // prompt tokens served from the prefix cache
	firstAt    time.Time
	lastAt     time.Time
	readyAt    time.Time // its grammar is compiled; not scheduled before
	encoded    bool      // its images went through the encoder
	parent     *seq      // the request's choice 0, for choices 1..n-1
	children   []*seq    // choices 1..n-1, once forked

	// The request's phases, engine-owned: scheduledAt is the start of the
	// iteration that first admitted the sequence (a readmission after
	// preemption keeps it, as vLLM's scheduled_ts is the first
	// scheduling); choicesDone counts the request's finished choices, on
	// choice 0's sequence.
	scheduledAt time.Time
	choicesDone int

	out      *outbox // shared by every choice of the request
	aborted  atomic.Bool
	finished bool // engine-owned: retired after its last token
}

// isAborted reports whether the request this sequence belongs to was
// aborted: a choice goes with its request.
func (s *seq) isAborted() bool {
	return s.aborted.Load() || s.parent != nil && s.parent.aborted.Load()
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

	// Request features.
	mmQueries, mmHits            uint64 // images looked up in the encoder cache, and found
	loraLoads, loraEvictions     uint64
	loraRunning, loraWaiting     []string // distinct adapters, sorted (replaced, never mutated)
	grammarCompiles, grammarHits uint64
	grammarCompileTime           time.Duration // compile time requests waited for, in total
	specDrafts, specDraftTokens  uint64
	specAccepted                 uint64
	specAcceptedPos              []uint64 // accepted drafts by position
	charged                      charges  // iteration time spent on each feature, in total
}

// statDelta is what one iteration adds to the counters, applied under mu
// once.
type statDelta struct {
	mmQueries, mmHits        uint64
	loraLoads, loraEvictions uint64
	drafts, accepted         uint64
	acceptedPos              []uint64
}

// engineFeatures are the request-feature settings the engine applies
// beyond EngineOptions (they come from Options).
type engineFeatures struct {
	specTokens int     // draft tokens per decode step; 0: off
	specAlpha  float64 // a draft's acceptance probability, given the ones before it were accepted
	maxLoRAs   int     // adapter slots; 0: no adapters served
	seed       uint64  // seeds the acceptance draws
}

// encoderCacheEntries and grammarCacheEntries bound the encoder and grammar
// caches: their keys come from clients, so they must forget.
const (
	encoderCacheEntries = 1024
	grammarCacheEntries = 1024
)

// clock is the engine's time: when an iteration starts, the wait for its
// end, and the idle wait. The engine reads no other time, so a test can
// step it with a fake clock that jumps to an iteration's end instead of
// waiting for it (iterate_test.go); the simulator runs on realClock.
type clock interface {
	now() time.Time
	sleepUntil(t time.Time)
	// after is time.After: the idle wait's timer.
	after(d time.Duration) <-chan time.Time
}

// realClock is wall-clock time, with sleepUntilTime's precise wait.
type realClock struct{}

func (realClock) now() time.Time                         { return time.Now() }
func (realClock) sleepUntil(t time.Time)                 { sleepUntilTime(t) }
func (realClock) after(d time.Duration) <-chan time.Time { return time.After(d) }

// engine runs the batching loop in its own goroutine.
type engine struct {
	opts     EngineOptions
	feat     engineFeatures
	clock    clock
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
	waiting  *list.List // of *seq
	running  []*seq
	rng      *rand.Rand        // speculative acceptance draws
	encoder  *lru[struct{}]    // images encoded, by bytes' hash
	grammars *lru[time.Time]   // compiled constraints: when each compile ends
	loaded   map[string]uint64 // adapters in a GPU slot: the iteration each was last used in
	active   map[string]bool   // adapters of the running sequences (rebuilt each iteration)
	batchAd  map[string]bool   // adapters in this iteration's batch (reused)
	tick     uint64            // iterations planned
}

func newEngine(o EngineOptions) *engine { return newEngineWith(o, engineFeatures{}) }

func newEngineWith(o EngineOptions, f engineFeatures) *engine {
	e := newSteppedEngine(o, f, realClock{})
	e.wg.Go(e.loop)
	return e
}

// newSteppedEngine builds an engine on clock c without starting its loop:
// the caller is then the engine goroutine, submitting with submit and
// drain and running each iteration with iterate. It lets a test step the
// scheduler one iteration at a time on a fake clock, with no goroutine
// and no wall-clock wait.
func newSteppedEngine(o EngineOptions, f engineFeatures, c clock) *engine {
	e := &engine{opts: o, feat: f, clock: c, kv: newKVCache(o.KVBlocks), submitC: make(chan *seq, 1024), abortC: make(chan *seq, 1024),
		stopC: make(chan struct{}), seed: maphash.MakeSeed(), waiting: list.New(), busy: newBusyMeter(c.now()),
		rng: rand.New(rand.NewPCG(f.seed, 0x5bec)), encoder: newLRU[struct{}](encoderCacheEntries), grammars: newLRU[time.Time](grammarCacheEntries),
		loaded: map[string]uint64{}, active: map[string]bool{}, batchAd: map[string]bool{}}
	e.stats.overrun = promtext.NewHistogram(1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 7.5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1)
	e.stats.specAcceptedPos = make([]uint64, f.specTokens)
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
// cache could never hold it. Each choice of a request decodes on its own,
// so one choice must fit, not all n at once.
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
	s.n = max(s.n, 1)
	s.out = newOutbox()
	e.submitC <- s
	return nil
}

// abort asks the engine to drop a request (every choice of it) at its next
// iteration boundary.
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
				e.enqueue(s)
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
			e.enqueue(s)
		case s := <-e.abortC:
			e.drop(s)
		default:
			return
		}
	}
}

// enqueue puts a new request at the back of the waiting queue. A
// constrained request looks its grammar up in the cache: a miss starts its
// compile, which the request waits out in the queue (requests behind it go
// first, as in vLLM, whose compiles run in a thread pool); a hit on a
// grammar still compiling waits for that compile.
func (e *engine) enqueue(s *seq) {
	if s.constrained {
		until, hit := e.grammars.get(s.grammar)
		if !hit {
			c := e.opts.Cost.GrammarCompileCost
			until = e.clock.now().Add(c)
			e.grammars.put(s.grammar, until)
			e.mu.Lock()
			e.stats.grammarCompiles++
			e.stats.grammarCompileTime += c
			e.mu.Unlock()
		} else {
			e.mu.Lock()
			e.stats.grammarHits++
			e.mu.Unlock()
		}
		s.readyAt = until
	}
	e.waiting.PushBack(s)
}

// drop removes an aborted request, every choice of it, and frees their
// blocks. A request whose choices all finished already (its client left
// just after the last token) is not an abort.
func (e *engine) drop(s *seq) {
	dropped := false
	for _, x := range append([]*seq{s}, s.children...) {
		if x.finished {
			continue
		}
		dropped = true
		for el := e.waiting.Front(); el != nil; el = el.Next() {
			if el.Value.(*seq) == x {
				e.waiting.Remove(el)
				e.waitingN.Add(-1)
				break
			}
		}
		for i, r := range e.running {
			if r == x {
				e.running = append(e.running[:i], e.running[i+1:]...)
				break
			}
		}
		e.freeBlocks(x)
	}
	if !dropped {
		return
	}
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
	emits    []int // tokens each decode produces (more than 1 with accepted drafts)
	prefills []*seq
	chunks   []int
	kvTokens int
	prefill  int
}

// seqsNeeded is how many running slots admitting s takes: a request with
// n choices not yet forked takes n, as its choices will run side by side.
func (s *seq) seqsNeeded() int {
	if s.n > 1 && s.parent == nil && s.generated == 0 {
		return s.n
	}
	return 1
}

// produced adds a sequence's new tokens to the per-token feature work.
func produced(w *iterWork, s *seq, tokens int) {
	if s.constrained {
		w.maskTokens += tokens
	}
	if s.logprobs {
		w.logprobTokens += tokens
	}
}

// schedulePrefill adds a prefill chunk to the plan, running the request's
// images through the encoder with its first chunk, and counts the tokens
// the chunk produces when it ends the prefill (one per choice).
func (e *engine) schedulePrefill(p *plan, w *iterWork, d *statDelta, s *seq, chunk int) {
	p.prefills, p.chunks = append(p.prefills, s), append(p.chunks, chunk)
	if !s.encoded {
		s.encoded = true
		for _, im := range s.images {
			d.mmQueries++
			if _, ok := e.encoder.get(im.hash); ok {
				d.mmHits++
				continue
			}
			e.encoder.put(im.hash, struct{}{})
			w.encoderTokens += im.tokens
		}
	}
	if s.computed+chunk >= s.target {
		produced(w, s, s.seqsNeeded()) // a recompute's last chunk samples a token too
	}
}

// draftAccepted draws how many of a step's drafts the target model
// accepts: the leading successes of specTokens trials.
func (e *engine) draftAccepted() int {
	a := 0
	for a < e.feat.specTokens && e.rng.Float64() < e.feat.specAlpha {
		a++
	}
	return a
}

// adapterFits reports whether a request for adapter a may join the batch:
// a batch holds at most maxLoRAs distinct adapters (vLLM's rule), so one
// not already running needs a free place among them.
func (e *engine) adapterFits(a string) bool {
	return a == "" || e.active[a] || len(e.active) < e.feat.maxLoRAs
}

// useAdapter puts adapter a in a GPU slot if it is not in one, evicting the
// least recently used adapter that no running sequence uses. adapterFits
// guarantees there is one: the running adapters are fewer than the slots.
func (e *engine) useAdapter(a string, w *iterWork, d *statDelta) {
	if a == "" {
		return
	}
	if _, ok := e.loaded[a]; !ok {
		if len(e.loaded) >= e.feat.maxLoRAs {
			victim, oldest := "", uint64(0)
			for name, used := range e.loaded {
				if !e.active[name] && (victim == "" || used < oldest || used == oldest && name < victim) {
					victim, oldest = name, used
				}
			}
			delete(e.loaded, victim)
			d.loraEvictions++
		}
		d.loraLoads++
		w.loraLoads++
	}
	e.loaded[a] = e.tick
	e.active[a] = true
}

func (e *engine) iterate() {
	start := e.clock.now()
	e.tick++
	var p plan
	var w iterWork
	var d statDelta
	budget := e.opts.MaxNumBatchedTokens
	k := e.feat.specTokens
	// Decodes first: every running sequence past its prefill gets a token
	// (and, under speculative decoding, its drafts verified), preempting
	// the youngest when the cache runs out. An iteration that preempted
	// admits nothing, as in vLLM: the cache is short already.
	preempted := false
	for i := 0; i < len(e.running); i++ {
		s := e.running[i]
		if s.computed < s.target {
			continue
		}
		// Room for the KV of the last token and of every draft, as vLLM
		// reserves lookahead slots, within the sequence's length.
		need := min(s.computed+1+k, s.promptLen+s.stopAt)
		for !e.ensureBlocks(s, need) {
			v := e.preempt()
			preempted = preempted || v != nil
			if v == s || v == nil {
				s = nil
				break
			}
		}
		if s == nil {
			break // s itself was preempted; everything after it too
		}
		emit := 1
		if k > 0 {
			a := e.draftAccepted()
			d.drafts++
			d.accepted += uint64(a)
			if d.acceptedPos == nil {
				d.acceptedPos = make([]uint64, k)
			}
			for j := range a {
				d.acceptedPos[j]++
			}
			emit = min(a+1, s.stopAt-s.generated)
			w.draftTokens += k
		}
		p.decodes, p.emits = append(p.decodes, s), append(p.emits, emit)
		p.kvTokens += s.computed
		budget -= 1 + k
		produced(&w, s, emit)
	}
	// Chunked prefills of running sequences, then admissions in FCFS order.
	for _, s := range e.running {
		if budget <= 0 {
			break
		}
		if s.computed < s.target { // still prefilling, so not among the decodes
			if chunk := e.prefillChunk(s, budget); chunk > 0 {
				e.schedulePrefill(&p, &w, &d, s, chunk)
				budget -= chunk
			}
		}
	}
	if e.feat.maxLoRAs > 0 {
		clear(e.active)
		for _, s := range e.running {
			if s.adapter != "" {
				e.active[s.adapter] = true
				e.loaded[s.adapter] = e.tick
			}
		}
	}
	var nextReady time.Time // the earliest compile a waiting request waits for
	for el := e.waiting.Front(); !preempted && el != nil && budget > 0 && len(e.running) < e.opts.MaxNumSeqs; {
		s := el.Value.(*seq)
		next := el.Next()
		if s.readyAt.After(start) {
			// Its grammar is still compiling: requests behind it go first.
			if nextReady.IsZero() || s.readyAt.Before(nextReady) {
				nextReady = s.readyAt
			}
			el = next
			continue
		}
		if !e.adapterFits(s.adapter) {
			el = next // skipped until its adapter can join the batch, as vLLM does
			continue
		}
		if len(e.running) > 0 && len(e.running)+s.seqsNeeded() > e.opts.MaxNumSeqs {
			break
		}
		if !e.admit(s) {
			break
		}
		e.useAdapter(s.adapter, &w, &d)
		if s.scheduledAt.IsZero() {
			s.scheduledAt = start
		}
		e.waiting.Remove(el)
		e.waitingN.Add(-1)
		e.running = append(e.running, s)
		if chunk := e.prefillChunk(s, budget); chunk > 0 {
			e.schedulePrefill(&p, &w, &d, s, chunk)
			budget -= chunk
		}
		el = next
	}
	for _, c := range p.chunks {
		p.prefill += c
	}
	if e.feat.maxLoRAs > 0 {
		clear(e.batchAd)
		for _, ss := range [][]*seq{p.decodes, p.prefills} {
			for _, s := range ss {
				if s.adapter != "" {
					e.batchAd[s.adapter] = true
				}
			}
		}
		w.adapters = len(e.batchAd)
	}
	cost := e.opts.Cost.Iteration(p.prefill, len(p.decodes), p.kvTokens)
	var ch charges
	if len(p.decodes) > 0 || len(p.prefills) > 0 {
		ch = e.opts.Cost.features(w)
		cost += ch.total()
	}
	e.apply(d)
	e.publish()
	if cost == 0 && len(p.decodes) == 0 && len(p.prefills) == 0 {
		// Nothing could run (the queue head does not fit, or every waiting
		// request waits for its grammar): wait for a change.
		wait := 10 * time.Millisecond
		if !nextReady.IsZero() {
			wait = min(wait, nextReady.Sub(e.clock.now()))
		}
		if wait <= 0 {
			return
		}
		select {
		case s := <-e.submitC:
			e.enqueue(s)
		case s := <-e.abortC:
			e.drop(s)
		case <-e.stopC:
		case <-e.clock.after(wait):
		}
		return
	}
	end := start.Add(cost)
	if cost == 0 {
		runtime.Gosched() // a free iteration still lets the process's other goroutines run
	}
	e.clock.sleepUntil(end)
	overrun := e.clock.now().Sub(end)
	e.commit(&p)
	e.busy.add(e.clock.now(), e.clock.now().Sub(start))
	e.mu.Lock()
	e.stats.iterations++
	e.stats.overrun.Observe(overrun.Seconds())
	e.stats.charged.add(ch)
	e.mu.Unlock()
	e.publish()
}

// apply adds an iteration's counters to the statistics.
func (e *engine) apply(d statDelta) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := &e.stats
	st.mmQueries += d.mmQueries
	st.mmHits += d.mmHits
	st.loraLoads += d.loraLoads
	st.loraEvictions += d.loraEvictions
	st.specDrafts += d.drafts
	st.specDraftTokens += d.drafts * uint64(e.feat.specTokens)
	st.specAccepted += d.accepted
	for j, n := range d.acceptedPos {
		st.specAcceptedPos[j] += n
	}
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

// emit hands n new tokens of s to its request's handler.
func (e *engine) emit(s *seq, n int, now time.Time) {
	s.generated += n
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
	ev := tokenEvent{choice: s.choice, tokens: n, done: done, reason: reason}
	if done {
		ev.times = s.finishChoice(now)
	}
	s.out.push(ev)
}

// fork starts choices 1..n-1 of a request whose prefill just ended: each
// shares the prompt's full blocks (the prompt is prefilled once), gets the
// first token sampled from the same logits, and decodes on its own from
// then on, with a private copy of the last, partial block allocated at its
// first decode.
func (e *engine) fork(s *seq, now time.Time) {
	full := min(s.computed/e.opts.BlockSize, len(s.blocks))
	for i := 1; i < s.n; i++ {
		c := &seq{id: s.id, promptLen: s.promptLen, blockHashes: s.blockHashes, maxTokens: s.maxTokens, stopAt: s.stopAts[i], arrival: s.arrival,
			adapter: s.adapter, constrained: s.constrained, grammar: s.grammar, logprobs: s.logprobs, n: 1, choice: i,
			computed: s.computed, target: s.target, encoded: true, parent: s, out: s.out}
		c.blocks = make([]*block, full)
		for j, b := range s.blocks[:full] {
			b.ref++ // referenced already, so neither free nor evictable
			c.blocks[j] = b
		}
		s.children = append(s.children, c)
		e.running = append(e.running, c)
		e.emit(c, 1, now)
	}
}

// commit applies an iteration's results and tells the handlers.
func (e *engine) commit(p *plan) {
	now := e.clock.now()
	for i, s := range p.decodes {
		if s.isAborted() {
			continue
		}
		s.computed += p.emits[i]
		e.emit(s, p.emits[i], now)
	}
	for i, s := range p.prefills {
		if s.isAborted() {
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
			// The last prefill chunk yields a token: the first, or after a
			// recompute the next, as vLLM samples once every token has its KV.
			first := s.generated == 0
			e.emit(s, 1, now)
			if first && s.n > 1 && s.parent == nil && s.children == nil {
				e.fork(s, now)
			}
		}
	}
	// Retire finished sequences.
	kept := e.running[:0]
	for _, s := range e.running {
		if s.generated >= s.stopAt || s.isAborted() {
			if !s.isAborted() {
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
	var running, waiting []string
	if e.feat.maxLoRAs > 0 {
		running = adapterNames(slices.Values(e.running))
		waiting = adapterNames(func(yield func(*seq) bool) {
			for el := e.waiting.Front(); el != nil; el = el.Next() {
				if !yield(el.Value.(*seq)) {
					return
				}
			}
		})
	}
	e.mu.Lock()
	e.stats.running, e.stats.waiting = len(e.running), int(e.waitingN.Load())
	e.stats.kvUsage = float64(e.kv.used) / float64(e.kv.total)
	e.stats.usedBlocks = e.kv.used
	e.stats.loraRunning, e.stats.loraWaiting = running, waiting
	e.mu.Unlock()
}

// adapterNames returns the distinct adapters of the sequences, sorted.
func adapterNames(seqs iter.Seq[*seq]) []string {
	var out []string
	for s := range seqs {
		if s.adapter != "" && !slices.Contains(out, s.adapter) {
			out = append(out, s.adapter)
		}
	}
	slices.Sort(out)
	return out
}

// snapshot returns a copy of the engine's statistics.
func (e *engine) snapshot() engineStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	s.overrun = e.stats.overrun.Clone()
	s.specAcceptedPos = slices.Clone(e.stats.specAcceptedPos)
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
