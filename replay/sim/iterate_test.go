package sim

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected blocks of testdata/iterations.txt from the engine's output")

// fakeClock steps the engine without waiting: sleepUntil jumps to the
// iteration's end, so each iteration takes exactly its cost, and the idle
// wait's timer fires at once, having moved the clock by its duration.
type fakeClock struct {
	t    time.Time
	idle bool // after was called: the iteration was an idle wait
}

func (c *fakeClock) now() time.Time { return c.t }

func (c *fakeClock) sleepUntil(t time.Time) {
	if t.After(c.t) {
		c.t = t
	}
}

func (c *fakeClock) after(d time.Duration) <-chan time.Time {
	c.t, c.idle = c.t.Add(d), true
	ch := make(chan time.Time, 1)
	ch <- c.t
	return ch
}

// TestIterateDataDriven runs the cases of testdata/iterations.txt: an
// engine built without its loop, on a fake clock, is given requests and
// stepped one iteration at a time; what each iteration scheduled (decodes,
// prefill chunks, preemptions), the tokens it produced, the sequences it
// finished, the queues and the KV blocks referenced after it must be as
// worked out by hand from iterate's rules and the cost model. The file's
// header gives the format; -rewrite writes the engine's output in place of
// the expected blocks, for an intended change (then read the diff).
func TestIterateDataDriven(t *testing.T) {
	const path = "testdata/iterations.txt"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	cases := parseIterCases(t, path, lines)
	got := make([][]string, len(cases))
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got[i] = stepCase(t, c)
			if *rewrite {
				return
			}
			for j := range max(len(got[i]), len(c.want)) {
				g, w := "(none)", "(none)"
				if j < len(got[i]) {
					g = got[i][j]
				}
				if j < len(c.want) {
					w = c.want[j]
				}
				if g != w {
					t.Errorf("%s:%d:\n got  %s\n want %s", path, c.wantLine+1+j, g, w)
				}
			}
		})
	}
	if !*rewrite {
		return
	}
	var out []string
	next := 0
	for i, c := range cases {
		if got[i] == nil {
			t.Fatalf("case %s did not run (-run must select every case); not rewriting", c.name)
		}
		out = append(out, lines[next:c.wantLine]...)
		out = append(out, got[i]...)
		next = c.wantLine + len(c.want)
	}
	out = append(out, lines[next:]...)
	if err := os.WriteFile(path, []byte(strings.Join(out, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
}

type iterReq struct {
	name           string
	prompt, max, n int
	at             int    // submitted before this iteration
	text           string // whose tokens the prompt has
}

type iterCase struct {
	name       string
	opts       EngineOptions
	reqs       []*iterReq
	iterations int
	want       []string
	wantLine   int // index in the file's lines of the first expected line
}

func parseIterCases(t *testing.T, path string, lines []string) []*iterCase {
	t.Helper()
	var cases []*iterCase
	var c *iterCase
	inWant := false
	for i, raw := range lines {
		n := i + 1
		line := strings.TrimSpace(raw)
		fail := func(format string, a ...any) {
			t.Fatalf("%s:%d: %s", path, n, fmt.Sprintf(format, a...))
		}
		f := strings.Fields(line)
		switch {
		case inWant && line != "" && !strings.HasPrefix(line, "#") && f[0] != "case":
			c.want = append(c.want, line)
			continue
		case line == "" || strings.HasPrefix(line, "#"):
			inWant = false // the expected block ends at a blank or comment line
			continue
		case f[0] == "case":
			if len(f) != 2 {
				fail("want \"case NAME\"")
			}
			c = &iterCase{name: f[1], opts: EngineOptions{MaxWaiting: 1000}}
			cases, inWant = append(cases, c), false
			continue
		case c == nil:
			fail("a line before the first case")
		case line == "----":
			inWant, c.wantLine = true, i+1
			continue
		}
		kv := map[string]string{}
		for _, a := range f[1:] {
			k, v, _ := strings.Cut(a, "=")
			kv[k] = v
		}
		num := func(k string, def int) int {
			v, ok := kv[k]
			if !ok {
				return def
			}
			x, err := strconv.Atoi(v)
			if err != nil {
				fail("%s=%q is not a number", k, v)
			}
			return x
		}
		dur := func(k string) time.Duration {
			v, ok := kv[k]
			if !ok {
				return 0
			}
			d, err := time.ParseDuration(v)
			if err != nil {
				fail("%s=%q is not a duration", k, v)
			}
			return d
		}
		switch f[0] {
		case "engine":
			o := &c.opts
			o.KVBlocks, o.BlockSize, o.MaxNumSeqs, o.MaxNumBatchedTokens = num("blocks", 0), num("block", 0), num("seqs", 0), num("batched", 0)
			_, o.PrefixCaching = kv["prefix"]
		case "cost":
			c.opts.Cost = CostModel{IterBase: dur("base"), PerPrefillToken: dur("prefill"), PerDecodeSeq: dur("decode"), PerKVToken: dur("kv")}
		case "req":
			if len(f) < 2 || strings.Contains(f[1], "=") {
				fail("want \"req NAME key=value...\"")
			}
			c.reqs = append(c.reqs, &iterReq{name: f[1], prompt: num("prompt", 0), max: num("max", 0), n: num("n", 1), at: num("at", 1), text: cmp.Or(kv["text"], f[1])})
		case "run":
			if len(f) != 2 {
				fail("want \"run N\"")
			}
			x, err := strconv.Atoi(f[1])
			if err != nil {
				fail("run %q: not a number", f[1])
			}
			c.iterations = x
		default:
			fail("unknown line %q", f[0])
		}
	}
	for _, c := range cases {
		if c.wantLine == 0 {
			t.Fatalf("%s: case %s has no \"----\" line", path, c.name)
		}
	}
	return cases
}

// seqState is what a sequence looks like between iterations.
type seqState struct {
	computed, target, generated int
	where                       byte // 'r' running, 'w' waiting, 0 neither
}

// stepCase runs a case's iterations and returns a line for each.
func stepCase(t *testing.T, c *iterCase) []string {
	t.Helper()
	epoch := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &fakeClock{t: epoch}
	e := newSteppedEngine(c.opts, engineFeatures{}, clk)
	names := map[*seq]string{}
	texts := map[string]int{}
	var out []string
	for it := 1; it <= c.iterations; it++ {
		for _, r := range c.reqs {
			if r.at != it {
				continue
			}
			if _, ok := texts[r.text]; !ok {
				texts[r.text] = len(texts) + 1
			}
			s := &seq{id: uint64(len(names) + 1), promptLen: r.prompt, maxTokens: r.max, stopAt: r.max, arrival: clk.now(), n: r.n}
			if r.n > 1 {
				for range r.n {
					s.stopAts = append(s.stopAts, r.max)
				}
			}
			if c.opts.PrefixCaching {
				ids := make([]int, r.prompt)
				for i := range ids {
					ids[i] = texts[r.text]*1_000_000 + i
				}
				s.blockHashes = e.hashBlocks(ids)
			}
			if err := e.submit(s); err != nil {
				t.Fatalf("iteration %d: submitting %s: %v", it, r.name, err)
			}
			names[s] = r.name
		}
		e.drain()

		// Every sequence, in scheduling order: running, then waiting.
		var order []*seq
		where := map[*seq]byte{}
		running := slices.Clone(e.running)
		for _, s := range running {
			order, where[s] = append(order, s), 'r'
		}
		for el := e.waiting.Front(); el != nil; el = el.Next() {
			s := el.Value.(*seq)
			order, where[s] = append(order, s), 'w'
		}
		before := map[*seq]seqState{}
		for _, s := range order {
			before[s] = seqState{s.computed, s.target, s.generated, where[s]}
		}

		start := clk.now()
		clk.idle = false
		preemptions := e.snapshot().preemptions
		e.iterate()
		cost := clk.now().Sub(start)

		// Preemptions happen among the decodes, before any admission or
		// fork, each taking the youngest: the last k of the running list as
		// it was. One may be admitted again in the same iteration.
		preempted := map[*seq]bool{}
		for _, s := range running[len(running)-int(e.snapshot().preemptions-preemptions):] {
			preempted[s] = true
		}

		// Forks joined the running sequences in this iteration.
		for _, s := range e.running {
			if _, ok := names[s]; !ok {
				names[s] = fmt.Sprintf("%s/%d", names[s.parent], s.choice)
			}
		}
		inWaiting := map[*seq]bool{}
		var run, wait []string
		for _, s := range e.running {
			run = append(run, names[s])
		}
		for el := e.waiting.Front(); el != nil; el = el.Next() {
			s := el.Value.(*seq)
			wait, inWaiting[s] = append(wait, names[s]), true
		}
		line := fmt.Sprintf("it %d t=%s+%s", it, ms(start.Sub(epoch)), ms(cost))
		if clk.idle {
			out = append(out, fmt.Sprintf("%s idle run=%s wait=%s kv=%d/%d", line, joined(run), joined(wait), e.kv.used, e.kv.total))
			continue
		}
		var decode, prefill, preempt, done, tok []string
		seen := map[*seq]bool{}
		var all []*seq
		for _, s := range order {
			all = append(all, s)
			seen[s] = true
		}
		for _, s := range order {
			for _, ch := range s.children {
				if !seen[ch] {
					all, seen[ch] = append(all, ch), true
				}
			}
		}
		for _, s := range all {
			b := before[s]
			switch {
			case preempted[s]:
				preempt = append(preempt, names[s])
			case b.where == 'r' && b.computed >= b.target:
				decode = append(decode, names[s])
			case b.where == 'r' && s.computed > b.computed:
				prefill = append(prefill, fmt.Sprintf("%s:%d", names[s], s.computed-b.computed))
			}
			if (b.where == 'w' || preempted[s]) && !inWaiting[s] { // admitted
				hit := 0
				if c.opts.PrefixCaching && b.generated == 0 {
					hit = s.cachedHits
				}
				if hit > 0 {
					prefill = append(prefill, fmt.Sprintf("%s:%d+%d", names[s], hit, s.computed-hit))
				} else {
					prefill = append(prefill, fmt.Sprintf("%s:%d", names[s], s.computed))
				}
			}
			if d := s.generated - b.generated; d > 0 {
				tok = append(tok, fmt.Sprintf("%s:%d", names[s], d))
			}
			if s.finished && b.generated < s.stopAt {
				done = append(done, names[s])
			}
		}
		out = append(out, fmt.Sprintf("%s decode=%s prefill=%s tok=%s preempt=%s done=%s run=%s wait=%s kv=%d/%d",
			line, joined(decode), joined(prefill), joined(tok), joined(preempt), joined(done), joined(run), joined(wait), e.kv.used, e.kv.total))
	}
	return out
}

// ms writes a duration in milliseconds, as the cases do.
func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64) + "ms"
}

func joined(xs []string) string {
	if len(xs) == 0 {
		return "-"
	}
	return strings.Join(xs, ",")
}
