package grpcxds

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/certfiles"
	"github.com/weft-mesh/weft/tools/testkit/proc"
	"github.com/weft-mesh/weft/tools/testkit/proxyless"
)

// The grpc-go referee for a Weft sidecar's inbound mTLS: a real pilot (its CA
// plugged in from the test's, so the test can give grpc-go certificates) and a
// real bin/sidecar with an identity in front of a plain gRPC app. A proxyless
// grpc-go client with xDS credentials (file_watcher provider) reads from pilot
// that the sidecar's endpoint takes mTLS as spiffe://cluster.local/ns/rpc/sa/greeter,
// and calls through the sidecar's STRICT inbound: its call succeeds, verified
// both ways; the sidecar's RBAC (from pilot) answers another principal
// PermissionDenied; a grpc-go client pilot does not know (plaintext, no
// identity) gets no TLS from pilot and STRICT refuses it.

const sidecarIP = "127.93.9.1" // loopback address of this test's sidecar (inbound, admin)

func sidecarMeshYAML(appPort int) string {
	return fmt.Sprintf(`apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  selector: {app: greeter}
  ports:
  - {name: grpc, port: %[3]d, targetPort: %[4]d, protocol: GRPC}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: PeerAuthentication
metadata: {name: default, namespace: %[2]s}
spec: {mtls: STRICT}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: AuthorizationPolicy
metadata: {name: greeter-callers, namespace: %[2]s}
spec:
  selector: {app: greeter}
  rules:
  - from: [{principals: ["spiffe://cluster.local/ns/%[2]s/sa/client"]}]
`, svc, ns, svcPort, appPort)
}

func TestGRPCClientToSidecarInboundMTLS(t *testing.T) {
	authority := certfiles.NewCA(t, "cluster.local")
	pilot := proc.StartPilot(t, "127.93.9.100", filepath.Join(t.TempDir(), "pilot"), proc.Secure(),
		"--ca-root-cert", authority.RootCertFile, "--ca-root-key", authority.RootKeyFile, "--tls-san", "127.93.9.100")

	app := startBackend(t, "app") // plain gRPC on 127.0.0.1, behind the sidecar
	pilot.Apply(t, sidecarMeshYAML(app.port))
	sc := proc.StartSidecar(t, proc.SidecarConfig{NodeID: "greeter-sidecar", Namespace: ns, ServiceAccount: "greeter",
		Labels: map[string]string{"app": "greeter"}, IP: sidecarIP, Pilot: pilot})
	testkit.Wait(t, 30*time.Second, func() error {
		select {
		case <-sc.Exited():
			t.Fatalf("sidecar exited: %v\n%s", sc.Err(), sc.Logs.String())
		default:
		}
		if _, err := sc.Metric(`weft_sidecar_certificate_state{state="valid"} 1`); err != nil {
			return fmt.Errorf("sidecar certificate: %v", err)
		}
		return nil
	})

	okCert, okKey := authority.Issue(t, authority.Workload(t, ns, "client"), "client")
	noCert, noKey := authority.Issue(t, authority.Workload(t, ns, "other"), "other")
	client := func(id, bootstrap string) testgrpc.TestServiceClient {
		return testgrpc.NewTestServiceClient(proxyless.Dial(t, target, []byte(bootstrap)))
	}
	call := func(c testgrpc.TestServiceClient) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		r, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		return r.GetServerId(), err
	}

	allowed := client("grpc-client", string(identityBootstrap(pilot.XDSTLSAddr(), "grpc-client", okCert, okKey, pilot.CARootFile(), "")))
	testkit.Wait(t, 30*time.Second, func() error {
		id, err := call(allowed)
		if err != nil {
			return fmt.Errorf("grpc-go through the sidecar's inbound: %v", err)
		}
		if id != app.id {
			return fmt.Errorf("answered by %q, want %q", id, app.id)
		}
		return nil
	})
	// The sidecar terminated mTLS for the call.
	if line, err := sc.Metric(`weft_sidecar_mtls_handshakes_total{result="ok",side="server"}`); err != nil {
		t.Errorf("no successful server-side handshake counted: %v", err)
	} else {
		t.Logf("sidecar: %s", line)
	}

	denied := client("grpc-other", string(identityBootstrap(pilot.XDSTLSAddr(), "grpc-other", noCert, noKey, pilot.CARootFile(), "")))
	testkit.Wait(t, 30*time.Second, func() error {
		if _, err := call(denied); grpcstatus.Code(err) != codes.PermissionDenied {
			return fmt.Errorf("another principal: %v, want PermissionDenied", err)
		}
		return nil
	})

	// A client pilot does not know gets plaintext, which STRICT refuses.
	plain := client("grpc-plain", `{
  "xds_servers": [{"server_uri": "`+pilot.XDSAddr()+`", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": "grpc-plain"}
}`)
	testkit.Wait(t, 30*time.Second, func() error {
		if _, err := call(plain); grpcstatus.Code(err) != codes.Unavailable {
			return fmt.Errorf("plaintext client to a STRICT inbound: %v, want Unavailable", err)
		}
		return nil
	})
	before := app.calls.Load()
	if _, err := call(plain); err == nil {
		t.Fatal("plaintext call succeeded through a STRICT inbound")
	}
	if app.calls.Load() != before {
		t.Error("a refused call reached the app")
	}
}

