package interception

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// upstream is the node's DNS server (what pods' resolv.conf names): the
// sidecars' DNS proxies forward names that are not the mesh's to it. It knows
// the names in hosts (lower-case, with the trailing dot) and says NXDOMAIN to
// every other one.
type upstream struct {
	hosts map[string]netip.Addr
}

// answer is the reply to the query q (nil: not a query worth an answer).
func (u upstream) answer(q []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return nil
	}
	question := qs[0]
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	addr, known := u.hosts[strings.ToLower(question.Name.String())]
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(question) != nil || b.StartAnswers() != nil {
		return nil
	}
	rrh := dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 5}
	switch {
	case known && question.Type == dnsmessage.TypeA && addr.Is4():
		if b.AResource(rrh, dnsmessage.AResource{A: addr.As4()}) != nil {
			return nil
		}
	case known && question.Type == dnsmessage.TypeAAAA && addr.Is6():
		if b.AAAAResource(rrh, dnsmessage.AAAAResource{AAAA: addr.As16()}) != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// serve answers on pc until it is closed.
func (u upstream) serve(pc net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if a := u.answer(buf[:n]); a != nil {
			_, _ = pc.WriteTo(a, from)
		}
	}
}

func query(t *testing.T, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	q, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// Unprivileged: the upstream's answers, so a run without pods still tests something.
func TestUpstreamAnswers(t *testing.T) {
	u := upstream{hosts: map[string]netip.Addr{"outside.example.": netip.MustParseAddr("10.250.0.13")}}
	for _, c := range []struct {
		name    string
		typ     dnsmessage.Type
		rcode   dnsmessage.RCode
		answers int
	}{
		{"outside.example.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, 1},
		{"OUTSIDE.example.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, 1},
		{"outside.example.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, 0},
		{"reviews.shop.shop.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeNameError, 0},
	} {
		var m dnsmessage.Message
		if err := m.Unpack(u.answer(query(t, c.name, c.typ))); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if m.ID != 7 || !m.Response || m.RCode != c.rcode || len(m.Answers) != c.answers {
			t.Errorf("%s %v: id %d rcode %v answers %d, want rcode %v answers %d", c.name, c.typ, m.ID, m.RCode, len(m.Answers), c.rcode, c.answers)
		}
		if c.answers == 1 && m.Answers[0].Body.(*dnsmessage.AResource).A != [4]byte{10, 250, 0, 13} {
			t.Errorf("%s: %v", c.name, m.Answers[0].Body)
		}
	}
	if u.answer([]byte{1, 2, 3}) != nil {
		t.Error("garbage answered")
	}
}
