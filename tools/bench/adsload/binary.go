package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/weft-mesh/weft/sidecar/xdsclient"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"

	"github.com/weft-mesh/weft/bootstrap/leds"
	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/node/envoynode"
	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/certs/ca"
	"github.com/weft-mesh/weft/certs/spiffe"
	"github.com/weft-mesh/weft/internal/edkey"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// The -stack=binary load test: the real bin/pilot process, N simulated Weft
// sidecars each on its own TCP connection (its own 127.x source address) with
// mTLS, E of them registered as endpoints of one Service ("big"). Certificates
// come from a test CA the bench creates (certs/ca, as pilot's own) and hands
// pilot as a plugged-in CA (--ca-root-cert/--ca-root-key): pilot verifies every
// client certificate against it as it would one it issued through the CSR
// service, without 10,000 CSRs before the measurement.

const (
	benchNS     = "bench"
	bigService  = "big"
	trustDomain = "cluster.local"
)

type binConfig struct {
	pilotBin  string
	proxies   int // simulated sidecars
	endpoints int // of them registered as endpoints of the big Service
	services  int // other Services (2 static Workloads each)
	rounds    int // measured endpoint changes
	conc      int // clients connecting at once
	verify    int // clients that decode every resource and check the change's content
	pilotArgs []string
	// replicas > 1: that many pilots on one etcd (a single member started by
	// the bench, etcdBin) sharing the CA root, token key and publisher key
	// from files; sidecar i connects to replica i % replicas.
	replicas int
	etcdBin  string
	// noLEDS: the sidecars do not advertise node.FeatureLEDS and get the
	// big Service's whole assignment on every change (the form before LEDS).
	noLEDS bool
	// profile: a directory to write each replica's CPU profile over the
	// measured rounds and its allocations before and after them into
	// (pilot runs with --admin-pprof; the pilot binary must have the flag).
	profile string
	log     io.Writer
}

type binResult struct {
	cfg                       binConfig
	connectWatchers, joinTime time.Duration
	joinPushes                []int64 // per watcher: EDS updates of the big Service while the endpoints joined
	rounds                    []roundResult
	rssIdle, rssConnected     int64
	rssJoined, rssEnd, hwm    int64 // over all replicas
	// Go heap and stacks in use and goroutines once all joined, over all
	// replicas (go_memstats_*, go_goroutines on their /metrics).
	heapJoined, stackJoined, goroutinesJoined int64
	maxSampledRSS                             int64
	replicaHWM                                []int64
	bytesPerChange                            float64
	restarts                                  int64 // streams restarted over all sidecars
	notCurrent                                int   // pilot's "no snapshot current ... within the wait" warnings
	lastRestartErr                            string
}

type roundResult struct {
	p50, p99, max time.Duration
	// CPU seconds pilot and this bench (the 10,000 clients: TLS, gRPC) used
	// from the write until the change reached every sidecar, and the
	// machine's 1-minute load average then: on a shared machine the
	// latency is mostly waiting for a core.
	pilotCPU, benchCPU float64
	load               string
	// pilotGCs is how many GC cycles pilot ran meanwhile, all replicas together
	// (go_gc_duration_seconds_count on their /metrics): with ~1 GB of heap at 10,000 sidecars, a cycle costs
	// pilot most of a second of CPU and shows as the slow round.
	pilotGCs int64
	// pushes is what pilot sent meanwhile, by type, all replicas together.
	pushes pushSample
}

// metrics reads pilot's /metrics samples: "name{labels}" -> value (nil
// when it cannot be read).
func (p *pilotProc) metrics() map[string]float64 {
	resp, err := p.hc.Get(p.admin + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		i := strings.LastIndexByte(l, ' ')
		if strings.HasPrefix(l, "#") || i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
			out[l[:i]] = v
		}
	}
	return out
}

// pushSample is what pilot counted of its responses by xDS type
// (weft_pilot_xds_pushes_total, weft_pilot_xds_push_bytes_total).
type pushSample map[string]struct{ n, bytes float64 }

func pushesOf(m map[string]float64) pushSample {
	out := pushSample{}
	for k, v := range m {
		for _, f := range []struct {
			prefix string
			bytes  bool
		}{{`weft_pilot_xds_pushes_total{type="`, false}, {`weft_pilot_xds_push_bytes_total{type="`, true}} {
			if typ, ok := strings.CutPrefix(k, f.prefix); ok {
				typ = strings.TrimSuffix(typ, `"}`)
				e := out[typ]
				if f.bytes {
					e.bytes += v
				} else {
					e.n += v
				}
				out[typ] = e
			}
		}
	}
	return out
}

