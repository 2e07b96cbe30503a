package ads

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/tools/testkit"
)

func TestConfigCheck(t *testing.T) {
	ok := testConfig()
	ok.Source, ok.Status = newFakeSource(), &status.Tracker{}
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"logger", func(c *Config) { c.Logger = nil }, "ads: Config.Logger is required"},
		{"source", func(c *Config) { c.Source = nil }, "ads: Config.Source is required"},
		{"status", func(c *Config) { c.Status = nil }, "ads: Config.Status is required"},
		{"max unacked", func(c *Config) { c.MaxUnacked = 0 }, "ads: Config.MaxUnacked must be > 0, got 0"},
		{"send timeout", func(c *Config) { c.SendTimeout = 0 }, "ads: Config.SendTimeout must be > 0, got 0s"},
		{"recv queue", func(c *Config) { c.RecvQueue = 0 }, "ads: Config.RecvQueue must be > 0, got 0"},
		{"subscriptions", func(c *Config) { c.MaxSubscriptions = 0 }, "ads: Config.MaxSubscriptions must be > 0, got 0"},
		{"diff cache", func(c *Config) { c.DiffCacheEntries = 0 }, "ads: Config.DiffCacheEntries must be > 0, got 0"},
		{"read-only subscriptions", func(c *Config) { c.MaxReadOnlySubscriptions = 0 }, "ads: Config.MaxReadOnlySubscriptions must be > 0, got 0"},
		{"trust domain", func(c *Config) { c.TrustDomain = "" }, "ads: Config.TrustDomain is required"},
		{"streams per identity", func(c *Config) { c.MaxStreamsPerIdentity = 0 }, "ads: Config.MaxStreamsPerIdentity must be > 0, got 0"},
		{"read-only streams", func(c *Config) { c.MaxReadOnlyStreams = 0 }, "ads: Config.MaxReadOnlyStreams must be > 0, got 0"},
		{"name bytes", func(c *Config) { c.MaxResourceNameBytes = 0 }, "ads: Config.MaxResourceNameBytes must be > 0, got 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			if _, err := New(c); err == nil || err.Error() != tc.want {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := New(ok); err != nil {
		t.Fatal(err)
	}
}

// A proxy that reads responses but never answers them is cut once MaxUnacked
// responses are outstanding, and is shown DISCONNECTED.
func TestUnackedLimitCutsStream(t *testing.T) {
	e := start(t, func(c *Config) { c.MaxUnacked = 3 })
	e.src.publish(mkSnap(t, 1, res{cds: {"a": "0"}}))
	c := e.delta(t)
	c.send(&discoveryv3.DeltaDiscoveryRequest{Node: nodeProto("slow"), TypeUrl: cds, ResourceNamesSubscribe: []string{"*"}})
	c.recv()
	for i := 1; i <= 3; i++ {
		e.src.publish(mkSnap(t, int64(i+1), res{cds: {"a": fmt.Sprint(i)}}))
		if i < 3 {
			c.recv()
		}
	}
	err := c.endErr()
	if st, _ := grpcstatus.FromError(err); st.Code() != codes.ResourceExhausted ||
		st.Message() != "ads: node slow has 3 responses unanswered (limit 3); closing the stream so it resyncs" {
		t.Fatalf("err = %v, want ResourceExhausted", err)
	}
	e.waitStatus(t, "slow", "DISCONNECTED", func(ps status.ProxyStatus) bool { return ps.Status == status.Disconnected })
	testkit.Eventually(t, 10*time.Second, "watch closed", func() bool { return cmp.Equal(e.src.closedIDs(), []string{"slow"}) })
}

// Answering keeps the count down: a client ACKing every response is never cut.
func TestAckingClientIsNotCut(t *testing.T) {
	// 10 pushes against a limit of 2: only counting the answers keeps it open.
	e := start(t, func(c *Config) { c.MaxUnacked = 2 })
	e.src.publish(mkSnap(t, 1, res{cds: {"a": "0"}}))
	c := e.delta(t)
	c.send(&discoveryv3.DeltaDiscoveryRequest{Node: nodeProto("ok"), TypeUrl: cds, ResourceNamesSubscribe: []string{"*"}})
	c.ack(c.recv())
	for i := 1; i <= 10; i++ {
		e.waitStatus(t, "ok", "synced", func(ps status.ProxyStatus) bool { return ps.Status == status.Synced })
		s := mkSnap(t, int64(i+1), res{cds: {"a": fmt.Sprint(i)}})
		e.src.publish(s)
		r := c.recv()
		if r.Resources[0].Version != ver(s, cds, "a") {
			t.Fatalf("push %d: got version %s", i, r.Resources[0].Version)
		}
		c.ack(r)
	}
	e.waitStatus(t, "ok", "synced at 11", func(ps status.ProxyStatus) bool { return ps.EffectiveRevision == 11 })
}

