package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/servetrace/servetrace/trace"
)

// writeJSON prints v as indented JSON, the shape of every --json output.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeHTMLFile writes a page through a temporary file (a failure never
// leaves half a page) and says where on stderr; flag names the flag that
// asked for it, for the error.
func writeHTMLFile(stderr io.Writer, flag, path string, render func(io.Writer) error) error {
	if err := trace.WriteFileAtomic(path, render); err != nil {
		return fmt.Errorf("%s %s: %w", flag, path, err)
	}
	fmt.Fprintf(stderr, "wrote %s\n", path)
	return nil
}
