package authz

import (
	"strings"
	"testing"
)

// refMatch is an independent statement of exact/prefix/suffix matching.
func refMatch(kind MatchKind, v, s string) bool {
	switch kind {
	case Exact:
		return s == v
	case Prefix:
		return len(s) >= len(v) && s[:len(v)] == v
	case Suffix:
		return len(s) >= len(v) && s[len(s)-len(v):] == v
	}
	return false
}

// FuzzMatch checks policy matching against a reference and the RBAC
// invariants: a DENY and an ALLOW set of the same policy disagree on every
// request; not inverts; a dry run never denies; the query is never part of the
// path; TCP ignores paths and methods; nothing panics.
func FuzzMatch(f *testing.F) {
	f.Add(uint8(0), "/reviews/", uint8(1), shopNS, frontend, "GET", "/reviews/1?x", uint16(9080), uint16(9080), false)
	f.Add(uint8(2), ".php", uint8(0), bot, bot, "POST", "/a/b.php#f", uint16(80), uint16(81), false)
	f.Add(uint8(1), "", uint8(1), "", "", "", "", uint16(1), uint16(1), true)
	f.Fuzz(func(t *testing.T, pk uint8, pv string, ik uint8, iv, principal, rmethod, rpath string, pport, rport uint16, tcp bool) {
		pathKind, idKind := MatchKind(pk%3), MatchKind(ik%2)
		if pport == 0 {
			pport = 1
		}
		if len(pv) > MaxMatchBytes || len(iv) > MaxMatchBytes || len(rmethod) > MaxMatchBytes {
			return
		}
		perm := andRules(path(pathKind, pv), orRules(method(rmethod), port(uint32(pport))))
		id := Principal{Kind: PrincipalAuthenticated, Name: StringMatch{Kind: idKind, Value: iv}}
		p := pol("ns/p", []Permission{perm}, []Principal{id})
		req := Request{Principal: principal, Method: rmethod, Path: rpath, Port: rport, TCP: tcp}

		stripped := rpath
		if i := strings.IndexAny(rpath, "?#"); i >= 0 {
			stripped = rpath[:i]
		}
		// The rmethod alternative is the request's own rmethod: on HTTP the or-set
		// holds; on TCP neither rpath nor rmethod does, so the policy never matches.
		permHolds := !tcp && refMatch(pathKind, pv, stripped)
		want := permHolds && principal != "" && refMatch(idKind, iv, principal)

		eng := func(fs ...Filter) *Engine {
			e, err := New(Config{Filters: fs}, nil, t0)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			return e
		}
		dd := eng(deny(p)).Decide(req, t0)
		da := eng(allow(p)).Decide(req, t0)
		if got := !dd.Allowed(); got != want {
			t.Fatalf("deny(%+v) on %+v: denied=%v, reference says match=%v", p, req, got, want)
		}
		if dd.Allowed() == da.Allowed() {
			t.Fatalf("deny and allow of one policy agree (%v) on %+v", dd.Allowed(), req)
		}
		notP := pol("ns/not", []Permission{notRule(perm)}, []Principal{anyID()})
		if dn := eng(deny(notP)).Decide(req, t0); dn.Allowed() != permHolds {
			t.Fatalf("not_rule: denied=%v with perm=%v on %+v", !dn.Allowed(), permHolds, req)
		}
		if ds := eng(shadow(Deny, p), shadow(Allow, p)).Decide(req, t0); !ds.Allowed() {
			t.Fatal("a dry run denied")
		}
		if !strings.ContainsAny(rpath, "?#") {
			q := req
			q.Path = rpath + "?" + pv
			if got := eng(deny(p)).Decide(q, t0); got.Allowed() != dd.Allowed() {
				t.Fatalf("the query changed the decision: %q vs %q", q.Path, rpath)
			}
		}
	})
}
