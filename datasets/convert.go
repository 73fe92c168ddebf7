package datasets

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/anon"
)

// ConvertOptions controls Convert.
type ConvertOptions struct {
	Options
	// Force replaces an existing bucket in the output directory.
	Force bool
	// MaxRejectRatio fails the conversion when more than this share of
	// lines is rejected (default 0.01; negative: never).
	MaxRejectRatio float64
	// DenseIDs renumbers prefix block ids by first appearance (Mooncake
	// style) through a map of at most MaxDenseIDs ids.
	DenseIDs    bool
	MaxDenseIDs int
	// TimeResolution coarsens arrival times down to a multiple of it.
	TimeResolution time.Duration
	// MinTenantRequests folds tenants with fewer requests into one
	// "(small tenants)" tenant, so a rare tenant cannot be singled out. It
	// reads the inputs twice, so it needs files, not standard input; past
	// 2^20 tenants its counts are lower bounds (tenantCounter), so it
	// errs on folding.
	MinTenantRequests int
	// WriterOptions tunes the bucket writer (buffer bounds).
	Writer trace.WriterOptions
	// Shard and ShardCount split the inputs: this process converts inputs
	// j with j mod ShardCount == Shard into outDir beside the other shards;
	// trace.MergeShards joins their manifests. ShardCount 0 or 1: no split.
	Shard, ShardCount int
	// Progress, when set, is called every ProgressEvery (default 10 s)
	// while an input is read, from a goroutine of its own.
	Progress      func(Progress)
	ProgressEvery time.Duration
	// open wraps each input as it is opened (tests).
	open func(io.Reader) io.Reader
}

// Errors of a conversion that wrote nothing, for callers to add their hint.
var (
	// ErrNothingConverted: every line was rejected; the format may be wrong.
	ErrNothingConverted = errors.New("check the input's format, or name it")
	// ErrTooManyRejects: more lines were rejected than MaxRejectRatio allows.
	ErrTooManyRejects = errors.New("too many lines rejected")
)

// SmallTenants is the tenant that --min-tenant-requests folds rare ones into.
const SmallTenants = "(small tenants)"

