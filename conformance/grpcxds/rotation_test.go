package grpcxds

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/certfiles"
	"github.com/weft-mesh/weft/tools/testkit/proc"
	"github.com/weft-mesh/weft/tools/testkit/proxyless"
)

// A proxyless grpc-go client keeps its connection to a Weft sidecar's STRICT
// inbound until something closes it, with the certificate of its handshake:
// it does not retire connections when its file_watcher rotates. The sidecar
// therefore drains the connection (GOAWAY) once the client's certificate is
// past its retire point, and grpc-go moves to a fresh handshake with its
// current certificate, before that certificate's NotAfter would make the
// sidecar cut the connection with calls on it. Short-lived client
// certificates (rotationTTL, rotated every rotationEvery) and calls back to
// back across the first one's NotAfter: none fails, no connection is cut for
// expiry, at least one is drained.
const (
	rotationTTL   = 8 * time.Second
	rotationEvery = 3 * time.Second
)

func TestGRPCClientCertificateRotationDrainsNotCuts(t *testing.T) {
	authority := certfiles.NewCA(t, "cluster.local")
	pilot := proc.StartPilot(t, "127.93.10.100", filepath.Join(t.TempDir(), "pilot"), proc.Secure(),
		"--ca-root-cert", authority.RootCertFile, "--ca-root-key", authority.RootKeyFile, "--tls-san", "127.93.10.100")
	app := startBackend(t, "app")
	pilot.Apply(t, sidecarMeshYAML(app.port))
	sc := proc.StartSidecar(t, proc.SidecarConfig{NodeID: "greeter-rotation", Namespace: ns, ServiceAccount: "greeter",
		Labels: map[string]string{"app": "greeter"}, IP: "127.93.10.1", Pilot: pilot})
	metric := func(name string) string {
		line, err := sc.Metric(name)
		if err != nil {
			return name + " 0"
		}
		return line
	}

	id := authority.Workload(t, ns, "client")
	certFile, keyFile := authority.IssueTTL(t, id, "client", rotationTTL)
	first := time.Now()
	client := testgrpc.NewTestServiceClient(proxyless.Dial(t, target,
		identityBootstrap(pilot.XDSTLSAddr(), "grpc-rotation", certFile, keyFile, pilot.CARootFile(), "")))
	call := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		return err
	}
	testkit.Wait(t, 30*time.Second, func() error {
		if err := call(); err != nil {
			return fmt.Errorf("grpc-go through the sidecar's inbound: %v", err)
		}
		return nil
	})

	// Calls back to back until well past the first certificate's NotAfter,
	// the files rotated meanwhile.
	var calls, failed atomic.Int64
	var firstErr atomic.Value
	done := make(chan struct{})
	go func() {
		defer close(done)
		for time.Since(first) < rotationTTL+3*time.Second {
			calls.Add(1)
			if err := call(); err != nil {
				if failed.Add(1) == 1 {
					firstErr.Store(err.Error())
				}
			}
		}
	}()
	rotate := time.NewTicker(rotationEvery)
	defer rotate.Stop()
	for rotated := false; !rotated || time.Since(first) < rotationTTL; {
		select {
		case <-rotate.C:
			authority.IssueTTL(t, id, "client", rotationTTL)
			rotated = true
		case <-done:
			rotated = true
		}
	}
	<-done
	t.Logf("%d calls across the client's first certificate's NotAfter (%s, rotated every %s); %s; %s", calls.Load(), rotationTTL, rotationEvery,
		metric("weft_sidecar_mtls_connections_retired_total"), metric(`weft_sidecar_mtls_connections_closed_total{reason="expired"}`))
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d calls failed across the rotation; first: %v", n, calls.Load(), firstErr.Load())
	}
	if line := metric(`weft_sidecar_mtls_connections_closed_total{reason="expired"}`); !strings.HasSuffix(line, " 0") {
		t.Errorf("%s: the sidecar cut a connection at a NotAfter instead of draining it first", line)
	}
	if line := metric("weft_sidecar_mtls_connections_retired_total"); strings.HasSuffix(line, " 0") {
		t.Errorf("%s: no connection was drained", line)
	}
}
