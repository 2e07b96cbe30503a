package resource

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"regexp"
	"regexp/syntax"
	"strings"
	"time"
)

// Validate checks one object on its own (defaults already applied) and returns an
// ErrorList with every problem found, or nil. Cross-object checks are ValidateSet's.
func Validate(o *Object) error {
	c := &collector{object: o.Key().String()}
	validateObject(c, o)
	return c.errs.orNil()
}

func validateObject(c *collector, o *Object) {
	if o.APIVersion != APIVersion {
		if o.APIVersion == "" {
			c.add("apiVersion", "required")
		} else {
			c.add("apiVersion", fmt.Sprintf("must be %s, got %q", APIVersion, o.APIVersion))
		}
	}
	info, ok := kindByName(o.Kind)
	if !ok {
		c.add("kind", fmt.Sprintf("unknown kind %q (known: %s)", o.Kind, kindNames()))
		return
	}
	validateMetadata(c, info, &o.Metadata)
	if want := reflect.TypeOf(info.NewSpec()); reflect.TypeOf(o.Spec) != want || reflect.ValueOf(o.Spec).IsNil() {
		c.add("spec", fmt.Sprintf("must be a non-nil %s, got %T", want, o.Spec))
		return
	}
	switch s := o.Spec.(type) {
	case *ServiceSpec:
		validateService(c, s)
	case *WorkloadSpec:
		validateWorkload(c, s)
	case *RouteSpec:
		validateRoute(c, s)
	case *DestinationPolicySpec:
		validateDestinationPolicy(c, s)
	case *PeerAuthenticationSpec:
		validatePeerAuthentication(c, s)
	case *AuthorizationPolicySpec:
		validateAuthorizationPolicy(c, s)
	case *StalenessPolicySpec:
		validateStalenessPolicy(c, s)
	case *OverrideSpec:
		validateOverride(c, s)
	case *MeshConfigSpec:
		validateMeshConfig(c, s)
	}
	if o.Status != nil {
		if o.Kind != KindService {
			c.add("status", fmt.Sprintf("must be empty: a %s has no status", o.Kind))
			return
		}
		checkAddresses(c, path("status").child("addresses"), o.Status.Addresses)
	}
}

func validateMetadata(c *collector, info KindInfo, m *Metadata) {
	p := path("metadata")
	checkName(c, p.child("name"), m.Name)
	switch {
	case !info.Namespaced && m.Namespace != "":
		c.add(p.child("namespace"), fmt.Sprintf("must be empty: %s is cluster-wide", info.Kind))
	case info.Namespaced:
		checkName(c, p.child("namespace"), m.Namespace)
	}
	if info.Kind == KindMeshConfig && m.Name != DefaultMeshConfigName && m.Name != "" {
		c.add(p.child("name"), fmt.Sprintf("must be %q: there is one MeshConfig", DefaultMeshConfigName))
	}
	checkLabels(c, p.child("labels"), m.Labels)
	checkCount(c, p.child("annotations"), len(m.Annotations), MaxLabels)
	for _, k := range sortedKeys(m.Annotations) {
		if msg := qualifiedNameProblem(k); msg != "" {
			c.add(p.child("annotations").key(k), msg)
		}
	}
	if m.Generation < 0 {
		c.add(p.child("generation"), fmt.Sprintf("must not be negative, got %d", m.Generation))
	}
	if m.Revision < 0 {
		c.add(p.child("revision"), fmt.Sprintf("must not be negative, got %d", m.Revision))
	}
}

// ---- names and labels ----

func checkName(c *collector, p path, s string) bool {
	if s == "" {
		c.add(p, "required")
		return false
	}
	if msg := labelProblem(s); msg != "" {
		c.add(p, msg)
		return false
	}
	return true
}

// labelProblem says why s is not a DNS-1123 label, or "".
func labelProblem(s string) string {
	if len(s) > MaxNameLength {
		return fmt.Sprintf("%q is %d characters, limit %d", s, len(s), MaxNameLength)
	}
	if !isDNSLabel(s) {
		return fmt.Sprintf("%q is not a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit)", s)
	}
	return ""
}

func isDNSLabel(s string) bool {
	if s == "" || len(s) > MaxNameLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case b >= 'a' && b <= 'z', b >= '0' && b <= '9':
		case b == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

func isDNSSubdomain(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, part := range strings.Split(s, ".") {
		if !isDNSLabel(part) {
			return false
		}
	}
	return true
}

// isLabelValue: Kubernetes label value syntax, also used for label key names.
func isLabelValue(s string) bool {
	if len(s) > MaxNameLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		alnum := b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
		if !alnum && (i == 0 || i == len(s)-1 || (b != '-' && b != '_' && b != '.')) {
			return false
		}
	}
	return true
}

// qualifiedNameProblem checks a label or annotation key: [prefix/]name, prefix a
// DNS-1123 subdomain, name 1..63 characters of [A-Za-z0-9-_.].
func qualifiedNameProblem(k string) string {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	}
	if name == "" || !isLabelValue(name) || (hasPrefix && !isDNSSubdomain(prefix)) {
		return "invalid key: must be [prefix/]name with a DNS-1123 subdomain prefix and a name of at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
	}
	return ""
}

func checkLabels(c *collector, p path, m map[string]string) {
	checkCount(c, p, len(m), MaxLabels)
	for _, k := range sortedKeys(m) {
		if msg := qualifiedNameProblem(k); msg != "" {
			c.add(p.key(k), msg)
			continue
		}
		if !isLabelValue(m[k]) {
			c.add(p.key(k), fmt.Sprintf("invalid value %q: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", m[k]))
		}
	}
}

// ---- scalars ----

