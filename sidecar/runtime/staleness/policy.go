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
	MaxRuleSize = 64 << 10                  // bytes of one encoded rule set
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
	if r.Resource == "" {
		return Policy{}, fmt.Errorf("resource: required")
	}
	c := Class(r.Resource)
	def := Default(c)
	p := Policy{Class: c, OnExpire: def.OnExpire, Jitter: def.Jitter, Grace: def.Grace}
	if !c.valid() {
		return Policy{}, p.Check() // names the unknown class
	}
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
		if d <= 0 {
			// Written out, a threshold must be one; "never" is leaving it out.
			return Policy{}, fmt.Errorf("%s: %v out of range (0, %v]", f.name, d, MaxDuration)
		}
		*f.out = d
	}
	if r.OnExpire != "" {
		p.OnExpire = Action(r.OnExpire)
	}
	if r.Jitter != nil {
		p.Jitter = *r.Jitter
	}
	return p, p.Check()
}

// Check validates a policy from outside (an operator flag, pilot's delivered
// StalenessPolicy) against the bounds pilot's own validation enforces, so pilot
// never sends what a sidecar refuses: a known class and action, thresholds zero
// ("never") or in (0, MaxDuration], jitter a percent in [0, MaxJitter], and set
// thresholds in escalation order (equal is allowed). Errors name the API field.
func (p Policy) Check() error {
	if p.Class == "" {
		return fmt.Errorf("resource: required")
	}
	if !p.Class.valid() {
		return fmt.Errorf("resource: %q unknown, want one of %v", p.Class, Classes())
	}
	order := []struct {
		name string
		d    time.Duration
	}{{"warnAfter", p.WarnAfter}, {"restrictAfter", p.RestrictAfter}, {"expireAfter", p.ExpireAfter}}
	for _, f := range order {
		if f.d < 0 || f.d > MaxDuration {
			return fmt.Errorf("%s: %v out of range (0, %v]", f.name, f.d, MaxDuration)
		}
	}
	if !p.OnExpire.valid() {
		return fmt.Errorf("onExpire: %q unknown, want serveStale, failClosed or drop", p.OnExpire)
	}
	if p.Jitter < 0 || p.Jitter > MaxJitter {
		return fmt.Errorf("jitter: %d out of range [0, %d]", p.Jitter, MaxJitter)
	}
	for i := range order {
		for j := i + 1; j < len(order); j++ {
			if order[i].d > 0 && order[j].d > 0 && order[i].d > order[j].d {
				return fmt.Errorf("%s: %v is after %s %v", order[i].name, order[i].d, order[j].name, order[j].d)
			}
		}
	}
	return nil
}
