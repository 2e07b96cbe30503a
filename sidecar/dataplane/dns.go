package dataplane

import (
	"fmt"
	"net"
	"slices"

	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// Bounds of the DNS name table (xdsresource decodes within them; pilot's
// generation keeps within them).
const (
	MaxDNSHosts        = xdsresource.MaxDNSHosts
	MaxDNSAddrsPerHost = xdsresource.MaxDNSAddrsPerHost
)

// DNSTable is the mesh's name table of a configuration: the Services' FQDNs
// (<svc>.<ns>.svc.<domain>) and their addresses, from the outbound listener's
// "weft.dns" metadata. Immutable; Lookup does not allocate.
type DNSTable struct {
	listener string
	domain   string // "cluster.local"
	svcZone  string // ".svc.cluster.local"
	dotZone  string // ".cluster.local"
	hosts    map[string]*DNSHost
}

// DNSHost is one Service's name and addresses by family, ready for answers
// (shared by every answer: never modify).
type DNSHost struct {
	Name string   // FQDN without the trailing dot
	A    []net.IP // 4-byte addresses, sorted
	AAAA []net.IP // 16-byte addresses, sorted
}

// DNSResult is what a name is to the mesh.
type DNSResult uint8

// Lookup results.
const (
	// DNSForward: not a mesh name; the pod's resolvers answer it.
	DNSForward DNSResult = iota
	// DNSFound: a mesh name; the host's addresses answer it.
	DNSFound
	// DNSNXDomain: a mesh name with one of the pod's search suffixes appended
	// (reviews.shop.shop.svc.cluster.local): no such name, answered at once as
	// cluster DNS would, so a client walking its search list moves on.
	DNSNXDomain
)

func (r DNSResult) String() string {
	switch r {
	case DNSFound:
		return "found"
	case DNSNXDomain:
		return "nxdomain"
	}
	return "forward"
}

// DNS returns the configuration's name table; nil when pilot sent none. Its
// methods accept a nil table (every name is then DNSForward).
func (c *Config) DNS() *DNSTable {
	if c == nil {
		return nil
	}
	return c.dns
}

// Domain is the cluster domain ("" for a nil table).
func (t *DNSTable) Domain() string {
	if t == nil {
		return ""
	}
	return t.domain
}

// Len is the number of hosts.
func (t *DNSTable) Len() int {
	if t == nil {
		return 0
	}
	return len(t.hosts)
}

// Listener names the listener the table came from.
func (t *DNSTable) Listener() string {
	if t == nil {
		return ""
	}
	return t.listener
}

// Host returns the host of a FQDN key exactly (lower case, no trailing dot), or nil.
func (t *DNSTable) Host(fqdn string) *DNSHost {
	if t == nil {
		return nil
	}
	return t.hosts[fqdn]
}

// Lookup resolves a query name (any case, with or without the trailing dot) as
// a Kubernetes search path would relative to namespace: svc (a Service of
// namespace), svc.ns, svc.ns.svc and svc.ns.svc.<domain>. A name that is one
// of those forms followed by a search suffix of the pod (ns.svc.<domain>,
// svc.<domain>, <domain>) is DNSNXDomain, unless it is a namespace's own name
// (ns.svc.<domain> exists as a parent of its Services); anything else is
// DNSForward. It does not allocate.
func (t *DNSTable) Lookup(name, namespace string) (*DNSHost, DNSResult) {
	if t == nil {
		return nil, DNSForward
	}
	var buf [xdsresource.MaxDNSNameBytes]byte
	q, ok := foldName(&buf, name)
	if !ok {
		return nil, DNSForward // too long, root, or escaped bytes: never a mesh name
	}
	if h := t.resolve(q, namespace); h != nil {
		return h, DNSFound
	}
	var nx bool
	if p, ok := cutSuffix(q, t.svcZone); ok && namespace != "" {
		if p, ok := cutSuffix(p, namespace); ok && len(p) > 1 && p[len(p)-1] == '.' {
			nx = t.resolve(p[:len(p)-1], namespace) != nil
		}
	}
	if p, ok := cutSuffix(q, t.svcZone); !nx && ok {
		if !hasDot(p) {
			return nil, DNSForward // <ns>.svc.<domain>: a namespace, parent of Services
		}
		nx = t.resolve(p, namespace) != nil
	}
	if p, ok := cutSuffix(q, t.dotZone); !nx && ok {
		nx = t.resolve(p, namespace) != nil
	}
	if nx {
		return nil, DNSNXDomain
	}
	return nil, DNSForward
}

// resolve finds q (lower case, no trailing dot) in one of the short forms.
func (t *DNSTable) resolve(q []byte, namespace string) *DNSHost {
	if len(q) == 0 {
		return nil
	}
	if h := t.hosts[string(q)]; h != nil { // the FQDN
		return h
	}
	var buf [xdsresource.MaxDNSNameBytes]byte
	var key []byte
	switch dots := countDots(q); {
	case dots == 0: // svc
		if namespace == "" {
			return nil
		}
		key = join(&buf, q, ".", namespace, t.svcZone)
	case dots == 1: // svc.ns
		key = join(&buf, q, t.svcZone, "", "")
	case dots == 2 && len(q) > 4 && string(q[len(q)-4:]) == ".svc": // svc.ns.svc
		key = join(&buf, q, t.dotZone, "", "")
	}
	if key == nil {
		return nil
	}
	return t.hosts[string(key)]
}

// foldName writes name lower-cased without its trailing dot into buf. False:
// empty, longer than a DNS name, or with escapes (\. \DDD), which no mesh name has.
func foldName(buf *[xdsresource.MaxDNSNameBytes]byte, name string) ([]byte, bool) {
	if len(name) > 0 && name[len(name)-1] == '.' {
		name = name[:len(name)-1]
	}
	if name == "" || len(name) > len(buf) {
		return nil, false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '\\':
			return nil, false
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return buf[:len(name)], true
}

// join writes a+b+c+d into buf; nil if too long for a DNS name.
func join(buf *[xdsresource.MaxDNSNameBytes]byte, a []byte, b, c, d string) []byte {
	if len(a)+len(b)+len(c)+len(d) > len(buf) {
		return nil
	}
	n := copy(buf[:], a)
	n += copy(buf[n:], b)
	n += copy(buf[n:], c)
	n += copy(buf[n:], d)
	return buf[:n]
}

func cutSuffix(q []byte, s string) ([]byte, bool) {
	if len(q) <= len(s) || string(q[len(q)-len(s):]) != s {
		return nil, false
	}
	return q[:len(q)-len(s)], true
}

func countDots(q []byte) int {
	n := 0
	for _, c := range q {
		if c == '.' {
			n++
		}
	}
	return n
}

func hasDot(q []byte) bool { return slices.Contains(q, '.') }

// compileDNS takes the name table of the one listener that carries it.
func (cfg *Config) compileDNS(xl *xdsresource.Listener) error {
	x := xl.DNS
	if x == nil {
		return nil
	}
	if cfg.dns != nil {
		return fmt.Errorf("%w: listener %q: metadata.filter_metadata[%q]: listener %q has the name table already; one per node",
			ErrInvalid, xl.Name, xdsresource.DNSMetadataKey, cfg.dns.listener)
	}
	if len(x.Hosts) > MaxDNSHosts {
		return fmt.Errorf("%w: listener %q: metadata.filter_metadata[%q].hosts: %d hosts, limit %d",
			ErrInvalid, xl.Name, xdsresource.DNSMetadataKey, len(x.Hosts), MaxDNSHosts)
	}
	t := &DNSTable{listener: xl.Name, domain: x.Domain, svcZone: ".svc." + x.Domain, dotZone: "." + x.Domain,
		hosts: make(map[string]*DNSHost, len(x.Hosts))}
	for _, xh := range x.Hosts {
		if len(xh.Addrs) == 0 || len(xh.Addrs) > MaxDNSAddrsPerHost {
			return fmt.Errorf("%w: listener %q: metadata.filter_metadata[%q].hosts[%q]: %d addresses, want 1..%d",
				ErrInvalid, xl.Name, xdsresource.DNSMetadataKey, xh.Name, len(xh.Addrs), MaxDNSAddrsPerHost)
		}
		h := &DNSHost{Name: xh.Name}
		for _, a := range xh.Addrs {
			if a.Is4() {
				h.A = append(h.A, net.IP(a.AsSlice()))
			} else {
				h.AAAA = append(h.AAAA, net.IP(a.AsSlice()))
			}
		}
		t.hosts[xh.Name] = h
	}
	cfg.dns = t
	return nil
}
