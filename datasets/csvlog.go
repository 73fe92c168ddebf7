package datasets

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/servetrace/servetrace/trace"
)

// FormatCSV is a CSV or TSV log with a header row, read through a Mapping
// whose paths are column names.
const FormatCSV = "csv"

// readCSVLog converts a CSV/TSV log (the delimiter is detected from the
// header) through the mapping: each row becomes column → text and goes
// through the same conversion as a JSON log.
func readCSVLog(ctx context.Context, br *bufio.Reader, opts Options, sink Sink) (Stats, error) {
	lr, st, err := newLogReader(opts, true)
	if err != nil {
		return Stats{}, err
	}
	cr, header, err := openCSVLog(br, opts.Name, lr.lo.Mapping)
	if err != nil {
		return Stats{}, err
	}
	err = eachCSVRecord(ctx, cr, opts, sink, &st, func(rec []string, line int64) error {
		tokens := 0 // of the JSON text its cells may hold
		for _, f := range rec {
			tokens += jsonTokensIn(f)
		}
		if tokens > maxDecodeTokens {
			return lr.settle(&st, sink, line, trace.Request{}, errTooManyTokens)
		}
		row := make(map[string]any, len(header))
		for i, h := range header {
			if i < len(rec) {
				row[h] = rec[i]
			}
		}
		req, err := lr.convertRecord(row, line)
		return lr.settle(&st, sink, line, req, err)
	})
	st.Notes = append(st.Notes, lr.media.notes(opts.Name)...)
	st.Notes = append(st.Notes, lr.sessionNotes()...)
	return st, err
}

// openCSVLog reads the header, tab- or comma-separated by whichever the
// first line has more of, and checks that the mapping names only columns
// and that the ts column is there, so a wrong mapping fails on line 1
// rather than rejecting every row.
func openCSVLog(br *bufio.Reader, name string, m *Mapping) (*boundedCSV, []string, error) {
	first, err := peekLine(br)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	cr := newBoundedCSV(br)
	if bytes.Count(first, []byte("\t")) > bytes.Count(first, []byte(",")) {
		cr.Comma = '\t'
	}
	cr.FieldsPerRecord = -1
	cr.LazyQuotes = true
	header, err := cr.Read()
	if err != nil {
		return nil, nil, fmt.Errorf("%s line 1: read header: %w", name, err)
	}
	for i := range header {
		header[i] = strings.TrimSpace(strings.TrimPrefix(header[i], "\ufeff"))
	}
	for field, paths := range m.Paths {
		for _, p := range paths {
			if len(p) > 1 {
				return nil, nil, fmt.Errorf("mapping %s: %s names a nested path %q, but a CSV has only columns", m.Name, field, strings.Join(p, "."))
			}
		}
	}
	if _, ok := m.lookup(headerRecord(header), "ts"); !ok {
		return nil, nil, fmt.Errorf("%s line 1: the mapping's ts column (%v) is not in the header; write a mapping naming your columns", name, m.Paths["ts"])
	}
	return cr, header, nil
}

// headerRecord is a record whose every column is present, to check that
// the mapping names existing columns.
func headerRecord(header []string) map[string]any {
	m := make(map[string]any, len(header))
	for _, h := range header {
		m[h] = "x"
	}
	return m
}
