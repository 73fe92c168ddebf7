// Command arrivallog is an independent OpenAI-compatible endpoint for
// measuring load generators: it records when each request arrived and when
// it wrote the response's first byte, answers with a short SSE stream, and
// reports the arrival error against a constant-rate schedule. It shares no
// code with servetrace's client or simulator, so a client is judged by a
// server that is not its own.
//
//	arrivallog serve -addr 127.0.0.1:8123 -log arrivals.csv   (until SIGINT/SIGTERM)
//	arrivallog report -log arrivals.csv -rate 1000 [-run RUN]
//
// serve listens on loopback unless -allow-remote, and keeps at most
// -max-arrivals arrivals (default 1,000,000), counting the rest as dropped.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: arrivallog serve|report [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "report":
		err = report(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: serve or report", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "arrivallog:", err)
		os.Exit(1)
	}
}
