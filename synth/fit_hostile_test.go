package synth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// TestLongFitHostileTimestamps fits buckets whose timestamps repeat or crowd
// into a few microseconds: the fit gives a clear error or a model that is
// finite, valid and written; never -Inf in model.json.
func TestLongFitHostileTimestamps(t *testing.T) {
	skipLong(t)
	at := func(us int64, in, out int64) trace.Request {
		return trace.Request{Identity: trace.Identity{RequestID: fmt.Sprint("r", us, in)}, TS: 1_700_000_000_000_000 + us,
			Shape: trace.Shape{InputTokens: in, OutputTokens: out, API: trace.APIChat}}
	}
	cases := []struct {
		name string
		rows func() []trace.Request
		want string // "" for a model that must write
	}{
		{"fifty rows at one instant", func() []trace.Request {
			var r []trace.Request
			for i := range 50 {
				r = append(r, at(0, int64(100+i), 10))
			}
			return r
		}, "one timestamp"},
		{"mostly one instant", func() []trace.Request {
			var r []trace.Request
			for i := range 990 {
				r = append(r, at(0, int64(100+i), 10))
			}
			for i := range 10 {
				r = append(r, at(int64(i+1)*360e6, 200, 20))
			}
			return r
		}, ""},
		{"every row the same", func() []trace.Request {
			var r []trace.Request
			for i := range 300 {
				r = append(r, at(int64(i)*1e6, 100, 10))
			}
			return r
		}, ""},
		{"two hundred rows in a hundred microseconds", func() []trace.Request {
			var r []trace.Request
			for i := range 200 {
				r = append(r, at(int64(i/2), int64(100+i), 10))
			}
			return r
		}, "requests/s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeBucket(t, c.rows(), nil)
			out := filepath.Join(t.TempDir(), "model.json")
			err, ok := withinDeadline(t, 60*time.Second, func() error {
				m, err := Fit(context.Background(), dir, FitOptions{})
				if err != nil {
					return err
				}
				if err := WriteModel(out, m); err != nil {
					return err
				}
				_, err = ReadModel(out)
				return err
			})
			if !ok {
				return
			}
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("%v; want a model", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v; want one saying %q", err, c.want)
			}
		})
	}
}

// TestLongFitArrivalsUnsortedTimes feeds the arrival fit times out of order
// (backwards, shuffled, repeated): every number it returns is finite.
func TestLongFitArrivalsUnsortedTimes(t *testing.T) {
	skipLong(t)
	var up []float64
	const arrivals = 600
	for i := range arrivals {
		up = append(up, 1000+float64(i)*0.7+float64(i%7)*0.05)
	}
	back := slices.Clone(up)
	slices.Reverse(back)
	shuffled := slices.Clone(up)
	rand.New(rand.NewPCG(1, 1)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	repeated := slices.Clone(up)
	for i := range repeated {
		if i%3 == 0 {
			repeated[i] = repeated[0]
		}
	}
	for _, c := range []struct {
		name string
		ts   []float64
	}{{"backwards", back}, {"shuffled", shuffled}, {"repeated", repeated}} {
		t.Run(c.name, func(t *testing.T) {
			err, ok := withinDeadline(t, 60*time.Second, func() error {
				a, err := fitArrivals(context.Background(), c.ts, 1000, 1000+arrivals*0.7, 1e-6, false)
				if err != nil {
					return err
				}
				if _, err := json.Marshal(a); err != nil {
					return err
				}
				m := testModel(t, "azure")
				m.Arrivals = a
				return m.Validate()
			})
			if ok && err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFitCancelReturnsPromptly cancels a fit of the Azure sample (about
// 10 s of work) after 200 ms: it must return context.Canceled, not a model.
func TestFitCancelReturnsPromptly(t *testing.T) {
	dir := sampleBucket(t, "azure-code-2023")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	err, ok := withinDeadline(t, 5*time.Second, func() error {
		m, err := Fit(ctx, dir, FitOptions{})
		if err == nil && m != nil {
			return errors.New("a model came back")
		}
		return err
	})
	if ok && !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v; want context.Canceled", err)
	}
}

// TestFitSparseTenYears fits 50 rows spread over ten years: the work is
// bounded by the rows, not the span (a generous bound, to catch a hang).
func TestFitSparseTenYears(t *testing.T) {
	var rows []trace.Request
	start := time.Date(2014, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	step := int64(10*365*24*time.Hour/time.Microsecond) / 49
	for i := range 50 {
		rows = append(rows, trace.Request{Identity: trace.Identity{RequestID: fmt.Sprint("r", i)}, TS: start + int64(i)*step + int64(i%5)*3_600_000_000,
			Shape: trace.Shape{InputTokens: int64(100 + i), OutputTokens: 20, API: trace.APIChat}})
	}
	dir := writeBucket(t, rows, nil)
	out := filepath.Join(t.TempDir(), "model.json")
	err, ok := withinDeadline(t, 30*time.Second, func() error {
		m, err := Fit(context.Background(), dir, FitOptions{})
		if err != nil {
			return err
		}
		return WriteModel(out, m)
	})
	if ok && err != nil {
		t.Fatal(err)
	}
}
