package resource

import (
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"strings"
	"time"
)

func validateService(c *collector, s *ServiceSpec) {
	p := path("spec")
	checkLabels(c, p.child("selector"), s.Selector)
	pp := p.child("ports")
	if !checkRequiredCount(c, pp, len(s.Ports), MaxServicePorts) {
		return
	}
	names := map[string]bool{}
	numbers := map[int32]bool{}
	for i, port := range s.Ports {
		ip := pp.index(i)
		checkUniqueName(c, ip.child("name"), port.Name, names, "port name")
		checkPort(c, ip.child("port"), port.Port)
		if numbers[port.Port] {
			c.add(ip.child("port"), fmt.Sprintf("duplicate port %d", port.Port))
		}
		numbers[port.Port] = true
		if port.TargetPort != port.Port { // else it was defaulted and already checked
			checkPort(c, ip.child("targetPort"), port.TargetPort)
		}
		checkEnum(c, ip.child("protocol"), port.Protocol, "HTTP", "HTTP2", "GRPC", "TCP")
	}
	checkAddresses(c, p.child("addresses"), s.Addresses)
}

// checkAddresses checks a Service's VIPs (spec.addresses or status.addresses):
// at most MaxServiceAddresses unicast IP literals in canonical form (so that
// one address has one spelling, and uniqueness across Services is a string
// compare), none loopback (loopback traffic is never intercepted), no
// duplicates.
func checkAddresses(c *collector, p path, addrs []string) {
	if !checkCount(c, p, len(addrs), MaxServiceAddresses) {
		return
	}
	seen := map[string]bool{}
	for i, s := range addrs {
		ip := p.index(i)
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil || a.Zone() != "":
			c.add(ip, fmt.Sprintf("%q is not an IPv4 or IPv6 literal", s))
		case a.Is4In6():
			c.add(ip, fmt.Sprintf("%q is an IPv4-mapped IPv6 address: write it as %s", s, a.Unmap()))
		case a.IsUnspecified() || a.IsMulticast():
			c.add(ip, fmt.Sprintf("%q is not a unicast address", s))
		case a.IsLoopback():
			c.add(ip, fmt.Sprintf("%q is a loopback address, which is never intercepted", s))
		case a.String() != s:
			c.add(ip, fmt.Sprintf("%q is not in canonical form: write it as %s", s, a))
		case seen[s]:
			c.add(ip, fmt.Sprintf("duplicate address %s", s))
		}
		seen[s] = true
	}
}

func validateWorkload(c *collector, s *WorkloadSpec) {
	p := path("spec")
	checkIP(c, p.child("address"), s.Address)
	if !isDNSSubdomain(s.ServiceAccount) {
		c.add(p.child("serviceAccount"), fmt.Sprintf("%q is not a DNS-1123 subdomain", s.ServiceAccount))
	}
	if s.Locality != "" {
		parts := strings.Split(s.Locality, "/")
		ok := len(parts) <= 3
		for _, part := range parts {
			ok = ok && part != "" && isLabelValue(part)
		}
		if !ok {
			c.add(p.child("locality"), fmt.Sprintf("%q must be region[/zone[/subzone]], each part 1..63 letters, digits, '-', '_' or '.'", s.Locality))
		}
	}
	if s.Weight < 1 || s.Weight > MaxWorkloadWeight {
		c.add(p.child("weight"), fmt.Sprintf("%d out of range 1..%d", s.Weight, MaxWorkloadWeight))
	}
	checkCount(c, p.child("ports"), len(s.Ports), MaxServicePorts)
	for _, k := range sortedKeys(s.Ports) {
		if msg := labelProblem(k); msg != "" {
			c.add(p.child("ports").key(k), "port name "+msg)
			continue
		}
		checkPort(c, p.child("ports").key(k), s.Ports[k])
	}
}

var retryOnValues = []string{"5xx", "gateway-error", "reset", "connect-failure", "retriable-4xx", "refused-stream",
	"cancelled", "deadline-exceeded", "unavailable", "resource-exhausted", "internal"}

