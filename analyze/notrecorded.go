package analyze

import "encoding/json"

// A figure a run does not hold is null in JSON, never 0: another tool's
// result file keeps no client health or lateness, may keep no rate, and a
// run whose requests all failed, or whose file keeps no timing, has no
// throughput; a 0 there would read as a measurement.

// MarshalJSON writes a throughput with no measured span as null.
func (t Throughput) MarshalJSON() ([]byte, error) {
	if t.DurationS <= 0 {
		return []byte("null"), nil
	}
	type plain Throughput
	return json.Marshal(plain(t))
}

// MarshalJSON writes, for another tool's run, the fields its file does
// not hold as null: servetrace's client health, lateness and shard; the
// offered rate where it gave none; the achieved rate where it gave no
// duration.
func (r RunSummary) MarshalJSON() ([]byte, error) {
	type plain RunSummary
	b, err := json.Marshal(plain(r))
	if err != nil || r.Tool == "" {
		return b, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	null := json.RawMessage("null")
	for _, k := range []string{"client", "lateness", "client_saturated", "shard"} {
		m[k] = null
	}
	if r.OfferedRate <= 0 {
		m["offered_rate_rps"] = null
	}
	if r.fileDurationS <= 0 {
		m["achieved_rate_rps"] = null
	}
	return json.Marshal(m)
}
