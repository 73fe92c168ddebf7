package analyze

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"golang.org/x/sync/errgroup"
	"gonum.org/v1/gonum/stat/distuv"

	"github.com/servetrace/servetrace/analyze/peer"
	"github.com/servetrace/servetrace/internal/loghist"
	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/trace"
)

// A run too long to hold is analyzed streamed: its parts are read batch by
// batch, twice (the send times alone, then every column analysis reads),
// into accumulators of fixed size, so memory does not grow with the run
// (docs/architecture.md, "Streamed analysis"):
//   - each metric's values go to log-linear histograms (loghist): every
//     percentile and interval end is within loghist.RelErr of the value the
//     held analysis gives, and order-statistic intervals keep exact ranks;
//   - batch means split the requests into streamBatches batches of equal
//     count in send order (the first pass's send times fix the edges), one
//     histogram per batch and metric;
//   - the bootstrap resamples a uniform sample of bootstrapSampleSize
//     values per metric, its standard error scaled by √(m/n);
//   - the dependence test pools the lag-1 rank autocorrelation within each
//     record batch (a part, as replay writes them) put in send order.

// DefaultInMemoryRows is the most result rows analyzed in memory when
// Options.InMemoryRows is unset: a held row costs about heldRowBytes at
// the analysis's peak, so this keeps a held analysis under 4 GB.
const DefaultInMemoryRows = 2_000_000

// heldRowBytes is about what one result row costs a held analysis at its
// peak (docs/measurements.md, "Streamed analysis").
const heldRowBytes = 1700

// heldEntriesPerRow is how many token times or prefix blocks a held
// analysis counts as one row: each is held as a value and again as a gap
// or a block id in a set, about 32 bytes, where a row of a few is
// heldRowBytes. Rows at the per-row bound (MaxRowEvents) would otherwise
// pass as few.
const heldEntriesPerRow = heldRowBytes / 32

// heldListColumns are the list columns a held analysis keeps every entry
// of.
var heldListColumns = []string{"token_times_ns", "prefix_blocks"}

const (
	// streamBatches is the batch-means batch count of a streamed analysis:
	// batchesFor's most, as every streamed run is long.
	streamBatches = 30
	// bootstrapSampleSize is how many values per metric the streamed
	// bootstrap resamples.
	bootstrapSampleSize = 1 << 17
	// rankedRows is about how many rows per metric the dependence test
	// ranks: every record batch of a run up to twice this, every k-th of
	// a longer one.
	rankedRows = 1_000_000
	// sendGridBins is the resolution of the first pass's send-time counts.
	sendGridBins = 1 << 20
)

// bootstrapSample is bootstrapSampleSize, smaller in tests.
var bootstrapSample = bootstrapSampleSize

// Streamed says how a report was computed without holding its rows.
type Streamed struct {
	// Rows are the result rows read; InMemoryRows the limit they exceed.
	Rows         int64 `json:"rows"`
	InMemoryRows int   `json:"in_memory_rows"`
	// RelErr bounds every percentile's and interval end's relative error
	// (the histograms' bin width).
	RelErr float64 `json:"percentile_rel_err"`
	// Batches is the batch-means batch count, BootstrapSample the values
	// per metric the bootstrap resamples.
	Batches         int `json:"batches"`
	BootstrapSample int `json:"bootstrap_sample"`
	// PrefixDistinctRelErr is the relative standard error of the count of
	// distinct prefix block ids behind the reuse share: 0 when counted
	// exactly (up to exactDistinct ids).
	PrefixDistinctRelErr float64 `json:"prefix_distinct_rel_err,omitempty"`
	// HeldRows, where the rows' token times and prefix blocks brought
	// them over the limit, is what they count as: the rows and an extra
	// row per heldEntriesPerRow entries.
	HeldRows int64 `json:"held_rows,omitempty"`
}

// streamedText is the report's note on a streamed analysis.
func streamedText(s *Streamed) string {
	of := fmt.Sprintf("%d result rows", s.Rows)
	if s.HeldRows > 0 {
		of = fmt.Sprintf("%d result rows, whose token times and prefix blocks count as %d,", s.Rows, s.HeldRows)
	}
	text := fmt.Sprintf("streamed analysis of %s (over %d held in memory): percentiles and interval ends within %.1f%%; batch means over %d batches of equal send count; bootstrap over a uniform sample of %d values per metric, its error scaled to the whole run",
		of, s.InMemoryRows, 100*s.RelErr, s.Batches, s.BootstrapSample)
	if s.PrefixDistinctRelErr > 0 {
		text += fmt.Sprintf("; prefix reuse from an estimate of distinct block ids (HyperLogLog, ±%.1f%% of that count at 95%%)", 196*s.PrefixDistinctRelErr)
	}
	return text
}

