package xdsclient

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/certs/ca"
	"github.com/weft-mesh/weft/certs/spiffe"
	"github.com/weft-mesh/weft/sidecar/certclient"
	"github.com/weft-mesh/weft/sidecar/svid"
	"github.com/weft-mesh/weft/tools/testkit"
)

// tlsServer is the reference xDS server on mTLS, recording the serial of the
// client certificate each stream came with.
type tlsServer struct {
	*refServer
	mu      sync.Mutex
	serials []*big.Int
}

func (s *tlsServer) seen() []*big.Int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*big.Int(nil), s.serials...)
}

func startTLSServer(t *testing.T, c cachev3.Cache, addr string, serving tls.Certificate, roots *bundle.Bundle) *tlsServer {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rec := newRecorder()
	ts := &tlsServer{}
	record := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if p, ok := peer.FromContext(ss.Context()); ok {
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
				ts.mu.Lock()
				ts.serials = append(ts.serials, ti.State.PeerCertificates[0].SerialNumber)
				ts.mu.Unlock()
			}
		}
		return h(srv, ss)
	}
	gs := grpc.NewServer(grpc.StreamInterceptor(record), grpc.Creds(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13,
		Certificates: []tls.Certificate{serving}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: roots.Pool()})))
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(ctx, c, rec.callbacks()))
	ts.refServer = &refServer{addr: lis.Addr().String(), rec: rec, gs: gs, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(ts.done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(ts.stop)
	return ts
}

func issue(t *testing.T, c *ca.CA, id spiffeid.ID) (*svid.SVID, tls.Certificate) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := c.SignKey(k.Public(), id, nil, []net.IP{net.IPv4(127, 0, 0, 1)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s, err := svid.New(chain, k)
	if err != nil {
		t.Fatal(err)
	}
	return s, s.Cert
}

// With TLS set, the stream is mTLS to a server verified as pilot; a renewed
// certificate is presented from the next reconnect on.
func TestTLSToPilot(t *testing.T) {
	c, err := ca.Open(ca.Config{Dir: t.TempDir(), TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	pilotID, _ := spiffe.Pilot("cluster.local")
	workload, _ := spiffe.Workload("cluster.local", "shop", "reviews")
	_, serving := issue(t, c, pilotID)
	first, _ := issue(t, c, workload)
	h := &svid.Holder{}
	h.Store(first)
	cache := cachev3.NewSnapshotCache(true, cachev3.IDHash{}, quiet{})
	setSnapshot(t, cache, snapshot(t, "v1", listener("l1", "r1")))
	srv := startTLSServer(t, cache, "127.0.0.1:0", serving, c.Bundle())

	cfg := testConfig(t, Delta, &applier{}, srv.addr)
	trust := func() (*bundle.Bundle, error) { return c.Bundle(), nil }
	cfg.TLS = certclient.PilotTLS(pilotID, trust, h.GetClientCertificate, time.Now)
	cl := runClient(t, cfg)
	testkit.Eventually(t, waitTimeout, "v1 ACKed over mTLS", func() bool { return ackedAll(srv.rec, "v1") })
	if got := srv.seen(); len(got) == 0 || got[0].Cmp(first.Cert.Leaf.SerialNumber) != 0 {
		t.Fatalf("server saw serials %v, want %v first", got, first.Cert.Leaf.SerialNumber)
	}

	// Renewal: the live stream is untouched; the next connection presents it.
	second, _ := issue(t, c, workload)
	h.Store(second)
	addr := srv.addr
	srv.stop()
	testkit.Eventually(t, waitTimeout, "stream gone", func() bool { return !cl.Status().Connected })
	srv2 := startTLSServer(t, cache, addr, serving, c.Bundle())
	testkit.Wait(t, waitTimeout, func() error {
		got := srv2.seen()
		if len(got) == 0 {
			return errors.New("no reconnect yet")
		}
		if got[len(got)-1].Cmp(second.Cert.Leaf.SerialNumber) != 0 {
			return errors.New("reconnect did not present the renewed certificate")
		}
		return nil
	})
}

// A server that is not pilot (another SPIFFE ID, or another CA) is refused:
// the client never gets a stream up.
func TestTLSRefusesNotPilot(t *testing.T) {
	c, _ := ca.Open(ca.Config{Dir: t.TempDir(), TrustDomain: "cluster.local"})
	other, _ := ca.Open(ca.Config{Dir: t.TempDir(), TrustDomain: "cluster.local"})
	pilotID, _ := spiffe.Pilot("cluster.local")
	pubID, _ := spiffe.Publisher("cluster.local")
	workload, _ := spiffe.Workload("cluster.local", "shop", "reviews")
	s, _ := issue(t, c, workload)
	h := &svid.Holder{}
	h.Store(s)
	_, impostor := issue(t, c, pubID)
	_, foreign := issue(t, other, pilotID)
	for _, tc := range []struct {
		name    string
		serving tls.Certificate
		want    string
	}{
		{"another SPIFFE ID", impostor, "is spiffe://cluster.local/weft/publisher, want spiffe://cluster.local/weft/pilot"},
		{"another CA", foreign, "verifying pilot (want spiffe://cluster.local/weft/pilot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := cachev3.NewSnapshotCache(true, cachev3.IDHash{}, quiet{})
			setSnapshot(t, cache, snapshot(t, "v1", listener("l1", "r1")))
			srv := startTLSServer(t, cache, "127.0.0.1:0", tc.serving, c.Bundle())
			var mu sync.Mutex
			var lastErr error
			verify := func() (*bundle.Bundle, error) { return c.Bundle(), nil }
			cfg := testConfig(t, Delta, &applier{}, srv.addr)
			cfg.TLS = certclient.PilotTLS(pilotID, verify, h.GetClientCertificate, time.Now)
			inner := cfg.TLS.VerifyConnection
			cfg.TLS.VerifyConnection = func(cs tls.ConnectionState) error {
				err := inner(cs)
				mu.Lock()
				lastErr = err
				mu.Unlock()
				return err
			}
			cl := runClient(t, cfg)
			testkit.Wait(t, waitTimeout, func() error {
				mu.Lock()
				defer mu.Unlock()
				if lastErr == nil || !strings.Contains(lastErr.Error(), tc.want) {
					return errors.New("no refusal yet: " + errString(lastErr))
				}
				return nil
			})
			if cl.Status().Connected || len(srv.seen()) != 0 {
				t.Fatal("a stream came up with a server that is not pilot")
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// Pilot refuses the client certificate (here: from another CA, as an expired
// one would be); a new certificate in the holder redials at once instead of
// after the backoff (here up to an hour, full jitter: a reconnect within 5s
// without the redial has a chance of 1 in 720).
func TestRedialOnNewCertificate(t *testing.T) {
	c, _ := ca.Open(ca.Config{Dir: t.TempDir(), TrustDomain: "cluster.local"})
	other, _ := ca.Open(ca.Config{Dir: t.TempDir(), TrustDomain: "cluster.local"})
	pilotID, _ := spiffe.Pilot("cluster.local")
	workload, _ := spiffe.Workload("cluster.local", "shop", "reviews")
	_, serving := issue(t, c, pilotID)
	refused, _ := issue(t, other, workload)
	h := &svid.Holder{}
	h.Store(refused)
	cache := cachev3.NewSnapshotCache(true, cachev3.IDHash{}, quiet{})
	setSnapshot(t, cache, snapshot(t, "v1", listener("l1", "r1")))
	srv := startTLSServer(t, cache, "127.0.0.1:0", serving, c.Bundle())
	cfg := testConfig(t, Delta, &applier{}, srv.addr)
	cfg.Backoff = Backoff{Initial: time.Hour, Max: time.Hour}
	cfg.ConnectTimeout = 200 * time.Millisecond
	cfg.TLS = certclient.PilotTLS(pilotID, func() (*bundle.Bundle, error) { return c.Bundle(), nil }, h.GetClientCertificate, time.Now)
	cfg.Redial = h.Changed
	cl := runClient(t, cfg)
	testkit.Eventually(t, waitTimeout, "the refused stream has ended", func() bool {
		return cl.Status().Server != "" && !cl.Status().Connected
	})
	good, _ := issue(t, c, workload)
	start := time.Now()
	h.Store(good)
	testkit.Eventually(t, waitTimeout, "v1 ACKed after the new certificate", func() bool { return ackedAll(srv.rec, "v1") })
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("reconnected %v after the new certificate", took)
	}
}
