package spans

import (
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/servetrace/servetrace/internal/llmspan"
)

// walkProto reads a protobuf ExportTraceServiceRequest span by span,
// straight from the wire, handing each to fn in a record that is reused
// for the next. Only the fields a record keeps are read; the rest are
// skipped unread, so decoding holds nothing but the body however many
// submessages it packs. Field numbers are opentelemetry-proto's
// (collector/trace/v1, trace/v1, common/v1); a field of another wire
// type than its own is skipped, as protobuf decoders keep it as unknown.
func walkProto(b []byte, fn func(*spanRecord)) error {
	var rec spanRecord
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != 1 || typ != protowire.BytesType { // resource_spans
			return nil
		}
		return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
			if num != 2 || typ != protowire.BytesType { // scope_spans
				return nil
			}
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num != 2 || typ != protowire.BytesType { // spans
					return nil
				}
				rec = spanRecord{}
				if err := readSpan(v, &rec); err != nil {
					return err
				}
				fn(&rec)
				return nil
			})
		})
	})
}

// readSpan reads a Span's kept fields into rec.
func readSpan(b []byte, rec *spanRecord) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			rec.traceID.set(v)
		case num == 2 && typ == protowire.BytesType:
			rec.spanID.set(v)
		case num == 4 && typ == protowire.BytesType:
			rec.parentSpanID.set(v)
		case num == 5 && typ == protowire.BytesType:
			rec.named = string(v) == llmspan.Name
		case num == 6 && typ == protowire.VarintType:
			rec.kind = int32(x)
		case num == 7 && typ == protowire.Fixed64Type:
			rec.start = x
		case num == 8 && typ == protowire.Fixed64Type:
			rec.end = x
		case num == 9 && typ == protowire.BytesType:
			return readKeyValue(v, rec)
		case (num == 11 || num == 13) && typ == protowire.BytesType: // events, links
			rec.dropped++
		}
		return nil
	})
}

// readKeyValue reads one attribute (KeyValue: key 1, value 2).
func readKeyValue(b []byte, rec *spanRecord) error {
	var key, value []byte
	if err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ == protowire.BytesType {
			switch num {
			case 1:
				key = v
			case 2:
				value = v
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if attrIndex(key) < 0 {
		rec.dropped++
		return nil
	}
	var av attrValue
	if err := eachField(value, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			av = attrValue{kind: stringValue, s: string(v)}
			if len(v) > maxRequestIDBytes {
				av = attrValue{kind: otherValue}
			}
		case num == 3 && typ == protowire.VarintType:
			av = attrValue{kind: intValue, i: int64(x)}
		case num == 4 && typ == protowire.Fixed64Type:
			av = attrValue{kind: doubleValue, f: math.Float64frombits(x)}
		case num >= 2 && num <= 7: // bool, int or double of the wrong wire type, array, kvlist, bytes
			av = attrValue{kind: otherValue}
		}
		return nil
	}); err != nil {
		return err
	}
	rec.setAttr(key, av)
	return nil
}

// errGroup refuses the deprecated group wire type, which no OTLP message
// uses.
var errGroup = errors.New("a group field, which OTLP does not use")

// eachField calls fn with each field of the message b: its number and
// wire type, and its value (v for length-delimited fields, x for
// numbers). A field that does not parse is an error.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("protobuf: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var x32 uint32
			x32, n = protowire.ConsumeFixed32(b)
			x = uint64(x32)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			return fmt.Errorf("protobuf field %d: %w", num, errGroup)
		}
		if n < 0 {
			return fmt.Errorf("protobuf field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}
