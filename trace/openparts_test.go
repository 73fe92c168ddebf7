package trace

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/internal/memcap"
)

// partsBucket writes each row list as a part of a bucket at dir, with the
// manifest entries meta gives (its rows, min_ts_us and max_ts_us from the
// rows unless meta changes them).
func partsBucket(t *testing.T, dir string, parts [][]Request, meta func(i int, p *Part)) {
	t.Helper()
	m := &Manifest{SchemaVersion: SchemaVersion, Kind: "trace", BlockSize: 512}
	for i, rows := range parts {
		rel := fmt.Sprintf("date=2024-01-01/hour=00/part-raw-%05d.parquet", i)
		if err := writePartFile(filepath.Join(dir, rel), rows, 100); err != nil {
			t.Fatal(err)
		}
		p := Part{Path: rel, Rows: int64(len(rows)), MinTS: rows[0].TS, MaxTS: rows[len(rows)-1].TS}
		if meta != nil {
			meta(i, &p)
		}
		m.Parts = append(m.Parts, p)
		m.Rows += p.Rows
	}
	if err := WriteJSONAtomic(filepath.Join(dir, ManifestName), m); err != nil {
		t.Fatal(err)
	}
}

// plainRequest is a valid request at ts.
func plainRequest(id string, ts int64) Request {
	return Request{Identity: Identity{RequestID: id}, TS: ts, Shape: Shape{InputTokens: 1, OutputTokens: 1, API: APIChat}}
}

// TestLongScanRefusesPartsStartingTogether (issue 46): a manifest listing
// 10,000 parts that all start at one instant is refused before a part is
// opened, naming the bucket and the bound, within 256 MiB. Before, Scan
// opened them all, a decoder and a batch each: 3.4 MB a part, out of
// memory.
func TestLongScanRefusesPartsStartingTogether(t *testing.T) {
	memcap.Run(t, 256<<20, func(t *testing.T) {
		dir := t.TempDir()
		t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
		partsBucket(t, dir, [][]Request{{plainRequest("a", t0)}}, nil)
		m, err := ReadManifest(dir)
		if err != nil {
			t.Fatal(err)
		}
		one := m.Parts[0]
		m.Parts = make([]Part, 10_000)
		for i := range m.Parts {
			m.Parts[i] = one
		}
		m.Rows = int64(len(m.Parts))
		if err := WriteJSONAtomic(filepath.Join(dir, ManifestName), m); err != nil {
			t.Fatal(err)
		}
		_, _, err = ReadAll(context.Background(), dir)
		for _, want := range []string{dir, "10000 parts overlap in time", fmt.Sprintf("at most %d", MaxOpenParts)} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("ReadAll = %v; want a refusal saying %q", err, want)
			}
		}
	})
}

// TestScanBoundsThePartsOpenAtOnce: with the bound lowered to 4, parts
// whose manifest times overlap past it are refused before any is opened,
// parts that overlap up to it are read, and parts whose rows reach past
// the manifest's max_ts_us are refused as the fifth would open, never
// more than 4 open.
func TestScanBoundsThePartsOpenAtOnce(t *testing.T) {
	defer func(was int) { maxOpenParts = was }(maxOpenParts)
	maxOpenParts = 4
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	// k parts of a row at t0+i, then 2,000 rows from t0+100+i: all
	// overlap in [t0+k-1, t0+100], and each holds its file open, its
	// decoder waiting for the merge, until near its end.
	const rowsPerPart = 2001
	overlapping := func(k int) [][]Request {
		var parts [][]Request
		for i := range k {
			rows := []Request{plainRequest(fmt.Sprint("a", i), t0+int64(i))}
			for j := range rowsPerPart - 1 {
				rows = append(rows, plainRequest(fmt.Sprint("b", i, "-", j), t0+100+int64(i+j)))
			}
			parts = append(parts, rows)
		}
		return parts
	}
	scan := func(dir string) (rows int, maxOpen int64, err error) {
		b, err := OpenBucket(dir)
		if err != nil {
			t.Fatal(err)
		}
		base := openParts.Load()
		err = b.Scan(context.Background(), func(*Request) error {
			rows++
			maxOpen = max(maxOpen, openParts.Load()-base)
			return nil
		})
		return rows, maxOpen, err
	}
	for _, c := range []struct {
		name  string
		parts [][]Request
		meta  func(i int, p *Part)
		want  string // "" for a bucket that reads
	}{
		{"four overlapping parts read", overlapping(4), nil, ""},
		{"five overlapping parts are refused up front", overlapping(5), nil, "5 parts overlap in time at 2024-01-01T00:00:00.000004Z"},
		{"five parts that say they do not overlap", overlapping(5), func(i int, p *Part) { p.MaxTS = p.MinTS }, "more than 4 parts overlap in time"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			partsBucket(t, dir, c.parts, c.meta)
			rows, maxOpen, err := scan(dir)
			if maxOpen > 4 {
				t.Errorf("%d parts were open at once; at most 4", maxOpen)
			}
			if c.want == "" {
				if err != nil || rows != rowsPerPart*len(c.parts) || maxOpen != 4 {
					t.Errorf("read %d rows with %d parts open at most, %v; want %d with 4", rows, maxOpen, err, rowsPerPart*len(c.parts))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "at most 4") {
				t.Errorf("Scan = %v; want a refusal naming the bucket, saying %q and the bound", err, c.want)
			}
		})
	}
}
