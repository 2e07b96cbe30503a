package xdsresource_test

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

var fuzzTypes = []string{xdsresource.ListenerType, xdsresource.RouteType, xdsresource.ClusterType, xdsresource.EndpointType, xdsresource.SecretType}

// FuzzDecode feeds arbitrary bytes as each resource type: Decode must never panic, and
// a success must yield the type's Go value with the name it reports.
func FuzzDecode(f *testing.F) {
	seed := func(k uint8, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(k, b)
	}
	r := dt.Simple("outbound", dt.MustAddr("127.0.0.1:15001"), true, dt.MustAddr("10.0.0.1:15006"))
	for k, tu := range fuzzTypes {
		for _, m := range r[tu] {
			seed(uint8(k), m)
		}
	}
	seed(0, dt.Listener("inbound", dt.MustAddr("10.0.0.1:15006"), dt.HTTPChain(9080, "r"), dt.TCPChain(3306, "c")))
	seed(0, inboundWithRBAC())
	peer := dt.MustAddr("10.0.0.2:15006")
	seed(3, dt.MarkPeer(dt.Endpoints("c", dt.MustAddr("10.0.0.1:8080"), peer), peer))
	seed(4, dt.RootCA([]byte("bundle"), []byte("crl")))
	tc := dt.EDSCluster("t", dt.ClusterOpts{})
	tc.TransportSocket = dt.UpstreamTLS("t", []string{"h2"}, "spiffe://cluster.local/ns/a/sa/b")
	seed(2, tc)
	seed(0, dt.Listener("inbound", dt.MustAddr("10.0.0.1:15006"), dt.WithTransport(dt.HTTPChain(15006, "r"), "tls"), dt.WithTransport(dt.HTTPChain(15006, "r"), "raw_buffer")))
	seed(1, dt.RouteConfig("r", dt.VirtualHost("v", []string{"*.shop", "a:80"}, regexRoute("/v[0-9]+/.*"))))
	seed(0, dt.WithDNS(dt.HTTPListener("outbound", dt.MustAddr("127.0.0.1:15001"), "r"),
		dt.DNSMetadata("cluster.local", map[string][]string{"reviews.shop.svc.cluster.local": {"240.240.0.1", "fd00::1"}})))
	f.Fuzz(func(t *testing.T, k uint8, b []byte) {
		tu := fuzzTypes[int(k)%len(fuzzTypes)]
		name, v, err := xdsresource.Decode(tu, &anypb.Any{TypeUrl: tu, Value: b})
		if err != nil {
			if v != nil {
				t.Fatalf("error %v with non-nil value %T", err, v)
			}
			return
		}
		switch x := v.(type) {
		case *xdsresource.Listener:
			if x.Name != name {
				t.Fatalf("listener name %q != %q", x.Name, name)
			}
		case *xdsresource.RouteConfig:
			if x.Name != name {
				t.Fatalf("route name %q != %q", x.Name, name)
			}
		case *xdsresource.Cluster:
			if x.Name != name || x.ConnectTimeout <= 0 {
				t.Fatalf("cluster %q: %+v", name, x)
			}
		case *xdsresource.Endpoints:
			if x.Name != name {
				t.Fatalf("endpoints name %q != %q", x.Name, name)
			}
		case *xdsresource.Secret:
			if x.Name != name || len(x.TrustedCA) == 0 || len(x.CRL) == 0 {
				t.Fatalf("secret %q: %+v", name, x)
			}
		default:
			t.Fatalf("unexpected value %T", v)
		}
	})
}
