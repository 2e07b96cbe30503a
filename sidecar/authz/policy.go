// Package authz is the sidecar's authorization engine: AuthorizationPolicy (ALLOW,
// DENY, AUDIT, dry run) and Override, as pilot delivers them in Envoy's RBAC shape
// (envoy.filters.http.rbac and envoy.filters.network.rbac), decided for one inbound
// request at a time.
//
// The engine is pure (DESIGN.md convention 6): an *Engine is immutable, Decide takes
// the request's time as an argument, reads no clock, starts no goroutine and
// allocates nothing. What outlives configurations (when an Override was first seen,
// decision counters) lives in a *State the sidecar creates once and hands to every
// compile, as sidecar/cluster.Registry does for breakers.
//
// Evaluation follows Envoy's RBAC filters, in chain order (pilot emits them in this
// order, see issue9-design.md "Wire"):
//
//	weft.override  DENY, one policy per Override, each until its deadline
//	deny           DENY policies
//	allow          ALLOW policies: when present, a request must match one
//	audit          LOG (AUDIT) policies: counted, never refused
//
// A filter's shadow rules (dryRun policies) are evaluated and counted, never
// enforced. The first filter that denies decides.
package authz

import (
	"strings"
	"time"
)

// Limits on what a compiled configuration may hold. The decoder
// (sidecar/xdsresource) refuses a resource past them, naming the field; New checks
// them again.
const (
	MaxFilters     = 8    // RBAC filters in one chain
	MaxPolicies    = 1024 // policies in one rule set (rules or shadow_rules)
	MaxIDs         = 1024 // principals or permissions in one list (a policy's, or an and/or set's)
	MaxDepth       = 8    // nesting of and/or/not
	MaxMatchBytes  = 1024 // one string a principal, path or method is compared with
	MaxNameBytes   = 512  // a policy name
	MaxOverrides   = 256  // Overrides in one listener
	MaxOverrideTTL = time.Hour
)

// Action is a rule set's action (Envoy's RBAC.Action).
type Action uint8

// Actions. Log is AuthorizationPolicy's AUDIT.
const (
	Allow Action = iota
	Deny
	Log
)

func (a Action) String() string {
	switch a {
	case Allow:
		return "ALLOW"
	case Deny:
		return "DENY"
	case Log:
		return "AUDIT"
	}
	return "UNKNOWN"
}

// MatchKind says how a StringMatch compares.
type MatchKind uint8

// String match kinds: the subset pilot emits.
const (
	Exact MatchKind = iota
	Prefix
	Suffix
)

// StringMatch is a case-sensitive exact, prefix or suffix comparison.
type StringMatch struct {
	Kind  MatchKind
	Value string
}

// Match reports whether s matches.
func (m StringMatch) Match(s string) bool {
	switch m.Kind {
	case Exact:
		return s == m.Value
	case Prefix:
		return strings.HasPrefix(s, m.Value)
	case Suffix:
		return strings.HasSuffix(s, m.Value)
	}
	return false
}

// PrincipalKind is the kind of a Principal node.
type PrincipalKind uint8

// Principal kinds (Envoy's config.rbac.v3.Principal subset).
const (
	PrincipalAny           PrincipalKind = iota // any: true
	PrincipalAuthenticated                      // authenticated.principal_name
	PrincipalAnd                                // and_ids
	PrincipalOr                                 // or_ids
	PrincipalNot                                // not_id (IDs[0])
)

// Principal matches a request's source. Authenticated compares the SPIFFE ID of
// the verified peer certificate; a plaintext request (no ID) never matches it.
type Principal struct {
	Kind PrincipalKind
	// Name is the comparison for PrincipalAuthenticated; AnyName matches any
	// authenticated peer (Envoy's authenticated without principal_name).
	Name    StringMatch
	AnyName bool
	IDs     []Principal // And, Or; Not has exactly one
}

