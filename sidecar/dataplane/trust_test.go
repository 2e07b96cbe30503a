package dataplane_test

import (
	"errors"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/mtls/mtlstest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

const reviewsSA = "spiffe://cluster.local/ns/shop/sa/reviews"

func TestTrustCompiles(t *testing.T) {
	ca := mtlstest.NewCA(t, "root")
	good := dt.RootCA(ca.RootPEM(), ca.CRLPEM(t, 7, time.Now(), time.Hour))
	r := tlsResources(good)
	cfg, err := r.Compile(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Trust() == nil || cfg.Trust().CRL().Number() != 7 || !cfg.NeedsMTLS() {
		t.Fatalf("trust %v needs %v, want CRL 7 and mTLS needed", cfg.Trust(), cfg.NeedsMTLS())
	}
	c := cfg.Cluster("reviews")
	if c.TLS == nil || len(c.Endpoints()) != 2 {
		t.Fatalf("cluster TLS %v endpoints %d", c.TLS, len(c.Endpoints()))
	}
	mt, plain := c.Endpoints()[0], c.Endpoints()[1]
	if mt.TLS() == nil || plain.TLS() != nil || mt.PoolKey() == mt.Address() || plain.PoolKey() != plain.Address() {
		t.Errorf("auto-mTLS: marked %v/%q, unmarked %v/%q", mt.TLS(), mt.PoolKey(), plain.TLS(), plain.PoolKey())
	}
	l := cfg.Listener("inbound")
	if !l.Sniff(15006) || l.Select(15006, true) == nil || !l.Select(15006, true).MTLS || l.Select(15006, false) == nil || l.Select(15006, false).MTLS {
		t.Errorf("inbound chains by transport wrong")
	}
	if l.Sniff(9999) || l.Select(9999, true) != nil {
		t.Errorf("a port without chains sniffs or selects")
	}
}

func tlsResources(secret *tlsv3.Secret) dt.Resources {
	a, b := dt.MustAddr("10.0.0.2:15006"), dt.MustAddr("10.0.0.3:15006")
	r := dt.Resources{}
	r.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", dt.MustAddr("127.0.0.1:15001"), "out"),
		dt.Listener("inbound", dt.MustAddr("0.0.0.0:15006"),
			dt.WithTransport(dt.HTTPChain(15006, "out"), xdsresource.TransportTLS),
			dt.WithTransport(dt.HTTPChain(15006, "out"), xdsresource.TransportRaw)))
	r.Add(xdsresource.RouteType, dt.RouteConfig("out", dt.VirtualHost("all", []string{"*"}, dt.PrefixRoute("/", "reviews", 0))))
	c := dt.EDSCluster("reviews", dt.ClusterOpts{})
	c.TransportSocket = dt.UpstreamTLS("reviews", []string{"h2"}, reviewsSA)
	r.Add(xdsresource.ClusterType, c)
	r.Add(xdsresource.EndpointType, dt.MarkMTLS(dt.MarkPeer(dt.Endpoints("reviews", a, b), a, b), a))
	if secret != nil {
		r.Add(xdsresource.SecretType, secret)
	}
	return r
}

func TestTrustRefusals(t *testing.T) {
	ca, other := mtlstest.NewCA(t, "root"), mtlstest.NewCA(t, "other")
	for _, tc := range []struct {
		name   string
		secret *tlsv3.Secret
		want   string
	}{
		{"no ROOTCA for TLS chains and clusters", nil, `secret "ROOTCA" not found`},
		{"bundle not PEM", dt.RootCA([]byte("junk"), ca.CRLPEM(t, 1, time.Now(), time.Hour)), "validation_context.trusted_ca"},
		{"CRL signed by another CA", dt.RootCA(ca.RootPEM(), other.CRLPEM(t, 1, time.Now(), time.Hour)), "validation_context.crl"},
		{"CRL not PEM", dt.RootCA(ca.RootPEM(), []byte("junk")), "validation_context.crl"},
	} {
		_, err := tlsResources(tc.secret).Compile(dataplane.Options{})
		if !errors.Is(err, dataplane.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want invalid naming %s", tc.name, err, tc.want)
		}
	}
}
