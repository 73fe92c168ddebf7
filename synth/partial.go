package synth

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/internal/regfile"
	"github.com/servetrace/servetrace/trace"
)

// A sharded fit splits Fit over machines: FitPartial fits shard i of N, the
// time slice [i/N, (i+1)/N) of the span, into a Partial (the fitters'
// accumulated statistics, not a model), and FitMerged merges the N
// partials and finishes the fit as Fit does. Arrivals, lengths, the mix and
// the contract merge exactly; sessions and prefix reuse that cross a slice
// boundary are seen in part (docs/architecture.md, "Sharded fit").

// PartialFormat names the file format of a partial fit: a gzip stream of
// two JSON lines, the PartialHeader and then the accumulated statistics.
const PartialFormat = "servetrace-fit-partial"

// PartialVersion is the version of the partial file format; a merge
// refuses partials of any other, since their statistics may mean other
// things.
const PartialVersion = 1

// MaxFitShards bounds a sharded fit's shard count.
const MaxFitShards = 4096

// maxPartialHeaderBytes bounds the header line a merge reads first: a
// header is a few hundred bytes.
const maxPartialHeaderBytes = 1 << 20

// ErrPartialsMismatch marks partials that are not shards of one fit: of
// different traces, shard counts, spans or format versions.
var ErrPartialsMismatch = errors.New("the partials are not of one sharded fit")

// ErrShardsIncomplete marks a merge given a shard more than once or not
// given every shard.
var ErrShardsIncomplete = errors.New("the partials are not every shard once")

// mergeError is a refusal to merge: its message, and the sentinel it is
// an instance of (errors.Is), which the message does not repeat.
type mergeError struct {
	msg string
	is  error
}

func (e *mergeError) Error() string { return e.msg }
func (e *mergeError) Unwrap() error { return e.is }

func refuse(is error, format string, args ...any) error {
	return &mergeError{msg: fmt.Sprintf(format, args...), is: is}
}

// PartialHeader says what a partial is of: the trace (by its manifest's
// digest), the span, and which slice of it.
type PartialHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Shard of Shards (0-based) fitted the slice [FromUs, ToUs) of the span
	// [SpanFromUs, SpanToUs), fractions Span of the trace's span.
	Shard      int          `json:"shard"`
	Shards     int          `json:"shards"`
	Trace      PartialTrace `json:"trace"`
	Span       [2]float64   `json:"span_fraction"`
	SpanFromUs int64        `json:"span_from_us"`
	SpanToUs   int64        `json:"span_to_us"`
	FromUs     int64        `json:"from_us"`
	ToUs       int64        `json:"to_us"`
	// TimeResolutionUs and BlockSize are the trace's, as Fit reads them.
	TimeResolutionUs int64 `json:"time_resolution_us"`
	BlockSize        int   `json:"block_size"`
	// Rows and FirstTurns are the rows of the slice and those that start a
	// session.
	Rows       int64 `json:"rows"`
	FirstTurns int64 `json:"first_turns"`
}

// PartialTrace identifies the trace a partial was fitted from: shards of
// one fit must agree on the manifest's digest (the path may differ between
// machines).
type PartialTrace struct {
	Dir            string `json:"dir"`
	ManifestSHA256 string `json:"manifest_sha256"`
	Rows           int64  `json:"rows"`
}

// Partial is one shard's accumulated statistics.
type Partial struct {
	PartialHeader
	state *fitState
}

// FitPartial reads shard of shards of the bucket at dir (the time slice
// [shard/shards, (shard+1)/shards) of opts.Span, by default of the whole
// span) and returns its statistics. Only the part of the bucket from the
// slice's first part to its end is read.
func FitPartial(ctx context.Context, dir string, opts FitOptions, shard, shards int) (*Partial, error) {
	if !validShard(shard, shards) {
		return nil, opterr.New("Shard", fmt.Sprintf("%d/%d", shard, shards), "want i/N with 0 ≤ i < N ≤ %d", MaxFitShards)
	}
	return accumulate(ctx, dir, opts, shard, shards)
}

// validShard reports whether shard i of n is one a fit can be split into.
func validShard(i, n int) bool { return n >= 1 && n <= MaxFitShards && i >= 0 && i < n }

// manifestDigest is the SHA-256 of the bucket's manifest file: what names
// a trace across machines.
func manifestDigest(dir string) (string, error) {
	return trace.HashFile(filepath.Join(dir, trace.ManifestName))
}

// WritePartial writes p to path (gzip, two JSON lines), whole or not at
// all.
func WritePartial(path string, p *Partial) error {
	return trace.WriteFileAtomic(path, func(w io.Writer) error {
		gz := gzip.NewWriter(w)
		enc := json.NewEncoder(gz)
		if err := enc.Encode(p.PartialHeader); err != nil {
			return err
		}
		if err := enc.Encode(p.state); err != nil {
			return err
		}
		return gz.Close()
	})
}

// ReadPartialHeader reads a partial's header, not its statistics.
func ReadPartialHeader(path string) (PartialHeader, error) {
	var h PartialHeader
	err := withPartial(path, func(gz io.Reader) error {
		r := newHeaderBudget(gz)
		return limitError(path, decodeHeader(path, json.NewDecoder(newPartialScanner(r)), &h))
	})
	return h, err
}

// readPartial reads a whole partial.
func readPartial(path string) (*Partial, error) {
	var p *Partial
	err := withPartial(path, func(gz io.Reader) error {
		var err error
		p, err = readPartialStream(path, gz)
		return err
	})
	return p, err
}

