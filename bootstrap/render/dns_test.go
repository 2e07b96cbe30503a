package render

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// Every DNS flag: its default, its bounds accepted, one past each refused
// naming the flag.
func TestDNSFlagsAtBoundsAndOnePast(t *testing.T) {
	got, err := Parse(base, readFile)
	if err != nil || got.DNS != DefaultDNS() {
		t.Fatalf("no flags: %+v %v, want the defaults", got.DNS, err)
	}
	tests := []struct {
		flag, ok, bad string
		want          func(DNS) bool
	}{
		{"dns-addr", "127.0.0.1:15053", "127.0.0.1:0", func(d DNS) bool { return d.Addr == netip.MustParseAddrPort("127.0.0.1:15053") && !d.Off }},
		{"dns-addr", "[::1]:53", "localhost:53", func(d DNS) bool { return d.Addr == netip.MustParseAddrPort("[::1]:53") }},
		{"dns-addr", "off", "127.0.0.1:15000", func(d DNS) bool { return d.Off && !d.Addr.IsValid() }}, // admin's address
		{"dns-max-in-flight", "1", "-1", func(d DNS) bool { return d.MaxInFlight == 1 }},
		{"dns-max-in-flight", "1048576", "1048577", func(d DNS) bool { return d.MaxInFlight == 1<<20 }},
		{"dns-forward-timeout", "30s", "30.000000001s", func(d DNS) bool { return d.ForwardTimeout == 30*time.Second }},
		{"dns-forward-timeout", "1ns", "0s", func(d DNS) bool { return d.ForwardTimeout == 1 }},
		{"dns-forward-timeout", "1s", "soon", func(d DNS) bool { return d.ForwardTimeout == time.Second }},
		{"dns-max-tcp-connections", "65536", "65537", func(d DNS) bool { return d.MaxTCPConns == 65536 }},
		{"dns-max-tcp-connections", "1", "-1", func(d DNS) bool { return d.MaxTCPConns == 1 }},
	}
	for _, tc := range tests {
		t.Run(tc.flag+"="+tc.ok, func(t *testing.T) {
			s, err := Parse(with("--"+tc.flag, tc.ok), readFile)
			if err != nil || !tc.want(s.DNS) {
				t.Fatalf("--%s %s: %+v %v", tc.flag, tc.ok, s.DNS, err)
			}
			_, err = Parse(with("--"+tc.flag, tc.bad), readFile)
			if err == nil || !strings.Contains(err.Error(), tc.flag) {
				t.Fatalf("--%s %s: err %v, want one naming the flag", tc.flag, tc.bad, err)
			}
		})
	}
}

// Listen: --dns-addr wins, off is off, and without it the proxy runs on the
// default address exactly when the sidecar intercepts.
func TestDNSListen(t *testing.T) {
	def := netip.MustParseAddrPort(DefaultDNSAddr)
	set := netip.MustParseAddrPort("127.0.0.5:5353")
	for _, tc := range []struct {
		d            DNS
		intercepting bool
		want         netip.AddrPort
		on           bool
	}{
		{DNS{}, false, netip.AddrPort{}, false},
		{DNS{}, true, def, true},
		{DNS{Off: true}, true, netip.AddrPort{}, false},
		{DNS{Addr: set}, false, set, true},
		{DNS{Addr: set}, true, set, true},
	} {
		if got, on := tc.d.Listen(tc.intercepting); got != tc.want || on != tc.on {
			t.Errorf("%+v intercepting=%v: %v %v, want %v %v", tc.d, tc.intercepting, got, on, tc.want, tc.on)
		}
	}
}

// The bootstrap file takes the same keys; a flag overrides the file's value.
func TestDNSFromBootstrapFile(t *testing.T) {
	files["dns.yaml"] = files["full.yaml"] + "dns-addr: 127.0.0.1:5353\ndns-resolv-conf: /pod/resolv.conf\ndns-max-in-flight: 8\n" +
		"dns-forward-timeout: 500ms\ndns-max-tcp-connections: 4\n"
	defer delete(files, "dns.yaml")
	s, err := Parse([]string{"--bootstrap", "dns.yaml", "--dns-max-in-flight", "9"}, readFile)
	if err != nil {
		t.Fatal(err)
	}
	want := DNS{Addr: netip.MustParseAddrPort("127.0.0.1:5353"), ResolvConf: "/pod/resolv.conf", MaxInFlight: 9,
		ForwardTimeout: 500 * time.Millisecond, MaxTCPConns: 4}
	if s.DNS != want {
		t.Fatalf("dns %+v, want %+v", s.DNS, want)
	}
	if s, err = Parse([]string{"--bootstrap", "dns.yaml", "--dns-addr", "off"}, readFile); err != nil || !s.DNS.Off {
		t.Fatalf("off over the file: %+v %v", s.DNS, err)
	}
}