func validateRoute(c *collector, s *RouteSpec) {
	p := path("spec")
	hp := p.child("hosts")
	if checkRequiredCount(c, hp, len(s.Hosts), MaxRouteHosts) {
		seen := map[string]bool{}
		for i, h := range s.Hosts {
			checkHost(c, hp.index(i), h)
			if seen[h] {
				c.add(hp.index(i), fmt.Sprintf("duplicate host %q", h))
			}
			seen[h] = true
		}
	}
	rp := p.child("http")
	if !checkRequiredCount(c, rp, len(s.HTTP), MaxHTTPRules) {
		return
	}
	names := map[string]bool{}
	for i := range s.HTTP {
		r := &s.HTTP[i]
		ip := rp.index(i)
		if r.Name != "" {
			checkUniqueName(c, ip.child("name"), r.Name, names, "rule name")
		}
		validateMatches(c, ip.child("match"), r.Match)
		validateDestinations(c, ip.child("route"), r.Route)
		timeout, hasTimeout := checkDuration(c, ip.child("timeout"), r.Timeout)
		if r.Retries != nil {
			validateRetries(c, ip.child("retries"), r.Retries, timeout, hasTimeout)
		}
		fp := ip.child("fallback")
		checkCount(c, fp, len(r.Fallback), MaxFallbacks)
		for j, f := range r.Fallback {
			validateDestination(c, fp.index(j).child("destination"), f.Destination)
		}
	}
}

func validateMatches(c *collector, p path, ms []HTTPMatch) {
	checkCount(c, p, len(ms), MaxMatchesPerRule)
	for j := range ms {
		m := &ms[j]
		mp := p.index(j)
		if m.Path != nil {
			checkStringMatch(c, mp.child("path"), m.Path, false)
			for _, v := range []*string{m.Path.Exact, m.Path.Prefix} {
				if v != nil && !strings.HasPrefix(*v, "/") {
					c.add(mp.child("path"), fmt.Sprintf("%q must start with \"/\"", *v))
				}
			}
		}
		hp := mp.child("headers")
		checkCount(c, hp, len(m.Headers), MaxHeadersPerMatch)
		for _, name := range sortedKeys(m.Headers) {
			if !isHeaderName(name) {
				c.add(hp.key(name), "invalid header name: want lower-case letters, digits and !#$%&'*+-.^_`|~")
				continue
			}
			sm := m.Headers[name]
			checkStringMatch(c, hp.key(name), &sm, true)
		}
		if m.Method != "" {
			checkEnum(c, mp.child("method"), m.Method, httpMethods...)
		}
	}
}

// isHeaderName: an RFC 9110 token in lower case (HTTP/2 requires lower case).
func isHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0) {
			return false
		}
	}
	return true
}

func validateDestinations(c *collector, p path, ds []RouteDestination) {
	if !checkRequiredCount(c, p, len(ds), MaxDestinationsPerRule) {
		return
	}
	sum := int64(0)
	weightsOK := true
	for k, d := range ds {
		dp := p.index(k)
		validateDestination(c, dp.child("destination"), d.Destination)
		if d.Weight < 0 || d.Weight > 100 {
			c.add(dp.child("weight"), fmt.Sprintf("%d out of range 0..100", d.Weight))
			weightsOK = false
		}
		sum += int64(d.Weight)
	}
	if weightsOK && sum != 100 {
		c.add(p, fmt.Sprintf("weights sum to %d, must be 100", sum))
	}
}

func validateDestination(c *collector, p path, d Destination) {
	checkHost(c, p.child("service"), d.Service)
	if d.Subset != "" {
		checkName(c, p.child("subset"), d.Subset)
	}
	if d.Port != 0 {
		checkPort(c, p.child("port"), d.Port)
	}
}

func validateRetries(c *collector, p path, r *RetryPolicy, timeout time.Duration, hasTimeout bool) {
	if r.Attempts < 1 || r.Attempts > MaxRetryAttempts {
		c.add(p.child("attempts"), fmt.Sprintf("%d out of range 1..%d", r.Attempts, MaxRetryAttempts))
	}
	if per, ok := checkDuration(c, p.child("perTryTimeout"), r.PerTryTimeout); ok && hasTimeout && per > timeout {
		c.add(p.child("perTryTimeout"), fmt.Sprintf("%s exceeds the rule timeout %s", r.PerTryTimeout, timeout))
	}
	checkUnique(c, p.child("retryOn"), r.RetryOn, func(c *collector, p path, s string) {
		checkEnum(c, p, s, retryOnValues...)
	})
	if b := r.Backoff; b != nil {
		bp := p.child("backoff")
		if b.BaseInterval == "" {
			c.add(bp.child("baseInterval"), "required")
		}
		base, okBase := checkDuration(c, bp.child("baseInterval"), b.BaseInterval)
		if max, ok := checkDuration(c, bp.child("maxInterval"), b.MaxInterval); ok && okBase && max < base {
			c.add(bp.child("maxInterval"), fmt.Sprintf("%s is below baseInterval %s", b.MaxInterval, b.BaseInterval))
		}
	}
}

