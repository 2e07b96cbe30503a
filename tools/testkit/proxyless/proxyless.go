// Package proxyless starts grpc-go's proxyless xDS peers for tests: a server
// (xds.NewGRPCServer) and clients whose mTLS comes from xDS (xDS credentials,
// the bootstrap's certificate providers), configured by a bootstrap the test
// writes. Both fall back to plaintext where xDS sends no TLS, as grpc-go's own
// examples do. Imported only by tests.
package proxyless

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/grpc/xds"
)

// Serve runs a proxyless grpc-go xDS server on lis, configured by bootstrap,
// with the services register adds, until the test ends (then it is stopped and
// waited for).
func Serve(t testing.TB, lis net.Listener, bootstrap []byte, register func(grpc.ServiceRegistrar)) {
	t.Helper()
	creds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	gs, err := xds.NewGRPCServer(grpc.Creds(creds), xds.BootstrapContentsForTesting(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	register(gs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
}

// Dial is a proxyless grpc-go client of target (an xds:/// URI) whose xDS
// client is configured by bootstrap, closed when the test ends.
func Dial(t testing.TB, target string, bootstrap []byte) *grpc.ClientConn {
	t.Helper()
	rb, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(target, grpc.WithResolvers(rb), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}
