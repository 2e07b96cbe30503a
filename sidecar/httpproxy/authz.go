package httpproxy

// Authorization on the request path: after the chain is found and before any
// virtual host or route (Envoy's RBAC filters run before the router), a chain
// with an *authz.Engine decides the request from the connection's verified
// peer (Target.Peer), the method, the path and the destination port, at the
// request's own start time. A denial answers 403 "RBAC: access denied" with
// x-weft-local: authz. The deciding policy's name goes in AuthzPolicyHeader only
// to authenticated callers (mesh workloads holding a certificate from the mesh
// CA); a plaintext caller is an outsider and gets no name: denials are logged,
// at most one line per authz.LogInterval, with the count of those left out
// (AUDIT matches likewise).
// Past authorization's staleness expiry (Config.AuthzExpired) every request on
// such a chain is denied with reason "authorization state expired". On a chain
// whose policies name paths, a path not in normal form (authz.NormalPath) is
// answered 400: Envoy as Istio configures it would normalize it; refusing
// leaves no spelling of a path that reaches the application unjudged.

import (
	"net/http"
	"time"

	"github.com/weft-mesh/weft/sidecar/authz"
	"github.com/weft-mesh/weft/sidecar/dataplane"
)

// Authorization answers.
const (
	LocalAuthz        = "authz"
	AuthzPolicyHeader = "x-weft-authz-policy"
	AuthzDeniedBody   = "RBAC: access denied"
	AuthzExpiredBody  = "RBAC: access denied: authorization state expired"
	// AuthzPathBody answers 400 a path not in normal form on a chain whose
	// policies name paths ("//a", "/a/../b", "/%61"): refused, not rewritten.
	AuthzPathBody = "RBAC: path not in normal form (empty, dot or percent-encoded unreserved segments)"
)

// routeThenAuthorize serves the inbound listener's own port, where peer
// sidecars connect and pilot routes by Host: the destination port
// authorization judges is the target port of the inbound cluster the request
// is routed to (pilot's gen says so), so routing comes first. A request that
// routes nowhere is still authorized (on the listener's port) before its 404,
// so a denied caller learns nothing of the routes.
func (p *Proxy) routeThenAuthorize(l *dataplane.Listener, fc *dataplane.FilterChain, t *Target, host string, port uint16, path string, h dataplane.Headers, now time.Time) routeResult {
	rr := p.route(l, fc, host, port, path, h)
	aport := port
	if rr.route != nil {
		if tp, ok := rr.route.InboundPort(); ok {
			aport = tp
		}
	}
	if deny, ok := p.authorize(fc, t, aport, path, h, now); !ok {
		return deny
	}
	return rr
}

// authorize decides a request on fc; ok false means answer rr.
func (p *Proxy) authorize(fc *dataplane.FilterChain, t *Target, port uint16, path string, h dataplane.Headers, now time.Time) (routeResult, bool) {
	e := fc.Authz
	if e == nil {
		return routeResult{}, true
	}
	var d authz.Decision
	if p.cfg.AuthzExpired != nil {
		if reason, expired := p.cfg.AuthzExpired(); expired {
			d = e.Expired()
			d.Count()
			p.logDenial(&d, t, path, now, reason)
			return routeResult{status: http.StatusForbidden, local: LocalAuthz, reason: AuthzExpiredBody}, false
		}
	}
	if e.UsesPaths() && !authz.NormalPath(path) {
		// Refused rather than normalized (authz.NormalPath says why).
		p.logDenial(&d, t, path, now, "path not in normal form")
		return routeResult{status: http.StatusBadRequest, local: LocalAuthz, reason: AuthzPathBody}, false
	}
	method, _ := h.Get(":method")
	d = e.Decide(authz.Request{Principal: t.Peer.String(), Method: method, Path: path, Port: port}, now)
	d.Count()
	if d.Allowed() {
		if d.Audit != "" {
			p.logAudit(&d, t, path, now)
		}
		return routeResult{}, true
	}
	p.logDenial(&d, t, path, now, "")
	rr := routeResult{status: http.StatusForbidden, local: LocalAuthz, reason: AuthzDeniedBody}
	if !t.Peer.IsZero() && d.Policy != "" {
		rr.hdrName, rr.hdrValue = AuthzPolicyHeader, d.Policy
	}
	return rr, false
}

func (p *Proxy) logDenial(d *authz.Decision, t *Target, path string, now time.Time, reason string) {
	ok, leftOut := p.authzLog.Take(now)
	if !ok {
		return
	}
	kv := []any{"listener", t.Listener, "principal", t.Peer, "source", t.Source, "path", clipStr(path),
		"filter", d.Filter, "policy", d.Policy, "override", d.Override, "not_logged_since_last", leftOut}
	if reason != "" {
		kv = append(kv, "reason", reason)
	}
	p.log.Info("request denied by authorization", kv...)
}

// logAudit logs an allowed request an AUDIT policy matched (sampled as
// denials are; every one is counted in /metrics).
func (p *Proxy) logAudit(d *authz.Decision, t *Target, path string, now time.Time) {
	ok, leftOut := p.auditLog.Take(now)
	if !ok {
		return
	}
	p.log.Info("request audited", "listener", t.Listener, "principal", t.Peer, "source", t.Source, "path", clipStr(path),
		"policy", d.Audit, "not_logged_since_last", leftOut)
}