// Convert reads each input (a bundled dataset's name, a file path, or "-"
// for standard input) and writes one bucket to outDir. On any error nothing
// that could pass for a bucket is left in outDir.
func Convert(ctx context.Context, inputs []string, outDir string, opts ConvertOptions) (*trace.Manifest, error) {
	if len(inputs) == 0 {
		return nil, errors.New("no input given: name a file, '-' for standard input, or a bundled dataset (servetrace datasets list)")
	}
	// Resolve every input before writing anything.
	for _, in := range inputs {
		if in == "-" {
			continue
		}
		if _, ok := Lookup(in); ok {
			continue
		}
		st, err := os.Stat(in)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("input %s: no such file and no bundled dataset of that name (see 'servetrace datasets list')", in)
		}
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", in, err)
		}
		if st.IsDir() {
			return nil, fmt.Errorf("input %s is a directory; give the log files inside it", in)
		}
	}
	if opts.ShardCount > 1 {
		if opts.Shard < 0 || opts.Shard >= opts.ShardCount || opts.ShardCount > trace.MaxShards {
			return nil, opterr.New("Shard", fmt.Sprintf("%d/%d", opts.Shard, opts.ShardCount), "want i/N with 0 <= i < N <= %d", trace.MaxShards)
		}
		if opts.MinTenantRequests > 1 || opts.DenseIDs {
			return nil, opterr.New("Shard", fmt.Sprintf("%d/%d", opts.Shard, opts.ShardCount), "MinTenantRequests and DenseIDs need every input in one conversion; they do not combine with shards")
		}
		var mine []string
		for j, in := range inputs {
			if j%opts.ShardCount == opts.Shard {
				mine = append(mine, in)
			}
		}
		inputs = mine
		opts.Writer.Shard = fmt.Sprintf("%d-of-%d", opts.Shard, opts.ShardCount)
	}
	if opts.Log.Salt.IsZero() {
		// One random salt for the whole conversion, so its inputs (and the
		// counting pass of --min-tenant-requests) link with each other.
		opts.Log.Salt = anon.RandomSalt()
	}
	var tenantCounts *tenantCounter
	if opts.MinTenantRequests > 1 {
		if slices.Contains(inputs, "-") {
			return nil, opterr.New("MinTenantRequests", opts.MinTenantRequests, "reads the inputs twice: give files, not '-' (standard input)")
		}
		tenantCounts = newTenantCounter(maxTenantCounts)
		for _, in := range inputs {
			if _, _, err := convertOne(ctx, in, opts.Options, tenantCounts, opts.report("counting tenants")); err != nil {
				return nil, err
			}
		}
	}
	wo := opts.Writer
	wo.Force, wo.Inputs, wo.Context = opts.Force, inputs, ctx
	if bi := opts.Log.BatchInput; bi != nil {
		wo.Inputs = append(slices.Clone(inputs), bi.Name)
	}
	w, err := trace.NewBucketWriter(outDir, wo)
	if err != nil {
		return nil, err
	}
	rl := newRejectLog(w, outDir, wo.Shard)
	defer rl.discard()
	// abort drops what the writer staged, keeping the rejects (unless
	// interrupted) where a failed conversion can be read about; it returns
	// what to add to the error about them.
	abort := func() string {
		kept := ""
		if ctx.Err() == nil {
			kept = rl.keep()
		}
		w.Abort()
		return kept
	}
	var sink Sink = rl
	post := &postSink{Sink: rl, dense: newDenseIDs(ExportOptions{DenseIDs: opts.DenseIDs, MaxDenseIDs: opts.MaxDenseIDs}),
		resolution: opts.TimeResolution.Microseconds(), tenants: tenantCounts, minTenant: opts.MinTenantRequests}
	if opts.DenseIDs || opts.TimeResolution > 0 || tenantCounts != nil {
		sink = post
	}
	m := &trace.Manifest{Kind: "trace", PrefixIDs: trace.PrefixIDsNone}
	for _, in := range inputs {
		src, st, err := convertOne(ctx, in, opts.Options, sink, opts.report("converting"))
		if err != nil {
			abort()
			return nil, err
		}
		m.Sources = append(m.Sources, src)
		m.Notes = append(m.Notes, st.Notes...)
		if st.SyntheticTimes {
			m.Notes = append(m.Notes, fmt.Sprintf("%s has no arrival times: rows were spaced %s apart in file order; take arrivals from a fitted model, or replay at a rate", src.Name, ShareGPTGap))
		}
		if st.TimesRelative {
			m.TimesRelative, m.Anchor = true, opts.startOrDefault()
		}
		for r, n := range st.RejectReasons {
			if m.RejectReasons == nil {
				m.RejectReasons = map[string]int64{}
			}
			m.RejectReasons[r] += n
		}
		if st.PrefixSalted {
			salt := st.Salt // what the reader really keyed with
			m.PrefixIDs, m.SaltFingerprint, m.SaltRandom = trace.PrefixIDsSaltedHash, salt.Fingerprint(), salt.Random
			m.Tokenizer = st.Tokenizer
			if salt.Random && !slices.Contains(m.Notes, noteRandomSalt) {
				m.Notes = append(m.Notes, noteRandomSalt)
			}
		}
		if st.BlockSize > 0 {
			if m.BlockSize != 0 && m.BlockSize != st.BlockSize {
				abort()
				return nil, fmt.Errorf("input %s uses %d-token prefix blocks, an earlier input %d: convert them into separate buckets", in, st.BlockSize, m.BlockSize)
			}
			m.BlockSize = st.BlockSize
			if !st.PrefixSalted {
				m.PrefixIDs = trace.PrefixIDsSource
			}
		}
	}
	if w.Rows() == 0 && opts.ShardCount > 1 && len(inputs) == 0 {
		// A shard with no input of its own still reports, so the merge
		// knows it finished.
		if err := w.Close(m); err != nil {
			return nil, err
		}
		return m, nil
	}
	if w.Rows() == 0 {
		rejects := w.Rejects()
		if rejects == 0 {
			abort()
			why := ""
			if len(m.Notes) > 0 { // what the readers skipped, and why
				why = ": " + strings.Join(m.Notes, "; ")
			}
			return nil, fmt.Errorf("no rows converted from %v (%d lines rejected)%s: %w", inputs, rejects, why, ErrNothingConverted)
		}
		summary := rl.summary()
		return nil, fmt.Errorf("no rows converted from %v (%d lines rejected): %s%s: %w", inputs, rejects, summary, abort(), ErrNothingConverted)
	}
	ratio := opts.MaxRejectRatio
	if ratio == 0 {
		ratio = 0.01
	}
	if total := w.Rows() + w.Rejects(); ratio >= 0 && total > 0 && float64(w.Rejects()) > ratio*float64(total) {
		summary := rl.summary()
		return nil, fmt.Errorf("%d of %d lines rejected (%.1f%%), more than the %.1f%% allowed: %s; no trace was written%s (fix the input or the mapping, or allow more): %w",
			w.Rejects(), total, 100*float64(w.Rejects())/float64(total), 100*ratio, summary, abort(), ErrTooManyRejects)
	}
	if opts.DenseIDs && m.PrefixIDs != trace.PrefixIDsNone {
		m.PrefixIDs = trace.PrefixIDsDense
		m.Notes = append(m.Notes, "prefix block ids were renumbered 0, 1, 2... by first appearance")
	}
	if opts.TimeResolution > 0 {
		m.Notes = append(m.Notes, fmt.Sprintf("arrival times were coarsened to multiples of %s", opts.TimeResolution))
		for i := range m.Sources {
			m.Sources[i].TimeResolutionUs = max(m.Sources[i].TimeResolutionUs, opts.TimeResolution.Microseconds())
		}
	}
	if bi := opts.Log.BatchInput; bi != nil {
		m.Notes = append(m.Notes, fmt.Sprintf("the request side (prompts, max tokens, sampling) was joined by custom_id from the batch input %s (%d requests, sha256 %s)", bi.Name, bi.Requests(), bi.SHA256))
	}
	if tenantCounts != nil {
		m.Notes = append(m.Notes, fmt.Sprintf("%d requests of tenants with fewer than %d requests were folded into %q", post.folded, opts.MinTenantRequests, SmallTenants))
		if tenantCounts.lossy() {
			m.Notes = append(m.Notes, fmt.Sprintf("more than %d tenants were counted at once, so counts were kept as lower bounds, at most %d below the truth: tenants with up to %d requests may have been folded too", maxTenantCounts,
				tenantCounts.requests/(maxTenantCounts+1), opts.MinTenantRequests-1+tenantCounts.requests/(maxTenantCounts+1)))
		}
	}
	if err := w.Close(m); err != nil {
		return nil, err
	}
	return m, nil
}

