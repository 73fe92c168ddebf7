package trace

import (
	"cmp"
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// WriterOptions configures a BucketWriter.
type WriterOptions struct {
	// PartRows is the most rows buffered for one hour partition before they
	// are sorted and written as a part file (default 512k).
	PartRows int
	// MaxBufferedRows bounds the rows held in memory across all partitions;
	// past it the largest partition is flushed (default 512k rows). A
	// buffered row costs the bytes of its columns that vary within its
	// partition: some 50 for an Azure row, more with prefix blocks.
	MaxBufferedRows int
	// RowGroupRows is the Parquet row-group size (default 128k).
	RowGroupRows int
	// Force lets the writer replace a bucket that already exists in the
	// directory (on Close, never before); without it, writing into an
	// existing bucket is an error (ErrOutputExists).
	Force bool
	// Shard, as "i-of-N", makes this writer one of N converting into the
	// same directory: its manifest and rejects get shard names, other
	// shards' files are left alone, and MergeShards joins the manifests.
	Shard string
	// Context, when set, stops a part being written between row groups
	// once it ends, so an interrupted conversion stops within a row group's
	// time; the writer must then be aborted.
	Context context.Context
	// Inputs are the paths the writer's rows come from: the output may not
	// be one of them, lie inside one or hold one.
	Inputs []string
	// Deterministic makes the bucket a function of its rows: part names
	// carry a fixed tag instead of a random one and the manifest has no
	// creation time (generated workloads are byte-identical per seed).
	Deterministic bool
}

// DefaultWriterOptions returns the options a newcomer can live with.
func DefaultWriterOptions() WriterOptions {
	return WriterOptions{PartRows: 512 << 10, MaxBufferedRows: 512 << 10, RowGroupRows: DefaultRowGroupRows}
}

// Reject is one input line that could not be converted. It names the file,
// line and reason and never carries the line's text.
type Reject struct {
	File   string `json:"file"`
	Line   int64  `json:"line"`
	Reason string `json:"reason"`
}

// BucketWriter writes requests into Hive-style hour partitions
// (DIR/date=YYYY-MM-DD/hour=HH/part-TAG-NNNNN.parquet), each part sorted by
// ts, then a manifest. Parts appear only under their final name once whole;
// the manifest is written last, so a directory without one is not a bucket.
type BucketWriter struct {
	dir   string // the output as given, for messages
	final string // the output directory, absolute
	stage string // where parts are written until Close
	lock  *outputLock
	old   *Manifest // the bucket this writer replaces (Force), if any
	opts  WriterOptions
	tag   string
	seq   int
	buf   map[string]*requestBuffer // partition path -> rows
	nbuf  int
	// spare holds emptied buffers for the next partitions.
	spare []*requestBuffer
	// pw writes every part, column by column, reusing its buffers.
	pw *requestPartWriter
	// lastHour and lastDir cache the partition path of the last row's hour.
	lastHour int64
	lastDir  string
	parts    []Part
	rejects  *os.File
	nrej     int64
	closed   bool
	// manifestName and rejectsName are _manifest.json and _rejects.jsonl,
	// or a shard's own.
	manifestName, rejectsName string
}

// ErrOutputExists marks an output directory that already holds a trace
// and may not be replaced (WriterOptions.Force is not set).
var ErrOutputExists = errors.New("the output already exists")

// NewBucketWriter prepares to write a new bucket into dir. Files are
// written into a staging directory beside dir, which replaces dir only when
// Close succeeds, so a failed or interrupted conversion leaves an earlier
// bucket as it was; a lock keeps a second writer out until Close or Abort.
// It refuses a dir that already holds a bucket unless opts.Force is set, a
// dir that holds files servetrace did not write, and a dir that overlaps
// one of opts.Inputs.
func NewBucketWriter(dir string, opts WriterOptions) (*BucketWriter, error) {
	def := DefaultWriterOptions()
	if opts.PartRows <= 0 {
		opts.PartRows = def.PartRows
	}
	if opts.MaxBufferedRows <= 0 {
		opts.MaxBufferedRows = def.MaxBufferedRows
	}
	if opts.RowGroupRows <= 0 {
		opts.RowGroupRows = def.RowGroupRows
	}
	final, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("output %s: %w", dir, err)
	}
	if err := CheckOutputPath(final, opts.Inputs); err != nil {
		return nil, err
	}
	manifestName, rejectsName, lockName := ManifestName, RejectsName, "writer"
	if opts.Shard != "" {
		manifestName, rejectsName, lockName = shardManifestName(opts.Shard), "_rejects.shard-"+opts.Shard+".jsonl", "shard-"+opts.Shard
	}
	lock, err := lockOutput(final, lockName)
	if err != nil {
		return nil, err
	}
	w := &BucketWriter{dir: dir, final: final, opts: opts, tag: writerTag(opts.Deterministic), buf: map[string]*requestBuffer{},
		manifestName: manifestName, rejectsName: rejectsName, lock: lock}
	if err := w.checkExisting(); err != nil {
		lock.release()
		return nil, err
	}
	if w.stage, err = newStageDir(final); err != nil {
		lock.release()
		return nil, err
	}
	return w, nil
}

