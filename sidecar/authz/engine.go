package authz

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ErrInvalid wraps every reason New refuses a configuration.
var ErrInvalid = errors.New("invalid authorization configuration")

// Config is one chain's authorization: its RBAC filters in chain order and the
// expiry of the Overrides (the listener's: entries no policy of this chain names
// are unused; the decoder checks every entry is used by some chain).
type Config struct {
	Filters   []Filter
	Overrides []Override
	// TCP: the filters are envoy.filters.network.rbac on a TCP chain; path and
	// method permissions never match.
	TCP bool
}

// Engine decides requests for one chain. Immutable; safe for concurrent use.
type Engine struct {
	filters   []filter
	tcp       bool
	overrides []string // names of the Override policies, sorted
	sightings []Sighting
	none      *policyStats // counts Expired decisions
	paths     bool         // a policy has a path permission (UsesPaths)
}

type filter struct {
	name     string
	override bool
	rules    *rules // nil: nothing enforced
	shadow   *rules
}

type rules struct {
	action   Action
	label    uint8 // metric action label (labelAllow..labelOverride)
	policies []policy
	none     *policyStats // counts an ALLOW set's denial when no policy matched
}

type policy struct {
	p        *Policy
	stat     *policyStats
	deadline time.Time // Overrides only: enforced while now is before it
}

// New compiles cfg. st holds what outlives configurations (when each Override
// was first seen, counters); now is the compile time, which becomes the first
// sighting of an Override revision st has not seen. The sighting is recorded
// only by State.Commit, which the caller runs with the engines of the
// configuration it activates (a refused candidate must not start a TTL).
// st nil: a private State.
func New(cfg Config, st *State, now time.Time) (*Engine, error) {
	if st == nil {
		st = NewState()
	}
	if len(cfg.Filters) > MaxFilters {
		return nil, fmt.Errorf("%w: %d RBAC filters, limit %d", ErrInvalid, len(cfg.Filters), MaxFilters)
	}
	if len(cfg.Overrides) > MaxOverrides {
		return nil, fmt.Errorf("%w: %d overrides, limit %d", ErrInvalid, len(cfg.Overrides), MaxOverrides)
	}
	ovr := make(map[string]Override, len(cfg.Overrides))
	for _, o := range cfg.Overrides {
		if err := checkOverride(o); err != nil {
			return nil, err
		}
		if _, dup := ovr[o.Name]; dup {
			return nil, fmt.Errorf("%w: override %q listed twice", ErrInvalid, o.Name)
		}
		ovr[o.Name] = o
	}
	e := &Engine{tcp: cfg.TCP, none: st.stat(NoPolicy)}
	used := map[string]bool{}
	for i := range cfg.Filters {
		f := &cfg.Filters[i]
		cf := filter{name: f.Name, override: f.Override}
		for _, rs := range []struct {
			in  *Rules
			out **rules
		}{{f.Rules, &cf.rules}, {f.Shadow, &cf.shadow}} {
			if rs.in == nil {
				continue
			}
			r, err := compileRules(f, rs.in, st)
			if err != nil {
				return nil, fmt.Errorf("filter %q: %w", f.Name, err)
			}
			if f.Override {
				for j := range r.policies {
					name := r.policies[j].p.Name
					o, ok := ovr[name]
					if !ok {
						return nil, fmt.Errorf("%w: filter %q: override policy %q has no TTL in the listener's weft.overrides", ErrInvalid, f.Name, name)
					}
					seen := st.firstSeen(o, now)
					r.policies[j].deadline = Deadline(o, seen)
					if !used[name] {
						used[name] = true
						e.overrides = append(e.overrides, name)
						e.sightings = append(e.sightings, Sighting{Name: name, Revision: o.Revision, FirstSeen: seen, Deadline: r.policies[j].deadline})
					}
				}
			}
			for j := range r.policies {
				e.paths = e.paths || permissionsUsePaths(r.policies[j].p.Permissions)
			}
			*rs.out = r
		}
		e.filters = append(e.filters, cf)
	}
	slices.Sort(e.overrides)
	return e, nil
}

// Deadline is when an Override stops being enforced: its TTL from the first
// sighting on this sidecar's clock, never past the ExpiresAt pilot stated.
func Deadline(o Override, firstSeen time.Time) time.Time {
	d := firstSeen.Add(o.TTL)
	if !o.ExpiresAt.IsZero() && o.ExpiresAt.Before(d) {
		return o.ExpiresAt
	}
	return d
}

func checkOverride(o Override) error {
	switch {
	case o.Name == "" || len(o.Name) > MaxNameBytes:
		return fmt.Errorf("%w: override name %q: want 1..%d bytes", ErrInvalid, clip(o.Name), MaxNameBytes)
	case o.TTL <= 0 || o.TTL > MaxOverrideTTL:
		return fmt.Errorf("%w: override %q: ttl %v outside (0, %v]", ErrInvalid, o.Name, o.TTL, MaxOverrideTTL)
	case o.Revision < 0:
		return fmt.Errorf("%w: override %q: negative revision %d", ErrInvalid, o.Name, o.Revision)
	}
	return nil
}

