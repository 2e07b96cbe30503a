package outlierreport

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The RPC, written by hand (no protoc): well-known types carry the encoded
// report, so grpc-go's proto codec applies unchanged.
//
//	service weft.outlierreport.v1.OutlierReports {
//	  rpc Report(google.protobuf.BytesValue) returns (google.protobuf.Empty);
//	}
//
// Pilot answers InvalidArgument for a report that does not decode or is past a
// bound, FailedPrecondition when it holds no ADS stream of the report's node
// from the same peer, ResourceExhausted past the per-node rate, pilot's total
// entries, or while pilot is already handling as many reports as it takes at
// once, and OK once the report replaced the node's previous one.
const (
	ServiceName  = "weft.outlierreport.v1.OutlierReports"
	ReportMethod = "/" + ServiceName + "/Report"
)

// Server is what pilot implements.
type Server interface {
	Report(ctx context.Context, req *wrapperspb.BytesValue) (*emptypb.Empty, error)
}

// ServiceDesc registers a Server on a grpc.Server:
// g.RegisterService(&outlierreport.ServiceDesc, srv).
var ServiceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*Server)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Report",
		Handler:    reportHandler,
	}},
	Metadata: "weft/outlierreport/v1 (hand-written, internal/outlierreport/grpc.go)",
}

func reportHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(wrapperspb.BytesValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(Server).Report(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: ReportMethod}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return srv.(Server).Report(ctx, req.(*wrapperspb.BytesValue))
	})
}

// Send sends one encoded report on cc (the sidecar's pilot connection). The
// caller bounds it with ctx's deadline.
func Send(ctx context.Context, cc grpc.ClientConnInterface, encoded []byte) error {
	return cc.Invoke(ctx, ReportMethod, wrapperspb.Bytes(encoded), new(emptypb.Empty))
}
