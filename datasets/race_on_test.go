//go:build race

package datasets

// raceEnabled is true under -race, which distorts timing and memory.
const raceEnabled = true
