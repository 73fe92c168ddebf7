package trace

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/format"
)

// requestLayout is what the column encoder needs of the request record:
// each leaf column in file order, and the footer's schema, column orders
// and creator, taken from a file parquet-go's own writer made, so a part
// from either writer has one schema.
type requestLayout struct {
	cols         []layoutColumn
	schema       []format.SchemaElement
	columnOrders []format.ColumnOrder
	createdBy    string
	version      int32
}

// layoutColumn is one leaf column: its place, type, levels and encoding.
type layoutColumn struct {
	index          int // in file order
	spec           *requestColumn
	path           []string
	kind           parquet.Kind
	maxDef, maxRep int
	// dict: dictionary-encoded (RLE_DICTIONARY data pages after a PLAIN
	// dictionary page); delta: DELTA_BINARY_PACKED; otherwise PLAIN.
	dict, delta bool
}

// requestLayoutOf builds the layout once per process.
var requestLayoutOf = sync.OnceValues(buildRequestLayout)

// parquetWriterOptions are the options of every part servetrace writes.
func parquetWriterOptions(rowGroupRows int) []parquet.WriterOption {
	return []parquet.WriterOption{
		parquet.Compression(&zstd.Codec{Level: zstd.SpeedFastest}),
		parquet.MaxRowsPerRowGroup(int64(rowGroupRows)),
		parquet.CreatedBy("servetrace", ToolVersion, ""),
	}
}

func buildRequestLayout() (*requestLayout, error) {
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[Request](&buf, parquetWriterOptions(DefaultRowGroupRows)...)
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("request layout: %w", err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		return nil, fmt.Errorf("request layout: %w", err)
	}
	md := f.Metadata()
	l := &requestLayout{schema: slices.Clone(md.Schema), columnOrders: slices.Clone(md.ColumnOrders),
		createdBy: strings.Clone(md.CreatedBy), version: md.Version}
	for i := range l.schema { // the names may point into buf
		l.schema[i].Name = strings.Clone(l.schema[i].Name)
	}
	for _, path := range requestSchema.Columns() {
		name := strings.Join(path, ".")
		leaf, _ := requestSchema.Lookup(path...)
		spec := requestColumnByPath[name]
		if spec == nil || spec.buffer == nil {
			return nil, fmt.Errorf("request layout: column %s has no entry in requestColumns", name)
		}
		c := layoutColumn{index: len(l.cols), spec: spec, path: path, kind: leaf.Node.Type().Kind(),
			maxDef: leaf.MaxDefinitionLevel, maxRep: leaf.MaxRepetitionLevel}
		if enc := leaf.Node.Encoding(); enc != nil {
			switch enc.Encoding() {
			case format.RLEDictionary:
				c.dict = true
			case format.DeltaBinaryPacked:
				c.delta = true
			case format.Plain:
			default:
				return nil, fmt.Errorf("request layout: column %s asks for %v, which the encoder does not write", name, enc)
			}
		}
		switch {
		case c.dict && (c.kind != parquet.ByteArray || c.maxRep > 0):
			return nil, fmt.Errorf("request layout: column %s: dictionary encoding only for string columns outside lists", name)
		case c.delta && c.kind != parquet.Int64 && c.kind != parquet.Int32:
			return nil, fmt.Errorf("request layout: column %s: delta encoding only for integers", name)
		case c.maxRep > 1 || c.maxDef > 1:
			return nil, fmt.Errorf("request layout: column %s nests deeper than the encoder writes", name)
		}
		switch c.kind {
		case parquet.Int64, parquet.Int32, parquet.Double, parquet.Boolean, parquet.ByteArray:
		default:
			return nil, fmt.Errorf("request layout: column %s is of type %v, which the encoder does not write", name, c.kind)
		}
		l.cols = append(l.cols, c)
	}
	if len(l.columnOrders) != len(l.cols) {
		return nil, fmt.Errorf("request layout: %d column orders for %d columns", len(l.columnOrders), len(l.cols))
	}
	return l, nil
}
