package peer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/servetrace/servetrace/internal/regfile"
)

// A result file is read by byte ranges, never whole: a document's keys are
// scanned once, their small values kept and their large ones (a detailed
// run's per-request lists) left where they lie, to be decoded element by
// element on each pass. Memory follows the largest small value and the
// buffers of the passes open at once, not the file.

// smallValueBytes is the most a value may take to be kept when its
// document is scanned: a tool's figures and settings are far smaller; a
// per-request list of more is read element by element.
const smallValueBytes = 1 << 20

// maxElementBytes bounds one element of a list read element by element,
// and one document of JSON lines or of an array of documents, as every
// input line of servetrace is bounded.
const maxElementBytes = 16 << 20

// maxNesting bounds how deep arrays and objects may nest.
const maxNesting = 512

// maxLiteralBytes bounds a number or other bare literal.
const maxLiteralBytes = 512

// jsonFile is a result file read by byte ranges.
type jsonFile struct {
	path string
}

// reader reads a file forward from an offset, counting lines.
type reader struct {
	f    io.Closer
	br   *bufio.Reader
	pos  int64 // offset of the next byte
	line int   // 1-based line of the next byte
	buf  []byte
}

// readerAt opens the file at offset off, which is on line line.
func (j *jsonFile) readerAt(off int64, line int) (*reader, error) {
	f, err := regfile.Open(j.path)
	if err != nil {
		return nil, fmt.Errorf("read result file: %w", err)
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("read result file: %w", err)
	}
	return &reader{f: f, br: bufio.NewReaderSize(f, 64<<10), pos: off, line: line}, nil
}

func (r *reader) close() { r.f.Close() }

// errCut is the error for a file that ends inside a value.
var errCut = errors.New("the file ends inside a JSON value (truncated?)")

func (r *reader) readByte() (byte, error) {
	c, err := r.br.ReadByte()
	if err != nil {
		if err == io.EOF {
			return 0, errCut
		}
		return 0, err
	}
	r.pos++
	if c == '\n' {
		r.line++
	}
	return c, nil
}

// peek skips white space (and a byte order mark) and returns the next
// byte without reading it; io.EOF at the end of the file.
func (r *reader) peek() (byte, error) {
	for {
		b, err := r.br.Peek(1)
		if err != nil {
			return 0, err
		}
		switch b[0] {
		case ' ', '\t', '\r', '\n':
			r.readByte()
			continue
		case 0xef: // a UTF-8 byte order mark
			if bom, err := r.br.Peek(3); err == nil && bytes.Equal(bom, []byte{0xef, 0xbb, 0xbf}) {
				r.br.Discard(3)
				r.pos += 3
				continue
			}
		}
		return b[0], nil
	}
}

// expect reads the next non-space byte, which must be c.
func (r *reader) expect(c byte) error {
	b, err := r.peek()
	if err == io.EOF {
		return errCut
	}
	if err != nil {
		return err
	}
	if b != c {
		return r.errorf("found %q where %q was expected", b, c)
	}
	_, err = r.readByte()
	return err
}

func (r *reader) errorf(format string, args ...any) error {
	return fmt.Errorf("line %d: %s", r.line, fmt.Sprintf(format, args...))
}

// value is one JSON value found by a scan: where it lies, what kind it is
// ('{', '[', '"', or the first byte of a literal), how many elements it
// holds when an array, and its bytes when they were kept.
type value struct {
	off   int64
	line  int
	kind  byte
	elems int64
	size  int64
	raw   json.RawMessage // nil when not kept
}

// skipValue reads one value, keeping its bytes when they are at most keep
// (Python's NaN and Infinity made JSON: null and "inf"). The bytes kept
// alias the reader's buffer until the next call.
func (r *reader) skipValue(keep int) (value, error) {
	first, err := r.peek()
	if err == io.EOF {
		return value{}, errCut
	}
	if err != nil {
		return value{}, err
	}
	v := value{off: r.pos, line: r.line, kind: first}
	r.buf = r.buf[:0]
	keeping := keep > 0
	add := func(c byte) {
		if keeping {
			if len(r.buf) >= keep {
				keeping = false
				return
			}
			r.buf = append(r.buf, c)
		}
	}
	if first != '{' && first != '[' && first != '"' {
		for {
			b, err := r.br.Peek(1)
			if err == io.EOF || err == nil && isDelim(b[0]) {
				break
			}
			if err != nil {
				return v, err
			}
			if r.pos-v.off >= maxLiteralBytes {
				return v, r.errorf("a bare value of more than %d bytes", maxLiteralBytes)
			}
			c, _ := r.readByte()
			add(c)
		}
	} else if err := r.skipNested(&v, add); err != nil {
		return v, err
	}
	v.size = r.pos - v.off
	if keeping {
		v.raw = sanitizePython(r.buf)
	}
	return v, nil
}

