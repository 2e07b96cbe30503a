package ca

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/certs/token"
)

// Issued is one certificate the CA signed; immutable once recorded.
type Issued struct {
	Serial    *big.Int
	ID        spiffeid.ID
	NotBefore time.Time
	NotAfter  time.Time
	Issuer    string // serial (hex) of the root or intermediate that signed it
	Node      string // who asked: "token <jti> from <addr>", "renewal of <serial> from <addr>", "pilot serving"...
	Internal  bool   // pilot's own certificates (serving, publisher): reissued by pilot itself on rotation
}

// Revocation is one revoked serial, kept (and listed in the CRL) until the
// certificate's NotAfter: past it no verifier accepts the certificate anyway.
type Revocation struct {
	Serial    *big.Int
	ID        string // SPIFFE ID of the certificate when known
	RevokedAt time.Time
	Reason    int
	NotAfter  time.Time
}

// ErrRegistryFull is returned when the issued registry holds MaxIssued
// unexpired certificates: new certificates are refused (ResourceExhausted) until
// some expire. Expired entries are dropped, oldest NotAfter first, to make room.
var ErrRegistryFull = errors.New("issued registry full")

// ErrTooManyRevocations is returned when revoke.MaxEntries unexpired serials are
// already revoked.
var ErrTooManyRevocations = errors.New("revocation list full")

// registry is the pure core of the CA's state: what was issued, what is
// revoked. It takes now as an argument and does no I/O; Service guards it with
// its mutex.
type registry struct {
	max     int
	issued  map[string]*Issued    // by serialKey
	revoked map[string]Revocation // by serialKey
	// ids are SPIFFE IDs revoked as a whole: a token issued, or a certificate
	// valid from, at or before the time is refused. Kept until every token that
	// could predate it has expired (token.MaxTTL + token.Leeway).
	ids map[spiffeid.ID]time.Time
}

func newRegistry(maxIssued int) *registry {
	return &registry{max: maxIssued, issued: map[string]*Issued{}, revoked: map[string]Revocation{}, ids: map[spiffeid.ID]time.Time{}}
}

func serialKey(s *big.Int) string { return fmt.Sprintf("%x", s) }

// ParseSerial reads a serial as hex, with or without colons or a 0x prefix,
// any case.
func ParseSerial(s string) (*big.Int, error) {
	t := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), ":", ""))
	t = strings.TrimPrefix(t, "0x")
	n, ok := new(big.Int).SetString(t, 16)
	if !ok || t == "" || n.Sign() <= 0 || n.BitLen() > 160 {
		return nil, fmt.Errorf("serial %q: not a positive hexadecimal serial of at most 20 bytes", s)
	}
	return n, nil
}

// add records e. At the bound it first drops every expired entry (so the
// oldest expired go first); when all MaxIssued are unexpired it refuses.
func (r *registry) add(e *Issued, now time.Time) error {
	if len(r.issued) >= r.max {
		r.dropExpired(now)
	}
	if len(r.issued) >= r.max {
		return fmt.Errorf("%w: %d unexpired certificates (--max-issued %d); new ones are refused until some expire", ErrRegistryFull, len(r.issued), r.max)
	}
	r.issued[serialKey(e.Serial)] = e
	return nil
}

func (r *registry) dropExpired(now time.Time) {
	for k, e := range r.issued {
		if now.After(e.NotAfter) {
			delete(r.issued, k)
		}
	}
}

// prune forgets revocations of expired certificates and ID revocations no token
// can predate any more. It reports whether the CRL content changed.
func (r *registry) prune(now time.Time) bool {
	changed := false
	for k, v := range r.revoked {
		if now.After(v.NotAfter) {
			delete(r.revoked, k)
			changed = true
		}
	}
	for id, at := range r.ids {
		if now.After(at.Add(token.MaxTTL + token.Leeway)) {
			delete(r.ids, id)
		}
	}
	return changed
}

// revokeSerial revokes one serial. A serial the registry does not know (issued
// before a crash lost it, or dropped at the bound) is still revoked, kept for
// unknownNotAfter past now. Revoking an already revoked serial is a no-op that
// returns the existing entry.
func (r *registry) revokeSerial(s *big.Int, reason int, now time.Time, unknownTTL time.Duration) (Revocation, bool, error) {
	k := serialKey(s)
	if v, ok := r.revoked[k]; ok {
		return v, false, nil
	}
	if len(r.revoked) >= revoke.MaxEntries {
		r.prune(now)
		if len(r.revoked) >= revoke.MaxEntries {
			return Revocation{}, false, fmt.Errorf("%w: %d serials revoked (bound %d)", ErrTooManyRevocations, len(r.revoked), revoke.MaxEntries)
		}
	}
	v := Revocation{Serial: s, RevokedAt: now, Reason: reason, NotAfter: now.Add(unknownTTL)}
	if e, ok := r.issued[k]; ok {
		v.ID, v.NotAfter = e.ID.String(), e.NotAfter
	}
	r.revoked[k] = v
	return v, true, nil
}