// The other direction: a Weft sidecar as the mTLS client of a proxyless
// grpc-go xDS server. The server talks mTLS to pilot as
// spiffe://cluster.local/ns/rpc/sa/greeter and serves the Workload at its
// address, so pilot marks that endpoint mTLS and sends the server its
// listener (certificate-provider TLS, RBAC); a plain gRPC client calls through
// a Weft client sidecar's outbound listener, which dials the server over mTLS
// with its own SVID and checks the server's SPIFFE ID. The server's RBAC lets
// the client sidecar's identity through and answers another sidecar's
// PermissionDenied.
func TestSidecarToGRPCServerMTLS(t *testing.T) {
	authority := certfiles.NewCA(t, "cluster.local")
	pilot := proc.StartPilot(t, "127.93.9.101", filepath.Join(t.TempDir(), "pilot"), proc.Secure(),
		"--ca-root-cert", authority.RootCertFile, "--ca-root-key", authority.RootKeyFile, "--tls-san", "127.93.9.101")
	srvCert, srvKey := authority.Issue(t, authority.Workload(t, ns, "greeter"), "server")

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pilot.Apply(t, identityMeshYAML(lis.Addr().(*net.TCPAddr).Port))
	b := &backend{id: "grpc-xds-server", held: make(chan struct{}, 1), release: make(chan struct{})}
	proxyless.Serve(t, lis, identityBootstrap(pilot.XDSTLSAddr(), "greeter-server", srvCert, srvKey, pilot.CARootFile(), "127.0.0.1"),
		func(s grpc.ServiceRegistrar) { testgrpc.RegisterTestServiceServer(s, b) })

	// Client sidecars whose outbound listens on the service port (explicit
	// mode: the port is the chain), as "client" (allowed) and "other".
	sidecar := func(ip, sa string) (*proc.SidecarProcess, string) {
		sc := proc.StartSidecar(t, proc.SidecarConfig{NodeID: sa + "-sidecar", Namespace: ns, ServiceAccount: sa,
			Labels: map[string]string{"app": sa}, IP: ip, Pilot: pilot,
			Extra: []string{"--outbound-addr", net.JoinHostPort(ip, strconv.Itoa(svcPort))}})
		testkit.Wait(t, 30*time.Second, func() error {
			select {
			case <-sc.Exited():
				t.Fatalf("sidecar %s exited: %v\n%s", sa, sc.Err(), sc.Logs.String())
			default:
			}
			_, err := sc.Metric(`weft_sidecar_certificate_state{state="valid"} 1`)
			return err
		})
		return sc, net.JoinHostPort(ip, strconv.Itoa(svcPort))
	}
	through := func(outbound string) testgrpc.TestServiceClient {
		cc, err := grpc.NewClient("passthrough:///"+outbound, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithAuthority(svc+"."+ns+".svc.cluster.local:"+strconv.Itoa(svcPort)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return testgrpc.NewTestServiceClient(cc)
	}
	call := func(c testgrpc.TestServiceClient) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		r, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		return r.GetServerId(), err
	}

	clientSC, out := sidecar("127.93.9.2", "client")
	allowed := through(out)
	testkit.Wait(t, 30*time.Second, func() error {
		id, err := call(allowed)
		if err != nil {
			return fmt.Errorf("through the client sidecar to the grpc-go xDS server: %v", err)
		}
		if id != b.id {
			return fmt.Errorf("answered by %q", id)
		}
		return nil
	})
	// The client sidecar made the mTLS connection.
	if line, err := clientSC.Metric(`weft_sidecar_mtls_handshakes_total{result="ok",side="client"}`); err != nil {
		t.Errorf("no successful client-side handshake counted: %v", err)
	} else {
		t.Logf("client sidecar: %s", line)
	}
	_, out = sidecar("127.93.9.3", "other")
	denied := through(out)
	testkit.Wait(t, 30*time.Second, func() error {
		if _, err := call(denied); grpcstatus.Code(err) != codes.PermissionDenied {
			return fmt.Errorf("another sidecar's identity: %v, want PermissionDenied", err)
		}
		return nil
	})
}
