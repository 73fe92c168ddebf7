//go:build race

package synth

// raceEnabled is true under -race; long statistical checks skip then (make
// test runs them without -race in test-timing).
const raceEnabled = true