func compileRules(f *Filter, in *Rules, st *State) (*rules, error) {
	if len(in.Policies) > MaxPolicies {
		return nil, fmt.Errorf("%w: %d policies, limit %d", ErrInvalid, len(in.Policies), MaxPolicies)
	}
	if f.Override && in.Action != Deny {
		return nil, fmt.Errorf("%w: override filter must DENY, has action %s", ErrInvalid, in.Action)
	}
	r := &rules{action: in.Action, policies: make([]policy, 0, len(in.Policies)), none: st.stat(NoPolicy)}
	switch {
	case f.Override:
		r.label = labelOverride
	case in.Action == Allow:
		r.label = labelAllow
	case in.Action == Deny:
		r.label = labelDeny
	case in.Action == Log:
		r.label = labelAudit
	default:
		return nil, fmt.Errorf("%w: unknown action %d", ErrInvalid, in.Action)
	}
	for i := range in.Policies {
		p := &in.Policies[i]
		if p.Name == "" || len(p.Name) > MaxNameBytes {
			return nil, fmt.Errorf("%w: policy name %q: want 1..%d bytes", ErrInvalid, clip(p.Name), MaxNameBytes)
		}
		if err := checkPolicy(p); err != nil {
			return nil, fmt.Errorf("policy %q: %w", p.Name, err)
		}
		r.policies = append(r.policies, policy{p: p, stat: st.stat(p.Name)})
	}
	slices.SortFunc(r.policies, func(a, b policy) int { return strings.Compare(a.p.Name, b.p.Name) })
	for i := 1; i < len(r.policies); i++ {
		if r.policies[i].p.Name == r.policies[i-1].p.Name {
			return nil, fmt.Errorf("%w: policy %q twice", ErrInvalid, r.policies[i].p.Name)
		}
	}
	return r, nil
}

func checkPolicy(p *Policy) error {
	if len(p.Permissions) > MaxIDs || len(p.Principals) > MaxIDs {
		return fmt.Errorf("%w: %d permissions and %d principals, limit %d each", ErrInvalid, len(p.Permissions), len(p.Principals), MaxIDs)
	}
	for i := range p.Permissions {
		if err := checkPermission(&p.Permissions[i], 1); err != nil {
			return err
		}
	}
	for i := range p.Principals {
		if err := checkPrincipal(&p.Principals[i], 1); err != nil {
			return err
		}
	}
	return nil
}

func checkMatch(m StringMatch) error {
	if m.Kind > Suffix {
		return fmt.Errorf("%w: unknown match kind %d", ErrInvalid, m.Kind)
	}
	if len(m.Value) > MaxMatchBytes {
		return fmt.Errorf("%w: match value is %d bytes, limit %d", ErrInvalid, len(m.Value), MaxMatchBytes)
	}
	return nil
}