func (o Options) startOrDefault() time.Time {
	if o.Start.IsZero() {
		return trace.DefaultStart
	}
	return o.Start.UTC()
}

// report is how convertOne reports progress at a stage.
func (o ConvertOptions) report(stage string) progressReport {
	return progressReport{fn: o.Progress, every: o.ProgressEvery, stage: stage, open: o.open}
}

// convertOne reads one input into w and describes it as a manifest
// source, reporting its progress.
func convertOne(ctx context.Context, in string, opts Options, w Sink, pr progressReport) (trace.Source, Stats, error) {
	var r io.Reader
	src := trace.Source{Name: in}
	size := int64(-1)
	if d, ok := Lookup(in); ok {
		r = d.Open()
		src.Name, src.Licence, src.Citation = d.Name, d.Licence, d.Citation
		if opts.Format == "" {
			opts.Format = d.Format
		}
	} else if in == "-" {
		r, src.Name = os.Stdin, "stdin"
	} else {
		f, stopOpen, err := openInput(ctx, in)
		if err != nil {
			return src, Stats{}, fmt.Errorf("input %s: %w", in, err)
		}
		defer stopOpen()
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			size = fi.Size()
		}
		r = f
	}
	if pr.open != nil {
		r = pr.open(r)
	}
	h := sha256.New()
	opts.Name = src.Name
	cs := &countingSink{Sink: w}
	read := &countingReader{r: r}
	stop := pr.watch(src.Name, size, read, cs)
	st, err := Read(ctx, io.TeeReader(read, h), opts, cs)
	stop()
	st.RejectReasons = cs.reasons
	if err != nil {
		return src, st, err
	}
	src.SHA256 = hex.EncodeToString(h.Sum(nil))
	src.Format, src.Rows, src.Rejects, src.TimeResolutionUs = st.Format, st.Rows, st.Rejects, st.TimeResolutionUs
	return src, st, nil
}

