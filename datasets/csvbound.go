package datasets

import (
	"encoding/csv"
	"fmt"
	"io"
)

// boundedCSV is encoding/csv's Reader held to the bound of a line: a
// record (a quoted field may span lines) of more than MaxLineBytes fails
// the read, naming the line after which it began, instead of being held
// whole. The reader cannot resume inside such a record, so the conversion
// stops there.
type boundedCSV struct {
	*csv.Reader
	lim *recordLimit
	// line is the last record's first line, lineBase what the caller's
	// line numbers add to the reader's own.
	line, lineBase int
}

// newBoundedCSV reads r through encoding/csv, each record within
// MaxLineBytes.
func newBoundedCSV(r io.Reader) *boundedCSV {
	lim := &recordLimit{r: r}
	return &boundedCSV{Reader: csv.NewReader(lim), lim: lim}
}

func (b *boundedCSV) Read() ([]string, error) {
	b.lim.n = 0
	rec, err := b.Reader.Read()
	if err == errRecordTooLong {
		return nil, fmt.Errorf("a CSV record after line %d is longer than %d MiB (a quoted field left open?)", b.line+b.lineBase, MaxLineBytes>>20)
	}
	if err == nil {
		b.line, _ = b.Reader.FieldPos(0)
	}
	return rec, err
}

var errRecordTooLong = fmt.Errorf("record longer than %d MiB", MaxLineBytes>>20)

// recordLimit fails a read once more than MaxLineBytes, and the reader's
// look-ahead, have been read since n was last set to 0.
type recordLimit struct {
	r io.Reader
	n int
}

func (l *recordLimit) Read(p []byte) (int, error) {
	if l.n > MaxLineBytes+csvLookAhead {
		return 0, errRecordTooLong
	}
	n, err := l.r.Read(p)
	l.n += n
	return n, err
}

// csvLookAhead is what encoding/csv's buffered reader may read past the
// record it returns.
const csvLookAhead = 64 << 10
