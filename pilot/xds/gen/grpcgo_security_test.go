package gen_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/compile"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/xds/gen"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/certfiles"
	"github.com/weft-mesh/weft/tools/testkit/proxyless"
)

// This file is the grpc-go referee for what gen sends for identity: a
// proxyless grpc-go server (xds.NewGRPCServer with xDS credentials) and
// proxyless clients (xDS credentials, file_watcher certificate provider, with
// certificates from certs/ca) take gen's output through go-control-plane's
// ADS server. grpc-go must ACK every type; the client must reach the server
// over mTLS with the SPIFFE ID gen says; grpc-go's RBAC must let the allowed
// principal through and answer PermissionDenied to another one.

const secureTarget = "greeter.shop.svc.cluster.local:50051"

// grpcBootstrap is a grpc-go bootstrap whose "default" certificate provider
// reads cert, key and the CA's roots from files.
func grpcBootstrap(xdsPort int, nodeID, certFile, keyFile, rootFile string, server bool) []byte {
	tmpl := ""
	if server {
		tmpl = fmt.Sprintf(`,
  "server_listener_resource_name_template": %q`, gen.ServerListenerTemplate)
	}
	return fmt.Appendf(nil, `{
  "xds_servers": [{"server_uri": "127.0.0.1:%d", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": %q},
  "certificate_providers": {
    %q: {"plugin_name": "file_watcher", "config": {"certificate_file": %q, "private_key_file": %q, "ca_certificate_file": %q, "refresh_interval": "1s"}}
  }%s
}`, xdsPort, nodeID, gen.CertProviderInstance, certFile, keyFile, rootFile, tmpl)
}

func secureMeshYAML(port int) string {
	return fmt.Sprintf(`apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: greeter, namespace: shop}
spec:
  selector: {app: greeter}
  ports:
  - {name: grpc, port: 50051, protocol: GRPC}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: greeter-0, namespace: shop, labels: {app: greeter}}
spec: {address: 127.0.0.1, serviceAccount: greeter, ports: {grpc: %d}}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: PeerAuthentication
metadata: {name: default, namespace: shop}
spec: {mtls: STRICT}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: AuthorizationPolicy
metadata: {name: greeter-callers, namespace: shop}
spec:
  selector: {app: greeter}
  rules:
  - from: [{principals: ["spiffe://cluster.local/ns/shop/sa/client"]}]
    to: [{paths: ["/grpc.testing.TestService/*"]}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: AuthorizationPolicy
metadata: {name: no-streaming, namespace: shop}
spec:
  selector: {app: greeter}
  action: DENY
  rules:
  - to: [{paths: ["/grpc.testing.TestService/StreamingOutputCall"]}]
`, port)
}

func TestGRPCGoSecureServerAndClient(t *testing.T) {
	authority := certfiles.NewCA(t, "cluster.local")
	serverID := authority.Workload(t, "shop", "greeter")
	allowedID := authority.Workload(t, "shop", "client")
	deniedID := authority.Workload(t, "shop", "other")
	srvCert, srvKey := authority.Issue(t, serverID, "server")
	okCert, okKey := authority.Issue(t, allowedID, "allowed")
	noCert, noKey := authority.Issue(t, deniedID, "denied")

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port

	objs, err := resource.Decode([]byte(secureMeshYAML(port)), "secure.yaml")
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	nodes := map[string]*node.Node{
		"greeter-server": {ID: "greeter-server", Address: "127.0.0.1", Identity: serverID.String()},
		"allowed-client": {ID: "allowed-client", Identity: allowedID.String()},
		"denied-client":  {ID: "denied-client", Identity: deniedID.String()},
	}
	mesh, err := compile.Compile(compile.Input{Revision: 1, Objects: objs, Proxies: []*node.Node{nodes["greeter-server"]}})
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	if len(mesh.Warnings) > 0 {
		t.Fatalf("compile warnings: %v", mesh.Warnings)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	for id, n := range nodes {
		s, err := gen.Proxy(mesh, n)
		if err != nil {
			t.Fatal(err)
		}
		if err := cache.SetSnapshot(ctx, id, cacheSnapshot(t, s)); err != nil {
			t.Fatal(err)
		}
	}
	rec := &nackRecorder{acked: map[string]bool{}}
	xdsSrv := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(xdsSrv, serverv3.NewServer(ctx, cache, serverv3.CallbackFuncs{StreamRequestFunc: rec.onRequest}))
	xdsPort := serve(t, xdsSrv)

	// The proxyless server: mTLS and RBAC come only from xDS.
	proxyless.Serve(t, lis, grpcBootstrap(xdsPort, "greeter-server", srvCert, srvKey, authority.RootFile, true),
		func(s grpc.ServiceRegistrar) { testgrpc.RegisterTestServiceServer(s, &greeter{id: "secure"}) })

	client := func(t *testing.T, id, cert, key string) testgrpc.TestServiceClient {
		return testgrpc.NewTestServiceClient(proxyless.Dial(t, "xds:///"+secureTarget, grpcBootstrap(xdsPort, id, cert, key, authority.RootFile, false)))
	}
	call := func(c testgrpc.TestServiceClient) error {
		callCtx, callCancel := context.WithTimeout(ctx, 2*time.Second)
		defer callCancel()
		_, err := c.UnaryCall(callCtx, &testgrpc.SimpleRequest{})
		return err
	}
	noNACK := func() {
		if nacks, _ := rec.state(); len(nacks) > 0 {
			t.Fatalf("grpc-go NACKed gen's output:\n%s", strings.Join(nacks, "\n"))
		}
	}

	allowed := client(t, "allowed-client", okCert, okKey)
	testkit.Wait(t, 20*time.Second, func() error {
		noNACK()
		if err := call(allowed); err != nil {
			return fmt.Errorf("allowed principal's call: %v", err)
		}
		return nil
	})
	// The DENY policy beats the ALLOW one for its method.
	stream, err := allowed.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if code := grpcstatus.Code(err); code != codes.PermissionDenied {
		t.Errorf("allowed principal's denied method: %v, want PermissionDenied", err)
	}

	denied := client(t, "denied-client", noCert, noKey)
	var last error
	testkit.Wait(t, 20*time.Second, func() error {
		noNACK()
		last = call(denied)
		if grpcstatus.Code(last) != codes.PermissionDenied {
			return fmt.Errorf("denied principal's call: %v, want PermissionDenied", last)
		}
		return nil
	})
	t.Logf("denied principal: %v", last)

	// Every type each client reads, and the server's Listener, ACKed.
	testkit.Wait(t, 10*time.Second, func() error {
		noNACK()
		_, acked := rec.state()
		for _, typ := range []string{"Listener", "RouteConfiguration", "Cluster", "ClusterLoadAssignment"} {
			if !acked[typ] {
				return fmt.Errorf("grpc-go never ACKed %s (acked: %v)", typ, acked)
			}
		}
		return nil
	})
}
