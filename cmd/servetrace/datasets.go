package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/datasets"
)

func datasetsCmd() *cli.Command {
	return &cli.Command{
		Name:  "datasets",
		Usage: "list the bundled sample traces",
		Subcommands: []*cli.Command{{
			Name:  "list",
			Usage: "show name, rows, licence and citation of each bundled trace",
			Action: func(c *cli.Context) error {
				for _, d := range datasets.Bundled() {
					fmt.Fprintf(c.App.Writer, "%s\n  %s\n  rows: %d   format: %s   licence: %s\n  cite: %s\n\n", d.Name, d.Description, d.Rows(), d.Format, d.Licence, d.Citation)
				}
				fmt.Fprintln(c.App.Writer, "convert one with: servetrace convert NAME --out DIR")
				return nil
			},
		}},
	}
}
