package intercept

import (
	"fmt"
	"strconv"
	"strings"
)

// Chain names (per table: nat uses all but none of raw's meaning; raw has its own
// WEFT_DNS and WEFT_INBOUND for the conntrack zones, as Istio's ISTIO_OUTPUT_DNS and
// ISTIO_INBOUND in raw).
const (
	ChainOutput     = "WEFT_OUTPUT"
	ChainInbound    = "WEFT_INBOUND"
	ChainRedirect   = "WEFT_REDIRECT"
	ChainInRedirect = "WEFT_IN_REDIRECT"
	ChainDNS        = "WEFT_DNS"
)

// ownChains are every chain this package may create, per table: Apply and Remove
// touch these and nothing else (plus the jumps to them).
var ownChains = []tableChains{
	{"nat", []string{ChainInbound, ChainInRedirect, ChainOutput, ChainRedirect, ChainDNS}},
	{"raw", []string{ChainDNS, ChainInbound}},
}

type tableChains struct {
	table  string
	chains []string
}

func isOwnChain(table, chain string) bool {
	for _, tc := range ownChains {
		if tc.table == table {
			for _, c := range tc.chains {
				if c == chain {
					return true
				}
			}
		}
	}
	return false
}

// ruleTable is one table's part of the rule set, in the order rules are appended.
type ruleTable struct {
	name   string
	chains []string // declared (created, or flushed when they exist)
	rules  []string // "-A CHAIN ..." lines
}

func (t *ruleTable) chain(c string) { t.chains = append(t.chains, c) }

func (t *ruleTable) add(chain string, spec ...string) {
	t.rules = append(t.rules, "-A "+chain+" "+strings.Join(spec, " "))
}

// family holds what differs between IPv4 and IPv6.
type family struct {
	loopback    string // the loopback host prefix Istio bypasses
	passthrough string // the inbound passthrough source
	v6          bool
}

var (
	familyV4 = family{loopback: "127.0.0.1/32", passthrough: InboundPassthroughV4 + "/32"}
	familyV6 = family{loopback: "::1/128", passthrough: InboundPassthroughV6 + "/128", v6: true}
)

