//go:build race

package replay

// raceEnabled is true under -race, whose overhead distorts timing figures;
// TestTiming* tests skip themselves then and run in `make test-timing`.
const raceEnabled = true
