//go:build race

package main

// raceEnabled is true under -race; long statistical checks skip then.
const raceEnabled = true
