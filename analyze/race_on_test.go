//go:build race

package analyze

// raceEnabled is true under -race; long statistical checks skip then.
const raceEnabled = true
