package tcpproxy

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/weft-mesh/weft/sidecar/authz"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/mtls"
)

// ErrDenied: authorization refused the connection (closed before any upstream
// was dialled, as Envoy's network RBAC does).
var ErrDenied = errors.New("denied by authorization")

// authorize decides a connection on route's engine (nil: allowed) from the
// verified peer and the destination port.
func (p *Proxy) authorize(client net.Conn, route *dataplane.TCPRoute, now time.Time) error {
	e := route.Authz
	if e == nil {
		return nil
	}
	var principal string
	if id, ok := mtls.PeerID(client); ok {
		principal = id.String()
	}
	if p.cfg.AuthzExpired != nil {
		if reason, expired := p.cfg.AuthzExpired(); expired {
			d := e.Expired()
			d.Count()
			if ok, leftOut := p.denyLog.Take(now); ok {
				p.cfg.Logger.Info("connection denied by authorization", "principal", principal, "source", client.RemoteAddr(),
					"reason", reason, "not_logged_since_last", leftOut)
			}
			return fmt.Errorf("%w: authorization state expired (%s), peer %q", ErrDenied, reason, principal)
		}
	}
	// The destination port judged is the target port of the inbound cluster
	// the chain proxies to (pilot's gen: peer sidecars connect to the inbound
	// listener's own port); otherwise the connection's local port.
	port, ok := route.InboundPort()
	if !ok {
		if a, isTCP := client.LocalAddr().(*net.TCPAddr); isTCP {
			port = uint16(a.Port)
		}
	}
	d := e.Decide(authz.Request{Principal: principal, Port: port, TCP: true}, now)
	d.Count()
	if d.Allowed() {
		if d.Audit != "" {
			if ok, leftOut := p.auditLog.Take(now); ok {
				p.cfg.Logger.Info("connection audited", "principal", principal, "source", client.RemoteAddr(), "port", port,
					"policy", d.Audit, "not_logged_since_last", leftOut)
			}
		}
		return nil
	}
	if ok, leftOut := p.denyLog.Take(now); ok {
		p.cfg.Logger.Info("connection denied by authorization", "principal", principal, "source", client.RemoteAddr(), "port", port,
			"filter", d.Filter, "policy", d.Policy, "override", d.Override, "not_logged_since_last", leftOut)
	}
	if d.Policy != "" {
		return fmt.Errorf("%w: policy %q (filter %s) refused peer %q on port %d", ErrDenied, d.Policy, d.Filter, principal, port)
	}
	return fmt.Errorf("%w: no ALLOW policy (filter %s) matched peer %q on port %d", ErrDenied, d.Filter, principal, port)
}
