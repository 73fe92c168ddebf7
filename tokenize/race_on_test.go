//go:build race

package tokenize

// raceEnabled is true under -race; scheduling checks skip then.
const raceEnabled = true
