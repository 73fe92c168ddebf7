package replay

import (
	"fmt"

	"github.com/servetrace/servetrace/trace"
)

// maxRowList bounds every list a result row holds (token times, choice
// indices, event hashes, prefix blocks, feature labels), so a run dir
// never holds a row whose reading costs more than a few MiB, whatever a
// server streamed or a workload row carried; it is the bound every reader
// holds rows to (trace.MaxResultList). The stream's own bounds
// (maxTokenEvents, maxEventHashes) keep to it; fitRow holds every row to
// it as it is written.
const maxRowList = trace.MaxResultList

// maxBufferedListEntries bounds the list entries of the rows the open
// part holds in memory: past it, the part is written, so a server that
// answers every request at the list bounds cannot grow the writer's
// buffer without end.
const maxBufferedListEntries = 4 << 20

// fitRow cuts each of res's lists to maxRowList entries, noting what it
// cut: a workload row may carry more prefix blocks than that, and the
// other lists keep to it as they are made.
func (r *Runner) fitRow(res *trace.Result) {
	cut := func(name string, n int) bool {
		if n <= maxRowList {
			return false
		}
		r.notes.add(fmt.Sprintf("%s of over %d entries was recorded cut to its first %d", name, maxRowList, maxRowList), res.RequestID)
		return true
	}
	if cut("prefix_blocks", len(res.PrefixBlocks)) {
		res.PrefixBlocks = res.PrefixBlocks[:maxRowList]
	}
	if cut("token_times_ns", len(res.TokenTimesNs)) {
		res.TokenTimesNs = res.TokenTimesNs[:maxRowList]
	}
	if cut("choice_index", len(res.ChoiceIndex)) {
		res.ChoiceIndex = res.ChoiceIndex[:maxRowList]
	}
	if cut("output_event_hashes", len(res.OutputEventHashes)) {
		res.OutputEventHashes = res.OutputEventHashes[:maxRowList]
	}
	for _, l := range []struct {
		name string
		v    *[]string
	}{{"features", &res.Features}, {"features_sent", &res.FeaturesSent}, {"features_stripped", &res.FeaturesStripped},
		{"features_refused", &res.FeaturesRefused}, {"output_hashes", &res.OutputHashes}} {
		if cut(l.name, len(*l.v)) {
			*l.v = (*l.v)[:maxRowList]
		}
	}
}

// listEntries counts the entries of res's lists: what buffering it costs
// beyond its fixed size.
func listEntries(res *trace.Result) int {
	return len(res.PrefixBlocks) + len(res.TokenTimesNs) + len(res.ChoiceIndex) + len(res.OutputEventHashes) +
		len(res.Features) + len(res.FeaturesSent) + len(res.FeaturesStripped) + len(res.FeaturesRefused) + len(res.OutputHashes)
}
