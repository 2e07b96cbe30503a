package staleness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Limits on rules from pilot.
const (
	MaxJitter   = 100                       // percent, as pilot validates it
	MaxDuration = 10 * 365 * 24 * time.Hour // any threshold; keeps time arithmetic sane
	MaxRuleSize = 64 << 10             // bytes of one encoded rule set
)

// Default is the policy for c when no StalenessPolicy selects the sidecar (API.md).
// Routing and authorization spread expiry by 10% so a fleet does not stop at once.
func Default(c Class) Policy {
	switch c {
	case Listeners, Routes, Clusters, Authorization:
		return Policy{Class: c, WarnAfter: 5 * time.Minute, ExpireAfter: 24 * time.Hour, OnExpire: FailClosed, Jitter: 10}
	case Endpoints:
		return Policy{Class: c, WarnAfter: time.Minute, OnExpire: ServeStale}
	case Secrets:
		// Fails closed at the certificate's NotAfter (a deadline), not by age.
		return Policy{Class: c, OnExpire: FailClosed}
	case Revocation:
		// Fails closed at the CRL's NextUpdate plus an hour.
		return Policy{Class: c, OnExpire: FailClosed, Grace: time.Hour}
	}
	return Policy{Class: c}
}

// Set holds one policy per class; build with Defaults or FromRules.
type Set map[Class]Policy

// Defaults is the default Set.
func Defaults() Set {
	s := Set{}
	for _, c := range Classes() {
		s[c] = Default(c)
	}
	return s
}

// EvaluateAll judges every class in Classes order. deadlines holds the absolute
// bounds known for some classes (Secrets: NotAfter; Revocation: NextUpdate).
func (s Set) EvaluateAll(lastConfirmed time.Time, deadlines map[Class]time.Time, now time.Time, seed uint64) []State {
	out := make([]State, 0, len(s))
	for _, c := range Classes() {
		p, ok := s[c]
		if !ok {
			p = Default(c)
		}
		out = append(out, EvaluateWithDeadline(p, lastConfirmed, deadlines[c], now, seed))
	}
	return out
}

// Rule is one StalenessPolicy rule as pilot delivers it (the API's field names;
// durations as Go duration strings; jitter a whole percent).
type Rule struct {
	Resource      string `json:"resource"`
	WarnAfter     string `json:"warnAfter,omitempty"`
	RestrictAfter string `json:"restrictAfter,omitempty"`
	ExpireAfter   string `json:"expireAfter,omitempty"`
	OnExpire      string `json:"onExpire,omitempty"`
	Jitter        *int   `json:"jitter,omitempty"`
}

// Spec is StalenessPolicy.spec as far as the sidecar needs it.
type Spec struct {
	Selector map[string]string `json:"selector,omitempty"`
	Rules    []Rule            `json:"rules"`
}

// Parse decodes a StalenessPolicy spec in JSON, strictly, and builds the Set: the
// defaults with each rule's class replaced.
func Parse(data []byte) (Set, error) {
	if len(data) > MaxRuleSize {
		return nil, fmt.Errorf("staleness policy: %d bytes, limit %d", len(data), MaxRuleSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var spec Spec
	if err := dec.Decode(&spec); err != nil {
		return nil, fmt.Errorf("staleness policy: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("staleness policy: trailing data after the object")
	}
	return FromRules(spec.Rules)
}

// FromRules validates rules and returns the defaults overridden by them. A rule
// replaces its class's policy whole, except that an omitted onExpire or jitter keeps
// the class default, and Grace always comes from the default.
func FromRules(rules []Rule) (Set, error) {
	if len(rules) > len(Classes()) {
		return nil, fmt.Errorf("staleness policy: rules: %d rules, limit %d (one per resource class)", len(rules), len(Classes()))
	}
	set := Defaults()
	seen := map[Class]int{}
	for i, r := range rules {
		p, err := r.policy()
		if err != nil {
			return nil, fmt.Errorf("staleness policy: rules[%d]: %w", i, err)
		}
		if j, dup := seen[p.Class]; dup {
			return nil, fmt.Errorf("staleness policy: rules[%d]: resource: %s already set by rules[%d]", i, p.Class, j)
		}
		seen[p.Class] = i
		set[p.Class] = p
	}
	return set, nil
}

func (r Rule) policy() (Policy, error) {
	c := Class(r.Resource)
	if r.Resource == "" {
		return Policy{}, fmt.Errorf("resource: required")
	}
	if !c.valid() {
		return Policy{}, fmt.Errorf("resource: %q unknown, want one of %v", r.Resource, Classes())
	}
	def := Default(c)
	p := Policy{Class: c, OnExpire: def.OnExpire, Jitter: def.Jitter, Grace: def.Grace}
	for _, f := range []struct {
		name string
		in   string
		out  *time.Duration
	}{{"warnAfter", r.WarnAfter, &p.WarnAfter}, {"restrictAfter", r.RestrictAfter, &p.RestrictAfter}, {"expireAfter", r.ExpireAfter, &p.ExpireAfter}} {
		if f.in == "" {
			continue
		}
		d, err := time.ParseDuration(f.in)
		if err != nil {
			return Policy{}, fmt.Errorf("%s: %w", f.name, err)
		}
		if d <= 0 || d > MaxDuration {
			return Policy{}, fmt.Errorf("%s: %v out of range (0, %v]", f.name, d, MaxDuration)
		}
		*f.out = d
	}
	if r.OnExpire != "" {
		p.OnExpire = Action(r.OnExpire)
		if !p.OnExpire.valid() {
			return Policy{}, fmt.Errorf("onExpire: %q unknown, want serveStale, failClosed or drop", r.OnExpire)
		}
	}
	if r.Jitter != nil {
		if *r.Jitter < 0 || *r.Jitter > MaxJitter {
			return Policy{}, fmt.Errorf("jitter: %d out of range [0, %d]", *r.Jitter, MaxJitter)
		}
		p.Jitter = *r.Jitter
	}
	// Thresholds that are set must not come before the one they escalate from
	// (equal is allowed, as pilot's validation allows it).
	order := []struct {
		name string
		d    time.Duration
	}{{"warnAfter", p.WarnAfter}, {"restrictAfter", p.RestrictAfter}, {"expireAfter", p.ExpireAfter}}
	for i := range order {
		for j := i + 1; j < len(order); j++ {
			if order[i].d > 0 && order[j].d > 0 && order[i].d > order[j].d {
				return Policy{}, fmt.Errorf("%s: %v is after %s %v", order[i].name, order[i].d, order[j].name, order[j].d)
			}
		}
	}
	return p, nil
}