// checkUniqueName checks a required DNS-1123 name that must not repeat in seen.
func checkUniqueName(c *collector, p path, name string, seen map[string]bool, what string) {
	if !checkName(c, p, name) {
		return
	}
	if seen[name] {
		c.add(p, fmt.Sprintf("duplicate %s %q", what, name))
	}
	seen[name] = true
}

// checkUnique checks a list's length, each entry, and that no entry repeats.
func checkUnique(c *collector, p path, l []string, check func(*collector, path, string)) {
	checkCount(c, p, len(l), MaxListEntries)
	seen := map[string]bool{}
	for i, s := range l {
		check(c, p.index(i), s)
		if seen[s] {
			c.add(p.index(i), fmt.Sprintf("duplicate %q", s))
		}
		seen[s] = true
	}
}

func validateDestinationPolicy(c *collector, s *DestinationPolicySpec) {
	p := path("spec")
	checkHost(c, p.child("service"), s.Service)
	sp := p.child("subsets")
	checkCount(c, sp, len(s.Subsets), MaxSubsets)
	names := map[string]bool{}
	for i, sub := range s.Subsets {
		ip := sp.index(i)
		checkUniqueName(c, ip.child("name"), sub.Name, names, "subset")
		if len(sub.Labels) == 0 {
			c.add(ip.child("labels"), "at least one label required")
		}
		checkLabels(c, ip.child("labels"), sub.Labels)
	}
	checkEnum(c, p.child("loadBalancer"), s.LoadBalancer, "ROUND_ROBIN", "LEAST_REQUEST", "RANDOM", "RING_HASH")
	if cp := s.ConnectionPool; cp != nil {
		pp := p.child("connectionPool")
		checkNonNegative(c, pp.child("maxConnections"), cp.MaxConnections)
		checkNonNegative(c, pp.child("maxPendingRequests"), cp.MaxPendingRequests)
		checkNonNegative(c, pp.child("maxRequests"), cp.MaxRequests)
		checkNonNegative(c, pp.child("maxRetries"), cp.MaxRetries)
		if rb := cp.RetryBudget; rb != nil {
			checkPercent(c, pp.child("retryBudget").child("percent"), rb.Percent)
			checkNonNegative(c, pp.child("retryBudget").child("minConcurrency"), rb.MinConcurrency)
		}
		checkDuration(c, pp.child("connectTimeout"), cp.ConnectTimeout)
	}
	if od := s.OutlierDetection; od != nil {
		validateOutlierDetection(c, p.child("outlierDetection"), od)
	}
	if rl := s.LocalRateLimit; rl != nil {
		rp := p.child("localRateLimit")
		if rl.RequestsPerSecond <= 0 {
			c.add(rp.child("requestsPerSecond"), fmt.Sprintf("must be positive, got %v", rl.RequestsPerSecond))
		}
		if rl.RequestsPerSecond > MaxRequestsPerSecond {
			c.add(rp.child("requestsPerSecond"), fmt.Sprintf("%v exceeds the limit of %v", rl.RequestsPerSecond, float64(MaxRequestsPerSecond)))
		}
		checkNonNegative(c, rp.child("burst"), rl.Burst)
		if rl.Burst > MaxRateLimitBurst {
			c.add(rp.child("burst"), fmt.Sprintf("%d exceeds the limit of %d", rl.Burst, MaxRateLimitBurst))
		}
		if rl.RequestsPerSecond > 0 && rl.Burst >= 0 {
			burst := max(float64(rl.Burst), 1)
			if rl.Burst == 0 {
				burst = max(math.Ceil(rl.RequestsPerSecond), 1) // the sidecar's default
			}
			if fill := burst / rl.RequestsPerSecond; fill > MaxRateLimitFillTime.Seconds() {
				c.add(rp.child("burst"), fmt.Sprintf("%.0f requests at %v per second take %.0fs to refill, limit %v", burst, rl.RequestsPerSecond, fill, MaxRateLimitFillTime))
			}
		}
	}
}

// Envoy's outlier-detection defaults the API's checks compare against.
const (
	defaultBaseEjectionTime = 30 * time.Second
	defaultMaxEjectionTime  = 300 * time.Second
)

