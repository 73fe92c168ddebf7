//go:build race

package sweep

// raceEnabled is true under -race, whose overhead distorts timing;
// TestTiming* tests skip themselves then and run in make test-timing.
const raceEnabled = true
