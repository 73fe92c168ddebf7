package trace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/servetrace/servetrace/internal/memcap"
)

// oneGroupBucket writes a bucket of one part of n rows in one row group,
// row i made by row, without page statistics (a page's least and greatest
// value). Rows are written one at a time, so that the writer holds a
// row's values at a time, not the row group's.
func oneGroupBucket(t *testing.T, dir string, n int, row func(i int, ts int64) Request) {
	t.Helper()
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	rel := "date=2024-01-01/hour=00/part-raw-00000.parquet"
	err := createPart(filepath.Join(dir, rel), func(f io.Writer) error {
		w := parquet.NewGenericWriter[Request](f, append(parquetWriterOptions(n), parquet.DataPageStatistics(false))...)
		for i := range n {
			if _, err := w.Write([]Request{row(i, t0+int64(i))}); err != nil {
				return err
			}
		}
		return w.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	m := &Manifest{SchemaVersion: SchemaVersion, Kind: "trace", Rows: int64(n), Parts: []Part{{Path: rel, Rows: int64(n), MinTS: t0, MaxTS: t0 + int64(n-1)}}}
	if err := WriteJSONAtomic(filepath.Join(dir, ManifestName), m); err != nil {
		t.Fatal(err)
	}
}

// longListsBucket writes a bucket of one row group of n rows, each of
// entries prefix blocks all 7, which Parquet stores in a few bytes
// however many there are.
func longListsBucket(t *testing.T, dir string, n, entries int) {
	t.Helper()
	blocks := make([]int64, entries)
	for i := range blocks {
		blocks[i] = 7
	}
	oneGroupBucket(t, dir, n, func(_ int, ts int64) Request {
		r := plainRequest("r", ts)
		r.InputTokens, r.PrefixBlocks = int64(entries), blocks
		return r
	})
}

// TestLongScanDecodesListsInBoundedBatches (issue 46): a part of 128 rows
// of 256k prefix blocks each, a few hundred KB on disk, is read whole
// within 256 MiB, its batches cut to batchEntries (lowered to 1M) list
// entries, 4 rows each. Before, a batch of 512 rows decoded the row
// group's 32M entries at once, 256 MB, and went past the cap.
func TestLongScanDecodesListsInBoundedBatches(t *testing.T) {
	memcap.Run(t, 256<<20, func(t *testing.T) {
		defer func(was int64) { batchEntries = was }(batchEntries)
		batchEntries = 1 << 20
		dir := t.TempDir()
		longListsBucket(t, dir, 128, 1<<18)
		b, err := OpenBucket(dir)
		if err != nil {
			t.Fatal(err)
		}
		rows, entries := 0, 0
		err = b.Scan(context.Background(), func(r *Request) error {
			rows, entries = rows+1, entries+len(r.PrefixBlocks)
			return nil
		})
		if err != nil || rows != 128 || entries != 128<<18 {
			t.Errorf("%d rows of %d entries, %v; want 128 of 256k each", rows, entries, err)
		}
	})
}

// TestBothDecodersKeepToTheBatchPlan: with batchEntries lowered to 1,000,
// a row group of 10 rows of 300 prefix blocks is read 3 rows at a time
// by the column decoder and by parquet-go's generic reader alike, the
// rows whole (before, all 10 in one read).
func TestBothDecodersKeepToTheBatchPlan(t *testing.T) {
	defer func(was int64) { batchEntries = was }(batchEntries)
	batchEntries = 1000
	dir := t.TempDir()
	longListsBucket(t, dir, 10, 300)
	m, _ := ReadManifest(dir)
	for _, byColumns := range []bool{true, false} {
		decodeByColumns = byColumns
		p, err := openPartFile[Request](filepath.Join(dir, m.Parts[0].Path))
		if err != nil {
			t.Fatal(err)
		}
		var sizes []int
		buf := make([]Request, cursorBatchRows)
		for {
			n, err := p.read(buf)
			if err != nil {
				break
			}
			sizes = append(sizes, n)
			for _, r := range buf[:n] {
				if len(r.PrefixBlocks) != 300 {
					t.Errorf("by columns %v: a row of %d blocks, want 300", byColumns, len(r.PrefixBlocks))
				}
			}
		}
		p.close()
		if !slices.Equal(sizes, []int{3, 3, 3, 1}) {
			t.Errorf("by columns %v: reads of %v rows, want [3 3 3 1]", byColumns, sizes)
		}
	}
	decodeByColumns = true
}

// TestRowGroupListsAreHeldToTheirBounds: a row group whose list column
// holds more entries than its rows may is refused from the footer, naming
// the rows and column, and one row past its bound, found when the row
// group holds more than a batch's entries, is refused by row.
func TestRowGroupListsAreHeldToTheirBounds(t *testing.T) {
	defer func(was int64) { batchEntries = was }(batchEntries)
	batchEntries = 1000
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	many := func(n int) []string {
		f := make([]string, n)
		for i := range f {
			f[i] = "tools"
		}
		return f
	}
	for _, c := range []struct {
		name string
		rows []Request
		want string
	}{
		{"a row group of more features than its rows may hold", func() []Request {
			r := plainRequest("a", t0)
			r.Features = many(MaxFeatures + 1)
			return []Request{r}
		}(), "row 1: column features holds 65 entries, at most 64"},
		{"one row past its bound among others", func() []Request {
			var rows []Request
			for i := range 40 {
				r := plainRequest("a", t0+int64(i))
				r.Features = many(30)
				if i == 33 {
					r.Features = many(MaxFeatures + 2)
				}
				rows = append(rows, r)
			}
			return rows
		}(), "row 34: column features holds 66 entries, at most 64"},
	} {
		for _, byColumns := range []bool{true, false} {
			t.Run(c.name, func(t *testing.T) {
				defer func(was bool) { decodeByColumns = was }(decodeByColumns)
				decodeByColumns = byColumns
				dir := t.TempDir()
				partsBucket(t, dir, [][]Request{c.rows}, nil)
				_, _, err := ReadAll(context.Background(), dir)
				if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "part-raw-00000.parquet") {
					t.Errorf("by columns %v: ReadAll = %v; want a refusal naming the part and saying %q", byColumns, err, c.want)
				}
			})
		}
	}
}

// TestLongDictionaryStringsAreCheckedBeforeTheyAreCopied (issue 46): a
// part of 512 rows whose model, dictionary-encoded, is one value of 1 MB,
// stored once, is refused by parquet-go's generic reader, which copies a
// dictionary value into every row, within 128 MiB. Before, a batch of 512
// rows copied it 512 times, 512 MB, and went past the cap.
func TestLongDictionaryStringsAreCheckedBeforeTheyAreCopied(t *testing.T) {
	// Written before the cap, in this process and in the capped child:
	// parquet-go's writer takes more than the reader may.
	dir := t.TempDir()
	model := strings.Repeat("m", 1<<20)
	oneGroupBucket(t, dir, 512, func(_ int, ts int64) Request {
		r := plainRequest("r", ts)
		r.Model = model
		return r
	})
	memcap.Run(t, 128<<20, func(t *testing.T) {
		defer func(was bool) { decodeByColumns = was }(decodeByColumns)
		decodeByColumns = false
		_, _, err := ReadAll(context.Background(), dir)
		if want := "column model holds a string of 1048576 bytes, at most 1024"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadAll = %v; want a refusal saying %q", err, want)
		}
	})
}

