package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/node/envoynode"
	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/internal/edkey"
	"github.com/weft-mesh/weft/pilot/ca"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/certfiles"
	"github.com/weft-mesh/weft/tools/testkit/etcdtest"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

// sharedCAFlags are the flags of pilot replicas on c sharing the CA root, the
// token key and the publisher key from files.
func sharedCAFlags(t *testing.T, c *etcdtest.Cluster) []string {
	t.Helper()
	root := certfiles.NewCA(t, "cluster.local")
	keys := t.TempDir()
	tokenKey, pubKey := filepath.Join(keys, "token.key"), filepath.Join(keys, "publisher.key")
	for _, f := range []string{tokenKey, pubKey} {
		if _, _, err := edkey.LoadOrCreate(f, "shared key"); err != nil {
			t.Fatal(err)
		}
	}
	return []string{"--store", "etcd", "--etcd-endpoints", strings.Join(c.Endpoints, ","),
		"--ca-root-cert", root.RootCertFile, "--ca-root-key", root.RootKeyFile, "--ca-token-key", tokenKey, "--publisher-key-file", pubKey}
}

// errRefused is a handshake pilot's TLS listener refused.
var errRefused = errors.New("refused at the TLS handshake")

// xdsHandshake connects to pilot's xDS TLS port with cert as a sidecar does
// (TLS 1.3, h2) and reads pilot's first HTTP/2 frame: in TLS 1.3 the server
// checks the client certificate after the client's side of the handshake is
// done, so a refusal arrives as an alert on that first read.
func xdsHandshake(addr string, roots *bundle.Bundle, cert tls.Certificate) error {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"}, Certificates: []tls.Certificate{cert},
		InsecureSkipVerify: true, // pilot's chain is checked against roots below
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			var chain []*x509.Certificate
			for _, r := range raw {
				c, err := x509.ParseCertificate(r)
				if err != nil {
					return err
				}
				chain = append(chain, c)
			}
			_, err := roots.Verify(chain, time.Now())
			return err
		}}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		return fmt.Errorf("%s: write preface: %w", addr, err)
	}
	var frame [9]byte
	_, err = io.ReadFull(conn, frame[:])
	var alert tls.AlertError
	switch {
	case errors.As(err, &alert) || (err != nil && strings.Contains(err.Error(), "remote error: tls")):
		return fmt.Errorf("%s: %w: %v", addr, errRefused, err)
	case err != nil:
		return fmt.Errorf("%s: read: %w", addr, err)
	case frame[3] != 0x4: // SETTINGS
		return fmt.Errorf("%s: first frame type %d, want SETTINGS", addr, frame[3])
	}
	return nil
}

// liveADS is an authenticated ADS stream to pilot at addr with cert, as
// node ns/sa: it is open once pilot answered the first request; ended is
// closed when the stream ends, err says how.
type liveADS struct {
	answered chan struct{}
	ended    chan struct{}
	err      error
}

func openADS(t *testing.T, addr string, roots *bundle.Bundle, cert tls.Certificate, id, ns, sa string) *liveADS {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(proc.ClientTLS(t, roots, "cluster.local", &cert)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := &node.Node{ID: id, Namespace: ns, ServiceAccount: sa, Address: "10.0.0.3", InboundPort: 15006}
	if err := st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: snapshot.ClusterType, Node: envoynode.ToProto(n)}); err != nil {
		t.Fatal(err)
	}
	l := &liveADS{answered: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(l.ended)
		first := true
		for {
			r, err := st.Recv()
			if err != nil {
				l.err = err
				return
			}
			if first {
				close(l.answered)
				first = false
			}
			_ = st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: r.TypeUrl, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
		}
	}()
	t.Cleanup(func() { cancel(); cc.Close(); <-l.ended })
	select {
	case <-l.answered:
	case <-l.ended:
		t.Fatalf("ADS stream to %s ended before an answer: %v", addr, l.err)
	case <-time.After(10 * time.Second):
		t.Fatalf("ADS stream to %s: no answer within 10s", addr)
	}
	return l
}

