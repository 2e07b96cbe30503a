package csrrpc_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/certs/ca"
	"github.com/weft-mesh/weft/certs/csrrpc"
)

// signer is a minimal CA service: the token names the ID to sign.
type signer struct{ ca *ca.CA }

func (s signer) Sign(ctx context.Context, req *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
	tok, err := csrrpc.BearerToken(ctx)
	if err != nil || tok == "" {
		return nil, status.Errorf(codes.Unauthenticated, "token: %v", err)
	}
	csr, err := x509.ParseCertificateRequest(req.GetValue())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	chain, err := s.ca.Sign(csr, spiffeid.RequireFromString(tok), time.Hour)
	if err != nil {
		return nil, status.Error(codes.PermissionDenied, err.Error())
	}
	return wrapperspb.Bytes(ca.EncodeChain(chain)), nil
}

func serve(t *testing.T) *grpc.ClientConn {
	t.Helper()
	c, err := ca.Open(ca.Config{Dir: t.TempDir(), TrustDomain: "td"})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	g.RegisterService(&csrrpc.ServiceDesc, signer{c})
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func csr(t *testing.T, id string) []byte {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	u, _ := url.Parse(id)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestSignOverGRPC(t *testing.T) {
	cc := serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id := "spiffe://td/ns/a/sa/b"
	chain, err := csrrpc.Sign(ctx, cc, csr(t, id), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(chain) != 1 || chain[0].URIs[0].String() != id {
		t.Fatalf("chain %v", chain)
	}
	_, err = csrrpc.Sign(ctx, cc, csr(t, id), "")
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v", err)
	}
	_, err = csrrpc.Sign(ctx, cc, csr(t, "spiffe://td/ns/a/sa/other"), id)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "CSR asks for SPIFFE ID spiffe://td/ns/a/sa/other, the credential grants spiffe://td/ns/a/sa/b") {
		t.Fatalf("wrong ID: %v", err)
	}
	// The client refuses to send a CSR past the bound; at the bound it is sent
	// (and the server refuses what does not parse).
	if _, err := csrrpc.Sign(ctx, cc, make([]byte, csrrpc.MaxCSRBytes+1), id); err == nil || !strings.Contains(err.Error(), "8193 bytes, over the bound of 8192") {
		t.Fatalf("MaxCSRBytes+1: %v", err)
	}
	if _, err := csrrpc.Sign(ctx, cc, make([]byte, csrrpc.MaxCSRBytes), id); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("MaxCSRBytes of junk: %v", err)
	}
}

func TestBearerToken(t *testing.T) {
	for _, tc := range []struct {
		md   metadata.MD
		want string
		err  string
	}{
		{metadata.Pairs("authorization", "Bearer abc"), "abc", ""},
		{metadata.MD{}, "", ""},
		{metadata.Pairs("authorization", "Basic abc"), "", "not \"Bearer <token>\""},
		{metadata.Pairs("authorization", "Bearer "), "", "not \"Bearer <token>\""},
		{metadata.Pairs("authorization", "Bearer a", "authorization", "Bearer b"), "", "2 authorization values"},
	} {
		got, err := csrrpc.BearerToken(metadata.NewIncomingContext(context.Background(), tc.md))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: %v, want %q", tc.md, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%v: %q %v", tc.md, got, err)
		}
	}
}

func TestParseChain(t *testing.T) {
	c, err := ca.Open(ca.Config{Dir: t.TempDir(), TrustDomain: "td"})
	if err != nil {
		t.Fatal(err)
	}
	one := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Signer().Raw})
	eight := bytes.Repeat(one, 8)
	if got, err := csrrpc.ParseChain(eight); err != nil || len(got) != 8 {
		t.Fatalf("8 certificates: %v", err)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		err  string
	}{
		{"nine", append(eight, one...), "more than 8 certificates"},
		{"empty", nil, "empty chain"},
		{"over MaxChainBytes", make([]byte, csrrpc.MaxChainBytes+1), "over the bound of 65536"},
		{"key block", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}}), "PEM type \"PRIVATE KEY\""},
		{"trailing", append(append([]byte(nil), one...), 'x'), "trailing data"},
	} {
		if _, err := csrrpc.ParseChain(tc.in); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
}