// Limits of what a partial may hold, checked as it is read, so that a
// damaged or hostile file (a gzip stream inflating to gigabytes) is
// refused before it fills memory. A partial servetrace wrote is far
// inside them.
var (
	// maxPartialStatsBytes bounds the decompressed statistics line less
	// its arrival times, whitespace included (partialScanner bounds what
	// the rest decodes to): every sketch but the prefix groups and the
	// mix's values has a fixed capacity, and those grow with the distinct
	// prefixes and values of the slice.
	maxPartialStatsBytes int64 = 512 << 20
	// maxMergedFirstTurns bounds the first turns of every partial of a
	// merge together: the merge holds each one's arrival time (8 bytes).
	maxMergedFirstTurns int64 = 1 << 28
)

// arrivalTextBytes is the most one arrival time takes in the statistics
// line: encoding/json's shortest float and a comma.
const arrivalTextBytes = 32

// errPartialLimit is a limit a partial passed; its message says which.
type errPartialLimit struct{ what string }

func (e *errPartialLimit) Error() string { return e.what }

// budgetReader reads at most left more bytes of the decompressed stream,
// then fails with the limit it was given.
type budgetReader struct {
	r    io.Reader
	left int64
	what string
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, &errPartialLimit{b.what}
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// newHeaderBudget reads a partial's stream within the header line's
// limit; decodePartial raises it once the header says what the
// statistics may hold.
func newHeaderBudget(r io.Reader) *budgetReader {
	return &budgetReader{r: r, left: maxPartialHeaderBytes, what: fmt.Sprintf("a header line of more than %d bytes", maxPartialHeaderBytes)}
}

// limitError names the limit a partial passed, if err is one.
func limitError(path string, err error) error {
	if l := (*errPartialLimit)(nil); errors.As(err, &l) {
		return fmt.Errorf("fit partial %s: decompressed past its limit: %s; fit the shard again (in more shards, if its slice holds that much)", path, l.what)
	}
	return err
}

// withPartial opens path, a regular file, and its gzip stream for fn.
func withPartial(path string, fn func(gz io.Reader) error) error {
	f, err := regfile.Open(path)
	if err != nil {
		return fmt.Errorf("fit partial: %w", err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f) // buffers f itself
	if err != nil {
		return fmt.Errorf("fit partial %s: not a fit partial (a gzip stream): %w", path, err)
	}
	defer gz.Close()
	return fn(gz)
}

// readPartialStream reads a partial from its decompressed stream; path
// names it in errors. The decoder reads it through a partialScanner, which
// holds what it buffers and builds to the statistics' limits.
func readPartialStream(path string, gz io.Reader) (*Partial, error) {
	r := newHeaderBudget(gz)
	p, err := decodePartial(path, r, json.NewDecoder(newPartialScanner(r)))
	return p, limitError(path, err)
}

// decodePartial reads a partial's header and then its statistics from
// dec, raising r's budget to what the header's counts allow.
func decodePartial(path string, r *budgetReader, dec *json.Decoder) (*Partial, error) {
	p := &Partial{state: &fitState{}}
	if err := decodeHeader(path, dec, &p.PartialHeader); err != nil {
		return nil, err
	}
	r.left = maxPartialStatsBytes + arrivalTextBytes*p.FirstTurns
	r.what = fmt.Sprintf("statistics of more than %d bytes besides %d arrival times of at most %d bytes each", maxPartialStatsBytes, p.FirstTurns, arrivalTextBytes)
	w, err := decodeStateStream(dec, p.FirstTurns)
	if err != nil {
		return nil, fmt.Errorf("fit partial %s: statistics: %w; fit the shard again", path, err)
	}
	if err := p.state.fromJSON(w); err != nil {
		return nil, fmt.Errorf("fit partial %s: statistics: %w; fit the shard again", path, err)
	}
	if err := p.state.check(&p.PartialHeader); err != nil {
		return nil, fmt.Errorf("fit partial %s: %w; fit the shard again", path, err)
	}
	return p, nil
}

// decodeStateStream reads the statistics object key by key: the arrival
// times one at a time, refused past the header's count of first turns;
// the length classes a class at a time and each fitter's statistics a
// member at a time (partialStreamed says which, for partialScanner, which
// bounds each value read whole); other keys whole, an unknown one skipped.
func decodeStateStream(dec *json.Decoder, firstTurns int64) (stateJSON, error) {
	var w stateJSON
	if err := expectDelim(dec, '{'); err != nil {
		return w, err
	}
	fields := map[string]any{"rows": &w.Rows, "first_turns": &w.FirstTurns, "saw_sessions": &w.SawSessions}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return w, err
		}
		key, _ := tok.(string)
		if seen[key] {
			return w, fmt.Errorf("%q twice", key)
		}
		seen[key] = true
		switch key {
		case "arrivals_s":
			w.Arrivals, err = decodeArrivals(dec, firstTurns)
		case "classes":
			w.Classes, err = decodeClasses(dec)
		case "prefix":
			w.Prefix, err = decodeFitter[prefixJSON, prefixFitter](dec)
		case "sessions":
			w.Sessions, err = decodeFitter[sessionJSON, sessionFitter](dec)
		case "mix":
			w.Mix, err = decodeFitter[mixJSON, mixCounter](dec)
		case "contract":
			w.Contract, err = decodeFitter[contractJSON, contractFitter](dec)
		default:
			if into, ok := fields[key]; ok {
				err = dec.Decode(into)
			} else {
				err = skipValue(dec) // a field of a later version
			}
		}
		if err != nil {
			return w, fmt.Errorf("%s: %w", key, err)
		}
	}
	return w, expectDelim(dec, '}')
}

