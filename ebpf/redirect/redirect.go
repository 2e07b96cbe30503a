//go:build linux

// Package redirect loads Weft's outbound interception programs (ebpf/bpf) and
// attaches them to one pod's cgroup v2 directory: TCP to a non-loopback
// destination goes to the sidecar's outbound port on loopback, port 53 to its
// DNS proxy, and SO_ORIGINAL_DST on the sidecar's accepted socket answers with
// the original destination, as conntrack does in iptables mode.
//
// Every attachment is a bpf_link created with BPF_LINK_CREATE (never the legacy
// attach, which outlives its process), so Close or the death of the attaching
// process detaches everything. Each Attach loads its own maps: a pod's
// loopback 4-tuples cannot meet another pod's (the netns cookie is in the key
// as well, for a cgroup whose processes span network namespaces).
//
// Kernel: 5.15 or later (bpf_get_netns_cookie in sockops and getsockopt
// programs). BPF memory is then charged to the memory cgroup, so
// RLIMIT_MEMLOCK is left alone (cilium/ebpf/rlimit would probe it with a map
// at every sidecar start, whatever the mode).
//
// Inbound is not here: in eBPF mode it stays iptables PREROUTING (the init step
// runs `sidecar intercept --mode ebpf`), see issue10-design.md.
package redirect

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/weft-mesh/weft/ebpf/bpf"
)

// CheckCgroup returns an error unless dir is a cgroup v2 directory other
// than the hierarchy's root.
func CheckCgroup(dir string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return fmt.Errorf("redirect: cgroup %q: %w", dir, err)
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("redirect: %q is not a cgroup v2 directory (filesystem type %#x)", dir, fs.Type)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fmt.Errorf("redirect: cgroup %q: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("redirect: cgroup %q is not a directory", dir)
	}
	// The root cgroup's id (its kernfs inode) is 1. A cgroup namespace's
	// root is some other cgroup and is allowed.
	if st.Ino == 1 {
		return fmt.Errorf("redirect: refusing to attach at the cgroup v2 root %q: it holds every process on the machine; give the pod's own cgroup", dir)
	}
	return nil
}

// probe makes an attachment answer only the self-test's probe connection.
type probe struct {
	addr netip.AddrPort // IPv4
	to   uint16         // local port the probe goes to
}

// Redirect is one attachment: its programs, maps and links. Close it.
type Redirect struct {
	cgroup string
	objs   bpf.RedirectObjects
	links  []*cgroupLink

	closeOnce sync.Once
	closeErr  error
}

// attachment names a program and its hook.
type attachment struct {
	name string
	prog *ebpf.Program
	typ  uint32 // BPF_CGROUP_*
}

// Attach loads the programs and attaches them to cfg.Cgroup. On error nothing
// stays attached or loaded.
func Attach(cfg Config) (*Redirect, error) {
	return attach(cfg, nil)
}

func attach(cfg Config, pr *probe) (_ *Redirect, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := CheckCgroup(cfg.Cgroup); err != nil {
		return nil, err
	}
	spec, err := bpf.LoadRedirect()
	if err != nil {
		return nil, fmt.Errorf("redirect: read the embedded object: %w", err)
	}
	for _, m := range []string{bpf.RedirectMapCookieOrig, bpf.RedirectMapTupleOrig} {
		spec.Maps[m].MaxEntries = cfg.MaxConns
	}
	spec.Maps[bpf.RedirectMapOwnAddrs].MaxEntries = MaxOwnAddrs
	r := &Redirect{cgroup: cfg.Cgroup}
	if err := spec.LoadAndAssign(&r.objs, nil); err != nil {
		return nil, fmt.Errorf("redirect: load programs: %w", err)
	}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if err := r.objs.ConfigMap.Put(uint32(0), mapConfig(cfg, pr)); err != nil {
		return nil, fmt.Errorf("redirect: write config map: %w", err)
	}
	for _, a := range cfg.OwnAddrs {
		// As16: IPv4 as ::ffff:a.b.c.d, the programs' form for both families.
		if err := r.objs.OwnAddrs.Put(a.As16(), uint8(1)); err != nil {
			return nil, fmt.Errorf("redirect: write own address %s: %w", a, err)
		}
	}

	p := &r.objs.RedirectPrograms
	hooks := []attachment{
		{"connect4", p.WeftConnect4, unix.BPF_CGROUP_INET4_CONNECT},
		{"connect6", p.WeftConnect6, unix.BPF_CGROUP_INET6_CONNECT},
		{"sockops", p.WeftSockops, unix.BPF_CGROUP_SOCK_OPS},
		{"getsockopt", p.WeftGetsockopt, unix.BPF_CGROUP_GETSOCKOPT},
		{"getpeername4", p.WeftGetpeername4, unix.BPF_CGROUP_INET4_GETPEERNAME},
		{"getpeername6", p.WeftGetpeername6, unix.BPF_CGROUP_INET6_GETPEERNAME},
		{"sock_release", p.WeftSockRelease, unix.BPF_CGROUP_INET_SOCK_RELEASE},
	}
	if cfg.DNS {
		hooks = append(hooks,
			attachment{"sendmsg4", p.WeftSendmsg4, unix.BPF_CGROUP_UDP4_SENDMSG},
			attachment{"sendmsg6", p.WeftSendmsg6, unix.BPF_CGROUP_UDP6_SENDMSG},
			attachment{"recvmsg4", p.WeftRecvmsg4, unix.BPF_CGROUP_UDP4_RECVMSG},
			attachment{"recvmsg6", p.WeftRecvmsg6, unix.BPF_CGROUP_UDP6_RECVMSG},
		)
	}
	dir, err := os.Open(cfg.Cgroup)
	if err != nil {
		return nil, fmt.Errorf("redirect: open cgroup %q: %w", cfg.Cgroup, err)
	}
	defer dir.Close() // each link holds its own reference to the cgroup
	for _, h := range hooks {
		l, err := linkCgroup(int(dir.Fd()), h.prog.FD(), h.typ)
		if err != nil {
			return nil, fmt.Errorf("redirect: attach %s to cgroup %q: %w", h.name, cfg.Cgroup, err)
		}
		r.links = append(r.links, l)
	}
	return r, nil
}

