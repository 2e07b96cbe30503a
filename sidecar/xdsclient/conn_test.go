package xdsclient

import (
	"testing"

	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/grpc/connectivity"

	"github.com/weft-mesh/weft/tools/testkit"
)

// Conn is the live stream's connection once a response came, and nil when the
// stream is gone (so reports never go on a dead or a reconnecting stream's
// connection).
func TestConnFollowsTheStream(t *testing.T) {
	cache := cachev3.NewSnapshotCache(true, cachev3.IDHash{}, quiet{})
	setSnapshot(t, cache, snapshot(t, "v1", listener("l1", "r1")))
	srv := startServer(t, cache, "127.0.0.1:0")
	c := runClient(t, testConfig(t, Delta, &applier{}, srv.addr))
	testkit.Eventually(t, waitTimeout, "v1 ACKed", func() bool { return ackedAll(srv.rec, "v1") })
	cc := c.Conn()
	if cc == nil || cc.GetState() != connectivity.Ready || cc.Target() != srv.addr {
		t.Fatalf("Conn with a live stream: %v", cc)
	}
	srv.stop()
	testkit.Eventually(t, waitTimeout, "Conn cleared when the stream ended", func() bool { return c.Conn() == nil })
	startServer(t, cache, srv.addr)
	testkit.Eventually(t, waitTimeout, "a new Conn on reconnect", func() bool { return c.Conn() != nil && c.Conn() != cc })
}