func validateOutlierDetection(c *collector, p path, od *OutlierDetection) {
	checkNonNegative(c, p.child("consecutive5xx"), od.Consecutive5xx)
	checkNonNegative(c, p.child("consecutiveGatewayErrors"), od.ConsecutiveGatewayErrors)
	checkNonNegative(c, p.child("consecutiveLocalOriginFailures"), od.ConsecutiveLocalOriginFailures)
	if s := od.SplitExternalLocalOriginErrors; s != nil && !*s && od.ConsecutiveLocalOriginFailures > 0 {
		// Without the split a local-origin failure counts as a 5xx: the
		// consecutive-local-origin detector would never see one.
		c.add(p.child("splitExternalLocalOriginErrors"), "false, but consecutiveLocalOriginFailures is set: that detector needs local-origin failures counted apart")
	}
	if sr := od.SuccessRate; sr != nil {
		sp := p.child("successRate")
		checkNonNegative(c, sp.child("minHosts"), sr.MinHosts)
		checkNonNegative(c, sp.child("requestVolume"), sr.RequestVolume)
		switch f := sr.StdevFactor; {
		case f < 0:
			c.add(sp.child("stdevFactor"), fmt.Sprintf("must not be negative, got %v", f))
		case f > MaxStdevFactor:
			c.add(sp.child("stdevFactor"), fmt.Sprintf("%v exceeds the limit of %v", f, float64(MaxStdevFactor)))
		case math.Abs(f*1000-math.Round(f*1000)) > 1e-6:
			c.add(sp.child("stdevFactor"), fmt.Sprintf("%v is finer than 0.001, the resolution Envoy's xDS field carries", f))
		}
	}
	if fp := od.FailurePercentage; fp != nil {
		pp := p.child("failurePercentage")
		if fp.Threshold == 0 {
			// Every host's failure percentage is ≥ 0: all would be ejected.
			c.add(pp.child("threshold"), "required: a whole percent 1..100 (0 would eject every host)")
		} else {
			checkWholePercent(c, pp.child("threshold"), fp.Threshold)
		}
		checkNonNegative(c, pp.child("minHosts"), fp.MinHosts)
		checkNonNegative(c, pp.child("requestVolume"), fp.RequestVolume)
	}
	checkOutlierDuration(c, p.child("interval"), od.Interval)
	base, hasBase := checkOutlierDuration(c, p.child("baseEjectionTime"), od.BaseEjectionTime)
	max, hasMax := checkOutlierDuration(c, p.child("maxEjectionTime"), od.MaxEjectionTime)
	switch {
	case hasMax && hasBase && max < base:
		c.add(p.child("maxEjectionTime"), fmt.Sprintf("%s is less than baseEjectionTime %s", od.MaxEjectionTime, od.BaseEjectionTime))
	case hasMax && od.BaseEjectionTime == "" && max < defaultBaseEjectionTime:
		// Envoy rejects max < base, also when base is its default.
		c.add(p.child("maxEjectionTime"), fmt.Sprintf("%s is less than the default baseEjectionTime %s", od.MaxEjectionTime, defaultBaseEjectionTime))
	}
	checkOutlierDuration(c, p.child("maxEjectionTimeJitter"), od.MaxEjectionTimeJitter)
	checkWholePercent(c, p.child("maxEjectionPercent"), od.MaxEjectionPercent)
	if od.MinHealthPercent != nil {
		checkPercent(c, p.child("minHealthPercent"), *od.MinHealthPercent)
	}
}

// checkOutlierDuration is checkDuration with outlier detection's 1ms floor:
// Envoy works in milliseconds and sidecars refuse less.
func checkOutlierDuration(c *collector, p path, d Duration) (time.Duration, bool) {
	v, ok := checkDuration(c, p, d)
	if ok && v < MinOutlierDuration {
		c.add(p, fmt.Sprintf("%s is below the minimum of %s", d, MinOutlierDuration))
		return 0, false
	}
	return v, ok
}

// checkWholePercent: 0..100 in whole percents; the xDS field is an integer, so a
// fraction would be silently rounded.
func checkWholePercent(c *collector, p path, f float64) {
	switch {
	case f < 0 || f > 100:
		c.add(p, fmt.Sprintf("%v out of range 0..100", f))
	case f != math.Trunc(f):
		c.add(p, fmt.Sprintf("%v is not a whole percent (the xDS field is an integer)", f))
	}
}

var mtlsModes = []string{"STRICT", "PERMISSIVE", "DISABLE"}

