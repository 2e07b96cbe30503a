// Package intercept installs a pod's traffic interception rules: the part Istio's
// istio-init (istio-iptables) plays, run as `sidecar intercept [flags]` so a pod image
// needs one binary.
//
// The rule set follows istio-iptables' REDIRECT mode (tools/istio-iptables/pkg/capture
// run.go) with our chain names (WEFT_OUTPUT, WEFT_INBOUND, WEFT_REDIRECT,
// WEFT_IN_REDIRECT, WEFT_DNS):
//   - outbound TCP: nat OUTPUT -> WEFT_OUTPUT -> WEFT_REDIRECT (REDIRECT to -p, 15001),
//     except the proxy's uid/gid, loopback, the inbound-passthrough source 127.0.0.6
//     (::6), excluded ports (-o) and CIDRs (-x); the proxy's own connections over lo
//     to a pod address (a call to its own Service) go to inbound capture as in Istio;
//   - inbound TCP: nat PREROUTING -> WEFT_INBOUND -> WEFT_IN_REDIRECT (REDIRECT to -z,
//     15006) for the ports of -b ('*' = all), never for -d nor the sidecar's own ports;
//   - DNS: UDP and TCP to port 53 from anything but the proxy uid/gid -> --dns-port
//     (15053), with Istio's conntrack zones in raw so the two UDP legs
//     (app <-> proxy, proxy <-> resolver) never share an entry.
//
// Apply is idempotent: it declares (so creates or flushes) only its own chains, deletes
// the jumps to them it finds, and re-adds them, in one iptables-restore transaction per
// table. Remove deletes exactly those chains and jumps.
//
// Deliberate differences from istio-iptables: no HBONE port (15008) rule; -u/-g take
// one id each, not lists; -d is enforced also when -b is a list; the sidecar's own
// ports are always excluded from inbound capture (the contract), Istio leaves that to
// the injector's -d; malformed list items are errors (Istio ignores bad CIDRs); DNS
// capture is always "capture all" (Istio's CAPTURE_ALL_DNS), not by resolv.conf
// server. --mode ebpf keeps, besides PREROUTING, the OUTPUT rule that sends the
// proxy's own calls to its pod's address over lo to inbound capture, so inbound
// handling is the same in both modes (the contract's "only the inbound chains").
package intercept

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Defaults, fixed by the issue #10 contract.
const (
	DefaultOutboundPort = 15001
	DefaultInboundPort  = 15006
	DefaultDNSPort      = 15053
	DefaultProxyUID     = 1337
	DefaultProxyGID     = 1337

	// The sidecar's other ports: admin (loopback only, excluded anyway), readiness
	// and liveness, metrics. Never captured inbound, whatever -b says.
	AdminPort   = 15000
	ReadyPort   = 15021
	MetricsPort = 15090

	// InboundPassthroughV4/V6 are the source addresses the sidecar binds for its
	// connections to the app (Istio's InboundPassthroughBindIpv4/6): never captured.
	InboundPassthroughV4 = "127.0.0.6"
	InboundPassthroughV6 = "::6"
)

// Limits on the lists: each item becomes one rule per family, walked linearly for
// every new connection, so the lists stay short. Istio's injector passes a handful.
const (
	// MaxPorts bounds each of -b, -d and -o (items, before removing duplicates).
	MaxPorts = 64
	// MaxCIDRs bounds -x (items, before removing duplicates).
	MaxCIDRs = 64
	// MaxListBytes bounds the text of any one list flag, so a parser never walks a
	// megabyte before the count check.
	MaxListBytes = 4096
)

// Mode says which rules Apply installs.
type Mode string

const (
	// ModeIPTables: outbound, inbound and DNS capture by iptables.
	ModeIPTables Mode = "iptables"
	// ModeEBPF: only inbound capture (PREROUTING, and the proxy's own calls to its
	// pod over lo); outbound and DNS are the BPF programs' (ebpf/redirect).
	ModeEBPF Mode = "ebpf"
)

// Backend is the iptables flavour Debian ships.
type Backend string

const (
	// BackendAuto: the backend that already holds rules in this netns, else nft.
	BackendAuto   Backend = "auto"
	BackendNFT    Backend = "nft"
	BackendLegacy Backend = "legacy"
)

// IPv6 says whether ip6tables rules are installed.
type IPv6 string

const (
	// IPv6Auto: when the network namespace has IPv6 (an address in /proc/net/if_inet6).
	IPv6Auto IPv6 = "auto"
	IPv6On   IPv6 = "true"
	IPv6Off  IPv6 = "false"
)

// PortRange is one list item: a port (Lo == Hi) or an iptables range "lo:hi".
type PortRange struct{ Lo, Hi uint16 }

func (r PortRange) String() string {
	if r.Lo == r.Hi {
		return strconv.Itoa(int(r.Lo))
	}
	return fmt.Sprintf("%d:%d", r.Lo, r.Hi)
}

