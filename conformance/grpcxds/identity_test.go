package grpcxds

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/weft-mesh/weft/pilot/ca"
	"github.com/weft-mesh/weft/pilot/server"
	"github.com/weft-mesh/weft/pilot/server/servertest"
	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/xds/gen"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/certfiles"
	"github.com/weft-mesh/weft/tools/testkit/proxyless"
)

// The grpc-go referee for identity, against pilot itself: a proxyless grpc-go
// xDS server (xds.NewGRPCServer, xDS credentials) and proxyless clients (xDS
// credentials, file_watcher certificate provider) connect to pilot's TLS xDS
// port with certificates from pilot's (plugged-in) mesh CA, so pilot knows
// their identities. The server's mTLS and RBAC come from pilot alone: the
// allowed principal's calls succeed over mTLS, another principal's are
// PermissionDenied, and pilot's status shows every type grpc-go reads ACKed.

// identityBootstrap is a grpc-go bootstrap that talks mTLS to pilot's TLS xDS
// port and has a "default" certificate provider for the data plane; server
// nodes carry their address (weft.address) and the server listener template.
func identityBootstrap(xdsAddr, nodeID, certFile, keyFile, rootFile, address string) []byte {
	files := fmt.Sprintf(`{"ca_certificate_file": %q, "certificate_file": %q, "private_key_file": %q, "refresh_interval": "1s"}`, rootFile, certFile, keyFile)
	extra, meta := "", ""
	if address != "" {
		meta = fmt.Sprintf(`, "metadata": {"weft.address": %q}`, address)
		extra = fmt.Sprintf(`,
  "server_listener_resource_name_template": %q`, gen.ServerListenerTemplate)
	}
	return fmt.Appendf(nil, `{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "tls", "config": %s}], "server_features": ["xds_v3"]}],
  "node": {"id": %q, "locality": {"zone": "a"}%s},
  "certificate_providers": {%q: {"plugin_name": "file_watcher", "config": %s}}%s
}`, xdsAddr, files, nodeID, meta, gen.CertProviderInstance, files, extra)
}

func identityMeshYAML(port int) string {
	return fmt.Sprintf(`apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: greeter, namespace: %[1]s}
spec:
  selector: {app: greeter}
  ports:
  - {name: grpc, port: %[2]d, protocol: GRPC}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: greeter-0, namespace: %[1]s, labels: {app: greeter}}
spec: {address: 127.0.0.1, serviceAccount: greeter, ports: {grpc: %[3]d}}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: PeerAuthentication
metadata: {name: default, namespace: %[1]s}
spec: {mtls: STRICT}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: AuthorizationPolicy
metadata: {name: greeter-callers, namespace: %[1]s}
spec:
  selector: {app: greeter}
  rules:
  - from: [{principals: ["spiffe://cluster.local/ns/%[1]s/sa/client"]}]
    to: [{paths: ["/grpc.testing.TestService/*"], methods: [POST]}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: AuthorizationPolicy
metadata: {name: no-streaming, namespace: %[1]s}
spec:
  selector: {app: greeter}
  action: DENY
  rules:
  - to: [{paths: ["/grpc.testing.TestService/StreamingOutputCall"]}]
`, ns, svcPort, port)
}

// syncedTypes reports whether every type in want is SYNCED at rev or later.
func syncedTypes(ps status.ProxyStatus, rev int64, want ...string) bool {
	got := map[string]bool{}
	for _, ts := range ps.Types {
		got[ts.Type] = ts.Status == status.Synced
	}
	for _, w := range want {
		if !got[w] {
			return false
		}
	}
	return ps.Status == status.Synced && ps.EffectiveRevision >= rev
}

func TestGRPCIdentityMTLSAndRBAC(t *testing.T) {
	authority := certfiles.NewCA(t, "cluster.local")
	p := servertest.Start(t, servertest.Options{Secure: true, CA: func(_ context.Context, env server.AuthorityEnv) (server.Authority, error) {
		return ca.New(ca.ServiceConfig{DataDir: env.DataDir, TrustDomain: env.TrustDomain, RootCertFile: authority.RootCertFile, RootKeyFile: authority.RootKeyFile,
			ServingIPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Logger: env.Logger})
	}})
	srvCert, srvKey := authority.Issue(t, authority.Workload(t, ns, "greeter"), "server")
	okCert, okKey := authority.Issue(t, authority.Workload(t, ns, "client"), "allowed")
	noCert, noKey := authority.Issue(t, authority.Workload(t, ns, "other"), "denied")

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rev := p.Apply(t, identityMeshYAML(lis.Addr().(*net.TCPAddr).Port))

	b := &backend{id: "secure", held: make(chan struct{}, 1), release: make(chan struct{})}
	proxyless.Serve(t, lis, identityBootstrap(p.XDSTLSAddr, "greeter-server", srvCert, srvKey, authority.RootFile, "127.0.0.1"),
		func(s grpc.ServiceRegistrar) { testgrpc.RegisterTestServiceServer(s, b) })

	client := func(id, cert, key string) testgrpc.TestServiceClient {
		return testgrpc.NewTestServiceClient(proxyless.Dial(t, target, identityBootstrap(p.XDSTLSAddr, id, cert, key, authority.RootFile, "")))
	}
	call := func(c testgrpc.TestServiceClient) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		return err
	}

	allowed := client("allowed-client", okCert, okKey)
	testkit.Wait(t, 20*time.Second, func() error {
		if err := call(allowed); err != nil {
			return fmt.Errorf("allowed principal: %v", err)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := allowed.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if grpcstatus.Code(err) != codes.PermissionDenied {
		t.Errorf("allowed principal, DENY-ed method: %v, want PermissionDenied", err)
	}

	denied := client("denied-client", noCert, noKey)
	var last error
	testkit.Wait(t, 20*time.Second, func() error {
		if last = call(denied); grpcstatus.Code(last) != codes.PermissionDenied {
			return fmt.Errorf("other principal: %v, want PermissionDenied", last)
		}
		return nil
	})
	t.Logf("other principal: %v", last)
	if n := b.calls.Load(); n == 0 {
		t.Fatal("the allowed calls never reached the server")
	}

	// Pilot knows each by its certificate and saw every type ACKed.
	p.WaitProxy(t, 10*time.Second, "greeter-server", "LDS SYNCED", func(ps status.ProxyStatus) bool {
		return ps.Namespace == ns && syncedTypes(ps, rev, "LDS")
	})
	for _, id := range []string{"allowed-client", "denied-client"} {
		p.WaitProxy(t, 10*time.Second, id, "CDS, EDS, LDS, RDS SYNCED", func(ps status.ProxyStatus) bool {
			return syncedTypes(ps, rev, "CDS", "EDS", "LDS", "RDS")
		})
	}
	if page := p.Metrics(t); strings.Contains(page, "weft_pilot_xds_nacks_total{") {
		t.Errorf("grpc-go NACKed a response:\n%s", page)
	}
}