// TestRevocationAcrossPilotReplicas: two bin/pilot replicas on one etcd. A
// workload certificate issued by replica A is accepted at replica B's xDS TLS
// port; `meshctl cert revoke` through A's admin API; then B refuses that
// certificate's handshake within ca.DefaultSharedPoll plus the time to sign
// and swap its CRL (bound asserted: 2s, the poll with room for a loaded
// 2-core machine), and so does A at once; the ADS stream that certificate
// had open to B is cut within the same bound. A fresh certificate from B is
// accepted by both throughout: only the revoked serial is refused.
func TestRevocationAcrossPilotReplicas(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	flags := sharedCAFlags(t, c)
	a := proc.StartPilot(t, "127.93.6.1", filepath.Join(t.TempDir(), "a"), flags...)
	b := proc.StartPilot(t, "127.93.6.2", filepath.Join(t.TempDir(), "b"), flags...)
	roots := a.CARoot(t)
	revoked := a.SVID(t, "shop", "reviews")
	other := b.SVID(t, "shop", "ratings")
	for _, p := range []*proc.PilotProcess{a, b} {
		for _, cert := range []tls.Certificate{revoked, other} {
			if err := xdsHandshake(p.XDSTLSAddr(), roots, cert); err != nil {
				t.Fatalf("before the revocation, %s: %v", cert.Leaf.URIs[0], err)
			}
		}
	}
	live := openADS(t, b.XDSTLSAddr(), roots, revoked, "reviews-on-b", "shop", "reviews")
	serial := fmt.Sprintf("%x", revoked.Leaf.SerialNumber)
	out, err := exec.Command(proc.Build(t, proc.Meshctl), "--pilot", a.URL(), "cert", "revoke", "--serial", serial, "--reason", "keyCompromise").CombinedOutput()
	if err != nil {
		t.Fatalf("meshctl cert revoke through A: %v\n%s", err, out)
	}
	acked := time.Now()
	t.Logf("meshctl cert revoke --serial %s through A: %s", serial, strings.TrimSpace(string(out)))
	if err := xdsHandshake(a.XDSTLSAddr(), roots, revoked); !errors.Is(err, errRefused) {
		t.Fatalf("A, right after its own revocation: %v, want refused", err)
	}
	var took time.Duration
	testkit.Wait(t, 10*time.Second, func() error {
		err := xdsHandshake(b.XDSTLSAddr(), roots, revoked)
		if errors.Is(err, errRefused) {
			took = time.Since(acked)
			return nil
		}
		if err == nil {
			return errors.New("B still accepts the certificate revoked through A")
		}
		return err
	})
	const bound = 2 * time.Second
	t.Logf("B refused the certificate revoked through A %v after the revocation was acknowledged (poll %v, bound %v)", took.Round(time.Millisecond), ca.DefaultSharedPoll, bound)
	if took > bound {
		t.Errorf("B refused it %v after the revocation, over the bound of %v", took, bound)
	}
	select {
	case <-live.ended:
	case <-time.After(bound):
		t.Fatalf("the revoked certificate's ADS stream to B is still open %v after the revocation", bound)
	}
	if grpcstatus.Code(live.err) != codes.PermissionDenied || !strings.Contains(live.err.Error(), "revoked") {
		t.Fatalf("the revoked certificate's ADS stream to B ended with %v, want PermissionDenied (revoked)", live.err)
	}
	t.Logf("its ADS stream to B was cut: %v", grpcstatus.Convert(live.err).Message())
	for _, p := range []*proc.PilotProcess{a, b} {
		if err := xdsHandshake(p.XDSTLSAddr(), roots, other); err != nil {
			t.Errorf("an unrevoked certificate at %s after the revocation: %v", p.XDSTLSAddr(), err)
		}
	}
}