// mapConfig is the config map's value for cfg (defaults applied).
func mapConfig(cfg Config, pr *probe) bpf.RedirectConfig {
	c := bpf.RedirectConfig{
		Flags:        bpf.RedirectConfigFlagsF_EXCLUDE_UID,
		ProxyUid:     cfg.ProxyUID,
		ExcludeMark:  cfg.ExcludeMark,
		OutboundPort: htons(cfg.OutboundPort),
		DnsPort:      htons(cfg.DNSPort),
	}
	if cfg.DNS {
		c.Flags |= bpf.RedirectConfigFlagsF_DNS
	}
	if pr != nil {
		c.Flags = bpf.RedirectConfigFlagsF_PROBE_ONLY
		a := pr.addr.Addr().As4()
		c.ProbeIp4 = nativeFromBE(a)
		c.ProbePort = htons(pr.addr.Port())
		c.ProbeToPort = htons(pr.to)
	}
	return c
}

// Check loads the programs and frees them: nil, or why this kernel or
// process cannot (an *ebpf.VerifierError is the programs' fault, anything
// else the environment's: privileges, kernel features).
func Check() error {
	var objs bpf.RedirectObjects
	if err := bpf.LoadRedirectObjects(&objs, nil); err != nil {
		return fmt.Errorf("redirect: load programs: %w", err)
	}
	return objs.Close()
}

// Cgroup is the directory the programs are attached to.
func (r *Redirect) Cgroup() string { return r.cgroup }

// LinkIDs are the kernel ids of the attachment's bpf_links.
func (r *Redirect) LinkIDs() []uint32 {
	ids := make([]uint32, len(r.links))
	for i, l := range r.links {
		ids[i] = l.id
	}
	return ids
}

// Close detaches the programs and frees the maps. Safe to call twice.
func (r *Redirect) Close() error {
	r.closeOnce.Do(func() {
		var errs []error
		for _, l := range r.links {
			if err := l.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		r.links = nil
		if err := r.objs.Close(); err != nil {
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			r.closeErr = fmt.Errorf("redirect: close %q: %w", r.cgroup, err)
		}
	})
	return r.closeErr
}

// Stats are the programs' counters since Attach.
type Stats struct {
	Redirected      uint64 // connections (and UDP sockets) sent to the outbound port
	DNSRedirected   uint64 // to the DNS proxy
	Excluded        uint64 // would have been redirected, but the sidecar's (uid or mark)
	OrigDstAnswered uint64 // SO_ORIGINAL_DST answered
	OrigDstMissed   uint64 // SO_ORIGINAL_DST asked for a connection with no entry
	SaveFailed      uint64 // original destination not saved (map update failed)
}

// Stats sums the per-CPU counters.
func (r *Redirect) Stats() (Stats, error) {
	var s Stats
	for k, f := range map[bpf.RedirectStat]*uint64{
		bpf.RedirectStatSTAT_REDIRECTED:       &s.Redirected,
		bpf.RedirectStatSTAT_DNS_REDIRECTED:   &s.DNSRedirected,
		bpf.RedirectStatSTAT_EXCLUDED:         &s.Excluded,
		bpf.RedirectStatSTAT_ORIGDST_ANSWERED: &s.OrigDstAnswered,
		bpf.RedirectStatSTAT_ORIGDST_MISSED:   &s.OrigDstMissed,
		bpf.RedirectStatSTAT_SAVE_FAILED:      &s.SaveFailed,
	} {
		var per []uint64
		if err := r.objs.Stats.Lookup(k, &per); err != nil {
			return Stats{}, fmt.Errorf("redirect: read stats: %w", err)
		}
		for _, v := range per {
			*f += v
		}
	}
	return s, nil
}

// htons is a port in network order, as the programs compare it.
func htons(p uint16) uint16 { return p<<8 | p>>8 }

// nativeFromBE is the uint32 whose little-endian memory is a (the object is
// built for little-endian targets only).
func nativeFromBE(a [4]byte) uint32 {
	return uint32(a[0]) | uint32(a[1])<<8 | uint32(a[2])<<16 | uint32(a[3])<<24
}
