// Command servetrace converts LLM request logs and public traces into Parquet
// trace buckets, fits and generates workloads, replays them against
// OpenAI-compatible endpoints (or its built-in simulator), and analyzes the
// results. Each command lives in its own file (convert.go, replay.go, ...);
// this one starts the app and turns errors into exit codes.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/internal/termsafe"
	"github.com/servetrace/servetrace/trace"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args, os.Stdout, os.Stderr))
}

// run executes the CLI and returns the exit code. Errors are printed as one
// line on stderr, never as a stack trace.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	// Text from files and servers (model names, file names, errors) must
	// not drive the terminal: control characters are printed as escapes.
	stdout, stderr = termsafe.Writer(stdout), termsafe.Writer(stderr)
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "servetrace: internal error: %v (please report this)\n", r)
			code = exitInternal
		}
	}()
	app := newApp(stdout, stderr)
	app.Metadata = map[string]any{"args": args}
	if err := app.RunContext(ctx, hoistFlags(app, args)); err != nil {
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			if msg := err.Error(); msg != "" {
				fmt.Fprintln(stderr, "servetrace: "+msg)
			}
			return max(ec.ExitCode(), 1)
		}
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			fmt.Fprintln(stderr, "servetrace: interrupted")
			return exitInterrupted
		}
		fmt.Fprintln(stderr, "servetrace: "+withFlagHints(app, err))
		return exitFailure
	}
	return 0
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:                 "servetrace",
		Usage:                "LLM-serving workloads: trace → fit → generate → replay → analyze",
		Version:              trace.ToolVersion,
		EnableBashCompletion: true,
		// Repeatable flags take one value each: a header value or a scenario
		// spec may itself hold commas.
		DisableSliceFlagSeparator: true,
		Suggest:                   true,
		Writer:                    stdout,
		ErrWriter:                 stderr,
		HideHelpCommand:           true,
		Description: `Start with 'servetrace demo', which runs the whole pipeline on a bundled
trace against the built-in simulator. Each command below has --help with an
example.`,
		Commands: []*cli.Command{
			convertCmd(), exportCmd(), fitCmd(), generateCmd(), validateCmd(), replayCmd(), sweepCmd(), simCmd(), analyzeCmd(), spansCmd(), datasetsCmd(), demoCmd(),
		},
		// run prints errors and picks the exit code; urfave's default
		// handler would call os.Exit itself.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError: func(c *cli.Context, err error, isSub bool) error {
			return usageError(fmt.Sprintf("%v (see 'servetrace %s --help')", err, c.Command.Name))
		},
	}
}
