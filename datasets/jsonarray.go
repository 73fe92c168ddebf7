package datasets

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// errElementTooLong marks a JSON array element longer than MaxLineBytes.
var errElementTooLong = fmt.Errorf("conversation longer than %d MiB", MaxLineBytes>>20)

// arrayElements streams the elements of the JSON array br holds (its '['
// not yet read) to fn, one at a time, each at most MaxLineBytes: a longer
// element is skipped as it streams, never held, and fn gets
// errElementTooLong for it, so one huge element costs neither memory nor
// the elements after it. It tracks only nesting and strings; fn decodes.
func arrayElements(br *bufio.Reader, fn func(elem []byte, n int64, err error) error) error {
	if err := skipSpace(br); err != nil {
		return err
	}
	if c, err := br.ReadByte(); err != nil || c != '[' {
		return errors.New("not a JSON array")
	}
	var buf []byte
	for n := int64(1); ; n++ {
		if err := skipSpace(br); err != nil {
			return fmt.Errorf("element %d: the array is cut short: %w", n, err)
		}
		c, _ := br.ReadByte()
		if c == ']' {
			return nil
		}
		br.UnreadByte()
		buf = buf[:0]
		tooLong := false
		keep := func(b byte) {
			if tooLong {
				return
			}
			if len(buf) == MaxLineBytes {
				tooLong, buf = true, buf[:0]
				return
			}
			buf = append(buf, b)
		}
		depth, str := 0, jsonStrings{}
		for {
			b, err := br.ReadByte()
			if err != nil {
				return fmt.Errorf("element %d: the array is cut short: %w", n, io.ErrUnexpectedEOF)
			}
			if str.within(b) {
				keep(b)
				continue
			}
			if depth == 0 && (b == ',' || b == ']') {
				if b == ']' {
					br.UnreadByte()
				}
				break
			}
			keep(b)
			switch b {
			case '"':
				str.in = true
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth < 0 {
					return fmt.Errorf("element %d: unbalanced brackets: the array is corrupt", n)
				}
			}
		}
		var err error
		if tooLong {
			err = errElementTooLong
		}
		if err := fn(buf, n, err); err != nil {
			return err
		}
	}
}

// skipSpace consumes JSON whitespace.
func skipSpace(br *bufio.Reader) error {
	for {
		c, err := br.ReadByte()
		if err != nil {
			return err
		}
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return br.UnreadByte()
		}
	}
}

// Errors of one record of a multi-line JSON log, rejected like a bad line.
var (
	errDocTooLong  = &rowError{reason: fmt.Sprintf("JSON document longer than %d MiB", MaxLineBytes>>20)}
	errDocCutShort = &rowError{reason: "malformed JSON: the input ends inside this document (truncated?)"}
)

// jsonDocs cuts a JSON log whose records are not one per line into its
// records: whole documents pretty-printed over many lines, one after
// another (as a logger appending indented JSON writes them), the elements
// of a top-level array, or both. Each record comes with the line it starts
// on, so rejects name lines as they do for JSONL. A record longer than
// MaxLineBytes is dropped as it streams and reported as errDocTooLong, so
// one huge document costs neither memory nor the records after it; input
// that ends inside a document gives errDocCutShort. Bytes outside any
// document (not whitespace, commas or brackets) run to the end of their
// line and come back as a record of their own, which then fails to decode.
// It tracks only nesting and strings; the caller decodes.
type jsonDocs struct {
	br      *bufio.Reader
	chunk   []byte // unread bytes of the current line
	err     error  // the read error after chunk, io.EOF at the end
	line    int64  // the line chunk is on, 1-based
	inArray bool
	buf     []byte
}

func newJSONDocs(br *bufio.Reader) *jsonDocs { return &jsonDocs{br: br, line: 1} }

// fill makes chunk non-empty, reading the next line (or part of a long
// one); false at the end of the input or on a read error.
func (d *jsonDocs) fill() bool {
	for len(d.chunk) == 0 {
		if d.err != nil {
			return false
		}
		c, err := d.br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			err = nil
		}
		d.chunk, d.err = c, err
	}
	return true
}

// next returns the next record and the line it starts on; io.EOF at the
// end, a rowError for a record to reject, any other error to stop.
func (d *jsonDocs) next() ([]byte, int64, error) {
	for {
		if !d.fill() {
			return nil, d.line, d.err
		}
		b := d.chunk[0]
		switch {
		case b == '\n':
			d.line++
		case b == ' ' || b == '\t' || b == '\r' || b == ',':
		case b == '[' && !d.inArray:
			d.inArray = true
		case b == ']' && d.inArray:
			d.inArray = false
		default:
			return d.value()
		}
		d.chunk = d.chunk[1:]
	}
}

// value reads one record starting at chunk[0].
func (d *jsonDocs) value() ([]byte, int64, error) {
	start := d.line
	d.buf = d.buf[:0]
	tooLong := false
	keep := func(b []byte) {
		if tooLong {
			return
		}
		if len(d.buf)+len(b) > MaxLineBytes {
			tooLong, d.buf = true, d.buf[:0]
			return
		}
		d.buf = append(d.buf, b...)
	}
	scalar := d.chunk[0] != '{' && d.chunk[0] != '['
	depth, str := 0, jsonStrings{}
	for d.fill() {
		c := d.chunk
		end := -1 // index just past the record's last byte in c
		for i := 0; i < len(c) && end < 0; i++ {
			b := c[i]
			if b == '\n' {
				d.line++
			}
			if str.within(b) {
				continue
			}
			switch {
			case b == '"':
				str.in = true
			case scalar && (b == '\n' || d.inArray && (b == ',' || b == ']')):
				if b == '\n' {
					d.line-- // the newline is left for next
				}
				end = i
			case scalar:
			case b == '{' || b == '[':
				depth++
			case b == '}' || b == ']':
				if depth--; depth == 0 {
					end = i + 1
				}
			}
		}
		if end >= 0 {
			keep(c[:end])
			d.chunk = c[end:]
			if tooLong {
				return nil, start, errDocTooLong
			}
			return d.buf, start, nil
		}
		keep(c)
		d.chunk = nil
	}
	if d.err != io.EOF {
		return nil, d.line, d.err
	}
	switch {
	case tooLong:
		return nil, start, errDocTooLong
	case scalar && !str.in:
		return d.buf, start, nil // junk on the last line, to be rejected by the decoder
	}
	return d.buf, start, errDocCutShort
}

// jsonStrings tracks, byte by byte, whether a scan of JSON text is inside
// a string, where brackets and separators do not count.
type jsonStrings struct{ in, escaped bool }

// within advances by b and reports whether b belongs to a string: its
// content or its closing quote (an opening quote the caller sees, and
// sets in).
func (s *jsonStrings) within(b byte) bool {
	if !s.in {
		return false
	}
	switch {
	case s.escaped:
		s.escaped = false
	case b == '\\':
		s.escaped = true
	case b == '"':
		s.in = false
	}
	return true
}