func validatePeerAuthentication(c *collector, s *PeerAuthenticationSpec) {
	checkLabels(c, "spec.selector", s.Selector)
	checkEnum(c, "spec.mtls", s.MTLS, mtlsModes...)
}

func validateAuthorizationPolicy(c *collector, s *AuthorizationPolicySpec) {
	p := path("spec")
	checkLabels(c, p.child("selector"), s.Selector)
	checkEnum(c, p.child("action"), s.Action, "ALLOW", "DENY", "AUDIT")
	rp := p.child("rules")
	checkCount(c, rp, len(s.Rules), MaxAuthzRules)
	for i, r := range s.Rules {
		ip := rp.index(i)
		checkCount(c, ip.child("from"), len(r.From), MaxListEntries)
		for j, f := range r.From {
			fp := ip.child("from").index(j)
			checkStrings(c, fp.child("principals"), f.Principals, checkPrincipal)
			checkStrings(c, fp.child("namespaces"), f.Namespaces, func(c *collector, p path, s string) {
				if s != "*" {
					checkName(c, p, s)
				}
			})
		}
		checkCount(c, ip.child("to"), len(r.To), MaxListEntries)
		for j, t := range r.To {
			tp := ip.child("to").index(j)
			checkStrings(c, tp.child("methods"), t.Methods, checkMethod)
			checkStrings(c, tp.child("paths"), t.Paths, checkPathPattern)
			checkCount(c, tp.child("ports"), len(t.Ports), MaxListEntries)
			for k, port := range t.Ports {
				checkPort(c, tp.child("ports").index(k), port)
			}
		}
	}
}

var stalenessResources = []string{"listeners", "routes", "clusters", "endpoints", "secrets", "revocation", "authorization"}

func validateStalenessPolicy(c *collector, s *StalenessPolicySpec) {
	p := path("spec")
	checkLabels(c, p.child("selector"), s.Selector)
	rp := p.child("rules")
	if !checkRequiredCount(c, rp, len(s.Rules), len(stalenessResources)) {
		return
	}
	seen := map[string]bool{}
	for i, r := range s.Rules {
		ip := rp.index(i)
		checkEnum(c, ip.child("resource"), r.Resource, stalenessResources...)
		if seen[r.Resource] {
			c.add(ip.child("resource"), fmt.Sprintf("duplicate rule for %q", r.Resource))
		}
		seen[r.Resource] = true
		// Each set bound must not come before the one it escalates from.
		type bound struct {
			field string
			d     Duration
			v     time.Duration
			ok    bool
		}
		bounds := []bound{{field: "warnAfter", d: r.WarnAfter}, {field: "restrictAfter", d: r.RestrictAfter}, {field: "expireAfter", d: r.ExpireAfter}}
		for k := range bounds {
			bounds[k].v, bounds[k].ok = checkDuration(c, ip.child(bounds[k].field), bounds[k].d)
		}
		for k := range bounds {
			for l := k + 1; l < len(bounds); l++ {
				if bounds[k].ok && bounds[l].ok && bounds[k].v > bounds[l].v {
					c.add(ip.child(bounds[k].field), fmt.Sprintf("%s is after %s %s", bounds[k].d, bounds[l].field, bounds[l].d))
				}
			}
		}
		checkEnum(c, ip.child("onExpire"), r.OnExpire, "serveStale", "failClosed", "drop")
		checkPercent(c, ip.child("jitter"), r.Jitter)
		if r.Jitter != float64(int(r.Jitter)) {
			// Sidecars apply jitter in whole percents.
			c.add(ip.child("jitter"), fmt.Sprintf("%v is not a whole percent", r.Jitter))
		}
	}
}

func validateOverride(c *collector, s *OverrideSpec) {
	p := path("spec")
	if s.TTL == "" {
		c.add(p.child("ttl"), "required")
	} else if ttl, ok := checkDuration(c, p.child("ttl"), s.TTL); ok && ttl > MaxOverrideTTL {
		c.add(p.child("ttl"), fmt.Sprintf("%s exceeds the limit of %s", s.TTL, MaxOverrideTTL))
	}
	if len(s.Reason) > MaxReasonBytes {
		c.add(p.child("reason"), fmt.Sprintf("%d bytes, limit %d", len(s.Reason), MaxReasonBytes))
	}
	checkEnum(c, p.child("action"), s.Action, "DENY", "ALLOW")
	mp := p.child("match")
	if len(s.Match.Principals)+len(s.Match.Paths)+len(s.Match.Methods) == 0 {
		// An override that matches everything would take a whole mesh down at once.
		c.add(mp, "at least one of principals, paths, methods required")
	}
	checkStrings(c, mp.child("principals"), s.Match.Principals, checkPrincipal)
	checkStrings(c, mp.child("paths"), s.Match.Paths, checkPathPattern)
	checkStrings(c, mp.child("methods"), s.Match.Methods, checkMethod)
}