// decodeClasses reads the length classes a class at a time.
func decodeClasses(dec *json.Decoder) ([]classJSON, error) {
	var out []classJSON
	if err := expectDelim(dec, '['); err != nil {
		return nil, err
	}
	for dec.More() {
		if len(out) >= maxTrackedClasses {
			return nil, fmt.Errorf("more than %d length classes", maxTrackedClasses)
		}
		var c classJSON
		if _, err := decodeFields(dec, &c); err != nil {
			return nil, fmt.Errorf("class %d: %w", len(out), err)
		}
		out = append(out, c)
	}
	return out, expectDelim(dec, ']')
}

// decodeFitter reads a fitter's statistics (its JSON form W) a member at a
// time and sets a fitter F from them; null is no fitter.
func decodeFitter[W any, F any, PF interface {
	*F
	fromJSON(W) error
}](dec *json.Decoder) (*F, error) {
	var w W
	null, err := decodeFields(dec, &w)
	if err != nil || null {
		return nil, err
	}
	f := PF(new(F))
	return f, f.fromJSON(w)
}

// decodeFields reads a JSON object (or null) a member at a time into the
// fields of the struct v points to, by their json names: a field that is a
// struct of its own (not a pointer, with no UnmarshalJSON) is read the same
// way, any other whole; an unknown member is skipped, a member twice is
// an error. The decoder then buffers one member's text at a time.
func decodeFields(dec *json.Decoder, v any) (null bool, err error) {
	rv := reflect.ValueOf(v).Elem()
	idx := map[string]int{}
	for i := range rv.NumField() {
		if name, _, _ := strings.Cut(rv.Type().Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			idx[name] = i
		}
	}
	tok, err := dec.Token()
	if err != nil {
		return false, err
	}
	if tok == nil {
		return true, nil
	}
	if tok != json.Delim('{') {
		return false, fmt.Errorf("found %v where an object was expected", tok)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false, err
		}
		key, _ := tok.(string)
		if seen[key] {
			return false, fmt.Errorf("%q twice", key)
		}
		seen[key] = true
		i, ok := idx[key]
		if !ok {
			if err := skipValue(dec); err != nil {
				return false, fmt.Errorf("%s: %w", key, err)
			}
			continue
		}
		f := rv.Field(i)
		if _, custom := f.Addr().Interface().(json.Unmarshaler); f.Kind() == reflect.Struct && !custom {
			_, err = decodeFields(dec, f.Addr().Interface())
		} else {
			err = dec.Decode(f.Addr().Interface())
		}
		if err != nil {
			return false, fmt.Errorf("%s: %w", key, err)
		}
	}
	return false, expectDelim(dec, '}')
}

// skipValue reads past one value, held whole within partialScanner's
// bound on a value read whole.
func skipValue(dec *json.Decoder) error {
	var raw json.RawMessage
	return dec.Decode(&raw)
}

// decodeArrivals reads a JSON array of arrival times, at most max of them.
func decodeArrivals(dec *json.Decoder, max int64) ([]float64, error) {
	if err := expectDelim(dec, '['); err != nil {
		return nil, err
	}
	out := make([]float64, 0, min(max, 1<<16))
	for dec.More() {
		if int64(len(out)) >= max {
			return nil, fmt.Errorf("more arrival times than the header's %d first turns", max)
		}
		var t float64
		if err := dec.Decode(&t); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, expectDelim(dec, ']')
}

// expectDelim reads the next token, which must be the delimiter d.
func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != d {
		return fmt.Errorf("found %v where %q was expected", tok, string(d))
	}
	return nil
}

// decodeHeader reads and checks the header line.
func decodeHeader(path string, dec *json.Decoder, h *PartialHeader) error {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("fit partial %s: not a fit partial: %w", path, err)
	}
	if len(raw) > maxPartialHeaderBytes {
		return fmt.Errorf("fit partial %s: a header of %d bytes, more than %d: not a fit partial", path, len(raw), maxPartialHeaderBytes)
	}
	if err := json.Unmarshal(raw, h); err != nil || h.Format != PartialFormat {
		return fmt.Errorf("fit partial %s: not a fit partial (no format %q in its first line)", path, PartialFormat)
	}
	if h.Version != PartialVersion {
		return refuse(ErrPartialsMismatch, "fit partial %s: format version %d, this servetrace reads version %d: fit that shard again with this servetrace", path, h.Version, PartialVersion)
	}
	if h.Rows < 0 || h.Rows > maxReservoirSeen || h.FirstTurns < 0 || h.FirstTurns > h.Rows || h.Trace.Rows > 0 && h.Rows > h.Trace.Rows {
		return fmt.Errorf("fit partial %s: %d rows and %d first turns of a trace of %d rows: out of range; fit the shard again", path, h.Rows, h.FirstTurns, h.Trace.Rows)
	}
	if !validShard(h.Shard, h.Shards) || h.BlockSize <= 0 ||
		!(h.Span[0] >= 0 && h.Span[1] <= 1 && h.Span[0] < h.Span[1]) || h.SpanFromUs >= h.SpanToUs {
		return fmt.Errorf("fit partial %s: shard %d of %d, span %v, block size %d: out of range; fit the shard again", path, h.Shard, h.Shards, h.Span, h.BlockSize)
	}
	if from, to := sliceBounds(h.SpanFromUs, h.SpanToUs, h.Shard, h.Shards); from != h.FromUs || to != h.ToUs {
		return fmt.Errorf("fit partial %s: slice [%d, %d) µs is not shard %d of %d of [%d, %d); fit the shard again", path, h.FromUs, h.ToUs, h.Shard, h.Shards, h.SpanFromUs, h.SpanToUs)
	}
	return nil
}