func (p *Principal) match(id string) bool {
	switch p.Kind {
	case PrincipalAny:
		return true
	case PrincipalAuthenticated:
		return id != "" && (p.AnyName || p.Name.Match(id))
	case PrincipalAnd:
		for i := range p.IDs {
			if !p.IDs[i].match(id) {
				return false
			}
		}
		return true
	case PrincipalOr:
		for i := range p.IDs {
			if p.IDs[i].match(id) {
				return true
			}
		}
		return false
	case PrincipalNot:
		return !p.IDs[0].match(id)
	}
	return false
}

// PermissionKind is the kind of a Permission node.
type PermissionKind uint8

// Permission kinds (Envoy's config.rbac.v3.Permission subset).
const (
	PermissionAny    PermissionKind = iota // any: true
	PermissionPath                         // url_path (the path without query)
	PermissionMethod                       // header ":method" exact
	PermissionPort                         // destination_port
	PermissionAnd                          // and_rules
	PermissionOr                           // or_rules
	PermissionNot                          // not_rule (Rules[0])
)

// Permission matches what a request asks for.
type Permission struct {
	Kind  PermissionKind
	Match StringMatch // Path, Method
	Port  uint32      // Port
	Rules []Permission
}

// match evaluates p. On a TCP chain a path or method never matches (as Istio:
// a rule naming HTTP fields cannot hold for a byte stream); a Not over one then
// holds, which is Envoy's network RBAC behaviour too.
func (p *Permission) match(r *Request) bool {
	switch p.Kind {
	case PermissionAny:
		return true
	case PermissionPath:
		return !r.TCP && p.Match.Match(r.Path)
	case PermissionMethod:
		return !r.TCP && p.Match.Match(r.Method)
	case PermissionPort:
		return uint32(r.Port) == p.Port
	case PermissionAnd:
		for i := range p.Rules {
			if !p.Rules[i].match(r) {
				return false
			}
		}
		return true
	case PermissionOr:
		for i := range p.Rules {
			if p.Rules[i].match(r) {
				return true
			}
		}
		return false
	case PermissionNot:
		return !p.Rules[0].match(r)
	}
	return false
}

// Policy is one named RBAC policy: it matches when any permission and any
// principal match (Envoy's semantics; an empty list matches nothing).
type Policy struct {
	Name        string
	Permissions []Permission
	Principals  []Principal
}

func (p *Policy) match(r *Request) bool {
	ok := false
	for i := range p.Permissions {
		if p.Permissions[i].match(r) {
			ok = true
			break
		}
	}
	if !ok {
		return false
	}
	for i := range p.Principals {
		if p.Principals[i].match(r.Principal) {
			return true
		}
	}
	return false
}

// Rules is one rule set: an action and its policies, evaluated in name order (as
// Envoy's map), so the first match is the policy reported.
type Rules struct {
	Action   Action
	Policies []Policy
}

// Filter is one RBAC filter instance of a chain. Rules nil: the filter enforces
// nothing (only shadow rules). Override marks the weft.override instance: its
// policies are Overrides, each enforced until its deadline.
type Filter struct {
	Name     string
	Override bool
	Rules    *Rules
	Shadow   *Rules
}

// Override is the expiry of one Override policy as pilot sends it in the
// listener's metadata "weft.overrides": TTL from when the sidecar first sees
// Revision, never past ExpiresAt (zero when pilot does not know the store time).
type Override struct {
	Name      string // "<ns>/<name>", the policy's name in the weft.override filter
	TTL       time.Duration
	Revision  int64
	ExpiresAt time.Time
}

// Request is what a decision is made on. Principal is the SPIFFE ID of the
// connection's verified peer certificate, "" for plaintext. Path excludes the
// query string (Decide strips one left in). TCP marks a network (connection)
// decision: no method or path.
type Request struct {
	Principal string
	Method    string
	Path      string
	Port      uint16
	TCP       bool
}