func checkCount(c *collector, p path, n, limit int) bool {
	if n > limit {
		c.add(p, fmt.Sprintf("%d entries, limit %d", n, limit))
		return false
	}
	return true
}

func checkRequiredCount(c *collector, p path, n, limit int) bool {
	if n == 0 {
		c.add(p, "at least one entry required")
		return false
	}
	return checkCount(c, p, n, limit)
}

func checkEnum(c *collector, p path, v string, allowed ...string) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	if v == "" {
		c.add(p, "required")
		return
	}
	c.add(p, fmt.Sprintf("%q is not one of %s", v, strings.Join(allowed, ", ")))
}

func checkPort(c *collector, p path, n int32) {
	if n < 1 || n > 65535 {
		c.add(p, fmt.Sprintf("port %d out of range 1..65535", n))
	}
}

func checkPercent(c *collector, p path, f float64) {
	if f < 0 || f > 100 {
		c.add(p, fmt.Sprintf("%v out of range 0..100", f))
	}
}

func checkNonNegative(c *collector, p path, n int32) {
	if n < 0 {
		c.add(p, fmt.Sprintf("must not be negative, got %d", n))
	}
}

// checkDuration parses an optional positive duration; ok is false when d is
// empty or invalid.
func checkDuration(c *collector, p path, d Duration) (time.Duration, bool) {
	if d == "" {
		return 0, false
	}
	v, err := time.ParseDuration(string(d))
	if err != nil {
		c.add(p, fmt.Sprintf("invalid duration %q", d))
		return 0, false
	}
	if v <= 0 {
		c.add(p, fmt.Sprintf("must be positive, got %q", d))
		return 0, false
	}
	if v > MaxDuration {
		c.add(p, fmt.Sprintf("%s exceeds the limit of %s", d, MaxDuration))
		return 0, false
	}
	return v, true
}

func checkRegex(c *collector, p path, s string) {
	if len(s) > MaxRegexBytes {
		c.add(p, fmt.Sprintf("regex is %d bytes, limit %d", len(s), MaxRegexBytes))
		return
	}
	// Go's regexp is RE2: linear time, no backreferences or lookaround.
	if _, err := regexp.Compile(s); err != nil {
		var se *syntax.Error
		if errors.As(err, &se) {
			c.add(p, "invalid RE2: "+string(se.Code))
		} else {
			c.add(p, "invalid RE2: "+err.Error())
		}
	}
}

// checkStringMatch enforces exactly one of exact|prefix|regex (|present for
// headers); prefix "/" paths are checked by the caller's needs.
func checkStringMatch(c *collector, p path, m *StringMatch, allowPresent bool) {
	n := 0
	for _, set := range []bool{m.Exact != nil, m.Prefix != nil, m.Regex != nil, m.Present != nil} {
		if set {
			n++
		}
	}
	want := "exactly one of exact, prefix, regex"
	if allowPresent {
		want += ", present"
	}
	switch {
	case m.Present != nil && !allowPresent:
		c.add(p.child("present"), "only allowed in header matches")
		return
	case n != 1:
		c.add(p, want+" required")
		return
	}
	if m.Regex != nil {
		checkRegex(c, p.child("regex"), *m.Regex)
	}
	if m.Present != nil && !*m.Present {
		c.add(p.child("present"), "must be true (omit the header match instead)")
	}
}

func checkIP(c *collector, p path, s string) {
	if s == "" {
		c.add(p, "required")
		return
	}
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil || a.Zone() != "":
		c.add(p, fmt.Sprintf("%q is not an IPv4 or IPv6 literal", s))
	case a.IsUnspecified() || a.IsMulticast():
		c.add(p, fmt.Sprintf("%q is not a unicast address", s))
	}
}

// hostProblem checks a Service reference: "<svc>" or "<svc>.<ns>".
func hostProblem(s string) string {
	svc, ns, qualified := strings.Cut(s, ".")
	if !isDNSLabel(svc) || (qualified && !isDNSLabel(ns)) {
		return fmt.Sprintf("%q is not a Service name: want <service> or <service>.<namespace>, DNS-1123 labels", s)
	}
	return ""
}

func checkHost(c *collector, p path, s string) {
	if s == "" {
		c.add(p, "required")
	} else if msg := hostProblem(s); msg != "" {
		c.add(p, msg)
	}
}

var httpMethods = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}

// checkPathPattern: authorization paths are "*", "/exact", "/prefix/*" or "*suffix".
func checkPathPattern(c *collector, p path, s string) {
	if s == "*" || (strings.HasPrefix(s, "*") && !strings.Contains(s[1:], "*")) {
		return
	}
	if !strings.HasPrefix(s, "/") || strings.Contains(strings.TrimSuffix(s, "*"), "*") {
		c.add(p, fmt.Sprintf("%q must be \"*\", start with \"/\", and use \"*\" only as the first or last character", s))
	}
}

// checkPrincipal: a SPIFFE ID, or a pattern with one leading or trailing "*".
func checkPrincipal(c *collector, p path, s string) {
	stars := strings.Count(s, "*")
	wildcardOK := stars == 0 || (stars == 1 && (strings.HasPrefix(s, "*") || strings.HasSuffix(s, "*")))
	if s == "" || !wildcardOK || strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		c.add(p, fmt.Sprintf("%q must be a SPIFFE ID or a pattern with \"*\" only as the first or last character", s))
	}
}

func checkStrings(c *collector, p path, l []string, check func(*collector, path, string)) {
	checkCount(c, p, len(l), MaxListEntries)
	for i, s := range l {
		check(c, p.index(i), s)
	}
}

func checkMethod(c *collector, p path, s string) {
	if s == "*" {
		return
	}
	checkEnum(c, p, s, httpMethods...)
}
