package trace

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// MaxOpenParts bounds the parts a Scan holds open at once. Each open part
// holds its file, its decoder's pages and buffers and up to four batches
// of rows (cursor.go), megabytes, so a bucket whose parts overlap in time
// past the bound is refused rather than read into gigabytes. servetrace's writer
// makes overlapping parts only from input out of time order (an hour's
// parts overlap one another, one for every flush of the rows buffered
// across all hours) and from shards converting the same hours (a part
// an hour each).
const MaxOpenParts = 1024

// maxOpenParts is MaxOpenParts; a variable so that tests can lower it.
var maxOpenParts = MaxOpenParts

// checkOverlap refuses a bucket whose manifest time ranges put more than
// maxOpenParts parts open at once: Scan opens a part when the merge
// reaches its min_ts_us and closes it after its last row, so the parts
// open together are those whose ranges share an instant. A range whose
// max_ts_us is before its min_ts_us is taken as the instant min_ts_us;
// Scan also counts the parts it opens, for ranges that end too early.
func (b *Bucket) checkOverlap() error {
	var starts, ends []int64
	for _, p := range b.Manifest.Parts {
		if p.Rows > 0 {
			starts, ends = append(starts, p.MinTS), append(ends, max(p.MinTS, p.MaxTS))
		}
	}
	if len(starts) <= maxOpenParts {
		return nil
	}
	slices.Sort(starts)
	slices.Sort(ends)
	most, at, ended := 0, int64(0), 0
	for i, s := range starts {
		for ended < len(ends) && ends[ended] < s {
			ended++
		}
		if open := i + 1 - ended; open > most {
			most, at = open, s
		}
	}
	if most > maxOpenParts {
		return fmt.Errorf("trace %s: %d parts overlap in time at %s, and a scan holds at most %d open at once: servetrace writes parts that overlap so much only from input far out of time order, or from as many shards each converting the same hours; sort the input by time, or use fewer shards, and convert it again",
			b.Dir, most, formatMicros(at), maxOpenParts)
	}
	return nil
}

// tooManyOpen is Scan's refusal to open part p past maxOpenParts, where
// the manifest's time ranges said fewer would be open.
func (b *Bucket) tooManyOpen(p Part) error {
	return fmt.Errorf("trace %s: more than %d parts overlap in time at %s (part %s), where the manifest's max_ts_us say fewer, and a scan holds at most %d open at once: the manifest was edited; convert the source again",
		b.Dir, maxOpenParts, formatMicros(p.MinTS), p.Path, maxOpenParts)
}

// formatMicros formats a time in microseconds since 1970 as RFC 3339, UTC.
func formatMicros(us int64) string {
	return time.UnixMicro(us).UTC().Format(time.RFC3339Nano)
}

// byMinTS orders part indexes by their min_ts_us, ties in manifest order.
func byMinTS(parts []Part) []int {
	order := make([]int, len(parts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return cmp.Compare(parts[i].MinTS, parts[j].MinTS) })
	return order
}
