//go:build race

package memcap

const raceEnabled = true