// FitMerged merges the partials at paths, one per shard of one sharded fit
// (in any order), and finishes the fit as Fit does; opts.Span must be zero
// (the partials carry theirs). Partials of other traces, shard counts,
// spans or format versions are refused (ErrPartialsMismatch), as are a
// missing or repeated shard (ErrShardsIncomplete). The partials are read
// one at a time, in shard order.
func FitMerged(ctx context.Context, paths []string, opts FitOptions) (*Model, error) {
	if opts.Span != ([2]float64{}) {
		return nil, opterr.New("Span", fmt.Sprint(opts.Span), "a merged fit takes its span from the partials")
	}
	if len(paths) == 0 {
		return nil, refuse(ErrShardsIncomplete, "merge fit partials: none given")
	}
	heads := make([]PartialHeader, len(paths))
	for i, path := range paths {
		h, err := ReadPartialHeader(path)
		if err != nil {
			return nil, err
		}
		heads[i] = h
	}
	order, err := shardOrder(paths, heads)
	if err != nil {
		return nil, err
	}
	var firstTurns int64
	for _, h := range heads {
		firstTurns += h.FirstTurns
	}
	if firstTurns > maxMergedFirstTurns {
		return nil, fmt.Errorf("merge fit partials: %d first turns in all, more than the %d a merge holds (8 bytes each): fit a shorter span of the trace, or a sample of it", firstTurns, maxMergedFirstTurns)
	}
	rng := rand.New(rand.NewPCG(mergeSeed, 0))
	var merged *Partial
	for _, i := range order {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p, err := readPartial(paths[i])
		if err != nil {
			return nil, err
		}
		if p.PartialHeader != heads[i] {
			return nil, fmt.Errorf("merge fit partials: %s changed while the merge read it; merge again", paths[i])
		}
		if opts.Progress != nil {
			opts.Progress(fmt.Sprintf("fit: merging shard %d of %d (%s, %d rows)", p.Shard, p.Shards, paths[i], p.Rows))
		}
		if merged == nil {
			merged = p
			continue
		}
		merged.state.merge(p.state, rng)
	}
	return finish(ctx, merged, opts)
}

// mergeSeed seeds the reservoir merges, so a merge is the same each time.
const mergeSeed = 0x3e43