// Config is one pod's interception. Build it from DefaultConfig; Validate (called by
// Apply, Remove and Main) checks it, errors naming the flag.
type Config struct {
	Mode         Mode
	OutboundPort uint16 // -p
	InboundPort  uint16 // -z
	ProxyUID     uint32 // -u
	ProxyGID     uint32 // -g
	// InboundAll is -b '*'; otherwise InboundPorts lists the captured ports (-b a,b);
	// neither: no inbound capture (-b '').
	InboundAll           bool
	InboundPorts         []PortRange
	ExcludeInboundPorts  []PortRange    // -d
	ExcludeOutboundPorts []PortRange    // -o
	ExcludeCIDRs         []netip.Prefix // -x, IPv4 and IPv6 mixed
	DNS                  bool           // --dns
	DNSPort              uint16         // --dns-port
	IPv6                 IPv6           // --ipv6
	Backend              Backend        // --backend
}

// DefaultConfig is `sidecar intercept` with no flags: capture everything in and out,
// DNS to 15053, proxy uid/gid 1337.
func DefaultConfig() Config {
	return Config{
		Mode:         ModeIPTables,
		OutboundPort: DefaultOutboundPort,
		InboundPort:  DefaultInboundPort,
		ProxyUID:     DefaultProxyUID,
		ProxyGID:     DefaultProxyGID,
		InboundAll:   true,
		DNS:          true,
		DNSPort:      DefaultDNSPort,
		IPv6:         IPv6Auto,
		Backend:      BackendAuto,
	}
}

// ErrInvalid marks a bad configuration (a usage error, exit status 2 in Main).
var ErrInvalid = errors.New("invalid interception config")

func invalid(flag, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, flag, fmt.Sprintf(format, args...))
}

// Validate checks every field, naming the flag of the first bad one.
func (c Config) Validate() error {
	switch c.Mode {
	case ModeIPTables, ModeEBPF:
	default:
		return invalid("--mode", "%q is not iptables or ebpf", c.Mode)
	}
	switch c.Backend {
	case BackendAuto, BackendNFT, BackendLegacy:
	default:
		return invalid("--backend", "%q is not auto, nft or legacy", c.Backend)
	}
	switch c.IPv6 {
	case IPv6Auto, IPv6On, IPv6Off:
	default:
		return invalid("--ipv6", "%q is not auto, true or false", c.IPv6)
	}
	ports := []struct {
		flag string
		v    uint16
	}{{"-p", c.OutboundPort}, {"-z", c.InboundPort}, {"--dns-port", c.DNSPort}}
	for i, p := range ports {
		if p.v == 0 {
			return invalid(p.flag, "port 0 (must be 1-65535)")
		}
		for _, q := range ports[:i] {
			if q.v == p.v {
				return invalid(p.flag, "port %d is also %s", p.v, q.flag)
			}
		}
	}
	if c.ProxyUID == 1<<32-1 {
		return invalid("-u", "%d is not a valid uid", c.ProxyUID)
	}
	if c.ProxyGID == 1<<32-1 {
		return invalid("-g", "%d is not a valid gid", c.ProxyGID)
	}
	if c.InboundAll && len(c.InboundPorts) > 0 {
		return invalid("-b", "'*' and a port list at once")
	}
	for _, l := range []struct {
		flag string
		v    []PortRange
	}{{"-b", c.InboundPorts}, {"-d", c.ExcludeInboundPorts}, {"-o", c.ExcludeOutboundPorts}} {
		if len(l.v) > MaxPorts {
			return invalid(l.flag, "%d ports (at most %d)", len(l.v), MaxPorts)
		}
		for _, r := range l.v {
			if r.Lo == 0 || r.Lo > r.Hi {
				return invalid(l.flag, "%s is not a port or a range lo:hi within 1-65535", r)
			}
		}
	}
	if len(c.ExcludeCIDRs) > MaxCIDRs {
		return invalid("-x", "%d CIDRs (at most %d)", len(c.ExcludeCIDRs), MaxCIDRs)
	}
	for _, p := range c.ExcludeCIDRs {
		if !p.IsValid() || p != p.Masked() || p.Addr().Zone() != "" {
			return invalid("-x", "%s is not a CIDR without host bits", p)
		}
	}
	// An inbound port the user asks to capture that is excluded anyway would be a
	// policy accepted and not enforced.
	excluded := c.inboundExcluded()
	for _, r := range c.InboundPorts {
		all := true
		for p := int(r.Lo); p <= int(r.Hi); p++ {
			if !excluded[p] {
				all = false
				break
			}
		}
		if all {
			return invalid("-b", "%s is excluded from inbound capture (by -d or as a sidecar port: %s)",
				r, joinPorts(c.sidecarPorts()))
		}
	}
	if c.Mode == ModeEBPF {
		// Outbound is the BPF program's; these would be accepted and not enforced.
		if len(c.ExcludeOutboundPorts) > 0 {
			return invalid("-o", "not supported with --mode ebpf (outbound capture is the BPF program's)")
		}
		if len(c.ExcludeCIDRs) > 0 {
			return invalid("-x", "not supported with --mode ebpf (outbound capture is the BPF program's)")
		}
	}
	return nil
}