// minus is s - base, per type, dropping types with nothing sent.
func (s pushSample) minus(base pushSample) pushSample {
	out := pushSample{}
	for typ, e := range s {
		e.n -= base[typ].n
		e.bytes -= base[typ].bytes
		if e.n > 0 {
			out[typ] = e
		}
	}
	return out
}

func (s pushSample) String() string {
	typs := make([]string, 0, len(s))
	for t := range s {
		typs = append(typs, t)
	}
	sort.Strings(typs)
	var b strings.Builder
	for i, t := range typs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.0f (%.0f B each)", t, s[t].n, s[t].bytes/s[t].n)
	}
	return b.String()
}

// cpuSeconds is utime+stime of pid ("self" for this process) from /proc.
func cpuSeconds(pid string) float64 {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces): state is [0],
	// utime [11], stime [12], in clock ticks (USER_HZ, 100 on Linux).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

// bigCluster is the outbound cluster (and EDS resource) of the big Service.
var bigCluster = clusterName(bigService)

// sidecar is one simulated Weft sidecar.
type sidecar struct {
	idx      int
	id       string
	endpoint bool // registers as an endpoint of the big Service
	verify   bool // decodes the big assignment and checks it
	m        *binMeasure

	conn   *grpc.ClientConn
	leds   bool // advertises node.FeatureLEDS: the big Service's endpoints come as LbEndpoint resources
	bytes  atomic.Int64
	ready  chan struct{} // closed once every type was received
	seen   int           // types received (owner: the recv goroutine)
	pend   bool          // the big assignment changed; the manifest covering it is still to come (recv goroutine)
	bigVer atomic.Pointer[string]
	// big is the big Service's endpoint set from LbEndpoint adds and removes
	// (LEDS; owner: the recv goroutine): name -> address, the address only
	// for verify clients, which decode each LbEndpoint.
	big      map[string]string
	bigCount atomic.Int64 // len(big)
	pushes   atomic.Int64 // updates of the big assignment received
	ackAt    atomic.Int64 // unix nanos: ACK of the manifest after the latest big update
	restarts atomic.Int64 // streams that ended and were opened again
	lastErr  atomic.Pointer[error]
	// verify clients only
	epCount atomic.Int64
	hasAddr atomic.Pointer[string] // the big assignment holds this static address
}

type binMeasure struct {
	target atomic.Pointer[string] // address of the static endpoint the round sets
}

// maxRestarts bounds one sidecar's stream restarts before the run fails.
const maxRestarts = 5

func sourceAddr(i int) net.IP { return net.IPv4(127, byte(1+i/62500), byte(i/250%250), byte(i%250+1)) }

// nodeFor is the sidecar's node metadata, as bootstrap/render makes it.
func (c *sidecar) nodeFor() *corev3.Node {
	sa, labels := "client", map[string]string{"app": "loadclient"}
	if c.endpoint {
		sa, labels = bigService, map[string]string{"app": bigService}
	}
	return envoynode.ToProto(&node.Node{ID: c.id, Namespace: benchNS, ServiceAccount: sa, Labels: labels,
		Address: fmt.Sprintf("10.%d.%d.%d", 100+c.idx/62500, c.idx/250%250, c.idx%250+1), InboundPort: 15006, LEDS: c.leds})
}

func (c *sidecar) run(ctx context.Context) error {
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return err
	}
	for i, t := range snapshot.PushOrder {
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t, ResourceNamesSubscribe: []string{"*"}}
		if i == 0 {
			req.Node = c.nodeFor()
		}
		if err := s.Send(req); err != nil {
			return err
		}
	}
	c.big = map[string]string{} // a new stream's wildcard sends the whole set again
	c.bigCount.Store(0)
	for {
		r, err := s.Recv()
		if err != nil {
			return err
		}
		if r.TypeUrl == snapshot.LbEndpointType {
			if err := c.takeLEDS(r); err != nil {
				return err
			}
		}
		if r.TypeUrl == snapshot.EndpointType && !c.leds {
			for _, res := range r.Resources {
				if res.Name != bigCluster {
					continue
				}
				v := res.Version
				c.bigVer.Store(&v)
				c.pushes.Add(1)
				c.pend = true
				if c.verify {
					if err := c.check(res); err != nil {
						return err
					}
				}
			}
		}
		if err := s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce}); err != nil {
			return err
		}
		if r.TypeUrl == snapshot.ManifestType && c.pend {
			c.pend = false
			c.ackAt.Store(time.Now().UnixNano())
		}
		if c.seen < len(snapshot.PushOrder) {
			c.seen++ // every type is answered once at the start, wildcard even when empty
			if c.seen == len(snapshot.PushOrder) {
				close(c.ready)
			}
		}
	}
}

