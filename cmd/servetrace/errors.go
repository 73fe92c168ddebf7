package main

import (
	"errors"
	"slices"
	"strings"
	"unicode"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/datasets"
	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/synth"
	"github.com/servetrace/servetrace/trace"
)

// withFlagHints is the one-line message of err, in the CLI's terms:
// libraries report an option by its Options field (opterr) and a state by
// a typed error, and this names the flag or command that would fix it.
func withFlagHints(app *cli.App, err error) string {
	if oe, ok := opterr.As(err); ok {
		name := flagFor(app, oe.Field)
		if oe.Value == "" {
			return name + ": " + oneLine(oe.Reason)
		}
		return name + " " + oe.Value + ": " + oneLine(oe.Reason)
	}
	msg := oneLine(err.Error())
	switch {
	case errors.Is(err, trace.ErrOutputExists):
		msg += outputExistsAdvice(ranCommand(app))
	case errors.Is(err, trace.ErrOutputIsInput):
		msg += " (--out)"
	case errors.Is(err, trace.ErrShardsNotMerged):
		msg += "; join them with 'servetrace convert --merge-shards --out DIR'"
	case errors.Is(err, synth.ErrShardsIncomplete):
		msg += " (give 'fit --merge' the file of every shard 0 to N-1 once, each from 'servetrace fit BUCKET --shard I/N --out FILE')"
	case errors.Is(err, synth.ErrPartialsMismatch):
		msg += " (the files given to 'fit --merge')"
	case errors.Is(err, datasets.ErrBatchInput):
		msg += " (--batch-input)"
	case errors.Is(err, datasets.ErrUnknownFormat), errors.Is(err, datasets.ErrNothingConverted):
		msg += " (--format " + strings.Join(datasets.Formats, "|") + ")"
	case errors.Is(err, datasets.ErrTooManyRejects):
		msg += " (--max-reject-ratio)"
	}
	return msg
}

// outputExistsAdvice says how to get past an existing output with the
// flags cmd has: replay and sweep never replace a run, so they have no
// --force to advise.
func outputExistsAdvice(cmd *cli.Command) string {
	out, force := hasFlag(cmd, "out"), hasFlag(cmd, "force")
	switch {
	case out && force:
		return "; choose a new --out, or pass --force to replace it"
	case force:
		return "; pass --force to replace it"
	}
	return "; choose a new --out"
}

// ranCommand is the command the app was run with (its first argument
// that is not a flag), or nil.
func ranCommand(app *cli.App) *cli.Command {
	args, _ := app.Metadata["args"].([]string)
	for i, a := range args {
		if i > 0 && !strings.HasPrefix(a, "-") {
			return app.Command(a)
		}
	}
	return nil
}

// hasFlag reports whether cmd has a flag of that name; a nil cmd has none.
func hasFlag(cmd *cli.Command, name string) bool {
	if cmd == nil {
		return false
	}
	for _, f := range cmd.Flags {
		if slices.Contains(f.Names(), name) {
			return true
		}
	}
	return false
}

// flagFor names the flag that sets a library option: the field in
// kebab case (TTFTMode: --ttft-mode) where the CLI has such a flag, else
// the field's own name.
func flagFor(app *cli.App, field string) string {
	name := kebab(field)
	var walk func(cmds []*cli.Command) bool
	walk = func(cmds []*cli.Command) bool {
		for _, c := range cmds {
			for _, f := range c.Flags {
				for _, n := range f.Names() {
					if n == name {
						return true
					}
				}
			}
			if walk(c.Subcommands) {
				return true
			}
		}
		return false
	}
	if walk(app.Commands) {
		return "--" + name
	}
	return field
}

// kebab turns a Go field name into a flag name: TTFTMode → ttft-mode,
// MinTenantRequests → min-tenant-requests, VsLogged → vs-logged.
func kebab(field string) string {
	r := []rune(field)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 && (unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1])) {
			b.WriteByte('-')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}
