package tcpproxy_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/tcpproxy"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// TestPassthroughDialsOriginalDst: the ORIGINAL_DST cluster dials the
// connection's original destination within the cluster's connect timeout.
func TestPassthroughDialsOriginalDst(t *testing.T) {
	r := dt.Resources{}
	r.Add(xdsresource.ListenerType, dt.WithDefault(dt.Listener("outbound", dt.MustAddr("127.0.0.1:15001")), dt.TCPChain(0, "PassthroughCluster")))
	r.Add(xdsresource.ClusterType, dt.OriginalDstCluster("PassthroughCluster", 250*time.Millisecond))
	cfg, err := r.Compile(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rt := cfg.Listener("outbound").SelectDest(dt.MustAddr("93.184.216.34:443"), false).TCP
	type dial struct {
		addr string
		left time.Duration
	}
	dials := make(chan dial, 1)
	refused := errors.New("test dial: refused")
	p, err := tcpproxy.New(tcpproxy.Config{Logger: hclog.NewNullLogger(), Passthrough: cluster.NewPassthrough(nil),
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			dl, _ := ctx.Deadline()
			dials <- dial{addr, time.Until(dl)}
			return nil, refused
		}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	defer b.Close()
	err = p.ServeTo(context.Background(), a, rt, netip.Addr{}, dt.MustAddr("[::ffff:93.184.216.34]:443"))
	if !errors.Is(err, refused) {
		t.Fatalf("ServeTo: %v", err)
	}
	d := <-dials
	if d.addr != "93.184.216.34:443" || d.left <= 0 || d.left > 250*time.Millisecond {
		t.Errorf("dialled %s with %v left, want 93.184.216.34:443 within the 250ms connect timeout", d.addr, d.left)
	}
	// Without an original destination (Serve) nothing is dialled.
	a2, b2 := net.Pipe()
	defer b2.Close()
	if err := p.Serve(context.Background(), a2, rt, netip.Addr{}); !errors.Is(err, cluster.ErrNoDestination) {
		t.Errorf("Serve without a destination: %v", err)
	}
}