// checkExisting refuses what is already in the output directory unless
// this writer may replace it.
func (w *BucketWriter) checkExisting() error {
	if st, err := os.Stat(w.final); err == nil && !st.IsDir() {
		return fmt.Errorf("output %s is a file, not a directory: choose a directory for the trace", w.dir)
	}
	if w.opts.Shard != "" {
		if _, err := os.Stat(filepath.Join(w.final, ManifestName)); err == nil {
			return fmt.Errorf("output %s already holds a merged trace; shards write into a fresh directory", w.dir)
		}
	}
	if old, err := readManifestFile(w.final, w.manifestName); err == nil {
		if !w.opts.Force {
			return fmt.Errorf("output %s already holds a trace (%d rows) in %s: %w", w.dir, old.Rows, w.manifestName, ErrOutputExists)
		}
		w.old = old
	} else if _, serr := os.Stat(filepath.Join(w.final, w.manifestName)); serr == nil {
		return err // a manifest that does not read
	}
	if w.opts.Shard != "" {
		return nil // other shards' files are expected beside this one's
	}
	if shards, _ := filepath.Glob(filepath.Join(w.final, "_manifest.shard-*.json")); len(shards) > 0 && !w.opts.Force {
		return fmt.Errorf("output %s holds %d shard manifests of another conversion: %w", w.dir, len(shards), ErrOutputExists)
	}
	foreign, err := foreignFiles(w.final, ownedBucketFile, 3)
	if err != nil {
		return fmt.Errorf("check output %s: %w", w.dir, err)
	}
	if len(foreign) > 0 {
		return fmt.Errorf("output %s holds files that are not part of a servetrace trace (%s): choose a new or empty directory", w.dir, strings.Join(foreign, ", "))
	}
	return nil
}

// partPathRE matches the path of a part inside a bucket.
var partPathRE = regexp.MustCompile(`^date=\d{4}-\d{2}-\d{2}/hour=\d{2}/part-[A-Za-z0-9]+-\d+\.parquet$`)

// partitionPathRE matches a partition directory inside a bucket.
var partitionPathRE = regexp.MustCompile(`^date=\d{4}-\d{2}-\d{2}/hour=\d{2}$`)

// ownedBucketFile reports whether a file at rel (slash-separated, inside a
// bucket directory) is one a bucket writer makes: parts, manifests,
// rejects, and the hidden temporary files of an interrupted writer.
func ownedBucketFile(rel string) bool {
	dir, base := path.Split(rel)
	temp := strings.HasPrefix(base, ".") && strings.HasSuffix(base, ".tmp")
	switch dir {
	case "":
		return temp || base == ManifestName || base == RejectsName || shardManifestRE.MatchString(base) || shardRejectsRE.MatchString(base)
	default:
		return partPathRE.MatchString(rel) || temp && partitionPathRE.MatchString(strings.TrimSuffix(dir, "/"))
	}
}

// shardManifestName is the manifest file of shard "i-of-N".
func shardManifestName(shard string) string { return "_manifest.shard-" + shard + ".json" }

var shardRejectsRE = regexp.MustCompile(`^_rejects\.shard-\d+-of-\d+\.jsonl$`)

// partitionDir returns the Hive partition path of a timestamp (UTC).
func partitionDir(tsMicros int64) string {
	t := time.UnixMicro(tsMicros).UTC()
	return fmt.Sprintf("date=%s/hour=%02d", t.Format("2006-01-02"), t.Hour())
}