// bigPrefix is what the name of every LbEndpoint of the big Service starts
// with, whatever its locality.
var bigPrefix = leds.CollectionPrefix(bigCluster)

// takeLEDS applies a LEDS response to the big Service's endpoint set: a
// change is any add or remove in its collections (verify clients decode each
// LbEndpoint and check the count and the round's address).
func (c *sidecar) takeLEDS(r *discoveryv3.DeltaDiscoveryResponse) error {
	changed := false
	for _, res := range r.Resources {
		if !strings.HasPrefix(res.Name, bigPrefix) {
			continue
		}
		changed = true
		addr := ""
		if c.verify {
			var ep endpointv3.LbEndpoint
			if err := res.GetResource().UnmarshalTo(&ep); err != nil {
				return fmt.Errorf("decode %s: %w", res.Name, err)
			}
			addr = ep.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
		}
		c.big[res.Name] = addr
	}
	for _, n := range r.RemovedResources {
		if strings.HasPrefix(n, bigPrefix) {
			changed = true
			delete(c.big, n)
		}
	}
	if !changed {
		return nil
	}
	v := r.Nonce // the set's version as this stream saw it change
	c.bigVer.Store(&v)
	c.pushes.Add(1)
	c.pend = true
	c.bigCount.Store(int64(len(c.big)))
	if c.verify {
		target := *c.m.target.Load()
		found := ""
		for _, a := range c.big {
			if a == target {
				found = target
			}
		}
		c.epCount.Store(int64(len(c.big)))
		c.hasAddr.Store(&found)
	}
	return nil
}

// check decodes the big assignment (verify clients): endpoints, and whether
// the round's static address is in it.
func (c *sidecar) check(res *discoveryv3.Resource) error {
	var cla endpointv3.ClusterLoadAssignment
	if err := res.GetResource().UnmarshalTo(&cla); err != nil {
		return fmt.Errorf("decode %s: %w", bigCluster, err)
	}
	n := 0
	target := *c.m.target.Load()
	found := ""
	for _, l := range cla.Endpoints {
		for _, e := range l.LbEndpoints {
			n++
			if e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress() == target {
				found = target
			}
		}
	}
	c.epCount.Store(int64(n))
	c.hasAddr.Store(&found)
	return nil
}

// raiseNoFile lifts this process's open-file limit to its hard limit (the
// pilot child inherits it) and checks it covers need.
func raiseNoFile(need int) error {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return err
	}
	r.Cur = r.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", r.Max, err)
	}
	if r.Cur < uint64(need) {
		return fmt.Errorf("RLIMIT_NOFILE hard limit %d is below the %d descriptors this run needs (raise it: ulimit -Hn)", r.Max, need)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// pilotProc is the bin/pilot child.
type pilotProc struct {
	cmd      *exec.Cmd
	admin    string // http://127.0.0.1:port
	tlsAddr  string
	logPath  string
	exited   chan struct{}
	hc       *http.Client
	hwmMu    sync.Mutex
	maxRSS   int64
	stopSamp chan struct{}
	sampDone chan struct{}
}

func startBinaryPilot(ctx context.Context, bin, dir string, caDir string, extra []string) (*pilotProc, error) {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	p := &pilotProc{admin: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), tlsAddr: fmt.Sprintf("127.0.0.1:%d", ports[2]),
		logPath: filepath.Join(dir, "pilot.log"), exited: make(chan struct{}), hc: &http.Client{Timeout: time.Minute},
		stopSamp: make(chan struct{}), sampDone: make(chan struct{})}
	args := append([]string{"--data-dir", filepath.Join(dir, "pilot"),
		"--admin-addr", fmt.Sprintf("127.0.0.1:%d", ports[0]), "--xds-addr", fmt.Sprintf("127.0.0.1:%d", ports[1]), "--xds-tls-addr", p.tlsAddr,
		"--webhook-addr", "off", "--log-level", "warn",
		"--ca-root-cert", filepath.Join(caDir, ca.RootFile), "--ca-root-key", filepath.Join(caDir, ca.RootKeyFile)}, extra...)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	logf, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives the bench
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { _ = p.cmd.Wait(); logf.Close(); close(p.exited) }()
	go p.sample()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := p.hc.Get(p.admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("pilot exited at start: %s", p.logTail())
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("pilot not healthy within a minute: %s", p.logTail())
		}
	}
}

