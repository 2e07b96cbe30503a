package intercept

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Usage is `sidecar intercept --help`.
const Usage = `usage: sidecar intercept [-p PORT] [-z PORT] [-u UID] [-g GID] [-b PORTS|'*'] [-d PORTS]
                        [-o PORTS] [-x CIDRS] [--dns=true|false] [--dns-port PORT]
                        [--mode iptables|ebpf] [--ipv6[=auto|true|false]] [--backend auto|nft|legacy]
                        [--dry-run] [--remove]
Installs the pod's interception rules in the current network namespace (run as root,
with NET_ADMIN and NET_RAW, before the app and the sidecar start), as istio-iptables
does, with the same letters:
  -p PORT    outbound capture port (15001): TCP from the app goes there
  -z PORT    inbound capture port (15006): TCP to the pod goes there
  -u UID     the sidecar's uid (1337): its traffic is never captured
  -g GID     the sidecar's gid (1337): likewise
  -b PORTS   inbound ports to capture: '*' (default) all, '' none, or a list
  -d PORTS   inbound ports never captured (besides the sidecar's own: 15000, -p, -z,
             15021, --dns-port, 15090, always excluded)
  -o PORTS   outbound ports never captured
  -x CIDRS   outbound destinations never captured (IPv4 and IPv6, comma-separated)
  -m REDIRECT, -i '*'  accepted for istio-iptables command lines (no other value)
  --dns      redirect UDP and TCP port 53 to --dns-port (default true; --dns=false: off)
  --dns-port PORT  the sidecar's DNS proxy (15053)
  --mode     iptables (default) or ebpf: only the inbound part, outbound and DNS are the
             BPF programs' (then -o and -x are refused)
  --ipv6     also ip6tables (::1, ::6 for 127.0.0.1, 127.0.0.6; ::6/128 is added to lo
             as istio-iptables does); auto (default): when the netns has IPv6
  --backend  auto (default: the one holding rules in this netns, else nft), nft, legacy
  --dry-run  print the rules (iptables-restore input) and change nothing
  --remove   delete exactly the chains and jumps this command installs
PORTS: comma-separated ports or ranges lo:hi, at most 64; CIDRS: at most 64.
Running it again replaces the rules (same flags: same rules).
Exit status: 0 done, 1 failed (nothing of the failing table changed), 2 bad flags.`

// portValue, idValue, portsValue... are flag.Values whose errors say what is wrong;
// package flag adds the flag's name.
type portValue struct{ p *uint16 }

func (v portValue) String() string {
	if v.p == nil {
		return ""
	}
	return fmt.Sprint(*v.p)
}
func (v portValue) Set(s string) (err error) { *v.p, err = ParsePort(s); return err }

type idValue struct{ p *uint32 }

func (v idValue) String() string {
	if v.p == nil {
		return ""
	}
	return fmt.Sprint(*v.p)
}
func (v idValue) Set(s string) (err error) { *v.p, err = ParseID(s); return err }

type portsValue struct{ p *[]PortRange }

func (v portsValue) String() string { return "" }
func (v portsValue) Set(s string) (err error) {
	*v.p, err = ParsePorts(s)
	return err
}

type inboundValue struct{ c *Config }

func (v inboundValue) String() string { return "" }
func (v inboundValue) Set(s string) (err error) {
	v.c.InboundAll, v.c.InboundPorts, err = ParseInboundPorts(s)
	return err
}

type excludeCIDRsValue struct{ c *Config }

func (v excludeCIDRsValue) String() string { return "" }
func (v excludeCIDRsValue) Set(s string) (err error) {
	v.c.ExcludeCIDRs, err = ParseCIDRs(s)
	return err
}

type enumValue[T ~string] struct {
	p       *T
	allowed []T
	isBool  bool
}

func (v enumValue[T]) String() string {
	if v.p == nil {
		return ""
	}
	return string(*v.p)
}
func (v enumValue[T]) Set(s string) error {
	for _, a := range v.allowed {
		if string(a) == s {
			*v.p = a
			return nil
		}
	}
	names := make([]string, len(v.allowed))
	for i, a := range v.allowed {
		names[i] = string(a)
	}
	return fmt.Errorf("%q is not one of %s", s, strings.Join(names, ", "))
}

// IsBoolFlag lets --ipv6 stand alone (= true).
func (v enumValue[T]) IsBoolFlag() bool { return v.isBool }

// Parsed is what the command line asks for.
type Parsed struct {
	Config Config
	DryRun bool
	Remove bool
	Help   bool
}