// noteRandomSalt is the manifest note for a conversion without a salt.
const noteRandomSalt = "no salt was given: a random one keyed the ids and prefix hashes, so they will not link with any other conversion"

// ReasonsText lists reject counts by reason, largest first.
func ReasonsText(m map[string]int64) string {
	type rc struct {
		r string
		n int64
	}
	var all []rc
	for r, n := range m {
		all = append(all, rc{r, n})
	}
	slices.SortFunc(all, func(a, b rc) int { return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.r, b.r)) })
	parts := make([]string, 0, len(all))
	for _, x := range all {
		parts = append(parts, fmt.Sprintf("%d × %s", x.n, x.r))
	}
	return strings.Join(parts, "; ")
}

// countingSink tallies reject reasons, numbers folded to N so that one kind
// of fault is one line of the summary, and counts rows and rejects for
// progress reports.
type countingSink struct {
	Sink
	reasons       map[string]int64
	rows, rejects atomic.Int64
}

func (c *countingSink) Write(r trace.Request) error {
	c.rows.Add(1)
	return c.Sink.Write(r)
}

func (c *countingSink) Reject(r trace.Reject) error {
	if c.reasons == nil {
		c.reasons = map[string]int64{}
	}
	c.reasons[foldDigits(r.Reason)]++
	c.rejects.Add(1)
	return c.Sink.Reject(r)
}

// foldDigits replaces each run of digits by N.
func foldDigits(s string) string {
	var b strings.Builder
	inNum := false
	for _, r := range s {
		if r >= '0' && r <= '9' {
			if !inNum {
				b.WriteByte('N')
			}
			inNum = true
			continue
		}
		inNum = false
		b.WriteRune(r)
	}
	return b.String()
}

// postSink applies the bucket-wide anonymisation options to each row:
// dense block ids, coarser times, folded rare tenants.
type postSink struct {
	Sink
	dense      *denseIDs
	resolution int64 // µs
	tenants    *tenantCounter
	minTenant  int
	folded     int64 // requests folded into SmallTenants
}

func (p *postSink) Write(r trace.Request) error {
	if p.dense.on && len(r.PrefixBlocks) > 0 {
		blocks := make([]int64, len(r.PrefixBlocks))
		for i, b := range r.PrefixBlocks {
			blocks[i] = p.dense.id(b)
		}
		r.PrefixBlocks = blocks
	}
	if p.resolution > 1 {
		r.TS -= r.TS % p.resolution
	}
	if p.tenants != nil && r.Tenant != "" && p.tenants.count(r.Tenant) < p.minTenant {
		r.Tenant = SmallTenants
		p.folded++
	}
	return p.Sink.Write(r)
}
