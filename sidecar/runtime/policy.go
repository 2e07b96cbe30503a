package runtime

import (
	"time"

	"github.com/weft-mesh/weft/sidecar/runtime/staleness"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// Where a class's staleness policy comes from, most binding first: an operator's
// --staleness override, then the StalenessPolicy pilot delivered with the active
// configuration, then the defaults (API.md). The delivered policy is part of the
// signed snapshot, so it changes only on activation and survives in the
// last-known-good file, and a sidecar restarted without pilot judges its age by
// the same policy it was running with.
const (
	PolicyOverride = "override"
	PolicyPilot    = "pilot"
	PolicyDefault  = "default"
)

// policy is the staleness policy in force for one configuration; immutable.
type policy struct {
	set    staleness.Set              // every class
	source map[staleness.Class]string // PolicyOverride | PolicyPilot | PolicyDefault
	from   map[staleness.Class]string // for PolicyPilot: the StalenessPolicy "namespace/name"
}

// effectivePolicy merges, per class, the operator's overrides, what pilot
// delivered (nil: nothing, as from a plain xDS server) and the defaults.
func effectivePolicy(overrides staleness.Set, delivered *xdsresource.Staleness) *policy {
	p := &policy{set: staleness.Defaults(), source: map[staleness.Class]string{}, from: map[staleness.Class]string{}}
	for _, c := range staleness.Classes() {
		p.source[c] = PolicyDefault
	}
	if delivered != nil {
		for _, r := range delivered.Rules {
			c := r.Policy.Class
			p.set[c], p.source[c], p.from[c] = r.Policy, PolicyPilot, r.Source
		}
	}
	for c, o := range overrides {
		p.set[c], p.source[c] = o, PolicyOverride
		delete(p.from, c)
	}
	return p
}

// deliveredPolicy is the staleness resource of a candidate, if it has one.
func deliveredPolicy(state map[string]map[string]any) *xdsresource.Staleness {
	for _, v := range state[xdsresource.StalenessType] {
		if s, ok := v.(*xdsresource.Staleness); ok {
			return s
		}
	}
	return nil
}

// PolicyInfo is the policy in force for one class and where it came from, for
// /config_dump. Durations are Go durations; empty means never.
type PolicyInfo struct {
	Source        string `json:"source"`         // override | pilot | default
	From          string `json:"from,omitempty"` // the StalenessPolicy, for pilot
	WarnAfter     string `json:"warnAfter,omitempty"`
	RestrictAfter string `json:"restrictAfter,omitempty"`
	ExpireAfter   string `json:"expireAfter,omitempty"`
	OnExpire      string `json:"onExpire"`
	Jitter        int    `json:"jitter"`
}

func (p *policy) info(c staleness.Class) PolicyInfo {
	sp := p.set[c]
	str := func(d time.Duration) string {
		if d == 0 {
			return ""
		}
		return d.String()
	}
	return PolicyInfo{Source: p.source[c], From: p.from[c], OnExpire: string(sp.OnExpire), Jitter: sp.Jitter,
		WarnAfter: str(sp.WarnAfter), RestrictAfter: str(sp.RestrictAfter), ExpireAfter: str(sp.ExpireAfter)}
}