// heldRows counts the result rows of run directories (a peer tool's
// result file: its records, peers opening each once) and what a held
// analysis counts them as: each row, and a row more per heldEntriesPerRow
// token times and prefix blocks (servetrace runs only). Both come from
// each part's footer, read once: the footer, not run.json, says how many
// rows a part holds (a run.json edited to list fewer would have them
// held), and run.json's count must match it.
func heldRows(runDirs []string, peers peerFiles) (rows, held int64, err error) {
	var entries int64
	for _, dir := range runDirs {
		if peer.IsResultFile(dir) {
			runs, err := peers.open(dir)
			if err != nil {
				return 0, 0, err
			}
			for _, r := range runs {
				if r.HasRecords() {
					rows += r.Records
				}
			}
			continue
		}
		if _, err := trace.ReadRunInfo(dir); err != nil {
			return 0, 0, err // says what is missing before the parts do
		}
		parts, err := trace.ResultParts(dir)
		if err != nil {
			return 0, 0, err
		}
		for _, p := range parts {
			path := filepath.Join(dir, p.Path)
			n, k, err := footerCounts(path, heldListColumns)
			if err != nil {
				return 0, 0, fmt.Errorf("read %s: %w", path, err)
			}
			if p.Rows >= 0 && n != p.Rows {
				return 0, 0, fmt.Errorf("run %s: %s holds %d rows, %s says %d: the part was replaced", dir, p.Path, n, trace.RunInfoName, p.Rows)
			}
			rows, entries = rows+n, entries+k
		}
	}
	return rows, rows + entries/heldEntriesPerRow, nil
}

// footerCounts are a Parquet part's row count and the value count of the
// named list columns' leaves over its row groups, from its footer.
func footerCounts(path string, columns []string) (rows, entries int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("corrupt Parquet data: %v", r)
		}
	}()
	pf, err := openParquet(path)
	if err != nil {
		return 0, 0, err
	}
	defer pf.Close()
	schema := pf.MetaData().Schema
	for i := range schema.NumColumns() {
		top, _, _ := strings.Cut(schema.Column(i).Path(), ".")
		if !slices.Contains(columns, top) {
			continue
		}
		for g := range pf.NumRowGroups() {
			meta, err := pf.MetaData().RowGroup(g).ColumnChunk(i)
			if err != nil {
				return 0, 0, err
			}
			entries += max(meta.NumValues(), 0)
		}
	}
	return pf.NumRows(), entries, nil
}

// heldText says how many rows runs hold and, where their token times and
// prefix blocks count for more, what they count as.
func heldText(rows, held int64) string {
	if held > rows {
		return fmt.Sprintf("%d result rows, whose token times and prefix blocks count as %d held rows", rows, held)
	}
	return fmt.Sprintf("%d result rows", rows)
}

// heldMemory is about what holding held rows takes.
func heldMemory(held int64) string {
	return fmt.Sprintf("about %.3g MB", float64(held)*heldRowBytes/1e6)
}

// holdable refuses runs whose rows, their token times and prefix blocks
// counted in, pass limit (0: DefaultInMemoryRows), from the parts'
// footers before any row is held: what needs every row held at once (a
// comparison, an envelope) has no streamed path.
func holdable(dirs []string, limit int, what string) error {
	limit = cmp.Or(limit, DefaultInMemoryRows)
	rows, held, err := heldRows(dirs, peerFiles{})
	if err != nil {
		return err
	}
	if held > int64(limit) {
		return opterr.New("InMemoryRows", limit, "%s holds every result row at once, and these runs hold %s: raise it to %d if the memory is there (%s), or use fewer runs", what, heldText(rows, held), held, heldMemory(held))
	}
	return nil
}

// peerFiles are the peer result files an analysis opened, by path, so
// that each is opened (and its records counted) once.
type peerFiles map[string][]peer.Run

// open returns the runs of the result file at path, opening it the first
// time.
func (p peerFiles) open(path string) ([]peer.Run, error) {
	if runs, ok := p[path]; ok {
		return runs, nil
	}
	runs, err := peer.Open(path)
	if err != nil {
		return nil, err
	}
	if p != nil {
		p[path] = runs
	}
	return runs, nil
}

// streamable checks that opts asks only for what a streamed analysis of
// rows computes, naming what needs the rows held otherwise.
func streamable(rows, held int64, limit int, opts Options) error {
	var needs string
	switch {
	case opts.Window > 0:
		needs = "a time series"
	case opts.Curves:
		needs = "quantile curves (the HTML report)"
	case opts.VsLogged != "":
		needs = "the comparison with the logged trace"
	}
	if needs == "" {
		return nil
	}
	return opterr.New("InMemoryRows", limit, "asking for %s needs every result row in memory, and these runs hold %s: raise the limit to %d if the machine has %s to spare (about %d bytes a held row), or analyze without it",
		needs, heldText(rows, held), held, heldMemory(held), heldRowBytes)
}