// ParseArgs parses `sidecar intercept` arguments into a validated Config. Errors name
// the flag; they wrap ErrInvalid.
func ParseArgs(args []string) (Parsed, error) {
	p := Parsed{Config: DefaultConfig()}
	c := &p.Config
	fs := flag.NewFlagSet("sidecar intercept", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.Var(portValue{&c.OutboundPort}, "p", "")
	fs.Var(portValue{&c.InboundPort}, "z", "")
	fs.Var(idValue{&c.ProxyUID}, "u", "")
	fs.Var(idValue{&c.ProxyGID}, "g", "")
	fs.Var(inboundValue{c}, "b", "")
	fs.Var(portsValue{&c.ExcludeInboundPorts}, "d", "")
	fs.Var(portsValue{&c.ExcludeOutboundPorts}, "o", "")
	fs.Var(excludeCIDRsValue{c}, "x", "")
	fs.BoolVar(&c.DNS, "dns", c.DNS, "")
	fs.Var(portValue{&c.DNSPort}, "dns-port", "")
	fs.Var(enumValue[Mode]{p: &c.Mode, allowed: []Mode{ModeIPTables, ModeEBPF}}, "mode", "")
	fs.Var(enumValue[IPv6]{p: &c.IPv6, allowed: []IPv6{IPv6Auto, IPv6On, IPv6Off}, isBool: true}, "ipv6", "")
	fs.Var(enumValue[Backend]{p: &c.Backend, allowed: []Backend{BackendAuto, BackendNFT, BackendLegacy}}, "backend", "")
	// istio-iptables' -m (interception mode) and -i (outbound CIDRs to capture) are
	// accepted with the only values we implement, so an Istio command line runs.
	var istioMode, istioInclude string
	fs.StringVar(&istioMode, "m", "REDIRECT", "")
	fs.StringVar(&istioInclude, "i", "*", "")
	fs.BoolVar(&p.DryRun, "dry-run", false, "")
	fs.BoolVar(&p.Remove, "remove", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			p.Help = true
			return p, nil
		}
		return p, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if fs.NArg() > 0 {
		return p, fmt.Errorf("%w: unexpected argument %q", ErrInvalid, fs.Arg(0))
	}
	if istioMode != "REDIRECT" {
		return p, invalid("-m", "%q: only REDIRECT is implemented (no TPROXY)", istioMode)
	}
	if istioInclude != "*" {
		return p, invalid("-i", "%q: only '*' is implemented (capture every destination not in -x)", istioInclude)
	}
	if p.DryRun && p.Remove {
		return p, invalid("--dry-run", "not with --remove (a dry run prints the rules Apply installs)")
	}
	if c.Mode == ModeEBPF {
		var dnsFlag string
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "dns" || f.Name == "dns-port" {
				dnsFlag = "--" + f.Name
			}
		})
		if dnsFlag != "" {
			// DNS capture is the BPF programs' in this mode (--dns-port is still
			// excluded inbound); a flag that changes nothing is refused.
			return p, invalid(dnsFlag, "not used with --mode ebpf (DNS capture is the BPF programs')")
		}
	}
	if err := c.Validate(); err != nil {
		return p, err
	}
	return p, nil
}

// Main is `sidecar intercept ARGS`: it returns the exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	p, err := ParseArgs(args)
	if err != nil {
		fmt.Fprintln(stderr, "sidecar intercept:", err)
		fmt.Fprintln(stderr, "run 'sidecar intercept --help' for usage")
		return 2
	}
	if p.Help {
		fmt.Fprintln(stdout, Usage)
		return 0
	}
	cfg := p.Config
	if p.DryRun {
		v6 := wantIPv6(cfg.IPv6)
		fmt.Fprintf(stdout, "# iptables-restore --noflush input (IPv4)\n%s", Rules(cfg, false))
		if v6 {
			fmt.Fprintf(stdout, "# ip6tables-restore --noflush input (IPv6), after adding %s/128 to lo\n%s", InboundPassthroughV6, Rules(cfg, true))
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	families := "IPv4"
	if p.Remove {
		res, err := RemoveResult(ctx, cfg)
		if res.IPv6 {
			families = "IPv4+IPv6"
		}
		if err != nil {
			fmt.Fprintln(stderr, "sidecar intercept: remove:", err)
			return 1
		}
		fmt.Fprintf(stderr, "sidecar intercept: removed %d chains (backend %s, %s; %s)\n", res.Count, res.Backend, families, res.BackendReason)
		return 0
	}
	res, err := ApplyResult(ctx, cfg)
	if res.IPv6 {
		families = "IPv4+IPv6"
	}
	if err != nil {
		fmt.Fprintln(stderr, "sidecar intercept:", err)
		return 1
	}
	fmt.Fprintf(stderr, "sidecar intercept: installed %d rules, mode %s (backend %s, %s; %s)\n",
		res.Count, cfg.Mode, res.Backend, families, res.BackendReason)
	return 0
}
