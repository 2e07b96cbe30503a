// Command adsload is pilot's ADS load test: N simulated delta-ADS clients (one
// goroutine and one stream each, over real gRPC on loopback) against a pilot
// child process (store + meshcache + status + ADS) serving S services. For each N
// it reports the time from one endpoint change (the store write) to each proxy's
// ACK (p50/p99/max), bytes sent per proxy for that change under delta and under
// SotW, and pilot RSS per connected proxy.
//
//	go run ./tools/bench/adsload -proxies 1000,10000 -services 1000
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/node/envoynode"
	"github.com/weft-mesh/weft/pilot/xds/gen"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

func main() {
	role := flag.String("role", "driver", "driver | pilot (internal: the child process)")
	stack := flag.String("stack", "real", "binary: the real bin/pilot process, sidecars on their own mTLS connections (see binary.go); real: the production pilot (server.Run + ServeADS: store, compile, gen, validation, signing, ADS); synth: store + meshcache + ADS with a synthetic compile/gen")
	proxies := flag.String("proxies", "1000,10000", "comma-separated client counts, one run each")
	services := flag.Int("services", 1000, "services in the mesh (2 endpoints each)")
	perConn := flag.Int("streams-per-conn", 10, "ADS streams sharing one gRPC connection")
	sotwN := flag.Int("sotw", 20, "SotW clients used to measure SotW bytes for the same kind of change")
	debounce := flag.Duration("debounce", 50*time.Millisecond, "meshcache debounce window (max delay is 10x)")
	conc := flag.Int("connect-concurrency", 200, "clients connecting at once")
	timeout := flag.Duration("timeout", 10*time.Minute, "bound on one run")
	sidecars := flag.Bool("sidecars", false, "delta clients register as Weft sidecars (node metadata; pilot validates, signs the content once per scope and a binding per node) and also take the manifest; -stack=real only")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of pilot during the measured delta change to FILE-<proxies>")
	pilotBin := flag.String("pilot-bin", "bin/pilot", "-stack=binary: the pilot binary (make build)")
	endpoints := flag.Int("endpoints", 2000, "-stack=binary: sidecars registered as endpoints of one Service")
	rounds := flag.Int("rounds", 5, "-stack=binary: measured endpoint changes")
	verify := flag.Int("verify", 3, "-stack=binary: sidecars that decode every resource and check the change's content")
	pilotArgs := flag.String("pilot-args", "", "-stack=binary: extra pilot flags, space-separated")
	replicas := flag.Int("replicas", 1, "-stack=binary: pilot replicas; above 1 they share one etcd (started by the bench) and the sidecars are split between them")
	noLEDS := flag.Bool("no-leds", false, "-stack=binary: the sidecars do not advertise weft.leds.v1 and get the big Service's whole assignment on every change (the form before LEDS)")
	etcdBin := flag.String("etcd-bin", "etcd", "-stack=binary with -replicas > 1: the etcd server binary (apt etcd-server)")
	profile := flag.String("profile", "", "-stack=binary: write pilot's CPU profile over the measured rounds and its allocations before and after them into this directory (cpu-<replica>.pprof, allocs-{before,after}-<replica>.pprof; needs a pilot with --admin-pprof)")
	flag.Parse()
	if *stack == "binary" {
		for _, s := range strings.Split(*proxies, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= *endpoints || *endpoints <= 0 {
				fmt.Fprintf(os.Stderr, "-proxies: %q is not a count above -endpoints %d\n", s, *endpoints)
				os.Exit(2)
			}
			ctx, cancel := context.WithTimeout(context.Background(), *timeout)
			r, err := runBinary(ctx, binConfig{pilotBin: *pilotBin, proxies: n, endpoints: *endpoints, services: *services, rounds: *rounds,
				conc: *conc, verify: *verify, pilotArgs: strings.Fields(*pilotArgs), replicas: *replicas, etcdBin: *etcdBin, noLEDS: *noLEDS, profile: *profile, log: os.Stderr})
			cancel()
			if err != nil {
				fmt.Fprintf(os.Stderr, "run with %d sidecars: %v\n", n, err)
				os.Exit(1)
			}
			r.print(os.Stdout)
		}
		return
	}
	if *sidecars && *stack != "real" {
		fmt.Fprintln(os.Stderr, "-sidecars needs -stack=real")
		os.Exit(2)
	}
	if *stack != "real" && *stack != "synth" {
		fmt.Fprintf(os.Stderr, "-stack: %q is not real or synth\n", *stack)
		os.Exit(2)
	}
	if *role == "pilot" {
		child := runPilot
		if *stack == "real" {
			child = runRealPilot
		}
		if err := child(pilotConfig{services: *services, debounce: *debounce}); err != nil {
			fmt.Fprintln(os.Stderr, "pilot:", err)
			os.Exit(1)
		}
		return
	}
	for _, s := range strings.Split(*proxies, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "-proxies: %q is not a positive count\n", s)
			os.Exit(2)
		}
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		r, err := run(ctx, runConfig{proxies: n, services: *services, perConn: *perConn, sotw: *sotwN, debounce: *debounce, conc: *conc, stack: *stack, cpuprofile: *cpuprofile, sidecars: *sidecars})
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "run with %d proxies: %v\n", n, err)
			os.Exit(1)
		}
		r.print(os.Stdout)
	}
}