// partitionOf returns partitionDir(ts), remembering the last hour's
// path: rows mostly arrive in time order, and formatting a path per row
// costs more than the rest of a row's bookkeeping.
func (w *BucketWriter) partitionOf(ts int64) string {
	const hour = int64(time.Hour / time.Microsecond)
	h := ts / hour
	if ts < 0 && ts%hour != 0 {
		h-- // floor for times before 1970
	}
	if w.lastHour != h || w.lastDir == "" {
		w.lastHour, w.lastDir = h, partitionDir(ts)
	}
	return w.lastDir
}

// Write adds one request. Its slices and pointed-to values are read later,
// when its block of rows goes into the column buffers, and its strings are
// kept: the caller must not change them after Write.
func (w *BucketWriter) Write(r Request) error {
	if w.closed {
		return errors.New("trace: write to a closed bucket writer")
	}
	p := w.partitionOf(r.TS)
	pb := w.buf[p]
	if pb == nil {
		var err error
		if pb, err = w.newBuffer(); err != nil {
			return err
		}
		w.buf[p] = pb
	}
	pb.add(&r)
	w.nbuf++
	if pb.n >= w.opts.PartRows {
		return w.flushPartition(p)
	}
	if w.nbuf >= w.opts.MaxBufferedRows {
		largest := ""
		for k, pb := range w.buf {
			if largest == "" || pb.n > w.buf[largest].n {
				largest = k
			}
		}
		return w.flushPartition(largest)
	}
	return nil
}

// Reject records an input line that could not be converted.
func (w *BucketWriter) Reject(r Reject) error {
	if w.rejects == nil {
		f, err := os.CreateTemp(w.stage, "."+RejectsName+".*.tmp")
		if err != nil {
			return fmt.Errorf("create rejects file: %w", err)
		}
		w.rejects = f
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode reject: %w", err)
	}
	if _, err := w.rejects.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write rejects file: %w", err)
	}
	w.nrej++
	return nil
}

// Rejects returns how many lines were rejected so far.
func (w *BucketWriter) Rejects() int64 { return w.nrej }

// Rows returns how many rows were written so far.
func (w *BucketWriter) Rows() int64 {
	n := int64(w.nbuf)
	for _, p := range w.parts {
		n += p.Rows
	}
	return n
}

// newBuffer returns an empty partition buffer, a spare one if any.
func (w *BucketWriter) newBuffer() (*requestBuffer, error) {
	if n := len(w.spare); n > 0 {
		b := w.spare[n-1]
		w.spare = w.spare[:n-1]
		return b, nil
	}
	l, err := requestLayoutOf()
	if err != nil {
		return nil, err
	}
	return newRequestBuffer(l), nil
}

func (w *BucketWriter) flushPartition(p string) error {
	pb := w.buf[p]
	delete(w.buf, p)
	if pb == nil || pb.n == 0 {
		return nil
	}
	w.nbuf -= pb.n
	rel := filepath.Join(p, fmt.Sprintf("part-%s-%05d.parquet", w.tag, w.seq))
	w.seq++
	if w.pw == nil {
		pw, err := newRequestPartWriter(w.opts.RowGroupRows)
		if err != nil {
			return err
		}
		w.pw = pw
	}
	ctx := w.opts.Context
	if ctx == nil {
		ctx = context.Background()
	}
	if err := w.pw.writeBuffer(ctx, filepath.Join(w.stage, rel), pb); err != nil {
		return err
	}
	minTS, maxTS := pb.span()
	w.parts = append(w.parts, Part{Path: filepath.ToSlash(rel), Rows: int64(pb.n), MinTS: minTS, MaxTS: maxTS})
	pb.reset()
	if len(w.spare) < 2 {
		w.spare = append(w.spare, pb)
	}
	return nil
}

