package ca

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/weft-mesh/weft/certs/token"
	"github.com/weft-mesh/weft/pilot/store"
)

// Revocations shared by pilot replicas (ServiceConfig.Revocations): every
// revocation is written to the store's set RevocationSet before it is
// acknowledged, and every replica builds its CRL from that set, so a
// certificate revoked through one replica is refused by all. The issued
// registry and the per-token CSR rate limit stay per replica.
const (
	// RevocationSet is the store set (store.Sets) of the revocations.
	RevocationSet = "ca-revocations"
	// DefaultSharedPoll is how often each replica reads the set's revision
	// (one small read); a change re-signs its CRL at once. It bounds how long
	// after a revocation through another replica this one still accepts the
	// certificate.
	DefaultSharedPoll = 500 * time.Millisecond
	MinSharedPoll     = 50 * time.Millisecond
	MaxSharedPoll     = 10 * time.Second
	// SharedTimeout bounds each read or write of the set.
	SharedTimeout = 10 * time.Second
)

// Record names: one record per revoked serial, one per revoked SPIFFE ID.
const (
	serialRecordPrefix = "serial/"
	idRecordPrefix     = "id/"
)

func serialRecord(v Revocation) (store.SetRecord, error) {
	b, err := json.Marshal(revocationJSON{Serial: serialKey(v.Serial), ID: v.ID, RevokedAt: v.RevokedAt, Reason: v.Reason, NotAfter: v.NotAfter})
	return store.SetRecord{Name: serialRecordPrefix + serialKey(v.Serial), Value: b}, err
}

func idRecord(id spiffeid.ID, at time.Time) (store.SetRecord, error) {
	b, err := json.Marshal(idRevocationJSON{ID: id.String(), RevokedAt: at})
	return store.SetRecord{Name: idRecordPrefix + id.String(), Value: b}, err
}

// decodeSet reads the set's records. A record it cannot read is an error
// (never skipped: a revocation dropped silently would be accepted again).
func decodeSet(recs []store.SetRecord) (map[string]Revocation, map[spiffeid.ID]time.Time, error) {
	revoked := make(map[string]Revocation, len(recs))
	ids := map[spiffeid.ID]time.Time{}
	for _, r := range recs {
		switch {
		case strings.HasPrefix(r.Name, serialRecordPrefix):
			var v revocationJSON
			if err := json.Unmarshal(r.Value, &v); err != nil {
				return nil, nil, fmt.Errorf("set %s: record %s: %w", RevocationSet, r.Name, err)
			}
			s, err := ParseSerial(v.Serial)
			if err != nil {
				return nil, nil, fmt.Errorf("set %s: record %s: %w", RevocationSet, r.Name, err)
			}
			if r.Name != serialRecordPrefix+serialKey(s) {
				return nil, nil, fmt.Errorf("set %s: record %s holds serial %s", RevocationSet, r.Name, serialKey(s))
			}
			revoked[serialKey(s)] = Revocation{Serial: s, ID: v.ID, RevokedAt: v.RevokedAt, Reason: v.Reason, NotAfter: v.NotAfter}
		case strings.HasPrefix(r.Name, idRecordPrefix):
			var v idRevocationJSON
			if err := json.Unmarshal(r.Value, &v); err != nil {
				return nil, nil, fmt.Errorf("set %s: record %s: %w", RevocationSet, r.Name, err)
			}
			id, err := spiffeid.FromString(v.ID)
			if err != nil {
				return nil, nil, fmt.Errorf("set %s: record %s: %w", RevocationSet, r.Name, err)
			}
			// Two replicas revoking one ID: the later time refuses more.
			if at, ok := ids[id]; !ok || v.RevokedAt.After(at) {
				ids[id] = v.RevokedAt
			}
		default:
			return nil, nil, fmt.Errorf("set %s: record %q: unknown kind of record", RevocationSet, r.Name)
		}
	}
	return revoked, ids, nil
}

// expiredRecords names the records no verifier needs any more (as
// registry.prune): serials past their certificate's NotAfter, IDs no token can
// predate.
func expiredRecords(revoked map[string]Revocation, ids map[spiffeid.ID]time.Time, now time.Time) []string {
	var out []string
	for k, v := range revoked {
		if now.After(v.NotAfter) {
			out = append(out, serialRecordPrefix+k)
		}
	}
	for id, at := range ids {
		if now.After(at.Add(token.MaxTTL + token.Leeway)) {
			out = append(out, idRecordPrefix+id.String())
		}
	}
	return out
}

// crlNumberFor is the CRL number of a CRL built from the set at setRev and
// signed at now: the set revision in the high bits, the signing second in the
// low 32. Every replica reads the same records at one set revision, so two
// CRLs with one number list the same serials; a later set revision always has
// a higher number, whichever replica signs; re-signing an unchanged set
// raises it with time.
func crlNumberFor(setRev store.Revision, now time.Time) (int64, error) {
	if setRev < 0 || setRev > math.MaxInt32 {
		return 0, fmt.Errorf("set %s: revision %d outside 0..%d, the CRL number cannot be derived from it", RevocationSet, setRev, math.MaxInt32)
	}
	sec := now.Unix()
	if sec < 0 || sec > math.MaxUint32 {
		return 0, fmt.Errorf("CRL number: time %v outside 1970..2106", now.UTC())
	}
	return int64(setRev)<<32 | sec, nil
}

// writeRecords puts recs and deletes del in chunks of store.MaxSetApply. Each
// chunk is atomic; revocations are idempotent, so a failure half way is
// repaired by retrying the whole call.
func writeRecords(sets store.Sets, recs []store.SetRecord, del []string) error {
	for len(recs) > 0 || len(del) > 0 {
		n := min(len(recs), store.MaxSetApply)
		m := min(len(del), store.MaxSetApply-n)
		ctx, cancel := context.WithTimeout(context.Background(), SharedTimeout)
		_, err := sets.SetApply(ctx, RevocationSet, recs[:n], del[:m])
		cancel()
		if err != nil {
			return fmt.Errorf("pilot ca: writing revocations to the store: %w", err)
		}
		recs, del = recs[n:], del[m:]
	}
	return nil
}

// revocationRecords is what one revocation writes: its serials and, for a
// SPIFFE ID, the ID.
func revocationRecords(revs []Revocation, id *spiffeid.ID, at time.Time) ([]store.SetRecord, error) {
	out := make([]store.SetRecord, 0, len(revs)+1)
	for _, v := range revs {
		r, err := serialRecord(v)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if id != nil {
		r, err := idRecord(*id, at)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// idStragglers are the serials this replica issued that a revoked SPIFFE ID
// covers (valid from at or before its revocation) but the set does not list:
// another replica revoked the ID without knowing them.
func (r *registry) idStragglers(now time.Time, backdate time.Duration) []Revocation {
	var out []Revocation
	for k, e := range r.issued {
		at, ok := r.ids[e.ID]
		if !ok || now.After(e.NotAfter) || e.NotBefore.Add(backdate).After(at) {
			continue
		}
		if _, done := r.revoked[k]; !done {
			out = append(out, Revocation{Serial: e.Serial, ID: e.ID.String(), RevokedAt: at, NotAfter: e.NotAfter})
		}
	}
	return out
}
