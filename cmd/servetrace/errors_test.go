package main

import (
	"errors"
	"fmt"
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
		{fmt.Errorf("output o already holds a trace: %w", trace.ErrOutputExists), "output o already holds a trace: the output already exists; choose a new --out, or pass --force to replace it"},
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
