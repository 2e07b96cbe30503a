// Package render turns a sidecar's command line, or its bootstrap file, into
// validated Settings.
//
// The bootstrap file (YAML or JSON) uses the flag names as keys, so one name means
// one setting everywhere:
//
//	node-id: reviews-v1-a
//	namespace: shop
//	service-account: reviews
//	labels: {app: reviews, version: v1}
//	address: 127.0.0.21
//	pilot: [127.0.0.1:15010, 127.0.0.2:15010]
//	publisher-key: /var/lib/weft/publisher.pub
//	state-dir: /var/lib/weft/reviews-v1-a
//	token-file: /var/run/weft/token
//	ca-root: /var/lib/weft/ca-root.pem
//	trust-domain: cluster.local
//
// Identity (issue #9): with token-file the sidecar asks pilot for a workload
// certificate (authenticated by the token) and talks to pilot over mTLS, so
// pilot addresses are then pilot's TLS xDS port (15012); ca-root is required
// with it and verifies pilot. Without token-file, xDS is plaintext (pilot must
// allow --insecure-plaintext-registration) and the sidecar has no mTLS.
//
// With --bootstrap FILE, the file is read first and every flag given explicitly on
// the command line overrides the file's value (labels and pilot as a whole), so an
// operator can reuse one file and change one thing. Decoding is strict: unknown keys
// are errors.
package render

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/certs/bundle"
)

// Defaults from issue #4.
const (
	DefaultAdminAddr    = "127.0.0.1:15000"
	DefaultOutboundAddr = "127.0.0.1:15001"
	DefaultInboundPort  = 15006 // on the workload address
	DefaultReadyPort    = 15021 // on the workload address
	DefaultAppAddress   = "127.0.0.1"
	DefaultXDSMode      = "delta"
	DefaultTrustDomain  = "cluster.local"
)

// Limits.
const (
	MaxPilots        = 16
	MaxLabels        = 64
	MaxLabelBytes    = 256 // per key and per value
	MaxIDBytes       = 253
	MaxBootstrapSize = 64 << 10
	// MaxCARootBytes bounds the --ca-root file: what bundle.Parse reads.
	MaxCARootBytes = bundle.MaxPEMBytes
)

// Settings is everything a sidecar needs to start.
type Settings struct {
	Node         node.Node // identity as registered with pilot (InboundPort from InboundAddr)
	Pilot        []string  // host:port, tried in order
	PublisherKey string    // file holding pilot's Ed25519 public key
	StateDir     string
	AdminAddr    netip.AddrPort
	OutboundAddr netip.AddrPort
	InboundAddr  netip.AddrPort
	ReadyAddr    netip.AddrPort
	AppAddress   netip.Addr
	XDSMode      string // "delta" or "sotw"
	// TokenFile holds the bootstrap token for the first CSR (checked at parse
	// time to exist and be at most token.MaxBytes; re-read for every CSR that
	// needs it). Empty: no identity, plaintext xDS.
	TokenFile string
	// CARoot is the PEM file of the mesh CA's roots pilot is verified by
	// (pilot's <data-dir>/ca/root.pem); required with TokenFile.
	CARoot string
	// TrustDomain of the mesh's SPIFFE IDs; default DefaultTrustDomain.
	TrustDomain string
	// CertificateInMemoryOnly keeps the workload certificate's key in memory
	// only, as Istio and Linkerd do, instead of also in StateDir: a sidecar
	// restarted while pilot is away then has no mTLS until pilot returns
	// (sidecar/certclient/persist.go says what persisting buys).
	CertificateInMemoryOnly bool
	// InsecureSkipManifest lets PublisherKey be empty: activation then does not wait
	// for a signed manifest (interop with plain xDS servers) and nothing is persisted.
	InsecureSkipManifest bool
	// Staleness holds operator overrides "CLASS=WARN/EXPIRE[/ONEXPIRE]" (the sidecar
	// parses them); for its class, one beats pilot's delivered StalenessPolicy.
	Staleness []string
	// Limits are the sidecar's own overload bounds.
	Limits Limits
	// DNS is the DNS proxy's (dns.go).
	DNS DNS
	// Concurrency is how many OS threads run the sidecar's Go code at once
	// (GOMAXPROCS): its worker cores, as Envoy's --concurrency.
	// DefaultConcurrency..MaxConcurrency.
	Concurrency int
	// H2Server is --h2-server: the HTTP/2 server of the listeners'
	// prior-knowledge HTTP/2 connections (the peer hop, gRPC clients), "weft"
	// (sidecar/h2server) or "std" (net/http's); "" the sidecar's default.
	H2Server string
	// H2Client is --h2-client: the HTTP/2 client of the pooled peer hop and
	// HTTP/2 upstreams, "weft" (sidecar/h2client) or "std" (net/http's); ""
	// the sidecar's default.
	H2Client string
	// Pprof serves Go's profiler (runtime/pprof) under /debug/pprof/ on the admin
	// address, which must then be a loopback address: profiles reveal memory.
	Pprof bool
	// Intercept is --intercept: "" (none: explicit), "iptables", "ebpf" or
	// "auto" (ebpf/mode decides at start: eBPF after a self-test, else
	// iptables). Node.Interception says the mode; for auto it is "iptables"
	// until the sidecar has decided (either is an intercept mode, which is
	// what the defaults depend on: the DNS proxy's, for one).
	Intercept string
	// InterceptCgroup is --intercept-cgroup: the cgroup v2 directory eBPF
	// attaches to (ebpf, auto); "" is the sidecar's own.
	InterceptCgroup string
}

