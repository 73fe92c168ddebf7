//go:build !linux

package pacing

import "time"

// sleepPrecise does nothing where no precise sleep is known: the
// scheduler yields in a loop to the due time instead.
func sleepPrecise(time.Duration) bool { return false }
