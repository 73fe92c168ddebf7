package spans

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// traceServiceDesc is the collector's TraceService with its one method,
// Export, registered by hand so that the export reaches the receiver as
// the bytes it came in (rawCodec) and is read span by span (walkProto),
// never decoded whole into protobuf structs, which a hostile export of
// empty submessages would swell forty-fold.
var traceServiceDesc = grpc.ServiceDesc{
	ServiceName: "opentelemetry.proto.collector.trace.v1.TraceService",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Export", Handler: func(srv any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		var msg rawMessage
		if err := dec(&msg); err != nil {
			return nil, err
		}
		if _, err := srv.(*Receiver).c.addProto(msg); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "not an OTLP trace export: %v", err)
		}
		return rawMessage(nil), nil // ExportTraceServiceResponse, empty
	}}},
	Metadata: "opentelemetry/proto/collector/trace/v1/trace_service.proto",
}

// rawMessage is a gRPC message as its serialized bytes.
type rawMessage []byte

// rawCodec is the receiver's gRPC codec: requests are kept as their
// bytes, responses are the bytes given.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(rawMessage)
	if !ok {
		return nil, fmt.Errorf("the span receiver sends bytes, not %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(m)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("the span receiver reads bytes, not %T", v)
	}
	*m = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// grpcBusy answers a gRPC export with ResourceExhausted and a RetryInfo
// of retryAfter, in the headers alone (gRPC's Trailers-Only response):
// the OTLP exporters retry ResourceExhausted when a RetryInfo says when.
func grpcBusy(w http.ResponseWriter) {
	st, err := status.New(codes.ResourceExhausted, "busy with other exports: retry").
		WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)})
	h := w.Header()
	h.Set("Content-Type", "application/grpc")
	h.Set("Grpc-Status", strconv.Itoa(int(codes.ResourceExhausted)))
	h.Set("Grpc-Message", "busy with other exports: retry")
	if err == nil {
		if b, err := proto.Marshal(st.Proto()); err == nil {
			h.Set("Grpc-Status-Details-Bin", base64.RawStdEncoding.EncodeToString(b))
		}
	}
	w.WriteHeader(http.StatusOK)
}
