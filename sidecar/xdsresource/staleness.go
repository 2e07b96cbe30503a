package xdsresource

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/weft-mesh/weft/bootstrap/stalenesspb"
	"github.com/weft-mesh/weft/sidecar/runtime/staleness"
)

// StalenessType is the StalenessPolicy pilot delivers to each Weft sidecar: one
// resource named stalenesspb.Name, decoded into *Staleness.
const StalenessType = stalenesspb.TypeURL

// MaxSourceBytes bounds a rule's source ("namespace/name" of a StalenessPolicy).
const MaxSourceBytes = 2 * MaxNameBytes

// Staleness is a delivered StalenessPolicy: the validated rules for the classes
// it covers, in wire order, one per class. Classes it does not cover keep the
// sidecar's defaults; an empty Staleness says no StalenessPolicy selects this
// sidecar.
type Staleness struct {
	Rules []StalenessRule
}

// StalenessRule is one class's delivered policy and the StalenessPolicy object
// ("namespace/name") it came from.
type StalenessRule struct {
	Policy staleness.Policy
	Source string
}

// decodeStaleness validates with staleness.Policy.Check, the same bounds pilot's
// validation enforces. Unlike an operator's rule, a delivered jitter of 0 means no
// jitter: pilot cannot tell an omitted jitter from 0, so it sends what was written.
// An omitted onExpire keeps the class default.
func decodeStaleness(m *stalenesspb.Policy) (*Staleness, error) {
	e := errs{kind: "staleness", name: stalenesspb.Name}
	if n := len(m.GetRules()); n > len(staleness.Classes()) {
		return nil, e.at("rules", "%d rules, limit %d (one per resource class)", n, len(staleness.Classes()))
	}
	out := &Staleness{}
	seen := map[staleness.Class]int{}
	for i, r := range m.GetRules() {
		f := fmt.Sprintf("rules[%d]", i)
		c := staleness.Class(r.GetResource())
		def := staleness.Default(c)
		p := staleness.Policy{Class: c, OnExpire: def.OnExpire, Jitter: int(r.GetJitterPercent()), Grace: def.Grace}
		if r.GetOnExpire() != "" {
			p.OnExpire = staleness.Action(r.GetOnExpire())
		}
		for _, d := range []struct {
			field string
			in    *durationpb.Duration
			out   *time.Duration
		}{{"warn_after", r.GetWarnAfter(), &p.WarnAfter}, {"restrict_after", r.GetRestrictAfter(), &p.RestrictAfter}, {"expire_after", r.GetExpireAfter(), &p.ExpireAfter}} {
			if d.in == nil {
				continue // never
			}
			v, err := duration(e, f+"."+d.field, d.in, 0)
			if err != nil {
				return nil, err
			}
			if v == 0 {
				return nil, e.at(f+"."+d.field, "must be positive (leave it unset for never)")
			}
			*d.out = v
		}
		if err := p.Check(); err != nil {
			return nil, e.at(f, "%v", err)
		}
		if j, dup := seen[c]; dup {
			return nil, e.at(f+".resource", "%s already set by rules[%d]", c, j)
		}
		seen[c] = i
		if n := len(r.GetSource()); n > MaxSourceBytes {
			return nil, e.at(f+".source", "is %d bytes, limit %d", n, MaxSourceBytes)
		}
		out.Rules = append(out.Rules, StalenessRule{Policy: p, Source: r.GetSource()})
	}
	return out, nil
}
