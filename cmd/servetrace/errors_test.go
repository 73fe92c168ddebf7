package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/trace"
)

func TestWithFlagHints(t *testing.T) {
	app := newApp(nil, nil)
	for _, c := range []struct {
		err  error
		want string
	}{
		{opterr.New("TTFTMode", "x", "use first-content or first-chunk"), `--ttft-mode "x": use first-content or first-chunk`},
		{fmt.Errorf("analyze: %w", opterr.New("MinTenantRequests", 5, "reads the inputs twice")), `--min-tenant-requests 5: reads the inputs twice`},
		{opterr.New("NoSuchOption", nil, "why"), `NoSuchOption: why`},
		{fmt.Errorf("output o already holds a trace: %w", trace.ErrOutputExists), "output o already holds a trace: the output already exists; choose a new --out"},
		{errors.New("plain\n  error"), "plain error"},
	} {
		if got := withFlagHints(app, c.err); got != c.want {
			t.Errorf("withFlagHints(%v) = %q, want %q", c.err, got, c.want)
		}
	}
	for field, want := range map[string]string{"TTFTMode": "ttft-mode", "VsLogged": "vs-logged", "Format": "format", "HTTP": "http", "MaxConcurrency": "max-concurrency", "CACert": "ca-cert"} {
		if got := kebab(field); got != want {
			t.Errorf("kebab(%s) = %s, want %s", field, got, want)
		}
	}
}

// TestOutputExistsAdviceFitsTheCommand (issue 46 item 12): an existing
// output is answered with --force only by a command that has the flag;
// replay and sweep, which never replace a run, advise a new --out alone.
func TestOutputExistsAdviceFitsTheCommand(t *testing.T) {
	err := fmt.Errorf("run directory r already holds results: %w", trace.ErrOutputExists)
	for _, c := range []struct {
		args  []string
		force bool
	}{
		{[]string{"servetrace", "replay", "wl", "--out", "r"}, false},
		{[]string{"servetrace", "sweep", "wl", "--out", "r"}, false},
		{[]string{"servetrace", "convert", "in", "--out", "o"}, true},
		{[]string{"servetrace", "generate", "m.json", "--out", "o"}, true},
		{[]string{"servetrace", "spans", "r", "f.json"}, true},
	} {
		app := newApp(nil, nil)
		app.Metadata = map[string]any{"args": c.args}
		got := withFlagHints(app, err)
		if strings.Contains(got, "--force") != c.force || !strings.Contains(got, "choose a new --out") && c.args[1] != "spans" {
			t.Errorf("%s: %q; want --force advised: %v", c.args[1], got, c.force)
		}
	}
}