// Close flushes every partition, moves the rejects file into place and writes
// the manifest. m's Rows, Rejects, Start, End, Parts, SchemaVersion,
// ToolVersion and CreatedAt are filled in by Close.
func (w *BucketWriter) Close(m *Manifest) error {
	if w.closed {
		return errors.New("trace: bucket writer closed twice")
	}
	keys := make([]string, 0, len(w.buf))
	for k := range w.buf {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := w.flushPartition(k); err != nil {
			w.Abort()
			return err
		}
	}
	if w.rejects != nil {
		name := w.rejects.Name()
		if err := w.rejects.Close(); err != nil {
			w.Abort()
			return fmt.Errorf("close rejects file: %w", err)
		}
		w.rejects = nil
		if err := os.Chmod(name, filePerm()); err != nil { // CreateTemp made it 0600
			w.Abort()
			return fmt.Errorf("set the mode of the rejects file: %w", err)
		}
		if err := os.Rename(name, filepath.Join(w.stage, w.rejectsName)); err != nil {
			w.Abort()
			return fmt.Errorf("move rejects file into place: %w", err)
		}
	}
	w.closed = true
	slices.SortFunc(w.parts, func(a, b Part) int { return cmp.Or(cmp.Compare(a.MinTS, b.MinTS), cmp.Compare(a.Path, b.Path)) })
	m.SchemaVersion, m.ToolVersion = SchemaVersion, ToolVersion
	if !w.opts.Deterministic {
		m.CreatedAt = time.Now().UTC().Truncate(time.Second)
	}
	m.Parts, m.Rows, m.Rejects = w.parts, 0, w.nrej
	for i, p := range w.parts {
		m.Rows += p.Rows
		if i == 0 || p.MinTS < m.Start.UnixMicro() {
			m.Start = time.UnixMicro(p.MinTS).UTC()
		}
		if i == 0 || p.MaxTS > m.End.UnixMicro() {
			m.End = time.UnixMicro(p.MaxTS).UTC()
		}
	}
	if m.Parts == nil {
		m.Parts = []Part{}
	}
	if m.BlockSize == 0 {
		m.BlockSize = DefaultBlockSize
	}
	defer w.lock.release()
	if err := WriteJSONAtomic(filepath.Join(w.stage, w.manifestName), m); err != nil {
		os.RemoveAll(w.stage)
		return err
	}
	if err := w.commit(); err != nil {
		os.RemoveAll(w.stage)
		return err
	}
	return nil
}

// commit moves the finished stage into place: it replaces the output
// directory, or, for a shard, joins the other shards' files there after
// removing this shard's earlier parts (Force).
func (w *BucketWriter) commit() error {
	if w.opts.Shard == "" {
		return replaceDir(w.final, w.stage, ownedBucketFile)
	}
	if w.old != nil {
		for _, p := range w.old.Parts {
			if !partPathRE.MatchString(p.Path) {
				continue // never follow a manifest path out of the bucket's layout
			}
			if err := os.Remove(filepath.Join(w.final, filepath.FromSlash(p.Path))); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("replace shard %s in %s: %w", w.opts.Shard, w.dir, err)
			}
		}
		for _, name := range []string{w.rejectsName, w.manifestName} {
			if err := os.Remove(filepath.Join(w.final, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("replace shard %s in %s: %w", w.opts.Shard, w.dir, err)
			}
		}
	}
	return mergeDir(w.final, w.stage)
}

// Abort removes everything this writer wrote (its staging directory) and
// releases the output, which stays as it was. It is safe to call after a
// failed Close and does nothing after a successful one.
func (w *BucketWriter) Abort() {
	if w.closed {
		return
	}
	w.closed = true
	if w.rejects != nil {
		w.rejects.Close()
	}
	os.RemoveAll(w.stage)
	w.lock.release()
	w.buf, w.parts = nil, nil
}

// Bucket is an opened trace or workload directory.
type Bucket struct {
	Dir      string
	Manifest *Manifest
}

// OpenBucket reads dir's manifest and checks that every part it lists exists.
func OpenBucket(dir string) (*Bucket, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	for _, p := range m.Parts {
		if _, err := InsideDir(dir, p.Path, filepath.Join(dir, ManifestName)); err != nil {
			return nil, fmt.Errorf("open trace %s: %w", dir, err)
		}
		if _, err := os.Stat(filepath.Join(dir, p.Path)); err != nil {
			return nil, fmt.Errorf("open trace %s: part %s listed in the manifest is missing: %w", dir, p.Path, err)
		}
	}
	return &Bucket{Dir: dir, Manifest: m}, nil
}