func checkPermission(p *Permission, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("%w: permissions nested deeper than %d", ErrInvalid, MaxDepth)
	}
	switch p.Kind {
	case PermissionAny:
		return nil
	case PermissionPath, PermissionMethod:
		return checkMatch(p.Match)
	case PermissionPort:
		if p.Port == 0 || p.Port > 65535 {
			return fmt.Errorf("%w: destination port %d outside 1..65535", ErrInvalid, p.Port)
		}
		return nil
	case PermissionAnd, PermissionOr, PermissionNot:
		if n := len(p.Rules); n == 0 || n > MaxIDs || p.Kind == PermissionNot && n != 1 {
			return fmt.Errorf("%w: permission set of %d rules (and/or: 1..%d; not: 1)", ErrInvalid, n, MaxIDs)
		}
		for i := range p.Rules {
			if err := checkPermission(&p.Rules[i], depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%w: unknown permission kind %d", ErrInvalid, p.Kind)
}

func checkPrincipal(p *Principal, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("%w: principals nested deeper than %d", ErrInvalid, MaxDepth)
	}
	switch p.Kind {
	case PrincipalAny:
		return nil
	case PrincipalAuthenticated:
		if p.AnyName {
			return nil
		}
		return checkMatch(p.Name)
	case PrincipalAnd, PrincipalOr, PrincipalNot:
		if n := len(p.IDs); n == 0 || n > MaxIDs || p.Kind == PrincipalNot && n != 1 {
			return fmt.Errorf("%w: principal set of %d ids (and/or: 1..%d; not: 1)", ErrInvalid, n, MaxIDs)
		}
		for i := range p.IDs {
			if err := checkPrincipal(&p.IDs[i], depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%w: unknown principal kind %d", ErrInvalid, p.Kind)
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Outcome says why a Decision allows or denies.
type Outcome uint8

// Outcomes.
const (
	Allowed       Outcome = iota // no filter denied
	DeniedPolicy                 // a DENY (or Override) policy matched: Policy names it
	DeniedNoMatch                // an ALLOW filter's policies did not match
	DeniedExpired                // authorization state is past its staleness expiry (Expired)
)

// maxHits bounds the counted results of one decision: each filter's rules and
// shadow rules report at most one.
const maxHits = 2 * MaxFilters

// Decision is the verdict on one request. It is a value: Decide allocates
// nothing; Count records it.
type Decision struct {
	Outcome Outcome
	// Policy is the deciding policy's name (DeniedPolicy), "" otherwise.
	Policy string
	// Filter is the deciding filter's name (denials), "" when allowed.
	Filter string
	// Override: the deciding policy is an Override.
	Override bool
	// Audit is the first AUDIT (LOG) policy that matched an allowed request,
	// "" if none: the shell logs it (sampled).
	Audit string

	hits [maxHits]hit
	n    uint8
}

// Allowed reports whether the request may proceed.
func (d *Decision) Allowed() bool { return d.Outcome == Allowed }

type hit struct {
	stat  *policyStats
	label uint8
	deny  bool
	dry   bool
}

func (d *Decision) add(s *policyStats, label uint8, deny, dry bool) {
	if int(d.n) < len(d.hits) {
		d.hits[d.n] = hit{stat: s, label: label, deny: deny, dry: dry}
		d.n++
	}
}

// Count adds the decision to its policies' counters (atomics; no allocation).
func (d *Decision) Count() {
	for i := 0; i < int(d.n); i++ {
		h := &d.hits[i]
		h.stat.add(h.label, h.deny, h.dry)
	}
}

// Decide judges req at now (the request's own start time: Decide reads no clock).
// A nil Engine allows everything (a chain without RBAC filters).
func (e *Engine) Decide(req Request, now time.Time) Decision {
	var d Decision
	if e == nil {
		return d
	}
	req.TCP = req.TCP || e.tcp
	if i := strings.IndexAny(req.Path, "?#"); i >= 0 {
		req.Path = req.Path[:i] // url_path matches the path without query (Envoy)
	}
	for i := range e.filters {
		f := &e.filters[i]
		if f.shadow != nil {
			f.shadow.eval(&req, now, &d, true)
		}
		if f.rules == nil {
			continue
		}
		if p, deny := f.rules.eval(&req, now, &d, false); deny {
			d.Filter = f.name
			d.Override = f.override
			if p != nil {
				d.Outcome, d.Policy = DeniedPolicy, p.p.Name
			} else {
				d.Outcome = DeniedNoMatch
			}
			return d
		}
	}
	return d
}

// eval runs one rule set: it returns the matched policy (nil: none) and whether
// the set denies, and records the result in d.
func (r *rules) eval(req *Request, now time.Time, d *Decision, dry bool) (*policy, bool) {
	var m *policy
	for i := range r.policies {
		p := &r.policies[i]
		if !p.deadline.IsZero() && !now.Before(p.deadline) {
			continue // an Override past its TTL
		}
		if p.p.match(req) {
			m = p
			break
		}
	}
	switch r.action {
	case Allow:
		if m == nil {
			d.add(r.none, r.label, true, dry)
			return nil, true
		}
		d.add(m.stat, r.label, false, dry)
		return m, false
	case Deny:
		if m == nil {
			return nil, false
		}
		d.add(m.stat, r.label, true, dry)
		return m, true
	}
	if m != nil { // Log
		d.add(m.stat, r.label, false, dry)
		if !dry && d.Audit == "" {
			d.Audit = m.p.Name
		}
	}
	return m, false
}

// Expired is the decision for every request while authorization state is past
// its staleness expiry (failClosed): denied, counted under NoPolicy with action
// EXPIRED. A nil Engine (no authorization on the chain) allows.
func (e *Engine) Expired() Decision {
	var d Decision
	if e == nil {
		return d
	}
	d.Outcome, d.Filter = DeniedExpired, "staleness"
	d.add(e.none, labelExpired, true, false)
	return d
}

// Overrides names the Override policies the engine enforces, sorted.
func (e *Engine) Overrides() []string {
	if e == nil {
		return nil
	}
	return e.overrides
}

// OverrideDeadline is when the named Override stops being enforced on this
// chain (false: the engine has no such Override).
func (e *Engine) OverrideDeadline(name string) (time.Time, bool) {
	if e == nil {
		return time.Time{}, false
	}
	for i := range e.filters {
		for _, r := range []*rules{e.filters[i].rules, e.filters[i].shadow} {
			if r == nil || !e.filters[i].override {
				continue
			}
			for j := range r.policies {
				if r.policies[j].p.Name == name {
					return r.policies[j].deadline, true
				}
			}
		}
	}
	return time.Time{}, false
}

// Empty reports whether the engine enforces and counts nothing (no filters).
func (e *Engine) Empty() bool { return e == nil || len(e.filters) == 0 }
