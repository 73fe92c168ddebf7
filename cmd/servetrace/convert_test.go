package main

import (
	"testing"

	"github.com/servetrace/servetrace/datasets"
)

// TestConvertProgressLine: how far convert is, as a user reads it.
func TestConvertProgressLine(t *testing.T) {
	for _, c := range []struct {
		p    datasets.Progress
		want string
	}{
		{datasets.Progress{Input: "logs.jsonl.zst", Stage: "converting", Read: 3 << 30, Size: 4 << 30, Rows: 1234, Rejects: 5},
			"convert: converting logs.jsonl.zst: 3072 of 4096 MiB read (75%), 1234 rows, 5 rejected"},
		{datasets.Progress{Input: "stdin", Stage: "converting", Read: 10 << 20, Size: -1, Rows: 7},
			"convert: converting stdin: 10 MiB read, 7 rows, 0 rejected"},
		{datasets.Progress{Input: "a.csv", Stage: "counting tenants", Read: 1 << 20, Size: 2 << 20},
			"convert: counting tenants a.csv: 1 of 2 MiB read (50%), 0 rows, 0 rejected"},
	} {
		if got := convertProgress(c.p); got != c.want {
			t.Errorf("%+v:\n got %q\nwant %q", c.p, got, c.want)
		}
	}
}
