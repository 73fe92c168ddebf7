package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/trace"
)

// needArgs checks the positional argument count.
func needArgs(c *cli.Context, min int, what string) error {
	if c.NArg() < min {
		return usageError(fmt.Sprintf("%s: missing %s (see 'servetrace %s --help')", c.Command.Name, what, c.Command.Name))
	}
	return nil
}

func outFlag(usage string, required bool) *cli.StringFlag {
	return &cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: usage, Required: required}
}

var startFlag = &cli.TimestampFlag{Name: "start", Usage: "anchor for relative times (RFC 3339)", Layout: time.RFC3339,
	Value: cli.NewTimestamp(trace.DefaultStart)}

func startTime(c *cli.Context) time.Time {
	if t := c.Timestamp("start"); t != nil {
		return t.UTC()
	}
	return trace.DefaultStart
}

// isTerminal reports whether f is a character device (a TTY).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// parseSpan reads "FROM-TO" in percent ("0-70", "70-100%") as fractions.
func parseSpan(flag, s string) ([2]float64, error) {
	if s == "" {
		return [2]float64{}, nil
	}
	a, b, ok := strings.Cut(strings.TrimSuffix(s, "%"), "-")
	lo, err1 := strconv.ParseFloat(strings.TrimSpace(a), 64)
	hi, err2 := strconv.ParseFloat(strings.TrimSpace(b), 64)
	if !ok || err1 != nil || err2 != nil || lo < 0 || hi > 100 || lo >= hi {
		return [2]float64{}, fmt.Errorf("--%s %q: want FROM-TO in percent of the trace's span, e.g. 0-70 or 70-100", flag, s)
	}
	return [2]float64{lo / 100, hi / 100}, nil
}