func (p *pilotProc) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func (p *pilotProc) stop() {
	close(p.stopSamp)
	<-p.sampDone
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// status reads pilot's /proc status fields in bytes (VmRSS, VmHWM).
func (p *pilotProc) status() (rss, hwm int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	return rss, hwm
}

// sample records the highest RSS seen every 100ms (VmHWM is the kernel's own
// peak; both are reported).
func (p *pilotProc) sample() {
	defer close(p.sampDone)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stopSamp:
			return
		case <-p.exited:
			return
		case <-t.C:
			if rss, _ := p.status(); rss > 0 {
				p.hwmMu.Lock()
				p.maxRSS = max(p.maxRSS, rss)
				p.hwmMu.Unlock()
			}
		}
	}
}

func (p *pilotProc) apply(yaml string) (int64, error) { return applyYAML(p.hc, p.admin, yaml) }

type revInfo struct {
	Revision  int64      `json:"revision"`
	WrittenAt *time.Time `json:"writtenAt"`
	Connected int        `json:"connected"`
	Converged bool       `json:"converged"`
}

func (p *pilotProc) revision(rev string) (revInfo, error) {
	var ri revInfo
	resp, err := p.hc.Get(p.admin + "/apis/status/v1/revisions/" + rev)
	if err != nil {
		return ri, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return ri, fmt.Errorf("revision %s: %s: %s", rev, resp.Status, bytes.TrimSpace(b))
	}
	return ri, json.NewDecoder(resp.Body).Decode(&ri)
}

// waitFor polls cond every 50ms until it holds or d passes.
// Every 30s it says on progress what it still waits for.
func waitFor(ctx context.Context, d time.Duration, what string, progress io.Writer, cond func() error) error {
	start := time.Now()
	deadline, next := start.Add(d), start.Add(30*time.Second)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if now := time.Now(); progress != nil && now.After(next) {
			fmt.Fprintf(progress, "adsload: %s: still waiting after %v: %v\n", what, now.Sub(start).Round(time.Second), err)
			next = now.Add(30 * time.Second)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v: %w", what, d, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// identities mints the sidecars' certificates from the test CA: one key
// (generating 10,000 would only time the bench), a certificate per sidecar.
type identities struct {
	ca     *ca.CA
	key    *ecdsa.PrivateKey
	bundle *bundle.Bundle
	pilot  string
}

func newIdentities(dir string) (*identities, error) {
	c, err := ca.Open(ca.Config{Dir: dir, TrustDomain: trustDomain})
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	pid, err := spiffe.Pilot(trustDomain)
	if err != nil {
		return nil, err
	}
	return &identities{ca: c, key: key, bundle: c.Bundle(), pilot: pid.String()}, nil
}

func (ids *identities) creds(sa string) (credentials.TransportCredentials, error) {
	id, err := spiffe.Workload(trustDomain, benchNS, sa)
	if err != nil {
		return nil, err
	}
	chain, err := ids.ca.SignKey(&ids.key.PublicKey, id, nil, nil, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	cert := tls.Certificate{PrivateKey: ids.key, Leaf: chain[0]}
	for _, c := range chain {
		cert.Certificate = append(cert.Certificate, c.Raw)
	}
	return credentials.NewTLS(&tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		// Pilot is verified by its SPIFFE ID against the bundle, not by name.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			certs := make([]*x509.Certificate, 0, len(raw))
			for _, r := range raw {
				c, err := x509.ParseCertificate(r)
				if err != nil {
					return err
				}
				certs = append(certs, c)
			}
			got, err := ids.bundle.Verify(certs, time.Now())
			if err != nil {
				return err
			}
			if got.String() != ids.pilot {
				return fmt.Errorf("pilot presented %s, want %s", got, ids.pilot)
			}
			return nil
		},
	}), nil
}

// fleet of sidecars on their own connections.
type binFleet struct {
	clients []*sidecar
	wg      sync.WaitGroup
	cancel  context.CancelFunc
	ctx     context.Context
	errs    chan error
}

func newBinFleet() *binFleet {
	ctx, cancel := context.WithCancel(context.Background())
	return &binFleet{ctx: ctx, cancel: cancel, errs: make(chan error, 64)}
}

func (f *binFleet) stop() {
	f.cancel()
	f.wg.Wait()
	for _, c := range f.clients {
		if c.conn != nil {
			c.conn.Close()
		}
	}
}

// connect starts clients from..to (in order, conc at a time: each slot is held
// until the client has every type) and waits until all are in sync.
func (f *binFleet) connect(ctx context.Context, addrs []string, ids *identities, m *binMeasure, from, to, conc, verify int, endpoint, withLEDS bool) error {
	sem := make(chan struct{}, conc)
	var batch []*sidecar
	for i := from; i < to; i++ {
		c := &sidecar{idx: i, id: fmt.Sprintf("sidecar-%05d", i), endpoint: endpoint, verify: i-from < verify, m: m, ready: make(chan struct{}), leds: withLEDS}
		sa := "client"
		if endpoint {
			sa = bigService
		}
		creds, err := ids.creds(sa)
		if err != nil {
			return err
		}
		src := sourceAddr(i)
		dial := func(ctx context.Context, a string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}}
			return d.DialContext(ctx, "tcp", a)
		}
		opts := []grpc.DialOption{grpc.WithTransportCredentials(creds), grpc.WithContextDialer(dial),
			grpc.WithReadBufferSize(16 << 10), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
			// A TLS handshake may wait on a busy pilot longer than gRPC's 20s default.
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: 2 * time.Minute})}
		// The windows a Weft sidecar dials pilot with.
		opts = append(opts, xdsclient.WindowOptions()...)
		if !c.verify {
			opts = append(opts, grpc.WithDefaultCallOptions(grpc.ForceCodecV2(lightCodec{bytes: &c.bytes})))
		}
		conn, err := grpc.NewClient("passthrough:///"+addrs[i%len(addrs)], opts...)
		if err != nil {
			return err
		}
		c.conn = conn
		f.clients = append(f.clients, c)
		batch = append(batch, c)
		select {
		case sem <- struct{}{}:
		case err := <-f.errs:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			// As a sidecar does: a stream that ends is opened again (gRPC
			// redials), after a jittered second; the bench reports how often.
			for {
				err := c.run(f.ctx)
				if f.ctx.Err() != nil {
					return
				}
				if n := c.restarts.Add(1); n > maxRestarts {
					select {
					case f.errs <- fmt.Errorf("sidecar %s: stream ended %d times, last: %w", c.id, n, err):
					default:
					}
					return
				}
				c.lastErr.Store(&err)
				select {
				case <-f.ctx.Done():
					return
				case <-time.After(time.Second + time.Duration(c.idx%1000)*time.Millisecond):
				}
			}
		}()
		go func() {
			select {
			case <-c.ready:
			case <-f.ctx.Done():
			}
			<-sem
		}()
	}
	for _, c := range batch {
		select {
		case <-c.ready:
		case err := <-f.errs:
			return err
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s's first sync: %w", c.id, ctx.Err())
		}
	}
	return nil
}

