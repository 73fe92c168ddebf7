package trace

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// Parquet's footer and page headers are Thrift structures, and
// parquet-go's decoder makes every list and byte string as long as the
// count or length it reads says, before it reads the elements: a footer
// of twenty bytes can ask for gigabytes. thriftCost walks such a
// structure first, in the Thrift compact protocol, and says what decoding
// it into its Go type would allocate, refusing a count or length past the
// bytes left (every element takes at least one byte).

// maxThriftDepth bounds the nesting of a Thrift structure: Parquet's
// metadata nests a few levels, and a deeper one would exhaust the
// decoder's stack.
const maxThriftDepth = 32

// unknownValueCost is what a value of no known Go type is taken to cost:
// a union's member, or an element of a list the decoder skips.
const unknownValueCost = 64

// Compact protocol type codes.
const (
	tcStop = iota
	tcTrue
	tcFalse
	tcByte
	tcI16
	tcI32
	tcI64
	tcDouble
	tcBinary
	tcList
	tcSet
	tcMap
	tcStruct
	tcUUID
)

// errThriftTruncated marks a structure that runs past its bytes.
var errThriftTruncated = errors.New("a structure that runs past its bytes")

// pastEnd is a count or length past the bytes left: it too marks a
// structure that runs past its bytes, which a reader of its first bytes
// only reads further to tell.
type pastEnd struct{ msg string }

func (e *pastEnd) Error() string        { return e.msg }
func (e *pastEnd) Is(target error) bool { return target == errThriftTruncated }

// thriftWalk is a walk over one compact-protocol structure in b.
type thriftWalk struct {
	b    []byte
	pos  int
	cost int64
}

// thriftCost walks the structure at the start of b as the Go struct t
// decodes it and returns the bytes it took and what its decoding
// allocates.
func thriftCost(b []byte, t reflect.Type) (n int, cost int64, err error) {
	w := &thriftWalk{b: b}
	if err := w.structure(t, 1); err != nil {
		return 0, 0, err
	}
	return w.pos, w.cost, nil
}

func (w *thriftWalk) byte() (byte, error) {
	if w.pos >= len(w.b) {
		return 0, errThriftTruncated
	}
	c := w.b[w.pos]
	w.pos++
	return c, nil
}

func (w *thriftWalk) varint() (uint64, error) {
	var v uint64
	for shift := 0; shift < 64; shift += 7 {
		c, err := w.byte()
		if err != nil {
			return 0, err
		}
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, nil
		}
	}
	return 0, errors.New("a varint of more than 10 bytes")
}

func (w *thriftWalk) skip(n uint64) error {
	if n > uint64(len(w.b)-w.pos) {
		return errThriftTruncated
	}
	w.pos += int(n)
	return nil
}

// count reads a list's, set's or map's element count: each element takes
// a byte or more, so a count past the bytes left is a lie.
func (w *thriftWalk) count(n uint64, what string) (int, error) {
	if left := len(w.b) - w.pos; n > uint64(left) {
		return 0, &pastEnd{fmt.Sprintf("a %s of %d entries where %d bytes are left", what, n, left)}
	}
	return int(n), nil
}

// structure walks a struct's fields up to its stop byte; t is its Go type
// (nil where unknown).
func (w *thriftWalk) structure(t reflect.Type, depth int) error {
	if depth > maxThriftDepth {
		return fmt.Errorf("structures nested deeper than %d", maxThriftDepth)
	}
	fields := thriftFields(t)
	var id int64
	for {
		h, err := w.byte()
		if err != nil {
			return err
		}
		if h == tcStop {
			return nil
		}
		if delta := h >> 4; delta != 0 {
			id += int64(delta)
		} else {
			z, err := w.varint()
			if err != nil {
				return err
			}
			id = int64(z>>1) ^ -int64(z&1)
		}
		var ft reflect.Type
		if fields != nil {
			ft = fields[id]
		}
		if err := w.value(h&0x0f, ft, depth, false); err != nil {
			return err
		}
	}
}

