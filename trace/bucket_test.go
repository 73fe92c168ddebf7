package trace

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sampleRequests returns n requests spread over three hours, in shuffled
// time order, with every nullable column exercised.
func sampleRequests(n int) []Request {
	base := time.Date(2024, 1, 1, 22, 30, 0, 0, time.UTC).UnixMicro()
	rows := make([]Request, n)
	for i := range rows {
		// A stride coprime with n visits every slot once, out of order.
		slot := int64((i * 7919) % n)
		r := Request{
			Identity: Identity{RequestID: "r" + string(rune('a'+i%26)) + itoa(i), SessionID: "s" + itoa(i/3), Turn: int32(i % 3), Model: "m", Tenant: "t" + itoa(i%4)},
			TS:       base + slot*(3*3600*1_000_000/int64(n)),
			Shape:    Shape{InputTokens: int64(100 + i), OutputTokens: int64(i % 50), MaxTokens: int64(i%50 + 1), API: APIChat, Stream: true, N: 1, PrefixBlocks: []int64{int64(i), int64(i * 2)}},
		}
		if i%2 == 0 {
			r.TTFTMs = Ptr(float64(i) / 2)
			r.Status = Ptr(int32(200))
			r.Features = []string{"tools"}
		}
		rows[i] = r
	}
	return rows
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestBucketRoundTripSortedAndPartitioned(t *testing.T) {
	dir := t.TempDir()
	in := sampleRequests(1000)
	opts := DefaultWriterOptions()
	opts.PartRows = 150 // force several parts per hour partition
	w, err := NewBucketWriter(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range in {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Reject(Reject{File: "in.csv", Line: 7, Reason: "bad number"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(&Manifest{Kind: "trace"}); err != nil {
		t.Fatal(err)
	}

	got, m, err := ReadAll(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(in) || m.Rows != int64(len(in)) || m.Rejects != 1 {
		t.Fatalf("rows read %d, manifest rows %d rejects %d; want %d, %d, 1", len(got), m.Rows, m.Rejects, len(in), len(in))
	}
	if !slices.IsSortedFunc(got, func(a, b Request) int { return int(a.TS - b.TS) }) {
		t.Fatal("rows are not in ts order")
	}
	if len(m.Parts) < 7 {
		t.Fatalf("expected several parts, got %d", len(m.Parts))
	}
	// Every row sits in the partition of its own hour, and every part is sorted.
	for _, p := range m.Parts {
		rows, err := readPartFile[Request](filepath.Join(dir, p.Path))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if want := partitionDir(r.TS); !strings.HasPrefix(p.Path, want+"/") {
				t.Fatalf("row at %v in part %s, want partition %s", r.Time(), p.Path, want)
			}
		}
		if !slices.IsSortedFunc(rows, func(a, b Request) int { return int(a.TS - b.TS) }) {
			t.Fatalf("part %s is not sorted by ts", p.Path)
		}
	}
	// Rows survive the round trip field by field.
	byID := map[string]Request{}
	for _, r := range in {
		byID[r.RequestID] = r
	}
	for _, r := range got {
		want := byID[r.RequestID]
		if r.TS != want.TS || r.InputTokens != want.InputTokens || !slices.Equal(r.PrefixBlocks, want.PrefixBlocks) ||
			(r.TTFTMs == nil) != (want.TTFTMs == nil) || (r.TTFTMs != nil && *r.TTFTMs != *want.TTFTMs) ||
			!slices.Equal(r.Features, want.Features) || r.SessionID != want.SessionID {
			t.Fatalf("row %s changed in the round trip:\n got %+v\nwant %+v", r.RequestID, r, want)
		}
	}
	if m.Start.After(m.End) || m.Start.Hour() != 22 || m.End.Hour() != 1 {
		t.Fatalf("manifest time range %v..%v", m.Start, m.End)
	}
	b, err := os.ReadFile(filepath.Join(dir, RejectsName))
	if err != nil || !strings.Contains(string(b), `"line":7`) {
		t.Fatalf("rejects file: %q, %v", b, err)
	}
	assertNoTempFiles(t, dir)
}

func TestBucketWriterRefusesExistingUnlessForced(t *testing.T) {
	dir := t.TempDir()
	write := func(opts WriterOptions, n int) error {
		w, err := NewBucketWriter(dir, opts)
		if err != nil {
			return err
		}
		for _, r := range sampleRequests(n) {
			if err := w.Write(r); err != nil {
				return err
			}
		}
		return w.Close(&Manifest{})
	}
	if err := write(WriterOptions{}, 10); err != nil {
		t.Fatal(err)
	}
	err := write(WriterOptions{}, 5)
	if !errors.Is(err, ErrOutputExists) {
		t.Fatalf("second write into a bucket: err = %v, want ErrOutputExists", err)
	}
	if err := write(WriterOptions{Force: true}, 5); err != nil {
		t.Fatal(err)
	}
	got, _, err := ReadAll(context.Background(), dir)
	if err != nil || len(got) != 5 {
		t.Fatalf("after --force: %d rows, %v; want 5 (old parts removed)", len(got), err)
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "date=*", "hour=*", "*.parquet"))
	if len(matches) != len(mustManifest(t, dir).Parts) {
		t.Fatalf("%d parquet files on disk, manifest lists %d: old parts left behind", len(matches), len(mustManifest(t, dir).Parts))
	}
}

func TestBucketWriterAbortLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	w, err := NewBucketWriter(dir, WriterOptions{PartRows: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range sampleRequests(100) {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	_ = w.Reject(Reject{File: "x", Line: 1, Reason: "r"})
	w.Abort()
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != 0 {
		t.Fatalf("abort left files behind: %v", files)
	}
	if _, err := OpenBucket(dir); err == nil {
		t.Fatal("an aborted directory opened as a bucket")
	}
}

func TestOpenBucketErrorsNameTheProblem(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, dir, want string
	}{
		{"missing directory", filepath.Join(dir, "nope"), "no such file"},
		{"directory without manifest", dir, "not a servetrace trace directory"},
	}
	for _, c := range cases {
		_, err := OpenBucket(c.dir)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to contain %q", c.name, err, c.want)
		}
	}
	// A corrupt part is reported with its path, not a panic.
	w, _ := NewBucketWriter(dir, WriterOptions{})
	_ = w.Write(sampleRequests(1)[0])
	if err := w.Close(&Manifest{}); err != nil {
		t.Fatal(err)
	}
	part := filepath.Join(dir, mustManifest(t, dir).Parts[0].Path)
	if err := os.WriteFile(part, []byte("PAR1 this is not parquet PAR1"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := ReadAll(context.Background(), dir)
	if err == nil || !strings.Contains(err.Error(), part) {
		t.Fatalf("corrupt part: err = %v, want it to name %s", err, part)
	}
}

// TestResultWriterRotatesAndReadsBack writes 8 rows in parts of 3, with
// the encoding in place and handed to an encoder (on a goroutine of its
// own, as replay's runs it), and reads them back.
func TestResultWriterRotatesAndReadsBack(t *testing.T) {
	for _, handed := range []bool{false, true} {
		run := t.TempDir()
		w, err := NewResultWriter(run, 3)
		if err != nil {
			t.Fatal(err)
		}
		encoded := 0
		if handed {
			w.SetEncoder(func(encode func()) {
				encoded++
				done := make(chan struct{})
				go func() { encode(); close(done) }()
				<-done
			})
		}
		for i := range 8 {
			r := Result{Identity: Identity{RequestID: itoa(i)}, Outcome: OutcomeOK, TokenTimesNs: []int64{1, 2, 2 + int64(i)}}
			if err := w.Write(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if got := len(w.Parts()); got != 3 {
			t.Fatalf("%d parts, want 3 (rotation every 3 rows)", got)
		}
		if handed && encoded != 3 {
			t.Errorf("the encoder ran %d times for 3 parts", encoded)
		}
		rows, err := ReadResults(run)
		if err != nil || len(rows) != 8 || rows[7].TokenTimesNs[2] != 9 {
			t.Fatalf("encoder handed %v: read back %d rows, %v", handed, len(rows), err)
		}
		if _, err := NewResultWriter(run, 3); err == nil {
			t.Fatal("a second result writer into the same run directory was allowed")
		}
		w.Close() // removes the next part's file, held open ahead
		assertNoTempFiles(t, run)
	}
}

func mustManifest(t *testing.T, dir string) *Manifest {
	t.Helper()
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func assertNoTempFiles(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".tmp") {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
}

// TestScanOpensPartsAsTheMergeReachesThem: a bucket of 12 parts written in
// time order is read with at most two parts open, one whose parts overlap
// in time still merges in ts order, and a manifest whose min_ts_us is
// later than the part's first row is refused by name.
func TestScanOpensPartsAsTheMergeReachesThem(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	write := func(order []int) string {
		dir := filepath.Join(t.TempDir(), "b")
		w, err := NewBucketWriter(dir, WriterOptions{PartRows: 40, MaxBufferedRows: 40})
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range order {
			if err := w.Write(Request{Identity: Identity{RequestID: strconv.Itoa(i)}, TS: t0.Add(time.Duration(i) * time.Millisecond).UnixMicro(),
				Shape: Shape{InputTokens: 1, API: APIChat}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(&Manifest{Kind: "trace"}); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	scan := func(dir string) (ids []int, maxOpen int64, err error) {
		b, err := OpenBucket(dir)
		if err != nil {
			t.Fatal(err)
		}
		base := openParts.Load()
		err = b.Scan(context.Background(), func(r *Request) error {
			id, _ := strconv.Atoi(r.RequestID)
			ids = append(ids, id)
			maxOpen = max(maxOpen, openParts.Load()-base)
			return nil
		})
		return ids, maxOpen, err
	}
	inOrder := make([]int, 480)
	for i := range inOrder {
		inOrder[i] = i
	}
	dir := write(inOrder)
	if m, _ := ReadManifest(dir); len(m.Parts) != 12 {
		t.Fatalf("%d parts, want 12 of 40 rows", len(m.Parts))
	}
	ids, maxOpen, err := scan(dir)
	if err != nil || !slices.Equal(ids, inOrder) || maxOpen > 2 {
		t.Errorf("in-order parts: %d rows in order %v, error %v, at most %d parts open (want ≤ 2)", len(ids), slices.IsSorted(ids), err, maxOpen)
	}
	// Interleaved: every part spans the whole time range.
	mixed := make([]int, 0, 480)
	for k := range 12 {
		for j := range 40 {
			mixed = append(mixed, j*12+k)
		}
	}
	ids, maxOpen, err = scan(write(mixed))
	if err != nil || !slices.Equal(ids, inOrder) {
		t.Errorf("overlapping parts: %d rows, sorted %v, error %v", len(ids), slices.IsSorted(ids), err)
	}
	t.Logf("overlapping parts: %d open at most", maxOpen)
	// A manifest that says a part starts later than it does.
	m, _ := ReadManifest(dir)
	m.Parts[5].MinTS += 1000
	if err := WriteJSONAtomic(filepath.Join(dir, ManifestName), m); err != nil {
		t.Fatal(err)
	}
	if _, _, err := scan(dir); err == nil || !strings.Contains(err.Error(), m.Parts[5].Path) || !strings.Contains(err.Error(), "min_ts_us") {
		t.Errorf("a wrong min_ts_us: error %v, want one naming %s and min_ts_us", err, m.Parts[5].Path)
	}
}