func validateMeshConfig(c *collector, s *MeshConfigSpec) {
	p := path("spec")
	if !isDNSSubdomain(s.TrustDomain) {
		c.add(p.child("trustDomain"), fmt.Sprintf("%q is not a DNS-1123 subdomain", s.TrustDomain))
	}
	checkEnum(c, p.child("defaultMtls"), s.DefaultMTLS, mtlsModes...)
	if ttl, ok := checkDuration(c, p.child("certificateTTL"), s.CertificateTTL); ok && ttl > MaxCertificateTTL {
		c.add(p.child("certificateTTL"), fmt.Sprintf("%s exceeds the limit of %s", s.CertificateTTL, MaxCertificateTTL))
	}
	if v, ok := checkDuration(c, p.child("crlValidity"), s.CRLValidity); ok && s.CRLValidity != "" {
		switch {
		case v < MinCRLValidity:
			c.add(p.child("crlValidity"), fmt.Sprintf("%s is under the limit of %s", s.CRLValidity, MinCRLValidity))
		case v > MaxCRLValidity:
			c.add(p.child("crlValidity"), fmt.Sprintf("%s exceeds the limit of %s", s.CRLValidity, MaxCRLValidity))
		}
	}
	if s.ServiceAddressRange != "" {
		if _, err := ParseServiceAddressRange(s.ServiceAddressRange); err != nil {
			c.add(p.child("serviceAddressRange"), err.Error())
		}
	}
	if s.OutboundTrafficPolicy != "" {
		checkEnum(c, p.child("outboundTrafficPolicy"), s.OutboundTrafficPolicy, OutboundAllowAny, OutboundRegistryOnly)
	}
	if sc := s.Sidecar; sc != nil {
		sp := p.child("sidecar")
		switch {
		case len(sc.Image) > MaxImageBytes:
			c.add(sp.child("image"), fmt.Sprintf("%d bytes, limit %d", len(sc.Image), MaxImageBytes))
		case sc.Image != "" && !imageRef.MatchString(sc.Image):
			c.add(sp.child("image"), fmt.Sprintf("%q is not an image reference ([registry/]name[:tag][@digest])", sc.Image))
		}
		if sc.CPU != "" && !quantity.MatchString(sc.CPU) {
			c.add(sp.child("cpu"), fmt.Sprintf("%q is not a Kubernetes quantity such as 100m or 0.5", sc.CPU))
		}
		if sc.Memory != "" && !quantity.MatchString(sc.Memory) {
			c.add(sp.child("memory"), fmt.Sprintf("%q is not a Kubernetes quantity such as 64Mi or 1G", sc.Memory))
		}
	}
}

// imageRef is a loose container image reference: what Kubernetes passes to the
// runtime, without spaces or shell characters.
var imageRef = regexp.MustCompile(`^[a-z0-9][a-zA-Z0-9._/:@+-]*$`)

// quantity is a Kubernetes resource quantity: a positive decimal with an
// optional decimal (m, k, M, G, T, P, E) or binary (Ki..Ei) suffix.
var quantity = regexp.MustCompile(`^([0-9]+(\.[0-9]*)?|\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$`)

// ParseServiceAddressRange parses MeshConfig.serviceAddressRange: an IPv4 CIDR
// in canonical form (its network address), at most MaxServiceAddressRangeBits
// long so that it holds an address besides network and broadcast.
func ParseServiceAddressRange(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR such as %s", s, DefaultServiceAddressRange)
	case !p.Addr().Is4():
		return netip.Prefix{}, fmt.Errorf("%q is not IPv4: only IPv4 ranges are allocated from (give IPv6 VIPs in a Service's spec.addresses)", s)
	case p.Masked() != p:
		return netip.Prefix{}, fmt.Errorf("%q is not a network address: did you mean %s?", s, p.Masked())
	case p.Bits() > MaxServiceAddressRangeBits:
		return netip.Prefix{}, fmt.Errorf("%q is longer than /%d: no address is left besides network and broadcast", s, MaxServiceAddressRangeBits)
	}
	return p, nil
}
