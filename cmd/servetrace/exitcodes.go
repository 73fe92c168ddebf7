package main

import "github.com/urfave/cli/v2"

// Exit codes, named as k6's errext/exitcodes names them, so that a script
// can tell wrong flags from a failed command, a bug or an interrupted run.
const (
	exitFailure     = 1   // the command failed: bad input, an unreachable endpoint
	exitUsage       = 2   // flags or arguments are wrong; nothing was done
	exitInternal    = 70  // a bug: a panic was caught (sysexits' EX_SOFTWARE)
	exitInterrupted = 130 // interrupted (SIGINT, SIGTERM), or a replay that did not finish
)

// usageError is a wrong flag or argument: the message, then exit 2.
func usageError(msg string) error { return cli.Exit(msg, exitUsage) }
