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

// distinctCap is how many distinct values of one string column (tenant,
// model, adapter, phase, role, finish reason, feature, probe kind, run id)
// analysis keeps apart: a value is held once however many rows carry it,
// and a hostile part can give every row its own. Values first seen past
// the cap are pooled as otherValue, and counted for a note.
const distinctCap = 256

// otherValue stands for the values pooled past distinctCap.
const otherValue = "(other)"

// boundedValues interns one column's values, at most distinctCap of
// them.
type boundedValues struct {
	column string
	index  map[string]int
	names  []string
	// pooled counts the values (rows, or list entries) pooled as
	// otherValue; first is the first such value, for the note.
	pooled int
	first  string
}

// id is v's index in b.names; past the cap, distinctCap, the pooled
// values' slot (a real value spelled "(other)" among the first keeps its
// own).
func (b *boundedValues) id(v string) int {
	if k, ok := b.index[v]; ok {
		return k
	}
	if b.index == nil {
		b.index = map[string]int{}
	}
	if len(b.index) < distinctCap {
		v = strings.Clone(v)
		b.index[v] = len(b.names)
		b.names = append(b.names, v)
		return len(b.names) - 1
	}
	if b.pooled++; b.pooled == 1 {
		b.first = clip(v, 40)
		b.names = append(b.names, otherValue)
	}
	return distinctCap
}

// find is v's index without adding it: otherValue finds the pooled
// values' slot once any were pooled.
func (b *boundedValues) find(v string) (int, bool) {
	if k, ok := b.index[v]; ok {
		return k, true
	}
	if v == otherValue && b.pooled > 0 {
		return distinctCap, true
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
			case ids[k] == distinctCap:
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
	return fmt.Sprintf("column %s has more than %d distinct values: %d row values first seen past them (the first %q) are pooled as %q", b.column, distinctCap, b.pooled, b.first, otherValue)
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