// Scan calls fn for every request of the bucket in ts order (ties keep part
// order, then row order), merging all part files as it streams. The request
// passed to fn is valid only during the call. Returning a non-nil error from
// fn stops the scan and returns that error.
//
// A part is opened only when the merge reaches its manifest min_ts_us, so a
// bucket of many parts written in time order holds one or two open at a
// time, not all of them: memory follows the parts that overlap in time,
// not the bucket's length.
//
// Every row is checked as it is read (Request.Validate), each part's times
// must not go backwards (parts are written sorted, and the merge relies on
// it), its first row must not be before its min_ts_us, and each part must
// hold the rows its manifest entry says: a fault is an error naming the
// part and row, never a row passed on.
func (b *Bucket) Scan(ctx context.Context, fn func(*Request) error) error {
	if err := b.checkOverlap(); err != nil {
		return err
	}
	h := make(cursorHeap, 0, min(len(b.Manifest.Parts), maxOpenParts))
	defer func() {
		for _, c := range h {
			c.close()
		}
	}()
	pending := byMinTS(b.Manifest.Parts)
	// open adds the pending parts that start at or before the merge's
	// next row (or the next one, when none is open) to the heap, one at a
	// time, as a part opened may hold the next row.
	open := func() error {
		for len(pending) > 0 && (len(h) == 0 || b.Manifest.Parts[pending[0]].MinTS <= h[0].row.TS) {
			i := pending[0]
			if len(h) >= maxOpenParts {
				return b.tooManyOpen(b.Manifest.Parts[i])
			}
			pending = pending[1:]
			c, err := b.openCursor(ctx, i)
			if err != nil {
				return err
			}
			if c != nil {
				heap.Push(&h, c)
			}
		}
		return nil
	}
	lastTS := int64(math.MinInt64)
	for n := 0; ; n++ {
		if err := open(); err != nil {
			return err
		}
		if len(h) == 0 {
			return nil
		}
		if n&1023 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		c := h[0]
		if c.row.TS < lastTS {
			return fmt.Errorf("trace %s: part %s row %d: ts %s is before a row of an earlier part the merge passed: the manifest's min_ts_us for the part is wrong; convert or generate it again", b.Dir, c.path, c.n,
				time.UnixMicro(c.row.TS).UTC().Format(time.RFC3339Nano))
		}
		lastTS = c.row.TS
		if err := fn(c.row); err != nil {
			return err
		}
		if err := c.advance(); err == io.EOF {
			heap.Pop(&h)
			c.close()
		} else if err != nil {
			return err
		} else {
			heap.Fix(&h, 0)
		}
	}
}

// openCursor opens part i at its first row, checked against its manifest
// entry; nil for a part of no rows. Once ctx ends, it stops waiting for
// the first row.
func (b *Bucket) openCursor(ctx context.Context, i int) (*cursor, error) {
	p := b.Manifest.Parts[i]
	pf, err := openPartFile[Request](filepath.Join(b.Dir, p.Path))
	if err != nil {
		return nil, err
	}
	if pf.numRows != p.Rows {
		pf.close()
		return nil, fmt.Errorf("trace %s: part %s holds %d rows, its manifest says %d: the part was replaced or the manifest edited; convert the source again", b.Dir, p.Path, pf.numRows, p.Rows)
	}
	c := startCursor(ctx, pf, i, b.Dir, p.Path)
	if err := c.advance(); err == io.EOF {
		c.close()
		return nil, nil
	} else if err != nil {
		c.close()
		return nil, err
	}
	if c.row.TS < p.MinTS {
		c.close()
		return nil, fmt.Errorf("trace %s: part %s row 1: ts %s is before the part's min_ts_us in the manifest (%s): the manifest was edited or the part replaced; convert the source again", b.Dir, p.Path,
			time.UnixMicro(c.row.TS).UTC().Format(time.RFC3339Nano), time.UnixMicro(p.MinTS).UTC().Format(time.RFC3339Nano))
	}
	return c, nil
}

// ReadAll returns every request of the bucket at dir in ts order.
func ReadAll(ctx context.Context, dir string) ([]Request, *Manifest, error) {
	b, err := OpenBucket(dir)
	if err != nil {
		return nil, nil, err
	}
	// The manifest's count only presizes, within reason: the rows read are
	// what counts.
	rows := make([]Request, 0, presize(b.Manifest.Rows))
	err = b.Scan(ctx, func(r *Request) error {
		rows = append(rows, *r)
		return nil
	})
	return rows, b.Manifest, err
}