type runConfig struct {
	proxies, services, perConn, sotw, conc int
	debounce                               time.Duration
	stack                                  string
	cpuprofile                             string
	sidecars                               bool
}

type result struct {
	cfg                   runConfig
	connectTime           time.Duration
	p50, p99, max         time.Duration
	serverConvergence     float64
	deltaBytes, sotwBytes float64
	manifestBytes         float64 // of deltaBytes, the signed manifest's responses (sidecars)
	rssBefore, rssAfter   int64
	rssFreed              int64 // after returning freed memory to the OS
	heapBefore, heapAfter int64
	goroutines            int
}

func (r result) print(w io.Writer) {
	perProxyRSS := float64(r.rssAfter-r.rssBefore) / float64(r.cfg.proxies)
	perProxyHeap := float64(r.heapAfter-r.heapBefore) / float64(r.cfg.proxies)
	kind := "plain xDS clients"
	if r.cfg.sidecars {
		kind = "Weft sidecars (signed manifest: content per scope, binding per node)"
	}
	fmt.Fprintf(w, "adsload %s stack=%s proxies=%d services=%d streams/conn=%d debounce=%v\n", kind, r.cfg.stack, r.cfg.proxies, r.cfg.services, r.cfg.perConn, r.cfg.debounce)
	fmt.Fprintf(w, "  connect+initial sync of all proxies: %v\n", r.connectTime.Round(time.Millisecond))
	fmt.Fprintf(w, "  endpoint change -> ACK (client side): p50=%v p99=%v max=%v; pilot-side last ACK %.3fs after the store write\n",
		r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.max.Round(time.Millisecond), r.serverConvergence)
	fmt.Fprintf(w, "  bytes per proxy for the change: delta=%.0f B, SotW=%.0f B, delta/SotW=%.3f%%\n", r.deltaBytes, r.sotwBytes, 100*r.deltaBytes/r.sotwBytes)
	if r.cfg.sidecars {
		fmt.Fprintf(w, "  of the delta bytes, the signed manifest: %.0f B per proxy\n", r.manifestBytes)
	}
	perProxyFreed := float64(r.rssFreed-r.rssBefore) / float64(r.cfg.proxies)
	fmt.Fprintf(w, "  pilot RSS %.1f MiB idle -> %.1f MiB after sync: %.1f KiB per proxy (includes garbage of the initial full sync)\n",
		float64(r.rssBefore)/(1<<20), float64(r.rssAfter)/(1<<20), perProxyRSS/1024)
	fmt.Fprintf(w, "  pilot RSS after GC + returning free pages: %.1f MiB: %.1f KiB per proxy; Go heap in use %.1f KiB per proxy; %d goroutines\n",
		float64(r.rssFreed)/(1<<20), perProxyFreed/1024, perProxyHeap/1024, r.goroutines)
}

// child is the pilot process.
type child struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	adsAddr  string
	httpBase string
}

func startPilot(cfg runConfig) (*child, error) {
	cmd := exec.Command(os.Args[0], "-role=pilot", "-stack", cfg.stack, "-services", strconv.Itoa(cfg.services), "-debounce", cfg.debounce.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 3 || f[0] != "READY" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("pilot child did not start: %q %v", line, err)
	}
	return &child{cmd: cmd, stdin: stdin, adsAddr: f[1], httpBase: "http://" + f[2]}, nil
}