func staticYAML(addr string) string {
	return fmt.Sprintf(`apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: big-static, namespace: %s, labels: {app: %s}}
spec: {address: %s, serviceAccount: %s}
`, benchNS, bigService, addr, bigService)
}

func runBinary(ctx context.Context, cfg binConfig) (*binResult, error) {
	res := &binResult{cfg: cfg}
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.log, "adsload: "+format+"\n", a...) }
	if err := raiseNoFile(cfg.proxies + 1024); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "adsload-binary-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ids, err := newIdentities(filepath.Join(dir, "testca"))
	if err != nil {
		return nil, fmt.Errorf("test CA: %w", err)
	}
	replicas := max(cfg.replicas, 1)
	extra := cfg.pilotArgs
	if cfg.profile != "" {
		extra = append([]string{"--admin-pprof"}, extra...)
	}
	if replicas > 1 {
		etcdURL, stopEtcd, err := startEtcd(ctx, cfg.etcdBin, filepath.Join(dir, "etcd"))
		if err != nil {
			return nil, err
		}
		defer stopEtcd()
		tokenKey, pubKey := filepath.Join(dir, "token.key"), filepath.Join(dir, "publisher.key")
		for _, f := range []string{tokenKey, pubKey} {
			if _, _, err := edkey.LoadOrCreate(f, "shared key"); err != nil {
				return nil, err
			}
		}
		extra = append([]string{"--store", "etcd", "--etcd-endpoints", etcdURL, "--ca-token-key", tokenKey, "--publisher-key-file", pubKey}, extra...)
	}
	var ps []*pilotProc
	defer func() {
		for _, p := range ps {
			p.stop()
		}
	}()
	for i := range replicas {
		p, err := startBinaryPilot(ctx, cfg.pilotBin, filepath.Join(dir, fmt.Sprintf("replica-%d", i)), filepath.Join(dir, "testca"), extra)
		if err != nil {
			return nil, fmt.Errorf("replica %d: %w", i, err)
		}
		ps = append(ps, p)
	}
	p := ps[0] // the mesh is applied through it; every replica serves it from the store
	rssAll := func() (rss int64) {
		for _, p := range ps {
			r, _ := p.status()
			rss += r
		}
		return rss
	}
	tlsAddrs := make([]string, len(ps))
	for i, p := range ps {
		tlsAddrs[i] = p.tlsAddr
	}

	var seed strings.Builder
	fmt.Fprintf(&seed, "---\n%s", serviceYAML(bigService))
	for i := range cfg.services {
		svc := svcName(i)
		fmt.Fprintf(&seed, "---\n%s", serviceYAML(svc))
		for j := range 2 {
			fmt.Fprintf(&seed, "---\n%s", workloadYAML(svc, j, fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1)))
		}
	}
	seeded, err := p.apply(seed.String())
	if err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}
	for i, p := range ps {
		if err := waitFor(ctx, time.Minute, fmt.Sprintf("seed compiled by replica %d", i), cfg.log, func() error {
			ri, err := p.revision("latest")
			if err == nil && ri.Revision < seeded {
				err = fmt.Errorf("latest compiled revision %d < %d", ri.Revision, seeded)
			}
			return err
		}); err != nil {
			return nil, err
		}
	}
	res.rssIdle = rssAll()

	m := &binMeasure{}
	none := ""
	m.target.Store(&none)
	f := newBinFleet()
	defer f.stop()
	watchers := cfg.proxies - cfg.endpoints
	start := time.Now()
	logf("connecting %d sidecars that are endpoints of nothing (%d at once)", watchers, cfg.conc)
	if err := f.connect(ctx, tlsAddrs, ids, m, 0, watchers, cfg.conc, cfg.verify, false, !cfg.noLEDS); err != nil {
		return nil, fmt.Errorf("connect: %w (pilot log: %s)", err, p.logTail())
	}
	res.connectWatchers = time.Since(start)
	res.rssConnected = rssAll()

	// The endpoints join; the watchers count the big assignment's updates.
	before := make([]int64, watchers)
	for i, c := range f.clients[:watchers] {
		before[i] = c.pushes.Load()
	}
	start = time.Now()
	logf("registering %d sidecars as endpoints of %s", cfg.endpoints, bigService)
	if err := f.connect(ctx, tlsAddrs, ids, m, watchers, cfg.proxies, cfg.conc, 0, true, !cfg.noLEDS); err != nil {
		return nil, fmt.Errorf("join: %w (pilot log: %s)", err, p.logTail())
	}
	// Replicas share registrations through the store (pilot/xds/regshare), so
	// every watcher's assignment holds every registered sidecar whichever
	// replica it is connected to.
	want := int64(cfg.proxies - watchers)
	if err := waitFor(ctx, 10*time.Minute, "every endpoint in every watcher's assignment", cfg.log, func() error {
		for _, c := range f.clients[:min(cfg.verify, watchers)] {
			if n := c.epCount.Load(); n != want {
				return fmt.Errorf("%s holds %d endpoints of %s, want %d", c.id, n, bigService, want)
			}
		}
		if !cfg.noLEDS {
			// Each stream names its own versions (nonces): every sidecar
			// holds the whole set instead.
			for _, c := range f.clients {
				if n := c.bigCount.Load(); n != want {
					return fmt.Errorf("%s holds %d LbEndpoints of %s, want %d", c.id, n, bigService, want)
				}
			}
			return nil
		}
		for r := range replicas {
			var group []*sidecar
			for _, c := range f.clients {
				if c.idx%replicas == r {
					group = append(group, c)
				}
			}
			if err := sameBigVersion(group); err != nil {
				return fmt.Errorf("replica %d: %w", r, err)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	res.joinTime = time.Since(start)
	for i, c := range f.clients[:watchers] {
		res.joinPushes = append(res.joinPushes, c.pushes.Load()-before[i])
	}
	res.rssJoined = rssAll()
	for _, p := range ps {
		m := p.metrics()
		res.heapJoined += int64(m["go_memstats_heap_inuse_bytes"])
		res.stackJoined += int64(m["go_memstats_stack_inuse_bytes"])
		res.goroutinesJoined += int64(m["go_goroutines"])
	}

	stopProfiles := func() error { return nil }
	if cfg.profile != "" {
		if stopProfiles, err = startProfiles(ps, cfg.profile); err != nil {
			return nil, err
		}
	}
	var bytesTotal int64
	for r := range cfg.rounds {
		addr := fmt.Sprintf("10.250.0.%d", r+1)
		m.target.Store(&addr)
		prev := make([]string, len(f.clients))
		for i, c := range f.clients {
			prev[i] = *c.bigVer.Load()
			c.ackAt.Store(0)
			c.bytes.Store(0)
		}
		pilotsCPU := func() (s float64) {
			for _, p := range ps {
				s += cpuSeconds(strconv.Itoa(p.cmd.Process.Pid))
			}
			return s
		}
		pilotsMetrics := func() (gcs int64, pushes pushSample) {
			pushes = pushSample{}
			for _, p := range ps {
				m := p.metrics()
				gcs += int64(m["go_gc_duration_seconds_count"])
				for typ, e := range pushesOf(m) {
					t := pushes[typ]
					t.n, t.bytes = t.n+e.n, t.bytes+e.bytes
					pushes[typ] = t
				}
			}
			return gcs, pushes
		}
		pilotCPU0, benchCPU0, load := pilotsCPU(), cpuSeconds("self"), loadAvg()
		gc0, pushes0 := pilotsMetrics()
		rev, err := p.apply(staticYAML(addr))
		if err != nil {
			return nil, fmt.Errorf("round %d: %w", r+1, err)
		}
		if err := waitFor(ctx, 10*time.Minute, fmt.Sprintf("round %d reaching every sidecar", r+1), cfg.log, func() error {
			for i, c := range f.clients {
				if *c.bigVer.Load() == prev[i] || c.ackAt.Load() == 0 {
					return fmt.Errorf("%s has not taken the change yet", c.id)
				}
			}
			for _, c := range f.clients[:min(cfg.verify, watchers)] {
				if h := c.hasAddr.Load(); h == nil || *h != addr {
					return fmt.Errorf("verify client %s: the assignment does not hold %s", c.id, addr)
				}
				// The registered sidecars and the static endpoint, moved.
				if n := c.epCount.Load(); n != want+1 {
					return fmt.Errorf("verify client %s holds %d endpoints of %s, want %d", c.id, n, bigService, want+1)
				}
			}
			return nil
		}); err != nil {
			return nil, err
		}
		pilotCPU, benchCPU := pilotsCPU()-pilotCPU0, cpuSeconds("self")-benchCPU0
		gcs, pushes := pilotsMetrics()
		gcs -= gc0
		// Asked once the change is everywhere: each answer walks every proxy's
		// status in pilot, which would compete with the push it measures.
		var written time.Time
		if err := waitFor(ctx, time.Minute, "write time of the change", cfg.log, func() error {
			ri, err := p.revision(strconv.FormatInt(rev, 10))
			if err == nil && ri.WrittenAt == nil {
				err = errors.New("no writtenAt yet")
			}
			if err == nil {
				written = *ri.WrittenAt
			}
			return err
		}); err != nil {
			return nil, err
		}
		lat := make([]time.Duration, len(f.clients))
		for i, c := range f.clients {
			lat[i] = time.Duration(c.ackAt.Load() - written.UnixNano())
			bytesTotal += c.bytes.Load()
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		rr := roundResult{p50: lat[len(lat)/2], p99: lat[len(lat)*99/100], max: lat[len(lat)-1], pilotCPU: pilotCPU, benchCPU: benchCPU, load: load, pilotGCs: gcs, pushes: pushes.minus(pushes0)}
		res.rounds = append(res.rounds, rr)
		logf("round %d: change at revision %d reached all %d sidecars: p50=%v p99=%v max=%v", r+1, rev, len(f.clients),
			rr.p50.Round(time.Millisecond), rr.p99.Round(time.Millisecond), rr.max.Round(time.Millisecond))
		for i, p := range ps {
			if err := waitFor(ctx, 5*time.Minute, fmt.Sprintf("replica %d converged", i), cfg.log, func() error {
				ri, err := p.revision(strconv.FormatInt(rev, 10))
				if err == nil && !ri.Converged {
					err = fmt.Errorf("revision %d not converged: %+v", rev, ri)
				}
				return err
			}); err != nil {
				return nil, err
			}
		}
	}
	if err := stopProfiles(); err != nil {
		return nil, err
	}
	light := 0
	for _, c := range f.clients {
		if !c.verify {
			light++
		}
	}
	if cfg.rounds > 0 && light > 0 {
		res.bytesPerChange = float64(bytesTotal) / float64(cfg.rounds) / float64(light)
	}
	for _, c := range f.clients {
		res.restarts += c.restarts.Load()
		if e := c.lastErr.Load(); e != nil {
			res.lastRestartErr = (*e).Error()
		}
	}
	for _, p := range ps {
		if b, err := os.ReadFile(p.logPath); err == nil {
			res.notCurrent += bytes.Count(b, []byte("no snapshot current for the proxy within the wait"))
		}
		rss, hwm := p.status()
		res.rssEnd, res.hwm = res.rssEnd+rss, res.hwm+hwm
		res.replicaHWM = append(res.replicaHWM, hwm)
		p.hwmMu.Lock()
		res.maxSampledRSS += p.maxRSS
		p.hwmMu.Unlock()
	}
	return res, nil
}

func sameBigVersion(cs []*sidecar) error {
	var v string
	for i, c := range cs {
		got := c.bigVer.Load()
		if got == nil {
			return fmt.Errorf("%s has no %s", c.id, bigCluster)
		}
		if i == 0 {
			v = *got
		} else if *got != v {
			return fmt.Errorf("%s holds %s version %s, %s holds %s", c.id, bigCluster, *got, cs[0].id, v)
		}
	}
	return nil
}

func medianDur(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func (r *binResult) print(w io.Writer) {
	c := r.cfg
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	store := "bolt (one pilot)"
	if c.replicas > 1 {
		store = fmt.Sprintf("etcd (%d pilot replicas, sidecars split evenly)", c.replicas)
	}
	fmt.Fprintf(w, "adsload stack=binary (%s) store=%s sidecars=%d (each its own TCP connection, mTLS) endpoints-of-one-Service=%d other-services=%d rounds=%d\n",
		c.pilotBin, store, c.proxies, c.endpoints, c.services, len(r.rounds))
	fmt.Fprintf(w, "  connect+first sync of %d non-endpoint sidecars: %v\n", c.proxies-c.endpoints, r.connectWatchers.Round(time.Millisecond))
	jp := append([]int64(nil), r.joinPushes...)
	sort.Slice(jp, func(i, j int) bool { return jp[i] < jp[j] })
	if len(jp) > 0 {
		fmt.Fprintf(w, "  %d endpoints joined in %v: the big assignment was pushed to each other sidecar p50=%d max=%d times\n",
			c.endpoints, r.joinTime.Round(time.Millisecond), jp[len(jp)/2], jp[len(jp)-1])
	}
	fmt.Fprintf(w, "  streams restarted: %d (last error: %q); sidecars pilot served a not-current snapshot after --xds-current-wait: %d\n",
		r.restarts, r.lastRestartErr, r.notCurrent)
	var p50s, p99s, maxs []time.Duration
	for i, rr := range r.rounds {
		fmt.Fprintf(w, "  round %d: one endpoint change -> every sidecar's ACK (manifest included): p50=%v p99=%v max=%v; CPU until then: pilot %.2fs, bench clients %.2fs; pilot GC cycles %d; load average %s\n", i+1,
			rr.p50.Round(time.Millisecond), rr.p99.Round(time.Millisecond), rr.max.Round(time.Millisecond), rr.pilotCPU, rr.benchCPU, rr.pilotGCs, rr.load)
		fmt.Fprintf(w, "    pilot sent meanwhile: %v\n", rr.pushes)
		p50s, p99s, maxs = append(p50s, rr.p50), append(p99s, rr.p99), append(maxs, rr.max)
	}
	if len(r.rounds) > 0 {
		fmt.Fprintf(w, "  median of %d rounds: p50=%v p99=%v max=%v; %.0f B received per sidecar per change\n", len(r.rounds),
			medianDur(p50s).Round(time.Millisecond), medianDur(p99s).Round(time.Millisecond), medianDur(maxs).Round(time.Millisecond), r.bytesPerChange)
	}
	fmt.Fprintf(w, "  pilot RSS: idle %.1f MiB, %d connected %.1f MiB, all joined %.1f MiB, end %.1f MiB\n",
		mib(r.rssIdle), c.proxies-c.endpoints, mib(r.rssConnected), mib(r.rssJoined), mib(r.rssEnd))
	fmt.Fprintf(w, "  pilot once all joined: Go heap in use %.1f MiB, stacks %.1f MiB, %d goroutines\n", mib(r.heapJoined), mib(r.stackJoined), r.goroutinesJoined)
	fmt.Fprintf(w, "  pilot peak RSS: VmHWM %.1f MiB (sampled max %.1f MiB): %.1f KiB per sidecar (goal <= 256 KiB)\n",
		mib(r.hwm), mib(r.maxSampledRSS), float64(r.hwm)/float64(c.proxies)/1024)
	if len(r.replicaHWM) > 1 {
		for i, h := range r.replicaHWM {
			fmt.Fprintf(w, "    replica %d: VmHWM %.1f MiB\n", i, mib(h))
		}
	}
}

// startEtcd runs one etcd member (the apt etcd-server's binary) on loopback
// with its data in dir, for the replicas' store; stop kills it.
func startEtcd(ctx context.Context, bin, dir string) (url string, stop func(), err error) {
	var ports [2]int
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return "", nil, err
		}
	}
	client, peer := fmt.Sprintf("http://127.0.0.1:%d", ports[0]), fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "--name", "bench", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "bench="+peer)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	stop = func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	if err := waitFor(ctx, time.Minute, "etcd healthy", nil, func() error {
		select {
		case <-exited:
			return errors.New("etcd exited")
		default:
		}
		resp, err := hc.Get(client + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("etcd /health: %s", resp.Status)
		}
		return nil
	}); err != nil {
		stop()
		return "", nil, err
	}
	return client, stop, nil
}
