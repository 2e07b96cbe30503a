package app

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	mdns "github.com/miekg/dns"

	"github.com/weft-mesh/weft/bootstrap/render"
	"github.com/weft-mesh/weft/sidecar/dns"
	"github.com/weft-mesh/weft/tools/testkit"
)

// bootstrap/render's DNS defaults and bounds are sidecar/dns's.
func TestDNSFlagDefaultsAreThePackages(t *testing.T) {
	for _, c := range []struct {
		name      string
		flag, pkg int64
	}{
		{"max in flight", render.DefaultDNSMaxInFlight, dns.DefaultMaxInFlight},
		{"max in flight bound", render.MaxDNSMaxInFlight, dns.MaxMaxInFlight},
		{"forward timeout", int64(render.DefaultDNSForwardTimeout), int64(dns.DefaultForwardTimeout)},
		{"forward timeout bound", int64(render.MaxDNSForwardTimeout), int64(dns.MaxForwardTimeout)},
		{"tcp connections", render.DefaultDNSMaxTCPConns, dns.DefaultMaxTCPConns},
		{"tcp connections bound", render.MaxDNSMaxTCPConns, dns.MaxMaxTCPConns},
	} {
		if c.flag != c.pkg {
			t.Errorf("%s: flag %d, package %d", c.name, c.flag, c.pkg)
		}
	}
	if render.DefaultDNSAddr != dns.DefaultAddr || render.DefaultDNSResolvConf != dns.DefaultResolvConf {
		t.Error("DNS address or resolv.conf defaults differ")
	}
}

func resolvConf(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunDNS: with --dns-addr the proxy serves UDP and TCP beside the rest;
// without a configuration every name is forwarded (here to no nameserver:
// SERVFAIL, counted); config_dump and /metrics show it; readiness is its own.
func TestRunDNS(t *testing.T) {
	s := settings(t, "127.77.9.9", "--dns-addr", "127.77.9.9:15053", "--dns-resolv-conf", resolvConf(t, "search shop.svc.cluster.local\n"),
		"--dns-max-in-flight", "17")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, s, Options{Logger: hclog.NewNullLogger()}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	for _, network := range []string{"udp", "tcp"} {
		var r *mdns.Msg
		testkit.Wait(t, 10*time.Second, func() error {
			m := new(mdns.Msg)
			m.SetQuestion("reviews.shop.", mdns.TypeA)
			var err error
			r, _, err = (&mdns.Client{Net: network, Timeout: time.Second}).Exchange(m, "127.77.9.9:15053")
			return err
		})
		if r.Rcode != mdns.RcodeServerFailure {
			t.Fatalf("%s: %v", network, r)
		}
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	body := func(url string) string {
		resp, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	cd := body("http://127.77.9.9:15000/config_dump")
	for _, want := range []string{`"dns": {`, `"addrs": [`, `"127.77.9.9:15053"`, `"namespace": "shop"`, `"upstream_error": 2`, `"maxInFlight": 17`} {
		if !strings.Contains(cd, want) {
			t.Fatalf("config_dump lacks %s:\n%s", want, cd)
		}
	}
	m := body("http://127.77.9.9:15000/metrics")
	for _, want := range []string{`weft_dns_queries_total{outcome="upstream_error",transport="tcp"} 1`, `weft_dns_limit{limit="max_in_flight"} 17`} {
		if !strings.Contains(m, want) {
			t.Fatalf("/metrics lacks %s", want)
		}
	}
	if r := body("http://127.77.9.9:15021/healthz/ready"); r != "no configuration yet: waiting for pilot\n" {
		t.Fatalf("ready: %q", r)
	}
}

func TestRunDNSRefusesToStart(t *testing.T) {
	log := hclog.NewNullLogger()
	missing := filepath.Join(t.TempDir(), "none")
	for _, tc := range []struct {
		name string
		s    *render.Settings
		want string
	}{
		{"no resolv.conf", settings(t, "127.77.9.10", "--dns-addr", "127.77.9.10:15053", "--dns-resolv-conf", missing),
			"sidecar: dns: resolv.conf: open " + missing + ": no such file or directory"},
		{"loop", settings(t, "127.77.9.10", "--dns-addr", "127.77.9.10:53", "--dns-resolv-conf", resolvConf(t, "nameserver 127.77.9.10\n")),
			"sidecar: dns: resolv.conf " + "%s" + " names the proxy's own address 127.77.9.10:53: every forward would loop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := strings.Replace(tc.want, "%s", tc.s.DNS.ResolvConf, 1)
			if err := Run(context.Background(), tc.s, Options{Logger: log}); err == nil || err.Error() != want {
				t.Fatalf("Run = %v, want %q", err, want)
			}
		})
	}
	// Off by default in explicit mode: no resolv.conf is read at all.
	s := settings(t, "127.77.9.10", "--dns-resolv-conf", missing)
	if _, on := s.DNS.Listen(s.Node.Interception != ""); on {
		t.Fatal("DNS on in explicit mode without --dns-addr")
	}
}
