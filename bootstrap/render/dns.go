package render

import (
	"flag"
	"fmt"
	"net/netip"
	"time"
)

// The DNS proxy's settings (issue #10; sidecar/dns has the same defaults and
// bounds, and sidecar/app tests that the two agree).
const (
	DefaultDNSAddr           = "127.0.0.1:15053" // when the sidecar intercepts
	DefaultDNSResolvConf     = "/etc/resolv.conf"
	DefaultDNSMaxInFlight    = 1024
	MaxDNSMaxInFlight        = 1 << 20
	DefaultDNSForwardTimeout = 2 * time.Second
	MaxDNSForwardTimeout     = 30 * time.Second
	DefaultDNSMaxTCPConns    = 256
	MaxDNSMaxTCPConns        = 1 << 16
	// DNSOff is the --dns-addr value that turns the proxy off.
	DNSOff = "off"
)

// DNS says whether and how the sidecar proxies DNS.
type DNS struct {
	// Addr is --dns-addr when given as IP:PORT (invalid otherwise); Off is
	// --dns-addr off. Neither: Listen decides by the interception mode.
	Addr netip.AddrPort
	Off  bool
	// ResolvConf is the file whose nameservers get the names that are not
	// the mesh's (read once at start).
	ResolvConf     string
	MaxInFlight    int
	ForwardTimeout time.Duration
	MaxTCPConns    int
}

// Listen is the proxy's address, false when it is off: --dns-addr, else
// DefaultDNSAddr when the sidecar intercepts (an app's port 53 is redirected
// to it) and off in explicit mode.
func (d DNS) Listen(intercepting bool) (netip.AddrPort, bool) {
	switch {
	case d.Off:
		return netip.AddrPort{}, false
	case d.Addr.IsValid():
		return d.Addr, true
	case intercepting:
		return netip.MustParseAddrPort(DefaultDNSAddr), true
	}
	return netip.AddrPort{}, false
}

// DefaultDNS is the DNS settings with no flag given.
func DefaultDNS() DNS {
	return DNS{ResolvConf: DefaultDNSResolvConf, MaxInFlight: DefaultDNSMaxInFlight, ForwardTimeout: DefaultDNSForwardTimeout,
		MaxTCPConns: DefaultDNSMaxTCPConns}
}

// FileDNS are the DNS keys of the bootstrap file (and the flags' raw values).
type FileDNS struct {
	DNSAddr           string `json:"dns-addr,omitempty"`
	DNSResolvConf     string `json:"dns-resolv-conf,omitempty"`
	DNSMaxInFlight    int    `json:"dns-max-in-flight,omitempty"`
	DNSForwardTimeout string `json:"dns-forward-timeout,omitempty"`
	DNSMaxTCPConns    int    `json:"dns-max-tcp-connections,omitempty"`
}

func dnsFlags(fs *flag.FlagSet, d *FileDNS) {
	fs.StringVar(&d.DNSAddr, "dns-addr", "", "DNS proxy IP:PORT (UDP and TCP), or off (default "+DefaultDNSAddr+" when intercepting, off otherwise)")
	fs.StringVar(&d.DNSResolvConf, "dns-resolv-conf", "", "resolv.conf whose nameservers answer the names that are not the mesh's (default "+DefaultDNSResolvConf+")")
	fs.IntVar(&d.DNSMaxInFlight, "dns-max-in-flight", 0, fmt.Sprintf("DNS queries answered at once; past it REFUSED (default %d)", DefaultDNSMaxInFlight))
	fs.StringVar(&d.DNSForwardTimeout, "dns-forward-timeout", "", fmt.Sprintf("time a forwarded DNS query has across the nameservers; then SERVFAIL (default %s)", DefaultDNSForwardTimeout))
	fs.IntVar(&d.DNSMaxTCPConns, "dns-max-tcp-connections", 0, fmt.Sprintf("client TCP connections of the DNS proxy; past it closed at once (default %d)", DefaultDNSMaxTCPConns))
}

func (d *FileDNS) override(cmd FileDNS, set map[string]bool) {
	for name, v := range map[string][2]*string{
		"dns-addr": {&d.DNSAddr, &cmd.DNSAddr}, "dns-resolv-conf": {&d.DNSResolvConf, &cmd.DNSResolvConf},
		"dns-forward-timeout": {&d.DNSForwardTimeout, &cmd.DNSForwardTimeout},
	} {
		if set[name] {
			*v[0] = *v[1]
		}
	}
	if set["dns-max-in-flight"] {
		d.DNSMaxInFlight = cmd.DNSMaxInFlight
	}
	if set["dns-max-tcp-connections"] {
		d.DNSMaxTCPConns = cmd.DNSMaxTCPConns
	}
}

// settings validates the raw values; every error names the flag.
func (d FileDNS) settings() (DNS, error) {
	out := DefaultDNS()
	switch d.DNSAddr {
	case "":
	case DNSOff:
		out.Off = true
	default:
		ap, err := netip.ParseAddrPort(d.DNSAddr)
		if err != nil || ap.Port() == 0 {
			return DNS{}, fmt.Errorf("dns-addr: %q is not IP:PORT with a port in 1..65535, or %s", d.DNSAddr, DNSOff)
		}
		out.Addr = ap
	}
	if d.DNSResolvConf != "" {
		out.ResolvConf = d.DNSResolvConf
	}
	if n := d.DNSMaxInFlight; n != 0 {
		if n < 1 || n > MaxDNSMaxInFlight {
			return DNS{}, fmt.Errorf("dns-max-in-flight: %d outside 1..%d", n, MaxDNSMaxInFlight)
		}
		out.MaxInFlight = n
	}
	if n := d.DNSMaxTCPConns; n != 0 {
		if n < 1 || n > MaxDNSMaxTCPConns {
			return DNS{}, fmt.Errorf("dns-max-tcp-connections: %d outside 1..%d", n, MaxDNSMaxTCPConns)
		}
		out.MaxTCPConns = n
	}
	if v := d.DNSForwardTimeout; v != "" {
		t, err := time.ParseDuration(v)
		if err != nil {
			return DNS{}, fmt.Errorf("dns-forward-timeout: %q is not a duration (like 2s)", v)
		}
		if t <= 0 || t > MaxDNSForwardTimeout {
			return DNS{}, fmt.Errorf("dns-forward-timeout: %s outside 1ns..%s", v, MaxDNSForwardTimeout)
		}
		out.ForwardTimeout = t
	}
	return out, nil
}