// A proxy that stops reading is cut after SendTimeout instead of holding pilot:
// with responses each over the quota gRPC holds per stream (the first Send past
// it blocks), and with small ones, which go out without the guard while
// under DirectSendBytes are outstanding and then pile up until a guarded Send
// blocks.
func TestSendTimeoutCutsStream(t *testing.T) {
	for _, size := range []int{256 << 10, 8 << 10} {
		t.Run(fmt.Sprintf("%dKiB", size>>10), func(t *testing.T) { sendTimeoutCuts(t, size) })
	}
}

func sendTimeoutCuts(t *testing.T, size int) {
	e := start(t, func(c *Config) { c.SendTimeout = 200 * time.Millisecond; c.MaxUnacked = 1000 },
		grpc.WithInitialWindowSize(64*1024), grpc.WithInitialConnWindowSize(64*1024))
	big := strings.Repeat("x", size)
	e.src.publish(mkSnap(t, 1, res{cds: {"a": big + "0"}}))
	// A raw stream nobody reads from.
	ctx, cancel := contextWithCancel()
	defer cancel()
	s, err := e.client.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: nodeProto("stuck"), TypeUrl: cds, ResourceNamesSubscribe: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, "stuck", "first response sent", func(ps status.ProxyStatus) bool { return typeStatus(ps, cds).Nonce == "1" })
	// Keep changing the cluster: responses pile up unread until a Send blocks
	// past SendTimeout and the stream is cut.
	i := 0
	testkit.Wait(t, 10*time.Second, func() error {
		i++
		e.src.publish(mkSnap(t, int64(i+1), res{cds: {"a": big + fmt.Sprint(i)}}))
		if ps, err := e.tracker.Proxy("stuck"); err != nil || ps.Status != status.Disconnected {
			return fmt.Errorf("stream not cut after %d changes (SendTimeout is 200ms): status %+v (err %v)", i, ps, err)
		}
		return nil
	})
	cancel()
	for {
		if _, err := s.Recv(); err != nil {
			break
		}
	}
}

// typeIndex numbers snapshot.PushOrder, which numTypes counts.
func TestTypeIndex(t *testing.T) {
	if len(snapshot.PushOrder) != numTypes {
		t.Fatalf("numTypes %d, PushOrder has %d types", numTypes, len(snapshot.PushOrder))
	}
	for i, typ := range snapshot.PushOrder {
		if got := typeIndex(typ); got != i {
			t.Errorf("typeIndex(%s) = %d, want %d", typ, got, i)
		}
	}
	if got := typeIndex("type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"); got != -1 {
		t.Errorf("typeIndex of a type pilot does not serve = %d, want -1", got)
	}
}

func TestUnknownTypeIgnoredAndDisconnect(t *testing.T) {
	e := start(t, nil)
	s := mkSnap(t, 1, res{cds: {"a": "1"}})
	e.src.publish(s)
	c := e.sotw(t)
	c.send(&discoveryv3.DiscoveryRequest{Node: nodeProto("n1"), TypeUrl: "type.googleapis.com/envoy.config.route.v3.ScopedRouteConfiguration"})
	c.send(&discoveryv3.DiscoveryRequest{TypeUrl: cds})
	// The first answer is the CDS one: the unknown type got none.
	if r := c.recv(); r.TypeUrl != cds || r.Nonce != "1" {
		t.Fatalf("got %s nonce %s, want CDS nonce 1", r.TypeUrl, r.Nonce)
	}
	if err := c.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, "n1", "DISCONNECTED", func(ps status.ProxyStatus) bool { return ps.Status == status.Disconnected })
	if rs := e.tracker.Revision(1); rs.Connected != 0 {
		t.Fatalf("revision 1 counts %d connected, want 0 (disconnected proxies are not converged)", rs.Connected)
	}
}

// Many concurrent delta streams all converge on each of several quick revisions.
func TestManyStreamsConverge(t *testing.T) {
	e := start(t, nil)
	e.src.publish(mkSnap(t, 1, res{cds: {"a": "1"}, eds: {"a": "1"}}))
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	stop := make(chan struct{})
	for i := range n {
		c := e.delta(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: nodeProto(fmt.Sprintf("p%d", i)), TypeUrl: cds, ResourceNamesSubscribe: []string{"*"}}); err != nil {
				errs <- err
				return
			}
			if err := c.stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a"}}); err != nil {
				errs <- err
				return
			}
			for {
				select {
				case r := <-c.resps:
					if err := c.stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce}); err != nil {
						errs <- err
						return
					}
				case <-stop:
					return
				}
			}
		}()
	}
	for rev := int64(2); rev <= 6; rev++ {
		e.src.publish(mkSnap(t, rev, res{cds: {"a": "1"}, eds: {"a": fmt.Sprint(rev)}}))
	}
	testkit.Eventually(t, 10*time.Second, "all converged at 6", func() bool {
		rs := e.tracker.Revision(6)
		return rs.Connected == n && rs.Converged
	})
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