// ruleSet builds the tables for one family. cfg must be valid (Validate).
func ruleSet(cfg Config, v6 bool) []*ruleTable {
	fam := familyV4
	if v6 {
		fam = familyV6
	}
	uid := strconv.FormatUint(uint64(cfg.ProxyUID), 10)
	gid := strconv.FormatUint(uint64(cfg.ProxyGID), 10)
	dns := cfg.DNS && cfg.Mode == ModeIPTables
	dnsPort := strconv.Itoa(int(cfg.DNSPort))

	nat := &ruleTable{name: "nat"}
	inbound := cfg.InboundAll || len(cfg.InboundPorts) > 0
	if inbound {
		nat.chain(ChainInbound)
	}
	nat.chain(ChainInRedirect)
	nat.chain(ChainOutput)
	if cfg.Mode == ModeIPTables {
		nat.chain(ChainRedirect)
	}
	if dns {
		nat.chain(ChainDNS)
	}

	// Inbound: PREROUTING -> WEFT_INBOUND. Exclusions first (the sidecar's ports, then
	// -d), so they hold whether -b is '*' or a list.
	if inbound {
		nat.add("PREROUTING", "-p", "tcp", "-j", ChainInbound)
		for _, p := range cfg.sidecarPorts() {
			nat.add(ChainInbound, "-p", "tcp", "-m", "tcp", "--dport", strconv.Itoa(int(p)), "-j", "RETURN")
		}
		side := cfg.sidecarPorts()
		for _, r := range cfg.ExcludeInboundPorts {
			if r.Lo == r.Hi && containsPort(side, r.Lo) {
				continue // already excluded above (Istio's injector passes -d 15090,15021,15020)
			}
			nat.add(ChainInbound, "-p", "tcp", "-m", "tcp", "--dport", r.String(), "-j", "RETURN")
		}
		if cfg.InboundAll {
			nat.add(ChainInbound, "-p", "tcp", "-j", ChainInRedirect)
		} else {
			for _, r := range cfg.InboundPorts {
				nat.add(ChainInbound, "-p", "tcp", "-m", "tcp", "--dport", r.String(), "-j", ChainInRedirect)
			}
		}
	}
	nat.add(ChainInRedirect, "-p", "tcp", "-j", "REDIRECT", "--to-ports", strconv.Itoa(int(cfg.InboundPort)))

	// Outbound: OUTPUT -> WEFT_OUTPUT. With DNS, UDP enters the chain too (for port 53).
	if dns {
		nat.add("OUTPUT", "-j", ChainOutput)
	} else {
		nat.add("OUTPUT", "-p", "tcp", "-j", ChainOutput)
	}
	if cfg.Mode == ModeIPTables {
		nat.add(ChainRedirect, "-p", "tcp", "-j", "REDIRECT", "--to-ports", strconv.Itoa(int(cfg.OutboundPort)))
		// Port exclusions come before everything else, as in Istio: they hold for
		// loopback calls too.
		for _, r := range cfg.ExcludeOutboundPorts {
			nat.add(ChainOutput, "-p", "tcp", "-m", "tcp", "--dport", r.String(), "-j", "RETURN")
			if dns {
				nat.add(ChainOutput, "-p", "udp", "-m", "udp", "--dport", r.String(), "-j", "RETURN")
			}
		}
	}
	// The sidecar's inbound connections to the app, bound to 127.0.0.6 (::6).
	nat.add(ChainOutput, "-s", fam.passthrough, "-o", "lo", "-j", "RETURN")
	for _, owner := range []string{"--uid-owner " + uid, "--gid-owner " + gid} {
		// The proxy calling its own pod's address over lo (the app called its own
		// Service, an endpoint is this pod): through inbound capture, as Istio does.
		// DNS (53) is the proxy's own upstream query and stays direct.
		if dns {
			nat.add(ChainOutput, "!", "-d", fam.loopback, "-o", "lo", "-p", "tcp", "-m", "tcp", "!", "--dport", "53",
				"-m", "owner", owner, "-j", ChainInRedirect)
		} else {
			nat.add(ChainOutput, "!", "-d", fam.loopback, "-o", "lo", "-p", "tcp", "-m", "owner", owner, "-j", ChainInRedirect)
		}
		if cfg.Mode != ModeIPTables {
			continue
		}
		// The app calling its own pod over lo: not captured (TCP 53 is, so a resolver
		// on localhost still goes through the DNS proxy).
		if dns {
			nat.add(ChainOutput, "-o", "lo", "-p", "tcp", "-m", "tcp", "!", "--dport", "53", "-m", "owner", "!", owner, "-j", "RETURN")
		} else {
			nat.add(ChainOutput, "-o", "lo", "-m", "owner", "!", owner, "-j", "RETURN")
		}
		// The loop breaker: the proxy's own traffic, every protocol.
		nat.add(ChainOutput, "-m", "owner", owner, "-j", "RETURN")
	}
	tables := []*ruleTable{nat}
	if cfg.Mode != ModeIPTables {
		return tables
	}
	if dns {
		nat.add(ChainOutput, "-j", ChainDNS)
		nat.add(ChainDNS, "-p", "tcp", "-m", "tcp", "--dport", "53", "-j", "REDIRECT", "--to-ports", dnsPort)
		nat.add(ChainDNS, "-p", "udp", "-m", "udp", "--dport", "53", "-j", "REDIRECT", "--to-ports", dnsPort)
	}
	nat.add(ChainOutput, "-d", fam.loopback, "-j", "RETURN")
	for _, p := range cfg.ExcludeCIDRs {
		if p.Addr().Is6() == fam.v6 {
			nat.add(ChainOutput, "-d", p.String(), "-j", "RETURN")
		}
	}
	nat.add(ChainOutput, "-j", ChainRedirect)

	if dns {
		// Conntrack zones (Istio's addDNSConntrackZones): the proxy's queries to the
		// resolvers and their answers in zone 1, the app's queries to the proxy and
		// its answers in zone 2, so a UDP 4-tuple reused by both legs never merges
		// them into one NATed entry.
		raw := &ruleTable{name: "raw"}
		raw.chain(ChainDNS)
		raw.chain(ChainInbound)
		raw.add("OUTPUT", "-p", "udp", "-j", ChainDNS)
		raw.add("PREROUTING", "-p", "udp", "-j", ChainInbound)
		for _, owner := range []string{"--uid-owner " + uid, "--gid-owner " + gid} {
			raw.add(ChainDNS, "-p", "udp", "-m", "udp", "--dport", "53", "-m", "owner", owner, "-j", "CT", "--zone", "1")
			raw.add(ChainDNS, "-p", "udp", "-m", "udp", "--sport", dnsPort, "-m", "owner", owner, "-j", "CT", "--zone", "2")
		}
		raw.add(ChainDNS, "-p", "udp", "-m", "udp", "--dport", "53", "-j", "CT", "--zone", "2")
		raw.add(ChainInbound, "-p", "udp", "-m", "udp", "--sport", "53", "-j", "CT", "--zone", "1")
		tables = append(tables, raw)
	}
	return tables
}

func containsPort(ps []uint16, p uint16) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// Rules is the iptables-restore input (for ip6tables-restore when v6) of cfg's rule
// set: each table's chain declarations, then its rules, then COMMIT. It is
// deterministic (golden files) and written in iptables-save's own spelling, so the
// rules read back from the kernel are these lines. cfg must be valid (Validate).
//
// Fed to `iptables-restore --noflush` as is, it creates or flushes the chains and
// appends the jumps; Apply adds the deletion of jumps already present, so a second run
// does not duplicate them.
func Rules(cfg Config, v6 bool) string {
	var b strings.Builder
	for _, t := range ruleSet(cfg, v6) {
		writeTable(&b, t, nil, nil)
	}
	return b.String()
}

// writeTable writes one table block: declarations (which create or flush), the
// deletions, chain removals, then the rules.
func writeTable(b *strings.Builder, t *ruleTable, deletes, removes []string) {
	fmt.Fprintf(b, "*%s\n", t.name)
	for _, c := range t.chains {
		fmt.Fprintf(b, ":%s - [0:0]\n", c)
	}
	for _, d := range deletes {
		b.WriteString(d + "\n")
	}
	for _, c := range removes {
		fmt.Fprintf(b, "-X %s\n", c)
	}
	for _, r := range t.rules {
		b.WriteString(r + "\n")
	}
	b.WriteString("COMMIT\n")
}