// revokeID revokes every unexpired certificate of id and refuses credentials
// for id that predate now. Returns the serials newly revoked.
func (r *registry) revokeID(id spiffeid.ID, reason int, now time.Time) ([]Revocation, error) {
	var out []Revocation
	for _, e := range r.sortedIssued() {
		if e.ID != id || now.After(e.NotAfter) {
			continue
		}
		v, added, err := r.revokeSerial(e.Serial, reason, now, 0)
		if err != nil {
			return out, err
		}
		if added {
			out = append(out, v)
		}
	}
	r.ids[id] = now
	return out, nil
}

// isRevoked reports whether serial is revoked.
func (r *registry) isRevoked(s *big.Int) bool {
	_, ok := r.revoked[serialKey(s)]
	return ok
}

// idRevokedSince reports whether id was revoked at or after t (so a credential
// for id issued at t is refused), and when.
func (r *registry) idRevokedSince(id spiffeid.ID, t time.Time) (time.Time, bool) {
	at, ok := r.ids[id]
	return at, ok && !t.After(at)
}

// crlEntries is every revoked serial, ordered by serial (a stable CRL).
func (r *registry) crlEntries() []revoke.Entry {
	out := make([]revoke.Entry, 0, len(r.revoked))
	for _, v := range r.revoked {
		out = append(out, revoke.Entry{Serial: v.Serial, RevokedAt: v.RevokedAt, Reason: v.Reason})
	}
	slices.SortFunc(out, func(a, b revoke.Entry) int { return a.Serial.Cmp(b.Serial) })
	return out
}

// liveFrom counts unexpired, unrevoked, non-internal certificates signed by
// issuer (what FinishRotation would strand).
func (r *registry) liveFrom(issuer string, now time.Time) int {
	n := 0
	for k, e := range r.issued {
		if e.Issuer == issuer && !e.Internal && !now.After(e.NotAfter) {
			if _, rev := r.revoked[k]; !rev {
				n++
			}
		}
	}
	return n
}

// sortedIssued is every entry, oldest NotBefore first (then serial).
func (r *registry) sortedIssued() []*Issued {
	out := make([]*Issued, 0, len(r.issued))
	for _, e := range r.issued {
		out = append(out, e)
	}
	sortIssued(out)
	return out
}

// sortIssued orders oldest NotBefore first, then by serial.
func sortIssued(out []*Issued) {
	slices.SortFunc(out, func(a, b *Issued) int {
		if c := a.NotBefore.Compare(b.NotBefore); c != 0 {
			return c
		}
		return a.Serial.Cmp(b.Serial)
	})
}

func (r *registry) sortedRevoked() []Revocation {
	out := make([]Revocation, 0, len(r.revoked))
	for _, v := range r.revoked {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b Revocation) int { return a.Serial.Cmp(b.Serial) })
	return out
}

// reasons are the RFC 5280 CRLReason names the admin API accepts
// (certificateHold is left out: a hold can be lifted, a Weft revocation cannot).
var reasons = map[string]int{
	"unspecified": 0, "keyCompromise": 1, "cACompromise": 2, "affiliationChanged": 3, "superseded": 4,
	"cessationOfOperation": 5, "privilegeWithdrawn": 9, "aACompromise": 10,
}

// ParseReason maps a reason name (or "" for unspecified) to its code.
func ParseReason(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	code, ok := reasons[s]
	if !ok {
		names := make([]string, 0, len(reasons))
		for n := range reasons {
			names = append(names, n)
		}
		slices.Sort(names)
		return 0, fmt.Errorf("reason %q: want one of %s", s, strings.Join(names, ", "))
	}
	return code, nil
}

// dropOldest drops the entry with the earliest NotAfter (used only to make room
// for pilot's own certificates at the bound).
func (r *registry) dropOldest() {
	var oldest string
	var at time.Time
	for k, e := range r.issued {
		if oldest == "" || e.NotAfter.Before(at) {
			oldest, at = k, e.NotAfter
		}
	}
	delete(r.issued, oldest)
}