// value walks one value of compact type tc decoding into Go type t (nil
// where unknown); inList says it is a list's element, where booleans take
// a byte.
func (w *thriftWalk) value(tc byte, t reflect.Type, depth int, inList bool) error {
	switch tc {
	case tcTrue, tcFalse:
		if inList {
			return w.skip(1)
		}
		return nil
	case tcByte:
		return w.skip(1)
	case tcI16, tcI32, tcI64:
		_, err := w.varint()
		return err
	case tcDouble:
		return w.skip(8)
	case tcUUID:
		return w.skip(16)
	case tcBinary:
		n, err := w.varint()
		if err != nil {
			return err
		}
		if left := len(w.b) - w.pos; n > uint64(left) {
			return &pastEnd{fmt.Sprintf("a byte string of %d bytes where %d are left", n, left)}
		}
		w.cost += int64(n)
		return w.skip(n)
	case tcList, tcSet:
		h, err := w.byte()
		if err != nil {
			return err
		}
		size := uint64(h >> 4)
		if size == 15 {
			if size, err = w.varint(); err != nil {
				return err
			}
		}
		n, err := w.count(size, "list")
		if err != nil {
			return err
		}
		elem, elemCost := listElem(t)
		w.cost += int64(n) * elemCost
		for range n {
			if err := w.value(h&0x0f, elem, depth, true); err != nil {
				return err
			}
		}
		return nil
	case tcMap:
		size, err := w.varint()
		if err != nil {
			return err
		}
		n, err := w.count(size, "map")
		if err != nil || n == 0 {
			return err
		}
		kv, err := w.byte()
		if err != nil {
			return err
		}
		w.cost += int64(n) * 2 * unknownValueCost
		for range n {
			if err := w.value(kv>>4, nil, depth, true); err != nil {
				return err
			}
			if err := w.value(kv&0x0f, nil, depth, true); err != nil {
				return err
			}
		}
		return nil
	case tcStruct:
		st := structType(t)
		if t == nil || st == nil || st.Kind() == reflect.Interface {
			w.cost += unknownValueCost
		} else if t.Kind() == reflect.Pointer {
			w.cost += int64(st.Size())
		}
		return w.structure(st, depth+1)
	}
	return fmt.Errorf("unknown type code %d", tc)
}

// listElem returns the element type of a list decoded into t and what
// each element costs.
func listElem(t reflect.Type) (reflect.Type, int64) {
	if t != nil && t.Kind() == reflect.Slice {
		return t.Elem(), int64(t.Elem().Size())
	}
	return nil, unknownValueCost
}

// structType returns the struct a Thrift struct value decodes into when
// its Go type is t: t itself, what a pointer points to, or the value of
// thrift.Null; nil where unknown.
func structType(t reflect.Type) reflect.Type {
	if t == nil {
		return nil
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Struct && strings.Contains(t.Name(), "Null[") {
		if v, ok := t.FieldByName("V"); ok {
			return structType(v.Type)
		}
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	return t
}

// thriftFieldCache holds thriftFields' answers by type.
var thriftFieldCache sync.Map

// thriftFields maps the Thrift field ids of struct t to their Go types,
// thrift.Null unwrapped, from its thrift tags; nil for a struct without
// them (a union, whose member is known only once read).
func thriftFields(t reflect.Type) map[int64]reflect.Type {
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	if m, ok := thriftFieldCache.Load(t); ok {
		return m.(map[int64]reflect.Type)
	}
	var m map[int64]reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		id, _, _ := strings.Cut(f.Tag.Get("thrift"), ",")
		n, err := strconv.ParseInt(id, 10, 16)
		if err != nil {
			continue
		}
		if m == nil {
			m = map[int64]reflect.Type{}
		}
		ft := f.Type
		if ft.Kind() == reflect.Struct && strings.Contains(ft.Name(), "Null[") {
			if v, ok := ft.FieldByName("V"); ok {
				ft = v.Type
			}
		}
		m[n] = ft
	}
	thriftFieldCache.Store(t, m)
	return m
}
