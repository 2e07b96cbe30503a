package authn_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/weft-mesh/weft/pilot/xds/authn"
	"github.com/weft-mesh/weft/pilot/xds/authn/authntest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// identify runs Identify in a real gRPC server (any method answers with what it
// found, in the status message) and calls it from a client with creds.
func identify(t *testing.T, server, client credentials.TransportCredentials, plaintextRegistration bool) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.Creds(server), grpc.UnknownServiceHandler(func(_ any, s grpc.ServerStream) error {
		p, err := authn.Identify(s.Context(), "cluster.local", plaintextRegistration)
		if err != nil {
			return grpcstatus.Error(codes.Unauthenticated, err.Error())
		}
		return grpcstatus.Error(codes.Aborted, fmt.Sprintf("auth=%v id=%s ns=%s sa=%s register=%v key=%s str=%s",
			p.Authenticated, p.ID, p.Namespace, p.ServiceAccount, p.MayRegister, p.Key, strings.Replace(p.String(), p.Addr, "ADDR", 1)))
	}))
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(lis) }()
	defer func() { g.Stop(); <-done }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(client))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	err = cc.Invoke(context.Background(), "/any.Service/Any", &emptypb.Empty{}, &emptypb.Empty{})
	st, _ := grpcstatus.FromError(err)
	return st.Code().String() + ": " + st.Message()
}

func TestIdentify(t *testing.T) {
	ca := authntest.NewCA(t)
	other := authntest.NewCA(t)
	cert := func(uris ...string) *tls.Certificate {
		if len(uris) == 1 && strings.HasPrefix(uris[0], "spiffe://cluster.local/") {
			c := ca.SVID(t, uris[0]) // certs/ca issues what it can
			return &c
		}
		c := ca.Raw(t, uris...)
		return &c
	}
	tests := []struct {
		name      string
		server    credentials.TransportCredentials
		client    credentials.TransportCredentials
		plaintext bool
		want      string
	}{
		{"workload certificate", ca.ServerCreds(t), ca.ClientCreds(cert("spiffe://cluster.local/ns/shop/sa/reviews")), false,
			"Aborted: auth=true id=spiffe://cluster.local/ns/shop/sa/reviews ns=shop sa=reviews register=true key=spiffe://cluster.local/ns/shop/sa/reviews@127.0.0.1 str=spiffe://cluster.local/ns/shop/sa/reviews"},
		{"TLS without a client certificate reads only", ca.ServerCreds(t), ca.ClientCreds(nil), true,
			"Aborted: auth=false id= ns= sa= register=false key=ip:127.0.0.1 str=unauthenticated peer ADDR"},
		{"plaintext, registration off", insecure.NewCredentials(), insecure.NewCredentials(), false,
			"Aborted: auth=false id= ns= sa= register=false key=ip:127.0.0.1 str=unauthenticated peer ADDR"},
		{"plaintext, --insecure-plaintext-registration", insecure.NewCredentials(), insecure.NewCredentials(), true,
			"Aborted: auth=false id= ns= sa= register=true key=ip:127.0.0.1 str=unauthenticated peer ADDR"},
		{"another trust domain", ca.ServerCreds(t), ca.ClientCreds(cert("spiffe://evil.example/ns/shop/sa/reviews")), false,
			`Unauthenticated: authn: client certificate serial`},
		{"not a workload ID", ca.ServerCreds(t), ca.ClientCreds(cert("spiffe://cluster.local/weft/pilot")), false,
			"Unauthenticated: authn: client certificate serial"},
		{"no SPIFFE ID", ca.ServerCreds(t), ca.ClientCreds(cert()), false,
			"Unauthenticated: authn: client certificate of 127.0.0.1:"},
		{"two URI SANs", ca.ServerCreds(t), ca.ClientCreds(cert("spiffe://cluster.local/ns/a/sa/b", "spiffe://cluster.local/ns/c/sa/d")), false,
			"Unauthenticated: authn: client certificate of 127.0.0.1:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := identify(t, tc.server, tc.client, tc.plaintext); !strings.HasPrefix(got, tc.want) {
				t.Fatalf("got  %s\nwant %s...", got, tc.want)
			}
		})
	}
	// A certificate of another CA never reaches Identify: the handshake fails.
	c := other.SVID(t, "spiffe://cluster.local/ns/shop/sa/reviews")
	if got := identify(t, ca.ServerCreds(t), ca.ClientCreds(&c), false); !strings.HasPrefix(got, "Unavailable") {
		t.Fatalf("certificate of another CA: %s, want Unavailable (handshake refused)", got)
	}
}

// Errors name the SPIFFE ID and the trust domains.
func TestIdentifyErrorsNameWhatFailed(t *testing.T) {
	ca := authntest.NewCA(t)
	for uri, want := range map[string]string{
		"spiffe://evil.example/ns/shop/sa/reviews": `SPIFFE ID spiffe://evil.example/ns/shop/sa/reviews is of trust domain "evil.example", pilot's is "cluster.local": unauthenticated`,
		"spiffe://cluster.local/weft/pilot":        "SPIFFE ID spiffe://cluster.local/weft/pilot: not a workload ID (want spiffe://<td>/ns/<ns>/sa/<sa>): unauthenticated",
	} {
		c := ca.Raw(t, uri)
		if got := identify(t, ca.ServerCreds(t), ca.ClientCreds(&c), false); !strings.HasSuffix(got, want) {
			t.Errorf("%s: got %s, want suffix %s", uri, got, want)
		}
	}
}

func TestAddrKey(t *testing.T) {
	for addr, want := range map[string]string{
		"10.1.2.3:5555":               "10.1.2.3",
		"[::ffff:10.1.2.3]:5555":      "10.1.2.3",
		"[2001:db8:1:2:3:4:5:6]:5555": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:1":    "2001:db8:1:2::/64",
		"@":                           "@",
		"":                            "",
	} {
		if got := authn.AddrKey(addr); got != want {
			t.Errorf("AddrKey(%q) = %q, want %q", addr, got, want)
		}
	}
}
