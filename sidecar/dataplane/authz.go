package dataplane

// Authorization compile: each chain's RBAC filters (xdsresource rbac.go) become
// an *authz.Engine on the FilterChain (and its TCPRoute). Every chain of the
// inbound listener gets one, empty when pilot sends no RBAC, so authorization's
// staleness (fail closed past expiry) covers every inbound request.
//
// issue9-design.md names `Config.Authz() *authz.Engine`; engines are per chain,
// so Authz takes the listener and destination port and returns that chain's.
//
// Override first sightings live in Options.Authz (an *authz.State the sidecar
// keeps for its life, like the cluster Registry) and are committed on Activate,
// so a config swap never restarts a TTL and a refused candidate starts none.
// Restarts: the sidecar persists the State's sightings (sidecar/app) and
// restores them before its first compile; independently pilot bounds every
// Override by expiresAt when it knows the store time.

import (
	"fmt"
	"strings"
	"time"

	"github.com/weft-mesh/weft/sidecar/authz"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// InboundListener is the name of the listener whose chains authorization
// covers whether or not they carry RBAC filters (pilot's gen.InboundListenerName).
const InboundListener = "inbound"

func (cfg *Config) compileAuthz(xl *xdsresource.Listener, f string, x *xdsresource.FilterChain, fc *FilterChain) error {
	if len(x.RBAC) == 0 && xl.Name != InboundListener {
		return nil
	}
	e, err := authz.New(authz.Config{Filters: x.RBAC, Overrides: xl.Overrides, TCP: x.TCP != nil}, cfg.authzState, cfg.compiledAt)
	if err != nil {
		return fmt.Errorf("%w: listener %q: %s: %v", ErrInvalid, xl.Name, f, err)
	}
	fc.Authz = e
	if fc.TCP != nil {
		fc.TCP.Authz = e
	}
	cfg.engines = append(cfg.engines, e)
	return nil
}

// commitAuthz records the Override sightings of c's engines (Activate).
func (c *Config) commitAuthz() { c.authzState.Commit(c.compiledAt, c.engines...) }

// Authz is the authorization engine of listener's chain for destination port
// (Listener.Chain's choice); nil when the chain has none (no RBAC filters, not
// inbound) or there is no such listener.
func (c *Config) Authz(listener string, port uint16) *authz.Engine {
	l := c.listeners[listener]
	if l == nil {
		return nil
	}
	if fc := l.Chain(port); fc != nil {
		return fc.Authz
	}
	return nil
}

// AuthzState is the long-lived authorization state c's engines count into.
func (c *Config) AuthzState() *authz.State { return c.authzState }

// compileTime is the compile's "now": the first sighting of a new Override.
func compileTime(o Options) time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// InboundPort is the target port of the inbound cluster r sends to
// ("inbound|<port>||", its first destination): the destination port
// authorization judges a request by on the inbound listener's own port, where
// peer sidecars connect (pilot's gen: a port permission names the workload's
// target port). false: r does not go to an inbound cluster.
func (r *Route) InboundPort() (uint16, bool) {
	if len(r.targets) == 0 {
		return 0, false
	}
	return inboundPort(r.targets[0].c.Name)
}

// InboundPort is TCPRoute's (Route.InboundPort).
func (t *TCPRoute) InboundPort() (uint16, bool) {
	if len(t.targets) == 0 {
		return 0, false
	}
	return inboundPort(t.targets[0].c.Name)
}

// inboundPort parses "inbound|<port>||" without allocating.
func inboundPort(name string) (uint16, bool) {
	const pre = "inbound|"
	if !strings.HasPrefix(name, pre) {
		return 0, false
	}
	rest := name[len(pre):]
	i := strings.IndexByte(rest, '|')
	if i <= 0 || i > 5 {
		return 0, false
	}
	n := 0
	for _, c := range rest[:i] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if n == 0 || n > 65535 {
		return 0, false
	}
	return uint16(n), true
}
