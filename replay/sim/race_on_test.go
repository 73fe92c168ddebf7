//go:build race

package sim

// raceEnabled is true under -race, whose overhead distorts timing figures.
const raceEnabled = true
