package attacker

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/node/envoynode"
	"github.com/weft-mesh/weft/pilot/xds/ads"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// Hostile-stream memory bound: pilot's RSS with HostileStreams read-only
// streams open, each at the largest subscription a stream without a
// certificate may hold, grows by at most MaxHostileRSSGrowth.
const (
	HostileStreams = 2000
	// perAddress streams from each source address: the per-identity bound.
	perAddress = ads.DefaultMaxStreamsPerIdentity
	// MaxHostileRSSGrowth: each stream holds at most 128 names of 512 bytes
	// (64 KiB of names and their bookkeeping) plus gRPC's, the source's and
	// the status tracker's per-stream state (~29 KiB measured with one name),
	// and the Go heap may grow to twice what is live before a collection:
	// measured ~155 KiB of RSS per stream, 2,000 streams ~310 MiB.
	MaxHostileRSSGrowth = 400 << 20
)

// The third finding, second half: one stream subscribed to 100,000
// names held about 17 MB and nothing capped the streams. Now 2,000 hostile
// read-only streams (from 250 addresses, 8 each: the per-address bound; each
// subscribing to the most names of the longest size a stream without a
// certificate may) leave pilot's RSS under a stated bound; the 9th stream of an
// address and a subscription one past the bound are refused.
func TestHostileStreamsRSS(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 streams")
	}
	p := startPilot(t)
	r := reader(t, p, "reader") // also a live stream before and after
	waitEndpoints(t, r, nil)
	before := rss(t, p)

	// The largest subscription: MaxReadOnlySubscriptions names, all but one
	// (the one that makes pilot answer) MaxResourceNameBytes long.
	names := []string{reviewsEDS}
	for i := 1; i < ads.DefaultMaxReadOnlySubscriptions; i++ {
		n := fmt.Sprintf("hostile-%d-", i)
		names = append(names, n+strings.Repeat("x", ads.DefaultMaxResourceNameBytes-len(n)))
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, HostileStreams)
	conns := make([]*grpc.ClientConn, HostileStreams/perAddress)
	for a := range conns {
		cc, err := grpc.NewClient(p.XDSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()), fromAddr(hostileIP(a)))
		if err != nil {
			t.Fatal(err)
		}
		conns[a] = cc
		t.Cleanup(func() { cc.Close() })
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for i := range HostileStreams {
		wg.Go(func() {
			errs <- hostile(ctx, conns[i/perAddress], fmt.Sprint("hostile-", i), names)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	opened := time.Since(start)
	after := rss(t, p)
	growth := after - before
	t.Logf("pilot RSS: %d MiB before, %d MiB with %d hostile streams of %d names x %d bytes (+%d MiB, %d KiB per stream; opened in %v)",
		before>>20, after>>20, HostileStreams, len(names), ads.DefaultMaxResourceNameBytes, growth>>20, growth/HostileStreams>>10, opened.Round(time.Millisecond))
	if growth > MaxHostileRSSGrowth {
		t.Errorf("pilot RSS grew by %d MiB with %d hostile streams, bound %d MiB", growth>>20, HostileStreams, MaxHostileRSSGrowth>>20)
	}

	// One more stream from a full address is refused before it reads a
	// request; one more name is refused too.
	over := dialStream(t, p.XDSAddr(), insecure.NewCredentials(), fromAddr(hostileIP(0))).open(t,
		&node.Node{ID: "ninth"}, []string{snapshot.EndpointType}, map[string][]string{snapshot.EndpointType: {reviewsEDS}})
	wantEnded(t, over, fmt.Sprintf("ResourceExhausted: ads: unauthenticated peer %s:", hostileIP(0)))
	tooMany := dialStream(t, p.XDSAddr(), insecure.NewCredentials(), fromAddr(hostileIP(len(conns)))).open(t,
		&node.Node{ID: "one-more"}, []string{snapshot.EndpointType}, map[string][]string{snapshot.EndpointType: append(names, "x")})
	wantEnded(t, tooMany, fmt.Sprintf("ResourceExhausted: ads: node one-more: EDS requests %d resource names, limit %d over all types", len(names)+1, len(names)))
	if !r.alive() {
		t.Fatal("the reader's stream ended")
	}
}

// hostile opens one read-only stream subscribing names and returns once pilot
// answered it (it has then built the subscription); the stream stays open
// until ctx ends.
func hostile(ctx context.Context, cc *grpc.ClientConn, id string, names []string) error {
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", id, err)
	}
	if err := s.Send(&discoveryv3.DiscoveryRequest{Node: envoynode.ToProto((&node.Node{ID: id})), TypeUrl: snapshot.EndpointType, ResourceNames: names}); err != nil {
		return fmt.Errorf("%s: send: %w", id, err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() { _, err := s.Recv(); got <- err }()
	select {
	case err := <-got:
		if err != nil {
			return fmt.Errorf("%s: %w", id, err)
		}
		return nil
	case <-rctx.Done():
		return fmt.Errorf("%s: no answer within 30s", id)
	}
}

// hostileIP is the a-th source address of hostile clients (127.92.0.0/16).
func hostileIP(a int) string { return fmt.Sprintf("127.92.%d.%d", a/250, a%250+1) }

func fromAddr(ip string) grpc.DialOption {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) })
}

// rss is pilot's resident set size after a moment of quiet (2 reads 200 ms
// apart must agree within 1 MiB, so a burst still being handled is not taken).
func rss(t *testing.T, p interface{ RSS() (int64, error) }) int64 {
	t.Helper()
	var last int64 = -1
	for deadline := time.Now().Add(10 * time.Second); ; {
		v, err := p.RSS()
		if err != nil {
			t.Fatal(err)
		}
		if d := v - last; last >= 0 && d < 1<<20 && d > -(1<<20) {
			return v
		}
		if time.Now().After(deadline) {
			return v
		}
		last = v
		time.Sleep(200 * time.Millisecond)
	}
}