// sidecarPorts are never captured inbound: the configured listeners plus admin,
// readiness and metrics. Sorted, unique.
func (c Config) sidecarPorts() []uint16 {
	ps := []uint16{AdminPort, c.OutboundPort, c.InboundPort, ReadyPort, c.DNSPort, MetricsPort}
	slices.Sort(ps)
	return slices.Compact(ps)
}

// inboundExcluded is the set of ports inbound capture skips.
func (c Config) inboundExcluded() *[65536]bool {
	var ex [65536]bool
	for _, p := range c.sidecarPorts() {
		ex[p] = true
	}
	for _, r := range c.ExcludeInboundPorts {
		for p := int(r.Lo); p <= int(r.Hi) && r.Lo != 0; p++ {
			ex[p] = true
		}
	}
	return &ex
}

func joinPorts(ps []uint16) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}

// ParsePort parses one port 1-65535.
func ParsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q is not a port (1-65535)", s)
	}
	return uint16(n), nil
}

// ParseID parses a uid or gid (0 to 2^32-2; 2^32-1 is "no id" to the kernel).
func ParseID(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 1<<32-1 {
		return 0, fmt.Errorf("%q is not a numeric id (0-4294967294)", s)
	}
	return uint32(n), nil
}

// splitList splits a comma list, trimming blanks around items. "" is the empty list;
// an empty item ("80,,443", "80,") is an error.
func splitList(s string, max int) ([]string, error) {
	if len(s) > MaxListBytes {
		return nil, fmt.Errorf("%d bytes (at most %d)", len(s), MaxListBytes)
	}
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	items := strings.Split(s, ",")
	if len(items) > max {
		return nil, fmt.Errorf("%d items (at most %d)", len(items), max)
	}
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
		if items[i] == "" {
			return nil, fmt.Errorf("empty item %d in %q", i+1, s)
		}
	}
	return items, nil
}

// ParsePorts parses a -d/-o/-b list: comma-separated ports or iptables ranges
// "lo:hi", at most MaxPorts items. Duplicates are dropped (first kept); the order is
// the order given, which is the rule order.
func ParsePorts(s string) ([]PortRange, error) {
	items, err := splitList(s, MaxPorts)
	if err != nil {
		return nil, err
	}
	var out []PortRange
	for _, it := range items {
		var r PortRange
		lo, hi, isRange := strings.Cut(it, ":")
		if r.Lo, err = ParsePort(lo); err != nil {
			return nil, err
		}
		r.Hi = r.Lo
		if isRange {
			if r.Hi, err = ParsePort(hi); err != nil {
				return nil, err
			}
			if r.Hi < r.Lo {
				return nil, fmt.Errorf("range %q ends before it starts", it)
			}
		}
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out, nil
}

// ParseInboundPorts parses -b: "*" (all), "" (none) or a ParsePorts list.
func ParseInboundPorts(s string) (all bool, ports []PortRange, err error) {
	if strings.TrimSpace(s) == "*" {
		return true, nil, nil
	}
	ports, err = ParsePorts(s)
	return false, ports, err
}

// ParseCIDRs parses -x: comma-separated CIDRs (IPv4 or IPv6; a bare address is its
// host prefix), at most MaxCIDRs items, duplicates dropped. Host bits set
// ("10.1.2.3/8") is an error, not silently masked: it is likely a typo.
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	if strings.TrimSpace(s) == "*" {
		return nil, errors.New("'*' is not allowed (it would exclude every destination)")
	}
	items, err := splitList(s, MaxCIDRs)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, it := range items {
		var p netip.Prefix
		if strings.Contains(it, "/") {
			p, err = netip.ParsePrefix(it)
			if err != nil {
				return nil, fmt.Errorf("%q is not a CIDR", it)
			}
		} else {
			a, err := netip.ParseAddr(it)
			if err != nil {
				return nil, fmt.Errorf("%q is not a CIDR or an address", it)
			}
			if a.Zone() != "" {
				return nil, fmt.Errorf("%q has a zone", it)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Zone() != "" {
			return nil, fmt.Errorf("%q has a zone", it)
		}
		if p.Addr().Is4In6() {
			return nil, fmt.Errorf("%q is an IPv4-mapped IPv6 address: write the IPv4 form", it)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("%q has host bits set (did you mean %s?)", it, p.Masked())
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}
