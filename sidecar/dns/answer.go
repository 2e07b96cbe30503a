package dns

import (
	mdns "github.com/miekg/dns"

	"github.com/weft-mesh/weft/sidecar/dataplane"
)

// Outcome is what became of one query; /metrics counts queries by it.
type Outcome uint8

// Outcomes.
const (
	// OutcomeMesh: answered from the name table (addresses, or an empty
	// NOERROR when the name has none of the type asked).
	OutcomeMesh Outcome = iota
	// OutcomeNXDomain: a mesh name with a search suffix appended, answered
	// NXDOMAIN without asking upstream.
	OutcomeNXDomain
	// OutcomeForwarded: answered by an upstream resolver (whatever its rcode).
	OutcomeForwarded
	// OutcomeRefused: MaxInFlight queries were in flight; answered REFUSED.
	OutcomeRefused
	// OutcomeUpstreamError: no upstream answered within ForwardTimeout (or
	// none is configured); answered SERVFAIL.
	OutcomeUpstreamError
	// OutcomeInvalid: not a query this proxy takes (malformed, not a QUERY
	// opcode, not one question, EDNS version ≠ 0); answered FORMERR, NOTIMP or
	// BADVERS, or dropped when it was a response.
	OutcomeInvalid
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"mesh", "nxdomain", "forwarded", "refused", "upstream_error", "invalid"}

func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return "unknown"
}

// Answer TTLs. Mesh addresses are stable (stored VIPs) but a Service can go:
// Istio's DNS proxy uses 30s. A negative answer is cached for the SOA's
// minimum, short so a Service applied a moment later resolves soon.
const (
	MeshTTL     = 30
	NegativeTTL = 5
)

// MaxUDPSize is the largest UDP message sent to a client or asked of an
// upstream (an EDNS0 size above it is lowered to it): 1232 bytes, the DNS flag
// day 2020 value that avoids IP fragmentation. A longer answer is truncated
// (TC) and the client retries over TCP.
const MaxUDPSize = 1232

// Answer is the reply to req from the mesh's name table t for a sidecar of
// namespace, or nil when the pod's resolvers must answer it (OutcomeForwarded
// is then returned). Pure: no clock, no I/O; the reply is not yet truncated.
func Answer(req *mdns.Msg, t *dataplane.DNSTable, namespace string) (*mdns.Msg, Outcome) {
	switch {
	case req.Response:
		return nil, OutcomeInvalid // never answer an answer (reflection)
	case req.Opcode != mdns.OpcodeQuery:
		return reply(req, mdns.RcodeNotImplemented), OutcomeInvalid
	case len(req.Question) != 1:
		return reply(req, mdns.RcodeFormatError), OutcomeInvalid
	}
	if opt := req.IsEdns0(); opt != nil && opt.Version() != 0 {
		return reply(req, mdns.RcodeBadVers), OutcomeInvalid // RFC 6891 6.1.3
	}
	q := req.Question[0]
	if q.Qclass != mdns.ClassINET {
		return nil, OutcomeForwarded
	}
	h, res := t.Lookup(q.Name, namespace)
	switch res {
	case dataplane.DNSNXDomain:
		r := reply(req, mdns.RcodeNameError)
		r.Authoritative = true
		r.Ns = []mdns.RR{soa(t.Domain())}
		return r, OutcomeNXDomain
	case dataplane.DNSFound:
		r := reply(req, mdns.RcodeSuccess)
		r.Authoritative = true
		r.Answer = make([]mdns.RR, 0, len(h.A)+len(h.AAAA))
		if q.Qtype == mdns.TypeA || q.Qtype == mdns.TypeANY {
			for _, ip := range h.A {
				r.Answer = append(r.Answer, &mdns.A{Hdr: hdr(q.Name, mdns.TypeA), A: ip})
			}
		}
		if q.Qtype == mdns.TypeAAAA || q.Qtype == mdns.TypeANY {
			for _, ip := range h.AAAA {
				r.Answer = append(r.Answer, &mdns.AAAA{Hdr: hdr(q.Name, mdns.TypeAAAA), AAAA: ip})
			}
		}
		if len(r.Answer) == 0 {
			// The name exists without records of this type (one family only, or
			// MX, TXT, SRV...): NODATA, so the client keeps the other family's
			// answer and no cache takes the name for nonexistent.
			r.Ns = []mdns.RR{soa(t.Domain())}
		}
		return r, OutcomeMesh
	}
	return nil, OutcomeForwarded
}

func hdr(name string, typ uint16) mdns.RR_Header {
	return mdns.RR_Header{Name: name, Rrtype: typ, Class: mdns.ClassINET, Ttl: MeshTTL}
}

// soa is the cluster zone's SOA for negative answers (RFC 2308), shaped as
// CoreDNS's kubernetes plugin makes it.
func soa(domain string) *mdns.SOA {
	zone := mdns.Fqdn(domain)
	return &mdns.SOA{Hdr: mdns.RR_Header{Name: zone, Rrtype: mdns.TypeSOA, Class: mdns.ClassINET, Ttl: NegativeTTL},
		Ns: "ns.dns." + zone, Mbox: "hostmaster." + zone, Serial: 1, Refresh: 7200, Retry: 1800, Expire: 86400, Minttl: NegativeTTL}
}

// reply is an empty answer to req with rcode, recursion available (the
// proxy forwards) and, when req had one, an OPT record of our own: our UDP
// size and req's DO bit (RFC 6891, RFC 3225).
func reply(req *mdns.Msg, rcode int) *mdns.Msg {
	r := new(mdns.Msg)
	r.SetRcode(req, rcode)
	r.RecursionAvailable = true
	if opt := req.IsEdns0(); opt != nil {
		r.SetEdns0(MaxUDPSize, opt.Do()) // Pack puts an extended rcode's high bits in it
	}
	return r
}

// udpSize is the largest UDP reply req's sender takes: 512 without EDNS0,
// else its advertised size within [512, MaxUDPSize].
func udpSize(req *mdns.Msg) int {
	opt := req.IsEdns0()
	if opt == nil {
		return mdns.MinMsgSize
	}
	return int(min(max(opt.UDPSize(), mdns.MinMsgSize), MaxUDPSize))
}
