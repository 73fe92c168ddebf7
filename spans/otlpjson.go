package spans

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// idKeys are the span fields OTLP/JSON writes as hex, where protobuf's
// JSON mapping, which protojson follows, writes bytes as base64
// (opentelemetry-proto's specification, "JSON Protobuf Encoding").
var idKeys = map[string]bool{"traceId": true, "spanId": true, "parentSpanId": true, "trace_id": true, "span_id": true, "parent_span_id": true}

// unmarshalJSON reads one OTLP/JSON trace export: its hex ids are turned
// into protojson's base64 first, numbers kept exact.
func unmarshalJSON(b []byte, msg *coltracepb.ExportTraceServiceRequest) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return err
	}
	if err := hexToBase64(v); err != nil {
		return err
	}
	out, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(out, msg)
}

// hexToBase64 rewrites, everywhere in v, the id fields from hex to base64.
// An id that is not hex is an error: OTLP/JSON never writes base64 ids.
func hexToBase64(v any) error {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && idKeys[k] {
				raw, err := hex.DecodeString(s)
				if err != nil {
					return fmt.Errorf("%s %q is not hex, as OTLP/JSON writes ids", k, clipKey(s))
				}
				x[k] = base64.StdEncoding.EncodeToString(raw)
				continue
			}
			if err := hexToBase64(e); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := hexToBase64(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// marshalJSON writes msg as one line of OTLP/JSON: protojson's output with
// the ids turned back from base64 to hex, as the collector's file exporter
// writes them.
func marshalJSON(msg *coltracepb.ExportTraceServiceRequest) ([]byte, error) {
	b, err := protojson.Marshal(msg)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	base64ToHex(v)
	out, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// base64ToHex rewrites, everywhere in v, the id fields from protojson's
// base64 to OTLP/JSON's hex.
func base64ToHex(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && idKeys[k] {
				if raw, err := base64.StdEncoding.DecodeString(s); err == nil {
					x[k] = hex.EncodeToString(raw)
				}
				continue
			}
			base64ToHex(e)
		}
	case []any:
		for _, e := range x {
			base64ToHex(e)
		}
	}
}