func (c *child) stop() {
	c.stdin.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

func (c *child) rss() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

func (c *child) getJSON(path string, v any) error {
	resp, err := http.Get(c.httpBase + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

type revStatus struct {
	Revision           int64      `json:"revision"`
	WrittenAt          *time.Time `json:"writtenAt"`
	Connected          int        `json:"connected"`
	Converged          bool       `json:"converged"`
	ConvergenceSeconds *float64   `json:"convergenceSeconds"`
}

// waitConverged polls the pilot's status API until revision rev ("latest" if 0)
// is effective on want connected proxies.
func (c *child) waitConverged(ctx context.Context, rev int64, want int) (revStatus, error) {
	path := "/apis/status/v1/revisions/latest"
	if rev > 0 {
		path = fmt.Sprintf("/apis/status/v1/revisions/%d", rev)
	}
	for {
		var rs revStatus
		err := c.getJSON(path, &rs)
		if err == nil && rs.Converged && rs.Connected == want && rs.WrittenAt != nil && (want == 0 || rs.ConvergenceSeconds != nil || rev == 0) {
			return rs, nil
		}
		select {
		case <-ctx.Done():
			return rs, fmt.Errorf("revision %s not converged on %d proxies: last %+v, %v", path, want, rs, err)
		// Not faster: each poll walks every proxy's status in pilot, and the
		// timings come from the clients and pilot's ACK records, not from polls.
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// profile saves a CPU profile of the pilot child over the next secs seconds.
func (c *child) profile(path string, secs int) error {
	resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", c.httpBase, secs))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return saveBody(resp, path)
}

func (c *child) memstats(free bool) (heap int64, goroutines int) {
	var m struct {
		HeapInuse  int64 `json:"heapInuse"`
		Goroutines int   `json:"goroutines"`
	}
	path := "/memstats"
	if free {
		path += "?free=1"
	}
	_ = c.getJSON(path, &m)
	return m.HeapInuse, m.Goroutines
}

func (c *child) change(svc int, addr string) (rev int64, cluster string, err error) {
	resp, err := http.Post(fmt.Sprintf("%s/change?svc=%d&addr=%s", c.httpBase, svc, addr), "", nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var out struct {
		Revision int64  `json:"revision"`
		Cluster  string `json:"cluster"`
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return 0, "", fmt.Errorf("change: %s: %s", resp.Status, b)
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	return out.Revision, out.Cluster, err
}

// measure is shared by all clients of a run: which change is being timed.
type measure struct {
	sidecars bool // delta clients register as Weft sidecars
	active   atomic.Bool
	target   atomic.Pointer[string] // cluster whose endpoints change
}

// client is one simulated proxy.
type client struct {
	idx     int
	sidecar bool // registers as a Weft sidecar (node metadata) and subscribes to its signed manifest too
	hit     bool // sidecar: the measured change arrived; its push completes with the manifest
	m       *measure
	ready   chan struct{} // closed once every subscribed type was received
	seen    int
	bytes   atomic.Int64 // bytes received while measuring
	mbytes  atomic.Int64 // of bytes, the manifest's responses
	ackAt   atomic.Int64 // unix nanos of the ACK of the measured change
}

var allTypes = []string{snapshot.ClusterType, snapshot.EndpointType, snapshot.ListenerType, snapshot.RouteType}

func typeBit(t string) int {
	for i, x := range allTypes {
		if x == t {
			return 1 << i
		}
	}
	return 0
}

func (c *client) runDelta(ctx context.Context, conn *grpc.ClientConn, id string) error {
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return err
	}
	types := allTypes
	nd := &corev3.Node{Id: id, Cluster: "bench"}
	if c.sidecar {
		types = append(append([]string(nil), allTypes...), snapshot.ManifestType)
		// Labels no Service selects: a client, not an endpoint of the mesh.
		nd = envoynode.ToProto((&node.Node{ID: id, Namespace: "bench", ServiceAccount: "default", Labels: map[string]string{"app": "loadclient"},
			Address: fmt.Sprintf("10.250.%d.%d", c.idx/250, c.idx%250+1), InboundPort: 15006}))

	}
	for i, t := range types {
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t, ResourceNamesSubscribe: []string{"*"}}
		if i == 0 {
			req.Node = nd
		}
		if err := s.Send(req); err != nil {
			return err
		}
	}
	for {
		r, err := s.Recv()
		if err != nil {
			return err
		}
		hit := false
		if c.m.active.Load() {
			c.bytes.Add(int64(proto.Size(r)))
			if r.TypeUrl == snapshot.ManifestType {
				c.mbytes.Add(int64(proto.Size(r)))
			}
			target := *c.m.target.Load()
			for _, res := range r.Resources {
				if res.Name == target {
					hit = true
				}
			}
		}
		if err := s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce}); err != nil {
			return err
		}
		switch {
		case hit && !c.sidecar:
			c.ackAt.Store(time.Now().UnixNano())
		case hit:
			c.hit = true
		case c.hit && r.TypeUrl == snapshot.ManifestType:
			c.hit = false
			c.ackAt.Store(time.Now().UnixNano())
		}
		c.markSeen(r.TypeUrl)
	}
}

func (c *client) markSeen(typ string) {
	if c.seen == 0xf {
		return
	}
	c.seen |= typeBit(typ)
	if c.seen == 0xf {
		close(c.ready)
	}
}

func (c *client) runSotW(ctx context.Context, conn *grpc.ClientConn, id string, names map[string][]string) error {
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	for i, t := range allTypes {
		req := &discoveryv3.DiscoveryRequest{TypeUrl: t, ResourceNames: names[t]}
		if i == 0 {
			req.Node = &corev3.Node{Id: id, Cluster: "bench"}
		}
		if err := s.Send(req); err != nil {
			return err
		}
	}
	for {
		r, err := s.Recv()
		if err != nil {
			return err
		}
		measuring := c.m.active.Load()
		if measuring {
			c.bytes.Add(int64(proto.Size(r)))
		}
		if err := s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: r.TypeUrl, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce, ResourceNames: names[r.TypeUrl]}); err != nil {
			return err
		}
		if measuring && r.TypeUrl == snapshot.EndpointType {
			c.ackAt.Store(time.Now().UnixNano())
		}
		c.markSeen(r.TypeUrl)
	}
}

type fleet struct {
	conns   []*grpc.ClientConn
	clients []*client
	wg      sync.WaitGroup
	cancel  context.CancelFunc
	errs    chan error
}

func (f *fleet) stop() {
	f.cancel()
	f.wg.Wait()
	for _, c := range f.conns {
		c.Close()
	}
}

// startFleet connects n clients (delta unless sotw != nil: then SotW subscribed to those names) and
// waits until each has received every type.
func startFleet(ctx context.Context, addr string, n, perConn, conc int, m *measure, prefix string, sotw map[string][]string) (*fleet, error) {
	cctx, cancel := context.WithCancel(context.Background())
	f := &fleet{cancel: cancel, errs: make(chan error, n)}
	sem := make(chan struct{}, conc)
	for i := range n {
		if i%perConn == 0 {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
			if err != nil {
				f.stop()
				return nil, err
			}
			f.conns = append(f.conns, conn)
		}
		conn := f.conns[len(f.conns)-1]
		c := &client{m: m, ready: make(chan struct{}), idx: i, sidecar: m.sidecars && sotw == nil}
		f.clients = append(f.clients, c)
		sem <- struct{}{}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			id := fmt.Sprintf("%s-%d", prefix, i)
			var err error
			if sotw != nil {
				err = c.runSotW(cctx, conn, id, sotw)
			} else {
				err = c.runDelta(cctx, conn, id)
			}
			if cctx.Err() == nil {
				f.errs <- fmt.Errorf("client %s: %w", id, err)
			}
		}()
		go func() {
			// Release the slot once this client is in sync (or gone).
			select {
			case <-c.ready:
			case <-cctx.Done():
			}
			<-sem
		}()
	}
	for _, c := range f.clients {
		select {
		case <-c.ready:
		case err := <-f.errs:
			f.stop()
			return nil, err
		case <-ctx.Done():
			f.stop()
			return nil, ctx.Err()
		}
	}
	return f, nil
}

func run(ctx context.Context, cfg runConfig) (result, error) {
	r := result{cfg: cfg}
	p, err := startPilot(cfg)
	if err != nil {
		return r, err
	}
	defer p.stop()
	if _, err := p.waitConverged(ctx, 0, 0); err != nil {
		return r, err
	}
	r.rssBefore = p.rss()
	r.heapBefore, _ = p.memstats(true)
	r.rssBefore = p.rss()

	m := &measure{sidecars: cfg.sidecars}
	empty := ""
	m.target.Store(&empty)
	start := time.Now()
	f, err := startFleet(ctx, p.adsAddr, cfg.proxies, cfg.perConn, cfg.conc, m, "delta", nil)
	if err != nil {
		return r, err
	}
	defer f.stop()
	if _, err := p.waitConverged(ctx, 0, cfg.proxies); err != nil {
		return r, err
	}
	r.connectTime = time.Since(start)
	r.rssAfter = p.rss()
	r.heapAfter, r.goroutines = p.memstats(true)
	r.rssFreed = p.rss()

	// The measured change: one endpoint of one service moves.
	var prof chan error
	if cfg.cpuprofile != "" {
		prof = make(chan error, 1)
		go func() { prof <- p.profile(fmt.Sprintf("%s-%d", cfg.cpuprofile, cfg.proxies), 2) }()
		time.Sleep(100 * time.Millisecond) // let the profile start before the change
	}
	m.active.Store(true)
	rev, cluster, err := p.change(cfg.services/2, "10.200.0.1")
	if err != nil {
		return r, err
	}
	m.target.Store(&cluster)
	rs, err := p.waitConverged(ctx, rev, cfg.proxies)
	if err != nil {
		return r, err
	}
	m.active.Store(false)
	if prof != nil {
		if err := <-prof; err != nil {
			return r, fmt.Errorf("cpu profile: %w", err)
		}
	}
	lat := make([]time.Duration, 0, cfg.proxies)
	var bytes, mbytes int64
	for _, c := range f.clients {
		at := c.ackAt.Load()
		if at == 0 {
			return r, fmt.Errorf("a client converged per pilot but saw no update of %s", cluster)
		}
		lat = append(lat, time.Duration(at-rs.WrittenAt.UnixNano()))
		bytes += c.bytes.Load()
		mbytes += c.mbytes.Load()
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	r.p50, r.p99, r.max = lat[len(lat)/2], lat[(len(lat)*99)/100], lat[len(lat)-1]
	r.serverConvergence = *rs.ConvergenceSeconds
	r.deltaBytes = float64(bytes) / float64(cfg.proxies)
	r.manifestBytes = float64(mbytes) / float64(cfg.proxies)

	// SotW: the same kind of change seen by SotW clients subscribed to the same
	// resources (CDS and LDS wildcard, EDS for every cluster, the route).
	clusters := make([]string, cfg.services)
	routes := []string{"outbound"} // synth: one route configuration
	if cfg.stack == "real" {
		routes = make([]string, cfg.services) // gen: one per service port, named like its api_listener
	}
	for i := range clusters {
		clusters[i] = clusterName(svcName(i))
		if cfg.stack == "real" {
			routes[i] = gen.APIListenerName(svcName(i)+".bench.svc.cluster.local", 80)
		}
	}
	sotwNames := map[string][]string{snapshot.EndpointType: clusters, snapshot.RouteType: routes}
	ms := &measure{}
	ms.target.Store(&empty)
	sf, err := startFleet(ctx, p.adsAddr, cfg.sotw, cfg.perConn, cfg.conc, ms, "sotw", sotwNames)
	if err != nil {
		return r, err
	}
	defer sf.stop()
	if _, err := p.waitConverged(ctx, 0, cfg.proxies+cfg.sotw); err != nil {
		return r, err
	}
	ms.active.Store(true)
	rev, _, err = p.change(cfg.services/3, "10.200.0.2")
	if err != nil {
		return r, err
	}
	if _, err := p.waitConverged(ctx, rev, cfg.proxies+cfg.sotw); err != nil {
		return r, err
	}
	ms.active.Store(false)
	bytes = 0
	for _, c := range sf.clients {
		bytes += c.bytes.Load()
	}
	r.sotwBytes = float64(bytes) / float64(cfg.sotw)
	return r, nil
}