// analyzeStreamed is AnalyzeContext for runs of more rows than held in
// memory; held is what they count as (more than rows where their token
// times and prefix blocks brought them over the limit).
func analyzeStreamed(ctx context.Context, runDirs []string, rows, held int64, limit int, opts Options, peers peerFiles, tap *batchTap) (*Report, error) {
	rep := &Report{TTFTMode: opts.TTFTMode, Interval: opts.Interval, Metrics: map[string]Distribution{}}
	// A source is a servetrace run's parts, or a peer tool's run.
	type source struct {
		dir   string
		parts []trace.Part
		peer  *peer.Run
	}
	var runs []source
	ids := map[string]bool{}
	for _, dir := range runDirs {
		if peer.IsResultFile(dir) {
			prs, err := peers.open(dir)
			if err != nil {
				return nil, err
			}
			for i := range prs {
				r := &prs[i]
				rep.Notes = append(rep.Notes, r.Notes...)
				if !r.HasRecords() {
					rep.Given = append(rep.Given, GivenRun{Source: r.Source, Tool: r.Tool, Model: r.Model, Figures: r.Figures, Remedy: r.Remedy})
					continue
				}
				runs = append(runs, source{dir: r.Source, peer: r})
				rep.Runs = append(rep.Runs, peerRunSummary(r))
				ids[r.ID] = true
			}
			continue
		}
		ri, err := trace.ReadRunInfo(dir)
		if err != nil {
			return nil, err
		}
		parts, err := trace.ResultParts(dir)
		if err != nil {
			return nil, err
		}
		runs = append(runs, source{dir: dir, parts: parts})
		sum, notes := runSummaryOf(dir, ri)
		rep.Runs, rep.Notes = append(rep.Runs, sum), append(rep.Notes, notes...)
		ids[ri.RunID] = true
	}
	if len(ids) > 1 {
		return nil, opterr.New("InMemoryRows", limit, "comparing %d repeats of a run needs every result row in memory, and these runs hold %s: raise the limit to %d if the machine has %s to spare, or analyze each run on its own",
			len(ids), heldText(rows, held), held, heldMemory(held))
	}
	// The live heap is small and fixed while the decoder allocates a
	// batch's buffers anew each time: collect less often while this runs
	// (a process-wide setting, restored when it returns).
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	grid := newSendGrid()
	for _, r := range runs {
		if r.peer != nil {
			err := r.peer.Each(func(batch []peer.Request) error {
				if err := ctx.Err(); err != nil {
					return err
				}
				for _, q := range batch {
					if !q.Warmup {
						grid.add(q.SentNs)
					}
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
			continue
		}
		for _, p := range r.parts {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			path := filepath.Join(r.dir, p.Path)
			if err := forEachBatch(path, func(top string) bool { return top == "sent_ns" || top == "warmup" }, grid.addBatch); err != nil {
				return nil, fmt.Errorf("read %s: %w", path, err)
			}
		}
	}
	acc := newStreamAcc(opts, grid.edges(streamBatches), rows)
	// One goroutine decodes record batches into chunks while this one adds
	// them up: three chunks circulate, so memory stays fixed.
	g, gctx := errgroup.WithContext(ctx)
	full, free := make(chan *resultColumns, 1), make(chan *resultColumns, 3)
	// Breakdowns by tenant, model, adapter, phase or turn need the
	// columns a lean read leaves out.
	lean := !slices.ContainsFunc(opts.By, func(d string) bool { return slices.Contains(groupColumns, d) })
	names := &columnNames{} // one interner for every chunk
	for range cap(free) {
		free <- &resultColumns{lean: lean, names: names}
	}
	var read int64
	// take gets a free chunk, emptied; send hands a filled one over.
	take := func() (*resultColumns, error) {
		select {
		case chunk := <-free:
			chunk.reset()
			return chunk, nil
		case <-gctx.Done():
			return nil, gctx.Err()
		}
	}
	send := func(chunk *resultColumns) error {
		select {
		case full <- chunk:
			return nil
		case <-gctx.Done():
			return gctx.Err()
		}
	}
	g.Go(func() error {
		defer close(full)
		wants := tap.wants((&resultColumns{lean: lean}).wantsColumn)
		for _, r := range runs {
			if r.peer != nil {
				base := 0
				err := r.peer.Each(func(batch []peer.Request) error {
					chunk, err := take()
					if err != nil {
						return err
					}
					chunk.appendPeer(r.peer, batch, base)
					if err := chunk.validateFrom(0, base); err != nil {
						return fmt.Errorf("%s: %w", r.dir, err)
					}
					base += chunk.n
					return send(chunk)
				})
				if err != nil {
					return err
				}
				read += int64(base)
				continue
			}
			for _, p := range r.parts {
				if err := gctx.Err(); err != nil {
					return err
				}
				path := filepath.Join(r.dir, p.Path)
				base := 0
				err := forEachBatch(path, wants, tap.then(func(rec arrow.RecordBatch) error {
					chunk, err := take()
					if err != nil {
						return err
					}
					if err := chunk.appendBatch(rec); err != nil {
						return err
					}
					if err := chunk.validateFrom(0, base); err != nil {
						return rowFault{fmt.Errorf("run %s: %s %w", r.dir, p.Path, err)}
					}
					base += chunk.n
					return send(chunk)
				}))
				if rf := (rowFault{}); errors.As(err, &rf) {
					return rf.err // names its run, part and row already
				}
				if err != nil {
					return fmt.Errorf("read %s: %w", path, err)
				}
				if p.Rows >= 0 && int64(base) != p.Rows {
					return fmt.Errorf("run %s: %s holds %d rows, %s says %d: the part was replaced", r.dir, p.Path, base, trace.RunInfoName, p.Rows)
				}
				read += int64(base)
			}
		}
		return nil
	})
	g.Go(func() error {
		for chunk := range full {
			acc.addChunk(chunk)
			free <- chunk
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	rep.Streamed = &Streamed{Rows: read, InMemoryRows: limit, RelErr: loghist.RelErr, Batches: streamBatches, BootstrapSample: bootstrapSample}
	if _, exact := acc.sent.distinct.count(); !exact {
		rep.Streamed.PrefixDistinctRelErr = distinctRelErr
	}
	if held > rows {
		rep.Streamed.HeldRows = held
	}
	rep.Notes = append(rep.Notes, names.notes()...)
	rep.Notes = append(rep.Notes, streamedText(rep.Streamed))
	acc.report(rep)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	scrapes, err := readScrapes(runDirs)
	if err != nil {
		return nil, err
	}
	rep.Notes = append(rep.Notes, scrapeNotes(scrapes)...)
	rep.Energy = energyOf(scrapes, int64(rep.Throughput.OutputTokens))
	if sd := specCounters(scrapes); sd != nil {
		acc.events.fill(sd)
		rep.SpecDecode = sd
	}
	return rep, nil
}

// rowFault is a row that failed validation, its error naming the run, the
// part and the row, as the held analysis names them.
type rowFault struct{ err error }

func (f rowFault) Error() string { return f.err.Error() }
func (f rowFault) Unwrap() error { return f.err }

// sendGrid counts send times (ns) in sendGridBins bins of a width that
// doubles whenever a time falls beyond the last: equal-count batch edges
// then come within one bin of exact without holding the times.
type sendGrid struct {
	counts []int64
	width  int64 // ns per bin
	n      int64
}

func newSendGrid() *sendGrid { return &sendGrid{counts: make([]int64, sendGridBins), width: 1} }

// add counts one send at t (a negative t counts as 0).
func (g *sendGrid) add(t int64) {
	t = max(t, 0)
	for t/g.width >= int64(len(g.counts)) {
		half := len(g.counts) / 2
		for i := range half {
			g.counts[i] = g.counts[2*i] + g.counts[2*i+1]
		}
		clear(g.counts[half:])
		g.width *= 2
	}
	g.counts[t/g.width]++
	g.n++
}

// addBatch counts the sends of a record batch's counted rows (warmup
// excluded, never-sent rows have no time).
func (g *sendGrid) addBatch(rec arrow.RecordBatch) error {
	col := func(name string) arrow.Array {
		if idx := rec.Schema().FieldIndices(name); len(idx) > 0 {
			return rec.Column(idx[0])
		}
		return nil
	}
	sent, ok := col("sent_ns").(*array.Int64)
	if !ok {
		return fmt.Errorf("no int64 column sent_ns: not a servetrace results file, or from an incompatible version")
	}
	warm, ok := col("warmup").(*array.Boolean)
	if !ok {
		return fmt.Errorf("no bool column warmup: not a servetrace results file, or from an incompatible version")
	}
	for i := range int(rec.NumRows()) {
		if !sent.IsNull(i) && !warm.Value(i) {
			g.add(sent.Value(i))
		}
	}
	return nil
}

// edges returns the k−1 send times that split the counted sends into k
// batches of nearly equal count: batch b holds sends t with
// edges[b−1] ≤ t < edges[b] (batchOf).
func (g *sendGrid) edges(k int) []int64 {
	out := make([]int64, 0, k-1)
	var cum int64
	b := 1
	for i, c := range g.counts {
		cum += c
		for b < k && cum*int64(k) >= int64(b)*g.n && g.n > 0 {
			out = append(out, int64(i+1)*g.width)
			b++
		}
	}
	for len(out) < k-1 {
		out = append(out, math.MaxInt64)
	}
	return out
}

// batchOf is the batch of a send at t: how many edges are at or before it.
func batchOf(edges []int64, t int64) int {
	return sort.Search(len(edges), func(i int) bool { return edges[i] > t })
}

// streamMetric accumulates one per-request metric: a histogram per batch
// (values in ns), moments, a uniform sample for the bootstrap, and the
// within-batch lag-1 rank autocorrelation sums.
type streamMetric struct {
	batches []loghist.Hist
	moments
	sample reservoir
	// c0 and c1 sum the squared and the lag-1 products of centred ranks;
	// ranked counts the values that took part.
	c0, c1 float64
	ranked int64
}

func newStreamMetric(k int) *streamMetric {
	return &streamMetric{batches: make([]loghist.Hist, k)}
}

// moments are a metric's count, mean, sum of squared deviations (Welford)
// and maximum, in ms.
type moments struct {
	n             int64
	mean, m2, max float64
}

func (m *moments) add(x float64) {
	m.n++
	if m.n == 1 || x > m.max {
		m.max = x
	}
	d := x - m.mean
	m.mean += d / float64(m.n)
	m.m2 += d * (x - m.mean)
}

// merge adds o's values to m (Chan et al.'s pairwise update).
func (m *moments) merge(o moments) {
	switch {
	case o.n == 0:
		return
	case m.n == 0:
		*m = o
		return
	}
	n := m.n + o.n
	d := o.mean - m.mean
	m.mean += d * float64(o.n) / float64(n)
	m.m2 += o.m2 + d*d*float64(m.n)*float64(o.n)/float64(n)
	m.max, m.n = max(m.max, o.max), n
}

// addNs counts v (ns) in batch b; ms is v in ms for the moments.
func (m *streamMetric) addNs(v int64, b int, ms float64) {
	m.batches[b].Add(v)
	m.add(ms)
}

// reservoir keeps a uniform sample of bootstrapSample of the values
// offered, drawing only when one is kept (Li's Algorithm L: the gap to the
// next kept value is geometric).
type reservoir struct {
	items      []timedValue
	seen, next int64 // values offered; the count at which the next is kept
	w          float64
}

// offer shows the reservoir one more value.
func (r *reservoir) offer(tv timedValue, rng *rand.Rand) {
	r.seen++
	k := bootstrapSample
	if len(r.items) < k {
		r.items = append(r.items, tv)
		if len(r.items) == k {
			r.w = 1
			r.skip(rng)
		}
		return
	}
	if r.seen == r.next {
		r.items[rng.IntN(k)] = tv
		r.skip(rng)
	}
}

// skip draws the count at which the next value is kept.
func (r *reservoir) skip(rng *rand.Rand) {
	u := func() float64 { return 1 - rng.Float64() } // in (0, 1]
	r.w *= math.Exp(math.Log(u()) / float64(bootstrapSample))
	r.next = r.seen + 1
	if r.w < 1 {
		r.next += int64(math.Floor(math.Log(u()) / math.Log1p(-r.w)))
	}
}

// total is every batch's histogram merged.
func (m *streamMetric) total() *loghist.Hist {
	var h loghist.Hist
	for i := range m.batches {
		h.Merge(&m.batches[i])
	}
	return &h
}

// rankLag1 adds a batch of values in send order to the dependence sums:
// ranks within the batch, ties at their mean rank, as dependenceOf ranks
// the whole series.
// It returns order, the scratch buffer, for reuse.
func (m *streamMetric) rankLag1(vals []timedValue, order []int32, mid []float64) []int32 {
	n := len(vals)
	if n < 3 {
		return order
	}
	slices.SortStableFunc(vals, func(a, b timedValue) int { return compareInt64(a.at, b.at) })
	order, mid = order[:0], mid[:n]
	for i := range vals {
		order = append(order, int32(i))
	}
	slices.SortFunc(order, func(a, b int32) int {
		switch va, vb := vals[a].v, vals[b].v; {
		case va < vb:
			return -1
		case va > vb:
			return 1
		}
		return int(a - b)
	})
	for i := 0; i < n; {
		j := i + 1
		for j < n && vals[order[j]].v == vals[order[i]].v {
			j++
		}
		for k := i; k < j; k++ {
			mid[order[k]] = float64(i+j-1)/2 - float64(n-1)/2
		}
		i = j
	}
	for i, d := range mid {
		m.c0 += d * d
		if i > 0 {
			m.c1 += d * mid[i-1]
		}
	}
	m.ranked += int64(n)
	return order
}

func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// distribution summarises the metric at the percentiles ps (in percent):
// the histogram's type-7 percentiles and order-statistic intervals, batch
// means, the bootstrap of the sample and the pooled dependence test.
func (m *streamMetric) distribution(percentiles []float64, o BootstrapOptions, precision float64, method IntervalMethod) Distribution {
	h := m.total()
	d := m.summary(h, percentiles)
	if m.n < 2 {
		return d
	}
	dep := Dependence{Limit: 2 / math.Sqrt(float64(max(m.ranked, 1))), Batches: streamBatches, Independent: true}
	if m.c0 > 0 {
		dep.Lag1 = m.c1 / m.c0
	}
	dep.Independent = math.Abs(dep.Lag1) < dep.Limit
	d.Dependence = &dep
	if m.n >= minBatchSamples {
		m.batchMeans(h, &d)
	}
	chooseHeadline(&d, method)
	items := m.sample.items
	slices.SortStableFunc(items, func(a, b timedValue) int { return compareInt64(a.at, b.at) })
	vals := make([]float64, len(items))
	for i, tv := range items {
		vals[i] = tv.v
	}
	// The quantiles keep the order asked for; the bootstrap's ascend.
	order, ps := ascending(percentiles)
	se, block := newSample(vals).cdfStandardErrors(ps, o)
	d.Block = block
	scale := math.Sqrt(float64(len(vals)) / float64(m.n))
	quant := histQuantile(h)
	for k, i := range order {
		lo, hi, loOK, hiOK := woodruffAt(quant, ps[k], se[k]*scale, zFor(0.95))
		setBootstrap(&d.Quantiles[i], lo, hi, loOK, hiOK, d.N, precision)
	}
	return d
}

// summary is the metric's count, moments and percentiles with their
// order-statistic intervals, the ranks exact and the values read from h.
func (m *streamMetric) summary(h *loghist.Hist, percentiles []float64) Distribution {
	return histSummary(h, m.moments, percentiles)
}

// histSummary is Summarize of the values counted in h (ns) with moments m
// (ms): the percentiles read from h, their order-statistic intervals at
// exact ranks.
func histSummary(h *loghist.Hist, m moments, percentiles []float64) Distribution {
	d := Distribution{N: int(m.n)}
	if m.n == 0 {
		return d
	}
	quant := histQuantile(h)
	d.Mean, d.Std, d.Max, d.Median = m.mean, math.Sqrt(m.m2/float64(m.n)), m.max, quant(0.5)
	for _, pc := range percentiles {
		q := Quantile{P: pc, Value: quant(pc / 100)}
		lo, hi, loOK, hiOK := OrderStatCI(int(m.n), pc/100, 0.95)
		if loOK {
			q.CILo = new(nsToMs(h.Kth(int64(lo))))
		}
		if hiOK {
			q.CIHi = new(nsToMs(h.Kth(int64(hi))))
		}
		q.Interval, q.Lo, q.Hi = intervalOrderName, q.CILo, q.CIHi
		d.Quantiles = append(d.Quantiles, q)
	}
	return d
}

// batchMeans sets each quantile's batch-means interval from the batches'
// shares of values at or below the estimate; batches without values say
// nothing and are left out.
func (m *streamMetric) batchMeans(h *loghist.Hist, d *Distribution) {
	var used []*loghist.Hist
	for i := range m.batches {
		if m.batches[i].N() > 0 {
			used = append(used, &m.batches[i])
		}
	}
	if len(used) < 2 {
		return
	}
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(len(used) - 1)}.Quantile(0.975)
	shares := make([]float64, len(used))
	for i := range d.Quantiles {
		q := &d.Quantiles[i]
		at := int64(math.Round(q.Value * 1e6))
		f := float64(h.AtOrBelow(at)) / float64(h.N())
		for b, bh := range used {
			shares[b] = float64(bh.AtOrBelow(at)) / float64(bh.N())
		}
		setBatch(q, woodruffFromShares(histQuantile(h), int(h.N()), q.P/100, f, shares, t))
	}
}

// histQuantile is h's quantile function in ms.
func histQuantile(h *loghist.Hist) quantileFunc {
	return func(p float64) float64 { return h.Quantile(p) / 1e6 }
}

// streamAcc accumulates what a report needs from rows streamed past it.
type streamAcc struct {
	tally
	opts    Options
	edges   []int64
	stallNs int64
	metrics [numMetrics]*streamMetric
	// itl pools every token gap (ns), batched by its request's send.
	itl      *streamMetric
	reasoned bool
	sent     sentAcc
	features map[string]*FeatureUse
	reason   reasoningAcc
	events   eventsAcc
	rng      *rand.Rand
	// The batch of the last send time seen (a row's metrics share it).
	lastAt    int64
	lastBatch int
	// Every rankEvery-th record batch goes to the dependence test;
	// chunks counts them, ranking says the current one does.
	rankEvery, chunks int
	ranking           bool
	// groups are the breakdowns (Options.By); row holds the current row's
	// values for them.
	groups []*groupsAcc
	row    rowValues
	// Scratch for the dependence sums of one record batch.
	chunkVals [numMetrics][]timedValue
	order     []int32
	mid       []float64
}

func newStreamAcc(opts Options, edges []int64, rows int64) *streamAcc {
	a := &streamAcc{tally: newTally(), opts: opts, edges: edges, stallNs: stallThreshold(opts), itl: newStreamMetric(len(edges) + 1),
		sent: newSentAcc(), features: map[string]*FeatureUse{}, rng: rand.New(rand.NewPCG(opts.Bootstrap.Seed, 0x5157)),
		rankEvery: max(1, int(rows/rankedRows)), lastAt: -1}
	for m := range a.metrics {
		a.metrics[m] = newStreamMetric(len(edges) + 1)
	}
	for _, dim := range opts.By {
		a.groups = append(a.groups, &groupsAcc{dim: dim, byKey: map[string]*groupAcc{}})
	}
	return a
}

// batch is the batch of a send at at.
func (a *streamAcc) batch(at int64) int {
	if at != a.lastAt {
		a.lastAt, a.lastBatch = at, batchOf(a.edges, at)
	}
	return a.lastBatch
}

func (a *streamAcc) value(m metricID, at int64, v float64) {
	sm, ns := a.metrics[m], int64(math.Round(v*1e6))
	sm.addNs(ns, a.batch(at), v)
	sm.sample.offer(timedValue{at, v}, a.rng)
	if a.ranking {
		a.chunkVals[m] = append(a.chunkVals[m], timedValue{at, v})
	}
	if a.groups != nil {
		a.row.capture(m, ns, v)
	}
}

func (a *streamAcc) tokenTimes(at int64, times []int64) {
	if a.groups != nil {
		a.row.times = times
	}
	b := a.batch(at)
	for j := 1; j < len(times); j++ {
		gap := times[j] - times[j-1]
		a.itl.addNs(gap, b, nsToMs(gap))
	}
}

func (a *streamAcc) tokens(prompt, output int64) {}

// addChunk adds every row of c.
func (a *streamAcc) addChunk(c *resultColumns) {
	a.ranking = a.chunks%a.rankEvery == 0
	a.chunks++
	for i := range c.n {
		a.row = rowValues{}
		a.addRow(c, i, a.opts, true, a.stallNs, a)
		for _, g := range a.groups {
			g.add(c, i, &a.row)
		}
		a.reasoned = a.reasoned || reasonedFirst(c, i) // as anyReasoned, warmup included
		if !c.warmup[i] {
			a.sent.add(c, i)
			a.reason.add(c, i)
			a.events.add(c, i)
		}
	}
	addFeatureUses(a.features, c)
	for m := range a.chunkVals {
		if a.mid == nil || cap(a.mid) < len(a.chunkVals[m]) {
			a.mid = make([]float64, len(a.chunkVals[m]))
		}
		a.order = a.metrics[m].rankLag1(a.chunkVals[m], a.order, a.mid)
		a.chunkVals[m] = a.chunkVals[m][:0]
	}
}

// report fills rep from the accumulators.
func (a *streamAcc) report(rep *Report) {
	opts := a.opts
	rep.setCounts(&a.tally)
	for m, sm := range a.metrics {
		id := metricID(m)
		switch {
		case sm.n == 0,
			id == mTTFA && !a.reasoned,
			id == mQueueWait && sm.max == 0: // no concurrency cap held anything back
			continue
		}
		rep.Metrics[metricNames[id]] = sm.distribution(opts.Percentiles, opts.Bootstrap, opts.Precision, opts.Interval)
	}
	if a.itl.n > 0 {
		h := a.itl.total()
		d := a.itl.summary(h, opts.Percentiles)
		if a.itl.n >= minBatchSamples {
			a.itl.batchMeans(h, &d)
		}
		setHeadlines(&d, opts.Interval != IntervalOrder)
		rep.Metrics["itl_ms"] = d
	}
	rep.metricNotes(opts)
	cv := 0.0
	if a.itl.n > 1 && a.itl.mean > 0 {
		cv = math.Sqrt(a.itl.m2/float64(a.itl.n-1)) / a.itl.mean
	}
	rep.Smoothness = smoothnessOf(&a.tally, cv, opts)
	rep.setRates(&a.tally, opts)
	if len(a.groups) > 0 {
		rep.Breakdowns = map[string][]Group{}
		for _, g := range a.groups {
			rep.Breakdowns[g.dim] = g.groups(opts, rep.Throughput.DurationS)
			if g.overflow.rows > 0 {
				rep.Notes = append(rep.Notes, fmt.Sprintf("breakdown by %s: %d rows of values first seen after the %d kept apart are pooled into (other)", g.dim, g.overflow.rows, streamGroupCap))
			}
		}
	}
	rep.Sent = a.sent.summary()
	rep.Features = sortedFeatureUses(a.features)
	rep.Reasoning = a.reason.summary()
}

// sentAcc is summarizeSent's accumulator for rows streamed past it; the
// prefix reuse share counts distinct block ids in bounded memory.
type sentAcc struct {
	inputs, requested, outputs loghist.Hist
	// gaps are served minus intended prompt tokens, by sign.
	gapsNeg, gapsPos loghist.Hist
	finish           map[string]int
	features         map[string]float64
	n                int
	prefixKnown      int
	blocks           int64
	distinct         distinctCounter
}

func newSentAcc() sentAcc {
	return sentAcc{finish: map[string]int{}, features: map[string]float64{}}
}

// add counts row i of c if it was sent.
func (s *sentAcc) add(c *resultColumns, i int) {
	if c.sent[i] == null {
		return
	}
	s.n++
	s.inputs.Add(c.promptSent[i])
	s.requested.Add(c.requestedOutput[i])
	if c.outcome[i] == trace.OutcomeOK {
		s.outputs.Add(c.observedOut[i])
	}
	if r := c.finishReason[i]; r != "" {
		s.finish[r]++
	}
	if c.usagePrompt[i] != null {
		if g := c.usagePrompt[i] - c.inputTokens[i]; g < 0 {
			s.gapsNeg.Add(-g)
		} else {
			s.gapsPos.Add(g)
		}
	}
	for _, f := range c.featuresOf(i) {
		s.features[f]++
	}
	if pb := c.prefixBlocksOf(i); len(pb) > 0 {
		s.prefixKnown++
		for _, b := range pb {
			s.blocks++
			s.distinct.add(b)
		}
	}
}

func (s *sentAcc) summary() Sent {
	out := Sent{FinishReasons: s.finish, FeatureShares: map[string]float64{}, PrefixKnown: s.prefixKnown,
		InputTokens: histTokenStats(&s.inputs, nil), RequestedOutputTokens: histTokenStats(&s.requested, nil), OutputTokens: histTokenStats(&s.outputs, nil)}
	for f, k := range s.features {
		out.FeatureShares[f] = k / float64(s.n)
	}
	if s.blocks > 0 {
		d, _ := s.distinct.count()
		out.ReusedPrefixShare = max(0, 1-d/float64(s.blocks))
	}
	if s.gapsNeg.N()+s.gapsPos.N() > 0 {
		g := histTokenStats(&s.gapsPos, &s.gapsNeg)
		out.PromptGap = &g
	}
	return out
}

// histTokenStats is tokenStats of the values counted in pos and, negated,
// in neg (nil: none): exact below 2,048 tokens, within loghist.RelErr
// above.
func histTokenStats(pos, neg *loghist.Hist) TokenStats {
	var nNeg int64
	if neg != nil {
		nNeg = neg.N()
	}
	n := pos.N() + nNeg
	if n == 0 {
		return TokenStats{}
	}
	kth := func(k int64) float64 { // 1-based over negatives then positives
		if k <= nNeg {
			return -float64(neg.Kth(nNeg - k + 1))
		}
		return float64(pos.Kth(k - nNeg))
	}
	at := func(p float64) float64 {
		pos := p * float64(n-1)
		lo := int64(math.Floor(pos))
		if lo >= n-1 {
			return kth(n)
		}
		a, b := kth(lo+1), kth(lo+2)
		return a + (pos-float64(lo))*(b-a)
	}
	return TokenStats{N: int(n), P10: at(0.10), P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: kth(n)}
}

// reasoningAcc is reasoningOf's accumulator.
type reasoningAcc struct {
	tokens            loghist.Hist
	reasoning, output int64
}

func (r *reasoningAcc) add(c *resultColumns, i int) {
	if c.outcome[i] != trace.OutcomeOK || !reasonedFirst(c, i) {
		return
	}
	r.tokens.Add(c.reasoning[i])
	r.reasoning += c.reasoning[i]
	r.output += c.observedOut[i]
}

func (r *reasoningAcc) summary() *Reasoning {
	if r.tokens.N() == 0 {
		return nil
	}
	out := &Reasoning{Requests: int(r.tokens.N()), TokensPerRequest: histTokenStats(&r.tokens, nil)}
	if r.output > 0 {
		out.Share = float64(r.reasoning) / float64(r.output)
	}
	return out
}

// eventsAcc counts output tokens per token event for speculative
// decoding: pooled, and each request's ratio in thousandths.
type eventsAcc struct {
	tokens, events int64
	milli          loghist.Hist
}

func (e *eventsAcc) add(c *resultColumns, i int) {
	n := int64(len(c.tokenTimesOf(i)))
	if c.outcome[i] != trace.OutcomeOK || n == 0 {
		return
	}
	e.tokens += c.observedOut[i]
	e.events += n
	e.milli.Add(int64(math.Round(1000 * float64(c.observedOut[i]) / float64(n))))
}

// fill sets sd's tokens per event.
func (e *eventsAcc) fill(sd *SpecDecode) {
	if e.events == 0 {
		return
	}
	sd.TokensPerEvent = float64(e.tokens) / float64(e.events)
	sd.TokensPerEventP50, sd.TokensPerEventP90 = e.milli.Quantile(0.5)/1000, e.milli.Quantile(0.9)/1000
}