// skipNested reads a string, array or object, counting an array's
// elements.
func (r *reader) skipNested(v *value, add func(byte)) error {
	var stack []byte // the open brackets
	inString, escaped, expecting := false, false, false
	for {
		c, err := r.readByte()
		if err != nil {
			return err
		}
		add(c)
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
				if len(stack) == 0 {
					return nil
				}
			case c < 0x20:
				return r.errorf("a control character in a string")
			}
			continue
		}
		if isSpace(c) {
			continue
		}
		if expecting && c != ']' { // the first byte of an element of the outer array
			v.elems++
			expecting = false
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			if len(stack) >= maxNesting {
				return r.errorf("values nested more than %d deep", maxNesting)
			}
			stack = append(stack, c)
			expecting = len(stack) == 1 && c == '['
		case ']', '}':
			if len(stack) == 0 || (c == ']') != (stack[len(stack)-1] == '[') {
				return r.errorf("an unmatched %q", c)
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return nil
			}
		case ',':
			expecting = len(stack) == 1 && stack[0] == '['
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func isDelim(c byte) bool { return c == ',' || c == ']' || c == '}' || c == ':' || isSpace(c) }

// object is a JSON object whose keys were scanned: small values kept,
// large ones located, to be read element by element.
type object struct {
	file *jsonFile
	// src names the document in messages: the file, with ":N" for line N
	// of JSON lines or "[N]" for element N of an array.
	src  string
	line int // of its opening brace
	vals map[string]value
	keys []string // in file order
}

// maxKeyBytes bounds an object's key.
const maxKeyBytes = 4096

// scanObject reads the object at the reader's position.
func (r *reader) scanObject(j *jsonFile, src string) (object, error) {
	o := object{file: j, src: src, vals: map[string]value{}}
	if _, err := r.peek(); err == nil {
		o.line = r.line
	}
	if err := r.expect('{'); err != nil {
		return o, err
	}
	for i := 0; ; i++ {
		c, err := r.peek()
		if err == io.EOF {
			return o, errCut
		}
		if err != nil {
			return o, err
		}
		if c == '}' {
			r.readByte()
			return o, nil
		}
		if i > 0 {
			if err := r.expect(','); err != nil {
				return o, err
			}
		}
		kv, err := r.skipValue(maxKeyBytes)
		if err != nil {
			return o, err
		}
		var key string
		if kv.kind != '"' || kv.raw == nil || json.Unmarshal(kv.raw, &key) != nil {
			return o, r.errorf("an object key that is not a string of at most %d bytes", maxKeyBytes)
		}
		if err := r.expect(':'); err != nil {
			return o, err
		}
		v, err := r.skipValue(smallValueBytes)
		if err != nil {
			return o, err
		}
		if v.raw != nil {
			v.raw = bytes.Clone(v.raw)
		}
		if _, seen := o.vals[key]; !seen {
			o.keys = append(o.keys, key)
		}
		o.vals[key] = v
	}
}

// has reports whether o has every key.
func (o object) has(keys ...string) bool {
	for _, k := range keys {
		if _, ok := o.vals[k]; !ok {
			return false
		}
	}
	return true
}

// hasAny reports whether o has one of keys.
func (o object) hasAny(keys ...string) bool {
	for _, k := range keys {
		if _, ok := o.vals[k]; ok {
			return true
		}
	}
	return false
}

// raw is a key's value as kept by the scan: nil when absent or too large
// to keep.
func (o object) raw(key string) json.RawMessage { return o.vals[key].raw }

// decode decodes a key's value into v; an absent key leaves v as it is.
func (o object) decode(key string, v any) error {
	val, ok := o.vals[key]
	if !ok {
		return nil
	}
	if val.raw == nil {
		return fmt.Errorf("%s: %d bytes, too large to read whole (line %d)", key, val.size, val.line)
	}
	if err := json.Unmarshal(val.raw, v); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// str is a key's value when it is a string, else "".
func (o object) str(key string) string {
	var s string
	if json.Unmarshal(o.raw(key), &s) != nil {
		return ""
	}
	return s
}

// elems is the element count of an array value, 0 when the key is absent
// or not an array.
func (o object) elems(key string) int64 {
	if v := o.vals[key]; v.kind == '[' {
		return v.elems
	}
	return 0
}

// child scans the object that is key's value.
func (o object) child(key, src string) (object, error) {
	v, ok := o.vals[key]
	if !ok || v.kind != '{' {
		return object{file: o.file, src: src, vals: map[string]value{}}, fmt.Errorf("%s: not an object", key)
	}
	r, err := o.file.readerAt(v.off, v.line)
	if err != nil {
		return object{}, err
	}
	defer r.close()
	return r.scanObject(o.file, src)
}

// keyList names up to n of o's keys, sorted, for an error message.
func (o object) keyList(n int) string {
	keys := append([]string(nil), o.keys...)
	slices.Sort(keys)
	more := ""
	if len(keys) > n {
		keys, more = keys[:n], fmt.Sprintf(", … (%d in all)", len(o.keys))
	}
	return strings.Join(keys, ", ") + more
}

// cursor reads an array's elements one at a time.
type cursor struct {
	r    *reader
	n    int64 // elements read
	done bool
}

// array opens a cursor on key's value, which must be an array; a cursor
// with no elements when the key is absent or null.
func (o object) array(key string) (*cursor, error) {
	v, ok := o.vals[key]
	if !ok || v.kind == 'n' {
		return &cursor{done: true}, nil
	}
	if v.kind != '[' {
		return nil, fmt.Errorf("%s: not a list", key)
	}
	return o.file.cursorAt(v)
}

// cursorAt opens a cursor on the array v.
func (j *jsonFile) cursorAt(v value) (*cursor, error) {
	r, err := j.readerAt(v.off, v.line)
	if err != nil {
		return nil, err
	}
	if err := r.expect('['); err != nil {
		r.close()
		return nil, err
	}
	return &cursor{r: r}, nil
}

// next returns the next element's bytes, valid until the next call;
// io.EOF after the last.
func (c *cursor) next() (json.RawMessage, error) {
	if c.done {
		return nil, io.EOF
	}
	b, err := c.r.peek()
	if err == io.EOF {
		return nil, errCut
	}
	if err != nil {
		return nil, err
	}
	if b == ']' {
		c.r.readByte()
		c.done = true
		return nil, io.EOF
	}
	if c.n > 0 {
		if err := c.r.expect(','); err != nil {
			return nil, err
		}
	}
	v, err := c.r.skipValue(maxElementBytes)
	if err != nil {
		return nil, err
	}
	if v.raw == nil {
		return nil, c.r.errorf("an element of more than %d bytes", maxElementBytes)
	}
	c.n++
	return v.raw, nil
}

// nextObject scans the next element, which must be an object, as a
// document of its own (named src): its small values kept, its large ones
// located. io.EOF after the last.
func (c *cursor) nextObject(j *jsonFile, src string) (object, error) {
	if c.done {
		return object{}, io.EOF
	}
	b, err := c.r.peek()
	if err == io.EOF {
		return object{}, errCut
	}
	if err != nil {
		return object{}, err
	}
	if b == ']' {
		c.r.readByte()
		c.done = true
		return object{}, io.EOF
	}
	if c.n > 0 {
		if err := c.r.expect(','); err != nil {
			return object{}, err
		}
	}
	o, err := c.r.scanObject(j, src)
	if err != nil {
		return o, err
	}
	c.n++
	return o, nil
}

func (c *cursor) close() {
	if c != nil && c.r != nil {
		c.r.close()
		c.r = nil
	}
}

// parseNumber reads a number as tools write them: a JSON number, a
// number in a string (json.dump's default=str), "inf" and "-inf"
// (Python's infinities, made strings), or null and "nan" (not a number:
// present false).
func parseNumber(raw []byte) (x float64, present bool, err error) {
	s := bytes.TrimSpace(raw)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	switch strings.ToLower(string(s)) {
	case "null", "nan":
		return 0, false, nil
	case "inf", "+inf", "infinity":
		return math.Inf(1), true, nil
	case "-inf", "-infinity":
		return math.Inf(-1), true, nil
	}
	x, err = strconv.ParseFloat(string(s), 64)
	if err != nil {
		return 0, false, fmt.Errorf("not a number: %.40q", raw)
	}
	return x, true, nil
}

// parseNumbers reads a list of numbers; nulls are NaN.
func parseNumbers(raw []byte, out []float64) ([]float64, error) {
	s := bytes.TrimSpace(raw)
	if string(s) == "null" {
		return out, nil
	}
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
		return out, fmt.Errorf("not a list of numbers: %.40q", raw)
	}
	s = bytes.TrimSpace(s[1 : len(s)-1])
	for len(s) > 0 {
		item := s
		if i := bytes.IndexByte(s, ','); i >= 0 {
			item, s = s[:i], s[i+1:]
			if len(bytes.TrimSpace(s)) == 0 {
				return out, fmt.Errorf("not a list of numbers: %.40q", raw)
			}
		} else {
			s = nil
		}
		x, present, err := parseNumber(item)
		if err != nil {
			return out, err
		}
		if !present {
			x = math.NaN()
		}
		out = append(out, x)
	}
	return out, nil
}

// parseString reads a string element; null is "".
func parseString(raw []byte) (string, error) {
	if string(raw) == `""` || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("not a string: %.40q", raw)
	}
	return s, nil
}
