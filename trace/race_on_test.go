//go:build race

package trace

// raceEnabled is true under -race, which slows the long checks tenfold.
const raceEnabled = true
