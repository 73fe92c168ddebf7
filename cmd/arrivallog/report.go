package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"

	"github.com/servetrace/servetrace/trace"
)

// report prints the arrival error of a constant-rate load against its
// schedule, and, with a servetrace run, the latency the client added.
//
// The i-th arrival (in arrival order) was due at t0 + i/rate, t0 chosen so
// that the earliest request is exactly on time: each error is the delay
// beyond the fastest request's, so a constant network delay counts for
// nothing and no arrival is early.
func report(args []string) error {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	logPath := fs.String("log", "arrivals.csv", "the log serve wrote")
	rate := fs.Float64("rate", 1000, "the constant rate the load was offered at, requests/s")
	run := fs.String("run", "", "a servetrace run dir of the same load: its TTFT against the server's own first byte")
	skip := fs.Int("skip", 0, "leave out the first N arrivals (connection set-up)")
	fs.Parse(args)
	if !(*rate > 0) || math.IsInf(*rate, 0) {
		return fmt.Errorf("-rate %v: want a positive rate, requests/s", *rate)
	}
	if *skip < 0 {
		return fmt.Errorf("-skip %d: want 0 or more arrivals", *skip)
	}
	rows, err := readLog(*logPath)
	if err != nil {
		return err
	}
	if len(rows) <= *skip+1 {
		return fmt.Errorf("%s: %d arrivals, too few", *logPath, len(rows))
	}
	slices.SortFunc(rows, func(a, b arrival) int { return int(a.arrived - b.arrived) })
	rows = rows[*skip:]
	period := 1e9 / *rate
	t0 := math.Inf(1)
	for i, r := range rows {
		t0 = math.Min(t0, float64(r.arrived)-float64(i)*period)
	}
	errs := make([]float64, len(rows))
	for i, r := range rows {
		errs[i] = (float64(r.arrived) - float64(i)*period - t0) / 1e6
	}
	span := float64(rows[len(rows)-1].arrived-rows[0].arrived) / 1e9
	fmt.Printf("arrivals %d over %.2f s (%.1f/s); arrival error vs schedule ms: %s\n", len(rows), span, float64(len(rows)-1)/span, quantiles(errs))
	if *run == "" {
		return nil
	}
	return clientAdded(*run, rows)
}

// clientAdded prints, for a servetrace run against this server, the
// latency the client added: its reported TTFT minus the server's own
// time from arrival to first byte, joined by X-Request-Id.
func clientAdded(run string, rows []arrival) error {
	info, err := trace.ReadRunInfo(run)
	if err != nil {
		return err
	}
	results, err := trace.ReadResults(run)
	if err != nil {
		return err
	}
	server := make(map[string]arrival, len(rows))
	for _, r := range rows {
		server[r.id] = r
	}
	var added, lateness, toWire []float64
	for _, r := range results {
		s, ok := server[info.RunID+"-"+r.RequestID]
		if !ok || r.SentNs == nil || r.FirstTokenNs == nil || r.Outcome != trace.OutcomeOK {
			continue
		}
		ttft := float64(*r.FirstTokenNs - *r.SentNs)
		added = append(added, (ttft-float64(s.firstByte-s.arrived))/1e6)
		lateness = append(lateness, float64(*r.SentNs-r.AdmittedNs)/1e6)
		if r.WroteNs != nil {
			toWire = append(toWire, float64(*r.WroteNs-r.AdmittedNs)/1e6)
		}
	}
	if len(added) == 0 {
		return fmt.Errorf("%s: no result joins the log by X-Request-Id", run)
	}
	fmt.Printf("servetrace run %s: %d requests joined\n", info.RunID, len(added))
	fmt.Printf("  client-added latency (TTFT - server first byte since arrival) ms: %s\n", quantiles(added))
	fmt.Printf("  lateness (sent - admitted) ms: %s\n", quantiles(lateness))
	if len(toWire) > 0 {
		fmt.Printf("  lateness to the wire (wrote - admitted) ms: %s\n", quantiles(toWire))
	}
	fmt.Printf("  run.json: lateness p99 %.3f ms, client CPU %.0f%%\n", info.Lateness.P99Ms, 100*info.Client.CPUUtilization)
	return nil
}

// quantiles formats p50, p99 and the maximum (nearest rank).
func quantiles(v []float64) string {
	s := slices.Clone(v)
	slices.Sort(s)
	at := func(p float64) float64 { return s[min(len(s)-1, int(math.Ceil(p*float64(len(s))))-1)] }
	return fmt.Sprintf("p50 %.3f, p99 %.3f, max %.3f", at(0.5), at(0.99), s[len(s)-1])
}

// Bounds on the log report reads: serve writes an id of at most
// maxIDBytes and two times a line, and at most mostArrivals lines.
const maxLineBytes = 4 << 10

// maxLogRows is mostArrivals, a variable so that a test can reach it.
var maxLogRows = mostArrivals

// errLongLine is a line past maxLineBytes.
var errLongLine = fmt.Errorf("a line longer than %d bytes", maxLineBytes)

// lineBound reads r, failing with errLongLine at a line longer than
// maxLineBytes, so the CSV reader never holds one.
type lineBound struct {
	r    io.Reader
	line int // bytes since the last newline
}

func (b *lineBound) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	for _, c := range p[:n] {
		if c == '\n' {
			b.line = 0
		} else if b.line++; b.line > maxLineBytes {
			return 0, errLongLine
		}
	}
	return n, err
}

// readLog reads serve's CSV: at most maxLogRows arrivals, each line
// within maxLineBytes; errors name the file and the line.
func readLog(path string) ([]arrival, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cr := csv.NewReader(&lineBound{r: f})
	cr.FieldsPerRecord = 3
	if _, err := cr.Read(); err != nil {
		return nil, fmt.Errorf("%s: no header: %w", path, err)
	}
	var out []arrival
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, line, err)
		}
		if len(out) == maxLogRows {
			return nil, fmt.Errorf("%s line %d: more than %d arrivals, more than serve writes", path, line, maxLogRows)
		}
		a, err1 := strconv.ParseInt(rec[1], 10, 64)
		b, err2 := strconv.ParseInt(rec[2], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s line %d: times are not integers", path, line)
		}
		out = append(out, arrival{id: rec[0], arrived: a, firstByte: b})
	}
}
