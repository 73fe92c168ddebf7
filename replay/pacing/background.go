package pacing

// InBackground runs f on a background thread of its own and returns when
// f has. Encoding a part of results takes tens of milliseconds of CPU; at
// the normal priority its thread takes its share of a core the sends
// need, and the lateness of the requests sent meanwhile shows it
// (docs/measurements.md, "Results encoded in the background").
func InBackground(f func()) {
	t := NewBackgroundThread()
	defer t.Close()
	t.Run(f)
}
