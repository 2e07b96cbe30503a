// Package mode decides, once at the sidecar's start, how its traffic is
// intercepted (--intercept=none|iptables|ebpf|auto) and says so: one log line
// ("interception mode chosen"), the metric weft_interception_mode{mode} and
// config_dump's "interception": {mode, reason}.
//
//   - none: explicit; applications address the sidecar.
//   - iptables: the init step's rules (`sidecar intercept`) redirect; the
//     sidecar reads SO_ORIGINAL_DST from conntrack.
//   - ebpf: the sidecar attaches ebpf/redirect to --intercept-cgroup (default
//     its own cgroup) after a self-test there, or does not start.
//   - auto: the same self-test and attachment; on any failure iptables, with the
//     reason. For the fallback to work the init step must have installed the
//     full iptables rules (not --mode ebpf); with both in place the eBPF
//     redirect acts first (its rewritten destination is loopback, which the
//     iptables rules leave alone) and SO_ORIGINAL_DST is answered by it.
package mode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/ebpf/redirect"
)

// The --intercept values.
const (
	None     = "none"
	IPTables = "iptables"
	EBPF     = "ebpf"
	Auto     = "auto"
)

// Requests are the values --intercept accepts; Auto resolves to EBPF or IPTables.
var Requests = []string{None, IPTables, EBPF, Auto}

// Self-test bounds.
const (
	DefaultSelfTestTimeout = redirect.DefaultSelfTestTimeout
	MaxSelfTestTimeout     = 30 * time.Second
)

// Config says what was asked for.
type Config struct {
	// Requested is --intercept: one of Requests ("" means None).
	Requested string
	// Cgroup is --intercept-cgroup: the pod's cgroup v2 directory; "" means
	// the sidecar's own (redirect.OwnCgroup).
	Cgroup string
	// Redirect has the ports, the proxy's uid and mark, and DNS; its Cgroup
	// is set from Cgroup. ProxyUID is the sidecar's own uid: eBPF tells the
	// sidecar's connections from the app's by it, so root (0, which would
	// mean "exclude every root process") is refused for ebpf and auto.
	Redirect redirect.Config
	// SelfTestTimeout bounds the self-test (DefaultSelfTestTimeout when 0, at
	// most MaxSelfTestTimeout).
	SelfTestTimeout time.Duration
	// Logger gets the one "interception mode chosen" line; required.
	Logger hclog.Logger
}

// Validate checks cfg without touching the system; errors name the flag.
func (c Config) Validate() error {
	switch c.Requested {
	case "", None, IPTables, EBPF, Auto:
	default:
		return fmt.Errorf("--intercept: %q is not one of %s", c.Requested, strings.Join(Requests, ", "))
	}
	if c.SelfTestTimeout < 0 || c.SelfTestTimeout > MaxSelfTestTimeout {
		return fmt.Errorf("interception: self-test timeout %s outside [0, %s]", c.SelfTestTimeout, MaxSelfTestTimeout)
	}
	if c.Cgroup != "" && !strings.HasPrefix(c.Cgroup, "/") {
		return fmt.Errorf("--intercept-cgroup: %q is not an absolute path", c.Cgroup)
	}
	if c.Logger == nil {
		return errors.New("interception: Config.Logger required")
	}
	return nil
}

// Decision is the active mode (None, IPTables or EBPF) and why.
type Decision struct {
	Mode   string `json:"mode"`
	Reason string `json:"reason"`
}

// Node is the mode as bootstrap/node.Node.Interception says it: "" when none.
func (d Decision) Node() string {
	if d.Mode == None {
		return ""
	}
	return d.Mode
}

// Active is the chosen mode and, in EBPF mode, the attachment. Close it when
// the sidecar stops (dying does it too: the links go with the process).
type Active struct {
	Decision
	redirect *redirect.Redirect
}

// Close detaches the programs (EBPF); nothing otherwise.
func (a *Active) Close() error {
	if a.redirect == nil {
		return nil
	}
	return a.redirect.Close()
}

// Stats are the eBPF programs' counters; ok is false in other modes.
func (a *Active) Stats() (s redirect.Stats, ok bool, err error) {
	if a.redirect == nil {
		return redirect.Stats{}, false, nil
	}
	s, err = a.redirect.Stats()
	return s, err == nil, err
}

// ops are the system calls Choose makes, replaced in tests of the decision.
type ops struct {
	ownCgroup func() (string, error)
	selfTest  func(ctx context.Context, cgroup string) error
	attach    func(redirect.Config) (*redirect.Redirect, error)
}

var system = ops{ownCgroup: redirect.OwnCgroup, selfTest: redirect.SelfTest, attach: redirect.Attach}

// Choose decides and, for EBPF, attaches. The error is for a start that must
// fail: a bad Config, or --intercept=ebpf that cannot be had.
func Choose(ctx context.Context, cfg Config) (*Active, error) {
	return choose(ctx, cfg, system)
}

func choose(ctx context.Context, cfg Config, o ops) (*Active, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.SelfTestTimeout == 0 {
		cfg.SelfTestTimeout = DefaultSelfTestTimeout
	}
	a := &Active{}
	switch cfg.Requested {
	case "", None:
		a.Decision = Decision{None, "--intercept=none: applications address the sidecar"}
	case IPTables:
		a.Decision = Decision{IPTables, "--intercept=iptables: the init step's rules redirect"}
	case EBPF, Auto:
		r, cgroup, err := attachEBPF(ctx, cfg, o)
		switch {
		case err == nil:
			a.redirect = r
			why := "self-test passed, attached to " + cgroup
			if cfg.Requested == Auto {
				why = "auto: eBPF " + why
			}
			a.Decision = Decision{EBPF, why}
		case cfg.Requested == EBPF:
			return nil, fmt.Errorf("--intercept=ebpf: %w", err)
		default:
			a.Decision = Decision{IPTables, "auto: eBPF unavailable, iptables rules assumed: " + err.Error()}
		}
	}
	lvl := hclog.Info
	if cfg.Requested == Auto && a.Mode != EBPF {
		lvl = hclog.Warn
	}
	cfg.Logger.Log(lvl, "interception mode chosen", "mode", a.Mode, "reason", a.Reason)
	return a, nil
}

// attachEBPF self-tests on the cgroup, then attaches the real configuration.
func attachEBPF(ctx context.Context, cfg Config, o ops) (*redirect.Redirect, string, error) {
	if cfg.Redirect.ProxyUID == 0 {
		return nil, "", errors.New("the sidecar runs as root: its own connections cannot be told from the application's by uid (run it as uid 1337)")
	}
	cgroup := cfg.Cgroup
	if cgroup == "" {
		var err error
		if cgroup, err = o.ownCgroup(); err != nil {
			return nil, "", err
		}
	}
	tctx, cancel := context.WithTimeout(ctx, cfg.SelfTestTimeout)
	defer cancel()
	if err := o.selfTest(tctx, cgroup); err != nil {
		return nil, cgroup, err
	}
	rc := cfg.Redirect
	rc.Cgroup = cgroup
	r, err := o.attach(rc)
	if err != nil {
		return nil, cgroup, err
	}
	return r, cgroup, nil
}
