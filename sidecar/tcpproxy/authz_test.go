package tcpproxy_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/mtls/mtlstest"
	"github.com/weft-mesh/weft/sidecar/svid"
	"github.com/weft-mesh/weft/sidecar/tcpproxy"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// TestAuthzClosesDenied: on an inbound TCP chain with network RBAC (an
// Override blocking t42/bot, ALLOW namespace shop on the listener's port) a
// verified shop peer is proxied, the bot, another namespace and a plaintext
// client are closed before any upstream is dialled, and past authorization's
// expiry everyone is.
func TestAuthzClosesDenied(t *testing.T) {
	echo := echoServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint32(ln.Addr().(*net.TCPAddr).Port)
	l := dt.Listener("inbound", dt.MustAddr("127.0.0.1:1"), dt.TCPChain(0, "db"))
	dt.WithNetworkRBAC(l,
		dt.NetworkRBAC("weft.override", dt.Rules(rbacv3.RBAC_DENY, map[string]*rbacv3.Policy{"shop/block-bot": dt.Policy(
			[]*rbacv3.Permission{dt.AnyPermission()}, []*rbacv3.Principal{dt.Principal("spiffe://cluster.local/ns/t42/sa/bot")})}), nil),
		dt.NetworkRBAC("envoy.filters.network.rbac", dt.Rules(rbacv3.RBAC_ALLOW, map[string]*rbacv3.Policy{"shop/db": dt.Policy(
			[]*rbacv3.Permission{dt.Port(port)}, []*rbacv3.Principal{dt.Namespace("cluster.local", "shop"), dt.Namespace("cluster.local", "t42")})}), nil))
	dt.WithOverrides(l, dt.OverrideTTL{Name: "shop/block-bot", TTL: time.Hour, Revision: 1})
	r := dt.Resources{}
	r.Add(xdsresource.ListenerType, l)
	r.Add(xdsresource.ClusterType, dt.EDSCluster("db", dt.ClusterOpts{Connect: time.Second}))
	r.Add(xdsresource.EndpointType, dt.Endpoints("db", echo))
	cfg, err := r.Compile(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rt := cfg.Listener("inbound").Chain(1).TCP
	var expired atomic.Bool
	p, err := tcpproxy.New(tcpproxy.Config{Logger: hclog.NewNullLogger(), AuthzExpired: func() (string, bool) { return "authorization expired", expired.Load() }})
	if err != nil {
		t.Fatal(err)
	}
	ca := mtlstest.NewCA(t, "mesh")
	h := &svid.Holder{}
	h.Store(ca.Workload(t, "cluster.local", "shop", "db"))
	m, err := mtls.New(mtls.Config{SVID: h, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	trust, err := mtls.NewTrust(ca.Bundle(t), ca.CRL(t, 1, time.Now().Add(-time.Minute), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	m.SetTrust(trust, true)
	errs := make(chan error, 16)
	ctx, cancel := context.WithCancel(context.Background())
	plainLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	serve := func(ln net.Listener, useTLS bool) {
		defer func() { done <- struct{}{} }()
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				var c net.Conn = raw
				if useTLS {
					mc, err := m.Server(ctx, raw)
					if err != nil {
						errs <- err
						return
					}
					c = mc
				}
				errs <- p.Serve(ctx, c, rt, dt.MustAddr("127.0.0.1:1").Addr())
			}()
		}
	}
	go serve(ln, true)
	go serve(plainLn, false)
	t.Cleanup(func() { ln.Close(); plainLn.Close(); cancel(); <-done; <-done })

	dial := func(ns, sa string) net.Conn {
		t.Helper()
		if ns == "" {
			c, err := net.Dial("tcp", plainLn.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		s := ca.Workload(t, "cluster.local", ns, sa)
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{Certificates: []tls.Certificate{s.Cert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// echoes reports whether a round trip through the proxy works.
	echoes := func(c net.Conn) bool {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return false
		}
		b := make([]byte, 4)
		_, err := io.ReadFull(c, b)
		return err == nil && string(b) == "ping"
	}
	wantServe := func(denied bool) {
		t.Helper()
		select {
		case err := <-errs:
			if got := errors.Is(err, tcpproxy.ErrDenied); got != denied {
				t.Errorf("Serve = %v, want denied %v", err, denied)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Serve did not return")
		}
	}
	if !echoes(dial("shop", "web")) {
		t.Error("shop peer not proxied")
	}
	wantServe(false)
	for _, who := range [][2]string{{"t42", "bot"}, {"other", "x"}, {"", ""}} {
		if echoes(dial(who[0], who[1])) {
			t.Errorf("%v proxied, want closed", who)
		}
		wantServe(true)
	}
	expired.Store(true)
	if echoes(dial("shop", "web")) {
		t.Error("proxied past authorization expiry")
	}
	wantServe(true)
}
