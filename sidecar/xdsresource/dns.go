package xdsresource

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
)

// DNSMetadataKey is the outbound listener's filter_metadata key of the mesh's DNS
// name table (issue #10, "LDS wire"):
//
//	{"domain": "cluster.local",
//	 "hosts": {"reviews.shop.svc.cluster.local": ["240.240.0.1", "fd00::1"]}}
//
// One entry per Service in the node's scope that has addresses; keys are
// lower-case FQDNs <svc>.<ns>.svc.<domain> without the trailing dot.
const DNSMetadataKey = "weft.dns"

// Bounds of a decoded name table (dataplane.MaxDNSHosts and MaxDNSAddrsPerHost
// are these; pilot's generation keeps within them). A Service has at most 8
// addresses today; 16 leaves room and keeps every answer within 512 bytes.
const (
	MaxDNSHosts        = 16384
	MaxDNSAddrsPerHost = 16
	// MaxDNSNameBytes is the longest DNS name in presentation form without the
	// trailing dot (RFC 1035: 255 wire bytes).
	MaxDNSNameBytes = 253
)

// DNSTable is a decoded name table: the cluster domain and the hosts sorted by
// name, each with its addresses sorted (IPv4 before IPv6) and unique.
type DNSTable struct {
	Domain string
	Hosts  []DNSHost
}

// DNSHost is one Service's FQDN and its addresses (1..MaxDNSAddrsPerHost).
type DNSHost struct {
	Name  string
	Addrs []netip.Addr
}

// decodeDNS reads metadata "weft.dns". Strict, as the rest of the decoder: an
// unknown field, a name that is not <svc>.<ns>.svc.<domain>, a bad or repeated
// address or a bound passed refuses the listener (NACK) naming the field.
func decodeDNS(e errs, md *structpb.Struct) (*DNSTable, error) {
	const f = "metadata.filter_metadata[\"" + DNSMetadataKey + "\"]"
	t := &DNSTable{}
	var hosts *structpb.Struct
	for k, v := range md.GetFields() {
		switch k {
		case "domain":
			s, ok := v.GetKind().(*structpb.Value_StringValue)
			if !ok {
				return nil, e.at(f+".domain", "must be a string")
			}
			t.Domain = s.StringValue
		case "hosts":
			if hosts = v.GetStructValue(); hosts == nil {
				return nil, e.at(f+".hosts", "must be an object {fqdn: [address, ...]}")
			}
		default:
			return nil, e.at(f, "unknown field %q", clipName(k))
		}
	}
	if t.Domain == "" {
		return nil, e.at(f+".domain", "required")
	}
	if msg := checkDNSName(t.Domain, true); msg != "" {
		return nil, e.at(f+".domain", "%q: %s", clipName(t.Domain), msg)
	}
	hf := hosts.GetFields()
	if len(hf) > MaxDNSHosts {
		return nil, e.at(f+".hosts", "%d hosts, limit %d", len(hf), MaxDNSHosts)
	}
	zone := ".svc." + t.Domain
	t.Hosts = make([]DNSHost, 0, len(hf))
	for name, v := range hf {
		nf := f + ".hosts[" + strconv.Quote(clipName(name)) + "]"
		if msg := checkDNSName(name, false); msg != "" {
			return nil, e.at(nf, "%s", msg)
		}
		// Only Service names: the sidecar derives the short forms (svc, svc.ns,
		// svc.ns.svc) from these two labels.
		svcNs, ok := strings.CutSuffix(name, zone)
		if !ok || strings.Count(svcNs, ".") != 1 {
			return nil, e.at(nf, "want <service>.<namespace>%s", zone)
		}
		l := v.GetListValue()
		if l == nil {
			return nil, e.at(nf, "must be a list of IP address strings")
		}
		vs := l.GetValues()
		if len(vs) == 0 || len(vs) > MaxDNSAddrsPerHost {
			return nil, e.at(nf, "want 1..%d addresses, got %d", MaxDNSAddrsPerHost, len(vs))
		}
		h := DNSHost{Name: name, Addrs: make([]netip.Addr, 0, len(vs))}
		for i, av := range vs {
			af := nf + "[" + strconv.Itoa(i) + "]"
			s, ok := av.GetKind().(*structpb.Value_StringValue)
			if !ok {
				return nil, e.at(af, "must be an IP address string")
			}
			a, err := netip.ParseAddr(s.StringValue)
			if err != nil || a.Zone() != "" {
				return nil, e.at(af, "%q is not an IP address literal", clipName(s.StringValue))
			}
			a = a.Unmap()
			if a.IsUnspecified() {
				return nil, e.at(af, "%s is unspecified", a)
			}
			if slices.Contains(h.Addrs, a) {
				return nil, e.at(af, "%s repeated", a)
			}
			h.Addrs = append(h.Addrs, a)
		}
		slices.SortFunc(h.Addrs, netip.Addr.Compare) // pilot sorts; order must not depend on it
		t.Hosts = append(t.Hosts, h)
	}
	slices.SortFunc(t.Hosts, func(a, b DNSHost) int { return strings.Compare(a.Name, b.Name) })
	return t, nil
}

// checkDNSName says what is wrong with a lower-case DNS name without the
// trailing dot ("" if nothing): labels of 1..63 bytes of a-z, 0-9 and '-' (not
// at either end), at most MaxDNSNameBytes. underscore also allows '_' (a trust
// domain may hold one).
func checkDNSName(s string, underscore bool) string {
	if s == "" || len(s) > MaxDNSNameBytes {
		return "must be 1.." + strconv.Itoa(MaxDNSNameBytes) + " bytes"
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return "labels must be 1..63 bytes"
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "a label must not start or end with '-'"
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || underscore && c == '_') {
				return "only lower-case letters, digits and '-' are allowed in labels"
			}
		}
	}
	return ""
}
