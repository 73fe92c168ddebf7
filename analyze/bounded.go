package analyze

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// maxDistinctValues and maxDistinctBytes bound the distinct values of one
// string column (tenant, model, adapter, phase, role, finish reason,
// feature, probe kind, run id) analysis keeps apart, whichever binds
// first: a value is held once however many rows carry it, and a hostile
// part can give every row its own. They are far above a real run's (a
// gateway's thousands of tenants), so that a breakdown's largest groups
// are never pooled for being seen late. Values first seen past them are
// pooled as otherValue, and counted for a note. Variables, lower in tests.
var (
	maxDistinctValues = 1 << 16
	maxDistinctBytes  = 16 << 20
)

// otherValue stands for the values pooled past the bounds.
const otherValue = "(other)"

// boundedValues interns one column's values, within maxDistinctValues and
// maxDistinctBytes.
type boundedValues struct {
	column string
	index  map[string]int
	names  []string
	bytes  int // of the values kept apart
	// pooled counts the values (rows, or list entries) pooled as
	// otherValue, whose slot in names is other; first is the first such
	// value, for the note.
	pooled int
	other  int
	first  string
}

// id is v's index in b.names; past the bounds, the pooled values' slot
// (a real value spelled "(other)" among the first keeps its own).
func (b *boundedValues) id(v string) int {
	if k, ok := b.index[v]; ok {
		return k
	}
	if b.index == nil {
		b.index = map[string]int{}
	}
	if b.pooled == 0 && len(b.index) < maxDistinctValues && b.bytes+len(v) <= maxDistinctBytes {
		v = strings.Clone(v)
		b.index[v] = len(b.names)
		b.names = append(b.names, v)
		b.bytes += len(v)
		return len(b.names) - 1
	}
	if b.pooled++; b.pooled == 1 {
		b.first = clip(v, 40)
		b.other = len(b.names)
		b.names = append(b.names, otherValue)
	}
	return b.other
}

// find is v's index without adding it: otherValue finds the pooled
// values' slot once any were pooled.
func (b *boundedValues) find(v string) (int, bool) {
	if k, ok := b.index[v]; ok {
		return k, true
	}
	if v == otherValue && b.pooled > 0 {
		return b.other, true
	}
	return 0, false
}

// intern is v as held: a shared copy, or otherValue past the cap.
func (b *boundedValues) intern(v string) string { return b.names[b.id(v)] }

// appendTo appends a string or dictionary-of-strings column's values to
// dst, interned.
func (b *boundedValues) appendTo(dst *[]string, a arrow.Array) error {
	switch a := a.(type) {
	case *array.String:
		for i := range a.Len() {
			*dst = append(*dst, b.intern(a.Value(i)))
		}
	case *array.Dictionary:
		dict, err := dictionaryStrings(a)
		if err != nil {
			return err
		}
		ids := make([]int, dict.Len())
		for k := range ids {
			ids[k] = -1 // only the values rows use are interned
		}
		for i := range a.Len() {
			k := a.GetValueIndex(i)
			switch {
			case ids[k] < 0:
				ids[k] = b.id(dict.Value(k))
			case b.pooled > 0 && ids[k] == b.other:
				b.pooled++ // a row more of a value pooled
			}
			*dst = append(*dst, b.names[ids[k]])
		}
	default:
		return fmt.Errorf("type %s, want string", a.DataType())
	}
	return nil
}

// note says how many values were pooled, or "" when none were.
func (b *boundedValues) note() string {
	if b.pooled == 0 {
		return ""
	}
	bound := fmt.Sprintf("more than %d distinct values", len(b.index))
	if len(b.index) < maxDistinctValues {
		bound = fmt.Sprintf("more than %s of distinct values (%d of them)", byteSize(maxDistinctBytes), len(b.index))
	}
	return fmt.Sprintf("column %s has %s: %d row values first seen past them (the first %q) are pooled as %q", b.column, bound, b.pooled, b.first, otherValue)
}

// byteSize prints n bytes in B, KiB or MiB.
func byteSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// clip is s cut to at most n bytes, marked "…" where cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// columnNames holds the interned values of each string column a read
// keeps, shared by every batch of an analysis.
type columnNames struct {
	by map[string]*boundedValues
}

// of is column's values; columns of one vocabulary (the feature lists)
// share one.
func (n *columnNames) of(column string) *boundedValues {
	if strings.HasPrefix(column, "features") {
		column = "features"
	}
	if n.by == nil {
		n.by = map[string]*boundedValues{}
	}
	b := n.by[column]
	if b == nil {
		b = &boundedValues{column: column}
		n.by[column] = b
	}
	return b
}

// notes says, column by column, what was pooled.
func (n *columnNames) notes() []string {
	if n == nil {
		return nil
	}
	var out []string
	for _, col := range slices.Sorted(maps.Keys(n.by)) {
		if note := n.by[col].note(); note != "" {
			out = append(out, note)
		}
	}
	return out
}

// dictionaryStrings is a dictionary column's values; an empty one where
// arrow-go gives none (a list column of no entries in the batch).
func dictionaryStrings(a *array.Dictionary) (*array.String, error) {
	if d := a.Data().Dictionary(); d == nil {
		return array.NewStringBuilder(memory.DefaultAllocator).NewStringArray(), nil
	} else if d, ok := d.(*array.Data); ok && d == nil {
		return array.NewStringBuilder(memory.DefaultAllocator).NewStringArray(), nil
	}
	dict, ok := a.Dictionary().(*array.String)
	if !ok {
		return nil, fmt.Errorf("dictionary of %s, want strings", a.Dictionary().DataType())
	}
	return dict, nil
}