// shardOrder checks that heads are shards 0..N−1 of one fit, each once,
// and returns their indices in shard order.
func shardOrder(paths []string, heads []PartialHeader) ([]int, error) {
	first, h0 := paths[0], heads[0]
	for i, h := range heads[1:] {
		path := paths[i+1]
		switch {
		case h.Trace.ManifestSHA256 != h0.Trace.ManifestSHA256 || h.Trace.Rows != h0.Trace.Rows:
			return nil, refuse(ErrPartialsMismatch, "merge fit partials: %s is of trace %s (manifest sha256 %.12s…, %d rows), %s of trace %s (%.12s…, %d rows): merge the partials of one trace",
				path, h.Trace.Dir, h.Trace.ManifestSHA256, h.Trace.Rows, first, h0.Trace.Dir, h0.Trace.ManifestSHA256, h0.Trace.Rows)
		case h.Shards != h0.Shards:
			return nil, refuse(ErrPartialsMismatch, "merge fit partials: %s is shard %d of %d, %s shard %d of %d: merge the partials of one sharded fit (one shard count)",
				path, h.Shard, h.Shards, first, h0.Shard, h0.Shards)
		case h.Span != h0.Span || h.SpanFromUs != h0.SpanFromUs || h.SpanToUs != h0.SpanToUs:
			return nil, refuse(ErrPartialsMismatch, "merge fit partials: %s covers span %v of the trace, %s span %v: fit every shard with the same span",
				path, h.Span, first, h0.Span)
		}
	}
	byShard := make([]int, h0.Shards)
	for i := range byShard {
		byShard[i] = -1
	}
	for i, h := range heads {
		if j := byShard[h.Shard]; j >= 0 {
			return nil, refuse(ErrShardsIncomplete, "merge fit partials: %s and %s are both shard %d of %d: give each shard's partial once", paths[j], paths[i], h.Shard, h.Shards)
		}
		byShard[h.Shard] = i
	}
	var missing []int
	for s, i := range byShard {
		if i < 0 {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		return nil, refuse(ErrShardsIncomplete, "merge fit partials: shards %v of %d of %s are missing (given: %d partials, the first %s): fit them and merge all %d",
			missing, h0.Shards, h0.Trace.Dir, len(paths), first, h0.Shards)
	}
	return byShard, nil
}

// merge adds the state of the slice after s's to s. Arrival times and
// class order follow from the slices' order; each fitter merges its own
// statistics.
func (s *fitState) merge(o *fitState, rng *rand.Rand) {
	s.rows += o.rows
	s.firstTurns += o.firstTurns
	s.sawSessions = s.sawSessions || o.sawSessions
	s.arrivals = append(s.arrivals, o.arrivals...)
	for _, c := range o.classes {
		key := [2]string{c.model, c.api}
		i, ok := s.classIdx[key]
		switch {
		case ok:
			s.classes[i].lengths.merge(c.lengths, rng)
		case len(s.classes) < maxTrackedClasses:
			s.classIdx[key] = len(s.classes)
			s.classes = append(s.classes, c)
		default:
			s.classes[len(s.classes)-1].lengths.merge(c.lengths, rng)
		}
	}
	s.prefix.merge(o.prefix, rng)
	s.sessions.merge(o.sessions, rng)
	s.mix.merge(o.mix)
	s.contract.merge(o.contract)
}

// The statistics line of a partial. Each fitter's accumulated state is
// written as its own JSON object; reservoirs as {seen, capacity, items}.

type stateJSON struct {
	Rows        int64           `json:"rows"`
	FirstTurns  int64           `json:"first_turns"`
	SawSessions bool            `json:"saw_sessions"`
	Arrivals    []float64       `json:"arrivals_s"`
	Classes     []classJSON     `json:"classes"`
	Prefix      *prefixFitter   `json:"prefix"`
	Sessions    *sessionFitter  `json:"sessions"`
	Mix         *mixCounter     `json:"mix"`
	Contract    *contractFitter `json:"contract"`
}

type classJSON struct {
	Model   string        `json:"model"`
	API     string        `json:"api"`
	Lengths *lengthFitter `json:"lengths"`
}

func (s *fitState) MarshalJSON() ([]byte, error) {
	w := stateJSON{Rows: s.rows, FirstTurns: s.firstTurns, SawSessions: s.sawSessions, Arrivals: s.arrivals,
		Prefix: s.prefix, Sessions: s.sessions, Mix: s.mix, Contract: s.contract}
	for _, c := range s.classes {
		w.Classes = append(w.Classes, classJSON{Model: c.model, API: c.api, Lengths: c.lengths})
	}
	return json.Marshal(w)
}

func (s *fitState) UnmarshalJSON(b []byte) error {
	var w stateJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	return s.fromJSON(w)
}

// fromJSON sets s from its decoded statistics line.
func (s *fitState) fromJSON(w stateJSON) error {
	if w.Prefix == nil || w.Sessions == nil || w.Mix == nil || w.Contract == nil {
		return errors.New("a fitter's statistics are missing")
	}
	*s = fitState{rows: w.Rows, firstTurns: w.FirstTurns, sawSessions: w.SawSessions, arrivals: w.Arrivals, classIdx: map[[2]string]int{},
		prefix: w.Prefix, sessions: w.Sessions, mix: w.Mix, contract: w.Contract}
	for _, c := range w.Classes {
		if c.Lengths == nil {
			return fmt.Errorf("class %s/%s has no lengths", c.Model, c.API)
		}
		key := [2]string{c.Model, c.API}
		if _, dup := s.classIdx[key]; dup {
			return fmt.Errorf("class %s/%s twice", c.Model, c.API)
		}
		s.classIdx[key] = len(s.classes)
		s.classes = append(s.classes, &classState{model: c.Model, api: c.API, lengths: c.Lengths})
	}
	return nil
}

// check holds a decoded state to what its header says and to the
// invariants the merge and the fitters rely on.
func (s *fitState) check(h *PartialHeader) error {
	if s.rows != h.Rows || s.firstTurns != h.FirstTurns || int64(len(s.arrivals)) != s.firstTurns || s.firstTurns > s.rows {
		return fmt.Errorf("%d rows, %d first turns and %d arrival times, the header says %d rows and %d first turns", s.rows, s.firstTurns, len(s.arrivals), h.Rows, h.FirstTurns)
	}
	from, to := float64(h.FromUs)/1e6, float64(h.ToUs)/1e6
	for i, t := range s.arrivals {
		if !(t >= from && t < to) || i > 0 && t < s.arrivals[i-1] {
			return fmt.Errorf("arrival %d at %v s is out of order or outside the slice [%v, %v)", i, t, from, to)
		}
	}
	if len(s.classes) > maxTrackedClasses {
		return fmt.Errorf("%d length classes, at most %d", len(s.classes), maxTrackedClasses)
	}
	var seen int64
	for _, c := range s.classes {
		in, out := c.lengths.in.total(), c.lengths.out.total()
		if in != out || in != int64(c.lengths.pairs.seen) {
			return fmt.Errorf("class %s/%s counts %d inputs, %d outputs and %d pairs", c.model, c.api, in, out, c.lengths.pairs.seen)
		}
		seen += in
	}
	if seen != s.firstTurns {
		return fmt.Errorf("the length classes count %d first turns, the header %d", seen, s.firstTurns)
	}
	if s.prefix.blockSize != h.BlockSize {
		return fmt.Errorf("prefix block size %d, the header's %d", s.prefix.blockSize, h.BlockSize)
	}
	return nil
}

// total is the number of values counted; -1 for a negative count.
func (h histogram) total() int64 {
	var n int64
	for _, c := range h {
		if c < 0 {
			return -1
		}
		n += c
	}
	return n
}

type reservoirJSON[T any] struct {
	Seen     int `json:"seen"`
	Capacity int `json:"capacity"`
	Items    []T `json:"items"`
}

func (r *reservoir[T]) MarshalJSON() ([]byte, error) {
	return json.Marshal(reservoirJSON[T]{Seen: r.seen, Capacity: r.capacity, Items: r.items})
}

// maxReservoirSeen bounds a decoded reservoir's count of values seen, so
// that merged counts cannot overflow: no trace holds 2^50 requests.
const maxReservoirSeen = 1 << 50

// UnmarshalJSON reads a reservoir that can take no more values (its
// random source is not kept) but can be merged.
func (r *reservoir[T]) UnmarshalJSON(b []byte) error {
	var w reservoirJSON[T]
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if w.Capacity < 1 || w.Capacity > maxPairs || w.Seen < 0 || w.Seen > maxReservoirSeen || len(w.Items) != min(w.Seen, w.Capacity) {
		return fmt.Errorf("a reservoir of capacity %d holding %d of %d values seen", w.Capacity, len(w.Items), w.Seen)
	}
	*r = reservoir[T]{items: w.Items, seen: w.Seen, capacity: w.Capacity, rng: rand.New(rand.NewPCG(0, 0x5e5e))}
	return nil
}

// capacityIs checks a decoded reservoir's capacity (nil passes where
// optional): a merge takes reservoirs of one capacity.
func capacityIs[T any](what string, r *reservoir[T], want int, optional bool) error {
	switch {
	case r == nil && optional:
		return nil
	case r == nil:
		return fmt.Errorf("%s: missing", what)
	case r.capacity != want:
		return fmt.Errorf("%s: capacity %d, want %d", what, r.capacity, want)
	}
	return nil
}

type lengthJSON struct {
	In    histogram            `json:"input_tokens"`
	Out   histogram            `json:"output_tokens"`
	Pairs *reservoir[[2]int64] `json:"pairs"`
}

func (f *lengthFitter) MarshalJSON() ([]byte, error) {
	return json.Marshal(lengthJSON{In: f.in, Out: f.out, Pairs: f.pairs})
}

func (f *lengthFitter) UnmarshalJSON(b []byte) error {
	var w lengthJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if err := capacityIs("pairs", w.Pairs, maxPairs, false); err != nil {
		return err
	}
	*f = lengthFitter{in: orEmpty(w.In), out: orEmpty(w.Out), pairs: w.Pairs}
	return nil
}

func orEmpty(h histogram) histogram {
	if h == nil {
		return histogram{}
	}
	return h
}

type sessionJSON struct {
	Sessions  int64               `json:"sessions"`
	Multi     int64               `json:"multi_turn"`
	Turns     histogram           `json:"turns"`
	Think     *reservoir[float64] `json:"think_s"`
	NewTokens *reservoir[float64] `json:"new_tokens"`
	Graphs    *graphFitter        `json:"graphs,omitempty"`
}

// MarshalJSON writes the closed sessions (closeAll first).
func (f *sessionFitter) MarshalJSON() ([]byte, error) {
	return json.Marshal(sessionJSON{Sessions: f.sessions, Multi: f.multi, Turns: f.turns, Think: f.think, NewTokens: f.newTokens, Graphs: f.graphs})
}

func (f *sessionFitter) UnmarshalJSON(b []byte) error {
	var w sessionJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	return f.fromJSON(w)
}

// fromJSON sets f from its decoded statistics, checked.
func (f *sessionFitter) fromJSON(w sessionJSON) error {
	if err := errors.Join(capacityIs("think_s", w.Think, maxPairs, false), capacityIs("new_tokens", w.NewTokens, maxPairs, false)); err != nil {
		return err
	}
	turns := orEmpty(w.Turns)
	if w.Graphs == nil {
		w.Graphs = newGraphFitter()
	}
	if n := turns.total(); w.Multi < 0 || w.Multi > w.Sessions || n+w.Graphs.sessions() != w.Sessions {
		return fmt.Errorf("sessions: %d sessions, %d multi-turn, %d in the turns histogram and %d agent graphs", w.Sessions, w.Multi, n, w.Graphs.sessions())
	}
	*f = sessionFitter{open: map[string]*sessionState{}, turns: turns, think: w.Think, newTokens: w.NewTokens, sessions: w.Sessions, multi: w.Multi, graphs: w.Graphs, blockBudget: maxHeldBlocks}
	return nil
}

type prefixJSON struct {
	BlockSize     int                                       `json:"block_size"`
	Requests      int64                                     `json:"requests"`
	Reused        int64                                     `json:"reused"`
	BinN          [16]int64                                 `json:"bin_n"`
	BinHits       [16]int64                                 `json:"bin_hits"`
	FillN         [fillBins]int64                           `json:"fill_n"`
	FillHits      [fillBins]int64                           `json:"fill_hits"`
	Reuses        *reservoir[reuseObs]                      `json:"reuses"`
	BinReuses     [16]*reservoir[reuseObs]                  `json:"bin_reuses"`
	PromptReuses  [depthClasses]*reservoir[reuseObs]        `json:"prompt_reuses"`
	Dist          *reservoir[truncatedSample]               `json:"distances"`
	DistByDepth   [depthClasses]*reservoir[truncatedSample] `json:"distances_by_depth"`
	ExcessByDepth [depthClasses]*reservoir[float64]         `json:"excess_by_depth"`
	Groups        groupsJSON                                `json:"groups"`
	First         float64                                   `json:"first_s"`
	Last          float64                                   `json:"last_s"`
	Forgot        bool                                      `json:"forgot"`
}

// groupsJSON holds the prefix groups as columns, by first block id.
type groupsJSON struct {
	IDs   []int64   `json:"first_block"`
	First []float64 `json:"first_s"`
	Last  []float64 `json:"last_s"`
	N     []int64   `json:"requests"`
}

// MarshalJSON writes the statistics of an ended slice (endSlice first).
func (f *prefixFitter) MarshalJSON() ([]byte, error) {
	w := prefixJSON{BlockSize: f.blockSize, Requests: f.requests, Reused: f.reused, BinN: f.binN, BinHits: f.binHits,
		FillN: f.byFill.n, FillHits: f.byFill.hits, Reuses: f.reuses, BinReuses: f.binReuses, PromptReuses: f.promptReuses,
		Dist: f.dist, DistByDepth: f.distByDepth, ExcessByDepth: f.excessByDepth, Forgot: f.forgot}
	if f.requests > 0 {
		w.First, w.Last = f.first, f.last
	}
	for _, id := range slices.Sorted(maps.Keys(f.groups)) {
		g := f.groups[id]
		w.Groups.IDs, w.Groups.First, w.Groups.Last, w.Groups.N = append(w.Groups.IDs, id), append(w.Groups.First, g.first), append(w.Groups.Last, g.last), append(w.Groups.N, g.n)
	}
	return json.Marshal(w)
}

func (f *prefixFitter) UnmarshalJSON(b []byte) error {
	var w prefixJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	return f.fromJSON(w)
}

// fromJSON sets f from its decoded statistics, checked.
func (f *prefixFitter) fromJSON(w prefixJSON) error {
	errs := []error{capacityIs("reuses", w.Reuses, maxPairs, false), capacityIs("distances", w.Dist, maxPairs, false)}
	for i := range w.BinReuses {
		errs = append(errs, capacityIs("bin_reuses", w.BinReuses[i], binPairs, true))
	}
	for c := range depthClasses {
		errs = append(errs, capacityIs("prompt_reuses", w.PromptReuses[c], binPairs, true),
			capacityIs("distances_by_depth", w.DistByDepth[c], binPairs, true), capacityIs("excess_by_depth", w.ExcessByDepth[c], binPairs, true))
		if (w.DistByDepth[c] == nil) != (w.ExcessByDepth[c] == nil) {
			errs = append(errs, fmt.Errorf("depth class %d has distances or excess shares, not both", c))
		}
	}
	g := w.Groups
	if len(g.First) != len(g.IDs) || len(g.Last) != len(g.IDs) || len(g.N) != len(g.IDs) {
		errs = append(errs, errors.New("groups: columns of different lengths"))
	}
	if w.BlockSize <= 0 || w.Requests < 0 || w.Reused < 0 || w.Reused > w.Requests {
		errs = append(errs, fmt.Errorf("block size %d, %d requests, %d reused", w.BlockSize, w.Requests, w.Reused))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("prefix: %w", err)
	}
	*f = prefixFitter{blockSize: w.BlockSize, groups: make(map[int64]*groupStat, len(g.IDs)), requests: w.Requests, reused: w.Reused,
		binN: w.BinN, binHits: w.BinHits, byFill: fillCounts{n: w.FillN, hits: w.FillHits}, reuses: w.Reuses, binReuses: w.BinReuses,
		promptReuses: w.PromptReuses, dist: w.Dist, distByDepth: w.DistByDepth, excessByDepth: w.ExcessByDepth,
		first: math.NaN(), last: math.NaN(), forgot: w.Forgot}
	if w.Requests > 0 {
		f.first, f.last = w.First, w.Last
	}
	for i, id := range g.IDs {
		if g.N[i] < 1 || g.First[i] > g.Last[i] {
			return fmt.Errorf("prefix: group %d: %d requests from %v s to %v s", id, g.N[i], g.First[i], g.Last[i])
		}
		f.groups[id] = &groupStat{first: g.First[i], last: g.Last[i], n: g.N[i]}
	}
	return nil
}

// reuseObs and truncatedSample are written as arrays: there are many.

func (o reuseObs) MarshalJSON() ([]byte, error) {
	return json.Marshal([6]float64{o.share, o.blocks, o.age, o.limit, float64(o.class), o.prompt})
}

func (o *reuseObs) UnmarshalJSON(b []byte) error {
	var a [6]float64
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	if c := a[4]; !(c >= 0 && c < depthClasses && c == math.Trunc(c)) {
		return fmt.Errorf("a reuse of depth class %v", c)
	}
	*o = reuseObs{share: a[0], blocks: a[1], age: a[2], limit: a[3], class: int(a[4]), prompt: a[5]}
	return nil
}

func (s truncatedSample) MarshalJSON() ([]byte, error) { return json.Marshal([2]float64{s.x, s.limit}) }

func (s *truncatedSample) UnmarshalJSON(b []byte) error {
	var a [2]float64
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	*s = truncatedSample{x: a[0], limit: a[1]}
	return nil
}

type catJSON struct {
	Total  map[string]int64     `json:"total"`
	ByHour [24]map[string]int64 `json:"by_hour"`
	Hours  []int64              `json:"hours"`
}

func (c *catCounter) MarshalJSON() ([]byte, error) {
	w := catJSON{Total: make(map[string]int64, len(c.counts))}
	for h := range w.ByHour {
		w.ByHour[h] = map[string]int64{}
	}
	for v, n := range c.counts {
		w.Total[v] = n.total
		for h, k := range n.byHour {
			if k != 0 {
				w.ByHour[h][v] = k
			}
		}
	}
	w.Hours = slices.Sorted(maps.Keys(c.hours))
	return json.Marshal(w)
}

func (c *catCounter) UnmarshalJSON(b []byte) error {
	var w catJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*c = *newCatCounter()
	for v, n := range w.Total {
		if n < 0 {
			return fmt.Errorf("value %q counted %d times", v, n)
		}
		c.countsOf(v).total = n
	}
	for h, m := range w.ByHour {
		for v, n := range m {
			if n < 0 {
				return fmt.Errorf("value %q counted %d times at hour %d", v, n, h)
			}
			if _, ok := w.Total[v]; !ok {
				return fmt.Errorf("value %q counted at hour %d but not in the total", v, h)
			}
			c.countsOf(v).byHour[h] = n
		}
	}
	for _, h := range w.Hours {
		c.hours[h] = true
	}
	return nil
}

type mixJSON struct {
	Model       *catCounter `json:"model"`
	Adapter     *catCounter `json:"adapter"`
	Tenant      *catCounter `json:"tenant"`
	API         *catCounter `json:"api"`
	Stream      *catCounter `json:"stream"`
	Temperature *catCounter `json:"temperature"`
	TopP        *catCounter `json:"top_p"`
	Features    *catCounter `json:"features"`
}

func (m *mixCounter) MarshalJSON() ([]byte, error) {
	return json.Marshal(mixJSON{m.model, m.adapter, m.tenant, m.api, m.stream, m.temperature, m.topP, m.features})
}

func (m *mixCounter) UnmarshalJSON(b []byte) error {
	var w mixJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	return m.fromJSON(w)
}

// fromJSON sets m from its decoded counts, checked.
func (m *mixCounter) fromJSON(w mixJSON) error {
	if slices.Contains([]*catCounter{w.Model, w.Adapter, w.Tenant, w.API, w.Stream, w.Temperature, w.TopP, w.Features}, nil) {
		return errors.New("mix: an attribute's counts are missing")
	}
	*m = mixCounter{model: w.Model, adapter: w.Adapter, tenant: w.Tenant, api: w.API, stream: w.Stream, temperature: w.Temperature, topP: w.TopP, features: w.Features}
	return nil
}

type contractJSON struct {
	ImageCount *catCounter            `json:"image_count"`
	ImageSize  map[string]*catCounter `json:"image_size"`
	AudioCount *catCounter            `json:"audio_count"`
	AudioMs    *catCounter            `json:"audio_ms"`
	Tools      *catCounter            `json:"tools"`
	Schema     *catCounter            `json:"schema"`
	Sampling   *catCounter            `json:"sampling"`
	// ImageIDs are the distinct image ids the slice saw (each one's first
	// sight in the slice), sorted; ImagesTotal and ImagesReused count
	// images and those whose id the slice had seen before.
	ImageIDs     []int64    `json:"image_ids"`
	ImagesTotal  int64      `json:"images_total"`
	ImagesReused int64      `json:"images_reused"`
	Schemas      popularity `json:"schemas"`
	Adapters     popularity `json:"adapters"`
	Any          bool       `json:"any"`
}

func (f *contractFitter) MarshalJSON() ([]byte, error) {
	w := contractJSON{ImageCount: f.imageCount, ImageSize: f.imageSize, AudioCount: f.audioCount, AudioMs: f.audioMs, Tools: f.tools,
		Schema: f.schema, Sampling: f.sampling, ImagesTotal: f.images.total, ImagesReused: f.images.reused,
		Schemas: f.schemas, Adapters: f.adapters, Any: f.any}
	w.ImageIDs = slices.Sorted(maps.Keys(f.images.seen))
	return json.Marshal(w)
}

func (f *contractFitter) UnmarshalJSON(b []byte) error {
	var w contractJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	return f.fromJSON(w)
}

// fromJSON sets f from its decoded statistics, checked.
func (f *contractFitter) fromJSON(w contractJSON) error {
	if slices.Contains([]*catCounter{w.ImageCount, w.AudioCount, w.AudioMs, w.Tools, w.Schema, w.Sampling}, nil) {
		return errors.New("contract: a quantity's counts are missing")
	}
	if w.ImagesTotal < 0 || w.ImagesReused < 0 || w.ImagesReused > w.ImagesTotal || len(w.ImageIDs) > maxSeenImages {
		return fmt.Errorf("contract: %d images, %d reused, %d distinct ids", w.ImagesTotal, w.ImagesReused, len(w.ImageIDs))
	}
	*f = contractFitter{imageCount: w.ImageCount, audioCount: w.AudioCount, audioMs: w.AudioMs, tools: w.Tools, schema: w.Schema, sampling: w.Sampling,
		imageSize: map[string]*catCounter{}, images: reuseCounter{seen: make(map[int64]bool, len(w.ImageIDs)), total: w.ImagesTotal, reused: w.ImagesReused},
		schemas: popularity{}, adapters: popularity{}, any: w.Any}
	for cls, c := range w.ImageSize {
		if c == nil {
			return fmt.Errorf("contract: image sizes of class %q are missing", cls)
		}
		f.imageSize[cls] = c
	}
	for _, id := range w.ImageIDs {
		f.images.seen[id] = true
	}
	for _, p := range []struct{ from, into popularity }{{w.Schemas, f.schemas}, {w.Adapters, f.adapters}} {
		for k, n := range p.from {
			if n < 0 {
				return fmt.Errorf("contract: %q counted %d times", k, n)
			}
			p.into[k] = n
		}
	}
	return nil
}
