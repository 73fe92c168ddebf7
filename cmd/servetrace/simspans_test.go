package main

import (
	"strings"
	"testing"
)

// TestSimSpanExportFlagsNamed: a span-export protocol or endpoint the
// simulator cannot use is refused before it serves, naming the flag (and,
// for the protocol, the environment variable it may have come from).
func TestSimSpanExportFlagsNamed(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string // OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
		want string
	}{
		{[]string{"--otlp-traces-protocol", "http/json"}, "", `--otlp-traces-protocol "http/json" (or OTEL_EXPORTER_OTLP_TRACES_PROTOCOL): use grpc or http/protobuf`},
		{nil, "thrift", `--otlp-traces-protocol "thrift" (or OTEL_EXPORTER_OTLP_TRACES_PROTOCOL)`},
		// The flag overrides the environment: the sim gets as far as a bad
		// --fail-rate, which stops it before it serves.
		{[]string{"--otlp-traces-protocol", "grpc", "--fail-rate", "2"}, "thrift", "--fail-rate 2"},
		{[]string{"--otlp-traces-endpoint", "https://127.0.0.1:4317"}, "", `--otlp-traces-endpoint "https://127.0.0.1:4317": the simulator exports without TLS`},
		{[]string{"--otlp-traces-endpoint", "collector"}, "", `--otlp-traces-endpoint "collector": not host:port`},
	} {
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", c.env)
		code, _, errOut := runCLI(t, append([]string{"sim", "--addr", "127.0.0.1:0"}, c.args...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("sim %v (env %q): exit %d, %q; want %q", c.args, c.env, code, strings.TrimSpace(errOut), c.want)
		}
	}
}
