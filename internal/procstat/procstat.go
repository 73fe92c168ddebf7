// Package procstat reads this process's peak resident memory from Linux's
// /proc, for the benchmarks that report it: a child process prints it, so
// its parent measures a clean process.
package procstat

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// PeakRSS returns the process's peak resident set size (VmHWM) in bytes,
// 0 where /proc is missing.
func PeakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// ResetPeakRSS resets the peak PeakRSS reports to the current resident
// size (Linux; a no-op elsewhere).
func ResetPeakRSS() { os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// peakPrefix starts the line ReportPeak writes.
const peakPrefix = "hwm_kb"

// ReportPeak writes the process's peak RSS in kB as the line
// "hwm_kb N", for the parent process to read with PeakFromOutput.
func ReportPeak(w io.Writer) { fmt.Fprintln(w, peakPrefix, PeakRSS()>>10) }

// PeakFromOutput returns the peak RSS in kB that a child process reported
// with ReportPeak in its output, 0 where it reported none.
func PeakFromOutput(out []byte) int64 {
	var kb int64
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), peakPrefix+" "); ok {
			kb, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return kb
}