// The --intercept values (ebpf/mode's).
const (
	InterceptNone     = "none"
	InterceptIPTables = "iptables"
	InterceptEBPF     = "ebpf"
	InterceptAuto     = "auto"
)

// DefaultConcurrency is one worker core, as linkerd2-proxy defaults to. Measured
// on 2 CPUs (tools/bench/proxy/run.sh, sidecar-alt A/B, 1 KiB HTTP/1.1): at
// 2,000 rps a second P costs ~15% more CPU per request (the idle P's thread is
// woken to spin on every arrival: 0.46 futex and 1.7 epoll_pwait calls per
// request against 0.001 and 0.2) and no more throughput, as the application
// and load generator need the other core. A sidecar that must proxy more than
// one core's worth (here ~50k rps of 1 KiB requests, beside the load
// generator and application) sets --concurrency. GOMAXPROCS in the environment
// wins over both (cmd/sidecar).
const (
	DefaultConcurrency = 1
	MaxConcurrency     = 256
)

// MaxStalenessOverrides bounds --staleness.
const MaxStalenessOverrides = 16

// File is the bootstrap file's shape; keys are the flag names.
type File struct {
	NodeID         string            `json:"node-id,omitempty"`
	Namespace      string            `json:"namespace,omitempty"`
	ServiceAccount string            `json:"service-account,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	Address        string            `json:"address,omitempty"`
	Locality       string            `json:"locality,omitempty"`
	Pilot          []string          `json:"pilot,omitempty"`
	PublisherKey   string            `json:"publisher-key,omitempty"`
	StateDir       string            `json:"state-dir,omitempty"`
	AdminAddr      string            `json:"admin-addr,omitempty"`
	OutboundAddr   string            `json:"outbound-addr,omitempty"`
	InboundAddr    string            `json:"inbound-addr,omitempty"`
	ReadyAddr      string            `json:"ready-addr,omitempty"`
	AppAddress     string            `json:"app-address,omitempty"`
	XDSMode        string            `json:"xds-mode,omitempty"`
	TokenFile      string            `json:"token-file,omitempty"`
	CARoot         string            `json:"ca-root,omitempty"`
	TrustDomain    string            `json:"trust-domain,omitempty"`
	// CertificateInMemoryOnly: see Settings.
	CertificateInMemoryOnly bool `json:"certificate-in-memory-only,omitempty"`
	// InsecureSkipManifest and Staleness: see Settings.
	InsecureSkipManifest bool     `json:"insecure-skip-manifest,omitempty"`
	Staleness            []string `json:"staleness,omitempty"`
	// Overload bounds and the DNS proxy's settings, inline: the keys are the flag names.
	FileLimits
	FileDNS
	// Concurrency and Pprof: see Settings.
	Concurrency int    `json:"concurrency,omitempty"`
	Pprof       bool   `json:"pprof,omitempty"`
	H2Server    string `json:"h2-server,omitempty"`
	H2Client    string `json:"h2-client,omitempty"`
	// Intercept and InterceptCgroup: see Settings.
	Intercept       string `json:"intercept,omitempty"`
	InterceptCgroup string `json:"intercept-cgroup,omitempty"`
}

// ErrUsage wraps every error Parse returns, so cmd/sidecar can exit 2.
var ErrUsage = errors.New("sidecar settings")

// Parse reads args (without the program name). readFile loads --bootstrap; pass
// os.ReadFile.
func Parse(args []string, readFile func(string) ([]byte, error)) (*Settings, error) {
	var f File
	var labels, pilot, bootstrap string
	var stale stringList
	fs := flag.NewFlagSet("sidecar", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&bootstrap, "bootstrap", "", "bootstrap file (YAML or JSON); flags override it")
	fs.StringVar(&f.NodeID, "node-id", "", "node id")
	fs.StringVar(&f.Namespace, "namespace", "", "namespace")
	fs.StringVar(&f.ServiceAccount, "service-account", "", "service account")
	fs.StringVar(&labels, "labels", "", "labels k=v,k=v")
	fs.StringVar(&f.Address, "address", "", "workload IP")
	fs.StringVar(&f.Locality, "locality", "", "region/zone/subzone")
	fs.StringVar(&pilot, "pilot", "", "pilot HOST:PORT[,HOST:PORT]")
	fs.StringVar(&f.PublisherKey, "publisher-key", "", "pin pilot's publisher public key (file); optional with --ca-root, which trusts any publisher the mesh CA certifies")
	fs.StringVar(&f.StateDir, "state-dir", "", "state directory")
	fs.StringVar(&f.AdminAddr, "admin-addr", "", "admin IP:PORT (default "+DefaultAdminAddr+")")
	fs.StringVar(&f.OutboundAddr, "outbound-addr", "", "outbound IP:PORT (default "+DefaultOutboundAddr+")")
	fs.StringVar(&f.InboundAddr, "inbound-addr", "", "inbound IP:PORT (default <address>:15006; "+DefaultInterceptInboundAddr+" when intercepting)")
	fs.StringVar(&f.ReadyAddr, "ready-addr", "", "readiness IP:PORT (default <address>:15021)")
	fs.StringVar(&f.AppAddress, "app-address", "", "application IP (default "+DefaultAppAddress+")")
	fs.StringVar(&f.XDSMode, "xds-mode", "", "delta|sotw (default delta)")
	fs.StringVar(&f.TokenFile, "token-file", "", "bootstrap token file: get a workload certificate and use mTLS to pilot")
	fs.StringVar(&f.CARoot, "ca-root", "", "mesh CA root PEM file verifying pilot (pilot's <data-dir>/ca/root.pem)")
	fs.StringVar(&f.TrustDomain, "trust-domain", "", "SPIFFE trust domain (default "+DefaultTrustDomain+")")
	fs.BoolVar(&f.CertificateInMemoryOnly, "certificate-in-memory-only", false, "keep the workload certificate's key in memory only, never in --state-dir (a restart with pilot away then has no mTLS until pilot returns)")
	fs.BoolVar(&f.InsecureSkipManifest, "insecure-skip-manifest", false, "activate without pilot's signed manifest (plain xDS servers); allows no publisher-key")
	limitFlags(fs, &f.FileLimits)
	dnsFlags(fs, &f.FileDNS)
	fs.IntVar(&f.Concurrency, "concurrency", 0, fmt.Sprintf("worker threads (GOMAXPROCS), 1..%d (default %d)", MaxConcurrency, DefaultConcurrency))
	fs.StringVar(&f.H2Server, "h2-server", "", "weft|std: the HTTP/2 server of prior-knowledge HTTP/2 connections (default weft: sidecar/h2server; std: net/http's)")
	fs.StringVar(&f.H2Client, "h2-client", "", "weft|std: the HTTP/2 client of the pooled peer hop and HTTP/2 upstreams (default weft: sidecar/h2client; std: net/http's)")
	fs.BoolVar(&f.Pprof, "pprof", false, "serve Go's profiler under /debug/pprof/ on the admin address (loopback only; a sidecar built with -tags weftpprof)")
	fs.StringVar(&f.Intercept, "intercept", "", "none|iptables|ebpf|auto: how traffic reaches the sidecar (default none: applications address it)")
	fs.StringVar(&f.InterceptCgroup, "intercept-cgroup", "", "ebpf, auto: the pod's cgroup v2 directory to attach to (default the sidecar's own)")
	fs.Var(&stale, "staleness", "operator override CLASS=WARN/EXPIRE[/ONEXPIRE], repeatable; beats pilot's StalenessPolicy for that class")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if set["labels"] {
		m, err := ParseLabels(labels)
		if err != nil {
			return nil, fmt.Errorf("%w: labels: %v", ErrUsage, err)
		}
		f.Labels = m
	}
	if set["pilot"] {
		f.Pilot = strings.Split(pilot, ",")
	}
	f.Staleness = stale
	if bootstrap != "" {
		data, err := readFile(bootstrap)
		if err != nil {
			return nil, fmt.Errorf("%w: bootstrap: %v", ErrUsage, err)
		}
		file, err := DecodeFile(data)
		if err != nil {
			return nil, fmt.Errorf("%w: bootstrap %s: %v", ErrUsage, bootstrap, err)
		}
		f = file.overriddenBy(f, set)
	}
	s, err := f.Settings()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if err := s.checkIdentityFiles(readFile); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	return s, nil
}

// overriddenBy returns the file with the explicitly set flags of cmd applied.
func (f File) overriddenBy(cmd File, set map[string]bool) File {
	for name, v := range map[string][2]*string{
		"node-id": {&f.NodeID, &cmd.NodeID}, "namespace": {&f.Namespace, &cmd.Namespace},
		"service-account": {&f.ServiceAccount, &cmd.ServiceAccount}, "address": {&f.Address, &cmd.Address},
		"locality": {&f.Locality, &cmd.Locality}, "publisher-key": {&f.PublisherKey, &cmd.PublisherKey},
		"state-dir": {&f.StateDir, &cmd.StateDir}, "admin-addr": {&f.AdminAddr, &cmd.AdminAddr},
		"outbound-addr": {&f.OutboundAddr, &cmd.OutboundAddr}, "inbound-addr": {&f.InboundAddr, &cmd.InboundAddr},
		"ready-addr": {&f.ReadyAddr, &cmd.ReadyAddr}, "app-address": {&f.AppAddress, &cmd.AppAddress},
		"xds-mode": {&f.XDSMode, &cmd.XDSMode}, "token-file": {&f.TokenFile, &cmd.TokenFile},
		"ca-root": {&f.CARoot, &cmd.CARoot}, "trust-domain": {&f.TrustDomain, &cmd.TrustDomain},
		"intercept": {&f.Intercept, &cmd.Intercept}, "intercept-cgroup": {&f.InterceptCgroup, &cmd.InterceptCgroup},
	} {
		if set[name] {
			*v[0] = *v[1]
		}
	}
	if set["labels"] {
		f.Labels = cmd.Labels
	}
	if set["pilot"] {
		f.Pilot = cmd.Pilot
	}
	if set["staleness"] {
		f.Staleness = cmd.Staleness
	}
	if set["insecure-skip-manifest"] {
		f.InsecureSkipManifest = cmd.InsecureSkipManifest
	}
	if set["certificate-in-memory-only"] {
		f.CertificateInMemoryOnly = cmd.CertificateInMemoryOnly
	}
	f.FileLimits.override(cmd.FileLimits, set)
	f.FileDNS.override(cmd.FileDNS, set)
	if set["pprof"] {
		f.Pprof = cmd.Pprof
	}
	if set["concurrency"] {
		f.Concurrency = cmd.Concurrency
	}
	if set["h2-server"] {
		f.H2Server = cmd.H2Server
	}
	if set["h2-client"] {
		f.H2Client = cmd.H2Client
	}
	return f
}

// DecodeFile decodes a bootstrap file strictly (YAML or JSON).
func DecodeFile(data []byte) (File, error) {
	var f File
	if len(data) > MaxBootstrapSize {
		return f, fmt.Errorf("%d bytes, limit %d", len(data), MaxBootstrapSize)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return f, errors.New("empty")
	}
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return File{}, err
	}
	return f, nil
}

// ParseLabels parses k=v,k=v. Empty input is no labels.
func ParseLabels(s string) (map[string]string, error) {
	m := map[string]string{}
	if s == "" {
		return m, nil
	}
	for i, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("item %d %q: want key=value", i, kv)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("item %d: key %q repeated", i, k)
		}
		m[k] = v
	}
	return m, nil
}

// Settings validates the file's values and applies defaults.
func (f File) Settings() (*Settings, error) {
	s := &Settings{PublisherKey: f.PublisherKey, StateDir: f.StateDir, XDSMode: f.XDSMode,
		TokenFile: f.TokenFile, CARoot: f.CARoot, TrustDomain: f.TrustDomain, CertificateInMemoryOnly: f.CertificateInMemoryOnly,
		InsecureSkipManifest: f.InsecureSkipManifest, Staleness: append([]string(nil), f.Staleness...), Pprof: f.Pprof,
		Concurrency: f.Concurrency, H2Server: f.H2Server, H2Client: f.H2Client}
	if s.H2Server != "" && s.H2Server != "weft" && s.H2Server != "std" {
		return nil, fmt.Errorf("h2-server: %q is neither weft nor std", s.H2Server)
	}
	if s.H2Client != "" && s.H2Client != "weft" && s.H2Client != "std" {
		return nil, fmt.Errorf("h2-client: %q is neither weft nor std", s.H2Client)
	}
	switch {
	case s.Concurrency == 0:
		s.Concurrency = DefaultConcurrency
	case s.Concurrency < 1 || s.Concurrency > MaxConcurrency:
		return nil, fmt.Errorf("concurrency: %d outside 1..%d", s.Concurrency, MaxConcurrency)
	}
	lim, err := f.FileLimits.Limits()
	if err != nil {
		return nil, err
	}
	s.Limits = lim
	if s.DNS, err = f.FileDNS.settings(); err != nil {
		return nil, err
	}
	if len(f.Staleness) > MaxStalenessOverrides {
		return nil, fmt.Errorf("staleness: %d overrides, limit %d", len(f.Staleness), MaxStalenessOverrides)
	}
	if err := checkID("node-id", f.NodeID, MaxIDBytes); err != nil {
		return nil, err
	}
	if err := checkDNSLabel("namespace", f.Namespace); err != nil {
		return nil, err
	}
	if err := checkDNSLabel("service-account", f.ServiceAccount); err != nil {
		return nil, err
	}
	if err := checkLabels(f.Labels); err != nil {
		return nil, err
	}
	addr, err := parseIP("address", f.Address, "")
	if err != nil {
		return nil, err
	}
	loc, err := node.ParseLocality(f.Locality)
	if err != nil {
		return nil, fmt.Errorf("locality: %v", err)
	}
	if s.Pilot, err = checkPilots(f.Pilot); err != nil {
		return nil, err
	}
	// With ca-root, manifests are trusted from publishers the mesh CA certifies;
	// publisher-key is then an optional pin.
	if f.PublisherKey == "" && f.CARoot == "" && !f.InsecureSkipManifest {
		return nil, errors.New("publisher-key or ca-root: required (whom manifests are trusted from)")
	}
	if f.StateDir == "" {
		return nil, errors.New("state-dir: required")
	}
	listeners := []struct {
		name string
		in   string
		def  string
		out  *netip.AddrPort
	}{
		{"admin-addr", f.AdminAddr, DefaultAdminAddr, &s.AdminAddr},
		{"outbound-addr", f.OutboundAddr, DefaultOutboundAddr, &s.OutboundAddr},
		{"inbound-addr", f.InboundAddr, defaultInboundAddr(f.Intercept, addr), &s.InboundAddr},
		{"ready-addr", f.ReadyAddr, netip.AddrPortFrom(addr, DefaultReadyPort).String(), &s.ReadyAddr},
	}
	used := map[netip.AddrPort]string{}
	for _, l := range listeners {
		in := l.in
		if in == "" {
			in = l.def
		}
		ap, err := netip.ParseAddrPort(in)
		if err != nil || ap.Port() == 0 {
			return nil, fmt.Errorf("%s: %q is not IP:PORT with a port in 1..65535", l.name, in)
		}
		if other, dup := used[ap]; dup {
			return nil, fmt.Errorf("%s: %s already used by %s", l.name, ap, other)
		}
		used[ap] = l.name
		*l.out = ap
	}
	if other, dup := used[s.DNS.Addr]; dup { // its TCP side (Listen with the default is checked at bind)
		return nil, fmt.Errorf("dns-addr: %s already used by %s", s.DNS.Addr, other)
	}
	if s.Pprof && !s.AdminAddr.Addr().IsLoopback() {
		return nil, fmt.Errorf("pprof: admin-addr %s is not a loopback address; the profiler is served on loopback only", s.AdminAddr)
	}
	if s.AppAddress, err = parseIP("app-address", f.AppAddress, DefaultAppAddress); err != nil {
		return nil, err
	}
	switch s.XDSMode {
	case "":
		s.XDSMode = DefaultXDSMode
	case "delta", "sotw":
	default:
		return nil, fmt.Errorf("xds-mode: %q, want delta or sotw", s.XDSMode)
	}
	if err := s.checkIdentity(); err != nil {
		return nil, err
	}
	interception, err := s.checkIntercept(f.Intercept, f.InterceptCgroup)
	if err != nil {
		return nil, err
	}
	labels := make(map[string]string, len(f.Labels))
	for k, v := range f.Labels {
		labels[k] = v
	}
	s.Node = node.Node{ID: f.NodeID, Namespace: f.Namespace, ServiceAccount: f.ServiceAccount, Labels: labels,
		Address: addr.String(), InboundPort: uint32(s.InboundAddr.Port()), Locality: loc, Interception: interception}
	if err := s.Node.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// DefaultInterceptInboundAddr is --inbound-addr's default when the sidecar
// intercepts: the wildcard, where iptables' inbound REDIRECT delivers (the
// sidecar binds [::]:15006 beside it when the pod has IPv6).
const DefaultInterceptInboundAddr = "0.0.0.0:15006"

// defaultInboundAddr is --inbound-addr's default for --intercept mode (an
// unknown mode is refused by checkIntercept).
func defaultInboundAddr(mode string, addr netip.Addr) string {
	if mode != "" && mode != InterceptNone {
		return DefaultInterceptInboundAddr
	}
	return netip.AddrPortFrom(addr, DefaultInboundPort).String()
}

// checkIntercept sets Intercept and InterceptCgroup and returns the
// Node.Interception known at parse time (auto's provisional one: iptables).
func (s *Settings) checkIntercept(mode, cgroup string) (string, error) {
	var interception string
	switch mode {
	case "", InterceptNone:
		mode = ""
	case InterceptIPTables:
		interception = node.InterceptionIPTables
	case InterceptEBPF:
		interception = node.InterceptionEBPF
	case InterceptAuto:
		interception = node.InterceptionIPTables
	default:
		return "", fmt.Errorf("intercept: %q, want none, iptables, ebpf or auto", mode)
	}
	if cgroup != "" {
		if mode != InterceptEBPF && mode != InterceptAuto {
			return "", fmt.Errorf("intercept-cgroup: only with --intercept=ebpf or auto")
		}
		if !strings.HasPrefix(cgroup, "/") {
			return "", fmt.Errorf("intercept-cgroup: %q is not an absolute path", cgroup)
		}
	}
	s.Intercept, s.InterceptCgroup = mode, cgroup
	return interception, nil
}

func checkID(name, v string, limit int) error {
	switch {
	case v == "":
		return fmt.Errorf("%s: required", name)
	case len(v) > limit:
		return fmt.Errorf("%s: %d bytes, limit %d", name, len(v), limit)
	case strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return fmt.Errorf("%s: %q contains whitespace or control characters", name, v)
	}
	return nil
}

// checkDNSLabel: Kubernetes DNS-1123 label (lowercase alphanumerics and '-', 1..63,
// starting and ending alphanumeric).
func checkDNSLabel(name, v string) error {
	if v == "" {
		return fmt.Errorf("%s: required", name)
	}
	ok := len(v) <= 63
	for i := 0; ok && i < len(v); i++ {
		c := v[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		ok = alnum || (c == '-' && i > 0 && i < len(v)-1)
	}
	if !ok {
		return fmt.Errorf("%s: %q is not a DNS-1123 label (lowercase letters, digits, '-', at most 63)", name, v)
	}
	return nil
}

func checkLabels(m map[string]string) error {
	if len(m) > MaxLabels {
		return fmt.Errorf("labels: %d labels, limit %d", len(m), MaxLabels)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // report the same bad key every time
	for _, k := range keys {
		v := m[k]
		if k == "" {
			return errors.New("labels: empty key")
		}
		if len(k) > MaxLabelBytes || len(v) > MaxLabelBytes {
			return fmt.Errorf("labels: %q: key or value longer than %d bytes", k, MaxLabelBytes)
		}
		if strings.ContainsAny(k, "=, \t\n") || strings.ContainsAny(v, "=,\n") {
			return fmt.Errorf("labels: %q: key or value contains '=', ',' or whitespace", k)
		}
	}
	return nil
}

func parseIP(name, v, def string) (netip.Addr, error) {
	if v == "" {
		if def == "" {
			return netip.Addr{}, fmt.Errorf("%s: required", name)
		}
		v = def
	}
	a, err := netip.ParseAddr(v)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%s: %q is not an IP literal", name, v)
	}
	return a, nil
}

func checkPilots(ps []string) ([]string, error) {
	if len(ps) == 0 {
		return nil, errors.New("pilot: at least one HOST:PORT required")
	}
	if len(ps) > MaxPilots {
		return nil, fmt.Errorf("pilot: %d addresses, limit %d", len(ps), MaxPilots)
	}
	seen := map[string]bool{}
	out := make([]string, len(ps))
	for i, p := range ps {
		host, port, err := net.SplitHostPort(p)
		n, perr := strconv.ParseUint(port, 10, 16)
		if err != nil || host == "" || perr != nil || n == 0 || strings.ContainsAny(host, " \t/") {
			return nil, fmt.Errorf("pilot[%d]: %q is not HOST:PORT with a port in 1..65535", i, p)
		}
		if seen[p] {
			return nil, fmt.Errorf("pilot[%d]: %s listed twice", i, p)
		}
		seen[p] = true
		out[i] = p
	}
	return out, nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }
