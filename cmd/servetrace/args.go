package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// hoistFlags moves a command's flags (with their values) ahead of its
// positional arguments, so `servetrace VERB INPUT... --out PATH` parses:
// urfave/cli v2 stops reading flags at the first positional argument and
// would otherwise ignore --out silently. Which flags take a value comes from
// the command's own flag definitions; "--" ends flag hoisting.
func hoistFlags(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	cmd := app.Command(args[1])
	if cmd == nil {
		return args
	}
	i := 2
	// Descend into subcommands (e.g. "datasets list").
	for i < len(args) {
		sub := cmd.Command(args[i])
		if sub == nil {
			break
		}
		cmd, i = sub, i+1
	}
	takesValue := map[string]bool{}
	for _, f := range cmd.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, name := range f.Names() {
			takesValue[name] = !isBool
		}
	}
	head := append([]string{}, args[:i]...)
	var flags, positional []string
	for j := i; j < len(args); j++ {
		a := args[j]
		switch {
		case a == "--":
			positional = append(positional, args[j+1:]...)
			j = len(args)
		case len(a) > 1 && a[0] == '-':
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if !strings.Contains(name, "=") && takesValue[name] && j+1 < len(args) {
				flags = append(flags, args[j+1])
				j++
			}
		default:
			positional = append(positional, a)
		}
	}
	out := append(head, flags...)
	if len(positional) > 0 {
		out = append(out, "--")
		out = append(out, positional...)
	}
	return out
}
