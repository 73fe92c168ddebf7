// Package spans collects what servers say about each request: the spans
// an engine exports over OTLP (vLLM's llm_request), received on loopback
// during a replay or read from a collector's file export afterwards, kept
// for one run only and turned into trace.ServerPhases.
package spans