// TestLongStringsAreRefusedBeforeTheyAreCopied: a string past
// MaxStringBytes is refused by row before its rows are decoded, by either
// decoder (before, it was copied into its row and refused by Validate
// after), and a string column chunk of more bytes than its values may
// take is refused from the footer.
func TestLongStringsAreRefusedBeforeTheyAreCopied(t *testing.T) {
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for _, c := range []struct {
		name string
		rows func() []Request
		want string
	}{
		{"one long id among short ones", func() []Request {
			var rows []Request
			for i := range 100 {
				rows = append(rows, plainRequest(fmt.Sprint("r", i), t0+int64(i)))
			}
			rows[41].RequestID = strings.Repeat("x", 50_000)
			return rows
		}, "row 42: column request_id holds a string of 50000 bytes, at most 1024"},
		{"a chunk of long ids", func() []Request {
			return []Request{plainRequest(strings.Repeat("x", 5000), t0), plainRequest(strings.Repeat("y", 5000), t0+1)}
		}, "bytes in 2 values, more than strings of at most 1024 bytes take"},
	} {
		for _, byColumns := range []bool{true, false} {
			t.Run(c.name, func(t *testing.T) {
				defer func(was bool) { decodeByColumns = was }(decodeByColumns)
				decodeByColumns = byColumns
				dir := t.TempDir()
				partsBucket(t, dir, [][]Request{c.rows()}, nil)
				_, _, err := ReadAll(context.Background(), dir)
				if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "part-raw-00000.parquet") {
					t.Errorf("by columns %v: ReadAll = %v; want a refusal naming the part and saying %q", byColumns, err, c.want)
				}
			})
		}
	}
}

// TestScanStopsAScanOfLongListsWhenCancelled: a scan cancelled while a
// part's row group is scanned for its longest rows (batchEntries lowered
// to 1,000) stops that scan within a few pages of the hundreds a whole
// scan reads, and returns the context's error. Before, opening the part
// waited for its first batch, after the whole row group was scanned: a
// scan of a hostile part could not be interrupted.
func TestScanStopsAScanOfLongListsWhenCancelled(t *testing.T) {
	defer func(was int64) { batchEntries = was }(batchEntries)
	batchEntries = 1000
	dir := t.TempDir()
	longListsBucket(t, dir, 512, 1<<13)
	b, err := OpenBucket(dir)
	if err != nil {
		t.Fatal(err)
	}
	before := prepassPages.Load()
	if err := b.Scan(context.Background(), func(*Request) error { return nil }); err != nil {
		t.Fatal(err)
	}
	whole := prepassPages.Load() - before
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	before = prepassPages.Load()
	err = b.Scan(ctx, func(*Request) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Scan = %v; want the context's error", err)
	}
	if read := prepassPages.Load() - before; whole < 100 || read > whole/4 {
		t.Errorf("the scan for the longest rows read %d of its %d pages after the scan was cancelled; want it stopped", read, whole)
	}
}
