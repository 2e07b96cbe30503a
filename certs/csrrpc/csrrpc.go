// Package csrrpc is the CSR service between a sidecar and pilot's CA, written by
// hand (no protoc): well-known types carry the CSR and the chain, so grpc-go's
// proto codec applies unchanged.
//
//	service weft.ca.v1.Certificates {
//	  rpc Sign(google.protobuf.BytesValue /* CSR, DER */) returns (google.protobuf.BytesValue /* PEM chain, leaf first */);
//	}
//
// The first CSR carries gRPC metadata "authorization: Bearer <token>" (a
// bootstrap token, certs/token); a renewal carries no token and is authenticated
// by the TLS client certificate of the connection. Pilot answers Unauthenticated
// when neither credential verifies, PermissionDenied when the CSR's SPIFFE ID is
// not the one the credential grants or the caller is revoked, InvalidArgument
// for a CSR that does not parse or is over MaxCSRBytes.
package csrrpc

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/certs/bundle"
)

// Names of the service.
const (
	ServiceName = "weft.ca.v1.Certificates"
	SignMethod  = "/" + ServiceName + "/Sign"
)

// MaxCSRBytes bounds a CSR (a P-256 CSR with one URI SAN is ~300 bytes).
const MaxCSRBytes = 8 << 10

// MaxChainBytes bounds the PEM chain a client accepts in answer.
const MaxChainBytes = 64 << 10

// AuthorizationKey is the metadata key of the bootstrap token ("Bearer <token>").
const AuthorizationKey = "authorization"

// Server is what pilot implements.
type Server interface {
	Sign(ctx context.Context, req *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error)
}

// ServiceDesc registers a Server on a grpc.Server: g.RegisterService(&csrrpc.ServiceDesc, srv).
var ServiceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*Server)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Sign",
		Handler:    signHandler,
	}},
	Metadata: "weft/ca/v1 (hand-written, certs/csrrpc/csrrpc.go)",
}

func signHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(wrapperspb.BytesValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(Server).Sign(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: SignMethod}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return srv.(Server).Sign(ctx, req.(*wrapperspb.BytesValue))
	})
}

// Sign sends csrDER on cc and returns the chain (leaf first). token is the
// bootstrap token for a first CSR, "" for a renewal over mTLS. The caller
// bounds it with ctx's deadline.
func Sign(ctx context.Context, cc grpc.ClientConnInterface, csrDER []byte, token string) ([]*x509.Certificate, error) {
	if len(csrDER) > MaxCSRBytes {
		return nil, fmt.Errorf("csr: %d bytes, over the bound of %d", len(csrDER), MaxCSRBytes)
	}
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, AuthorizationKey, "Bearer "+token)
	}
	out := new(wrapperspb.BytesValue)
	if err := cc.Invoke(ctx, SignMethod, wrapperspb.Bytes(csrDER), out); err != nil {
		return nil, fmt.Errorf("csr: sign: %w", err)
	}
	return ParseChain(out.GetValue())
}

// ParseChain reads a PEM chain (leaf first; at most MaxChainBytes and
// bundle.MaxChain certificates, nothing but CERTIFICATE blocks).
func ParseChain(pemBytes []byte) ([]*x509.Certificate, error) {
	if len(pemBytes) > MaxChainBytes {
		return nil, fmt.Errorf("csr: chain of %d bytes, over the bound of %d", len(pemBytes), MaxChainBytes)
	}
	out, rest, err := bundle.ParseCertificates(pemBytes, bundle.MaxChain)
	if err != nil {
		return nil, fmt.Errorf("csr: chain: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("csr: empty chain")
	}
	if len(strings.TrimSpace(string(rest))) != 0 {
		return nil, errors.New("csr: trailing data after the chain")
	}
	return out, nil
}

// BearerToken returns the bootstrap token of an incoming call, "" when none.
// More than one authorization value, or one not of the form "Bearer <token>",
// is an error.
func BearerToken(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(AuthorizationKey)
	switch len(vals) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", fmt.Errorf("csr: %d authorization values, want at most one", len(vals))
	}
	tok, ok := strings.CutPrefix(vals[0], "Bearer ")
	tok = strings.TrimSpace(tok)
	if !ok || tok == "" {
		return "", errors.New(`csr: authorization is not "Bearer <token>"`)
	}
	return tok, nil
}
