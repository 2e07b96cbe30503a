package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Part two of the demo: a real mesh on one machine. Pilot plus three workloads,
// each an application and a sidecar on its own loopback address (no root).

const meshNamespace = "demo"

// Loopback addresses of the workloads (127/8 is all loopback on Linux).
var workloads = []workload{
	{name: "frontend", ip: "127.0.10.1", app: "frontend", version: "v1"},
	{name: "reviews-v1", ip: "127.0.10.2", app: "reviews", version: "v1"},
	{name: "reviews-v2", ip: "127.0.10.3", app: "reviews", version: "v2"},
}

const pilotIP = "127.0.10.254"

type workload struct {
	name, ip, app, version string
	srv                    *http.Server
	cmd                    *exec.Cmd
	exited                 chan error
	logPath                string
	token                  string // bootstrap token file
}

const meshYAML = `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: frontend, namespace: demo}
spec:
  selector: {app: frontend}
  ports: [{name: http, port: 8080, targetPort: 8080, protocol: HTTP}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: demo}
spec:
  selector: {app: reviews}
  ports: [{name: http, port: 9080, targetPort: 9080, protocol: HTTP}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: DestinationPolicy
metadata: {name: reviews, namespace: demo}
spec:
  service: reviews
  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]
  loadBalancer: ROUND_ROBIN
`

const routeTemplate = `apiVersion: mesh.weft.dev/v1alpha1
kind: Route
metadata: {name: reviews, namespace: demo}
spec:
  hosts: [reviews]
  http:
  - name: split
    route:
    - {destination: {service: reviews, subset: v1, port: 9080}, weight: %d}
    - {destination: {service: reviews, subset: v2, port: 9080}, weight: %d}
`

// Bounds of the mesh part.
const (
	readyTimeout    = 20 * time.Second
	convergeTimeout = 20 * time.Second
	requestTimeout  = 5 * time.Second
)

type mesh struct {
	ctx      context.Context
	bin      string
	tmp      string
	d        *demo
	pilotLog string
	dataDir  string
	pilot    *exec.Cmd
	exited   chan error
	hc       *http.Client
}

// runMesh is part two. It cleans up everything it started, also on failure.
func runMesh(ctx context.Context, bin string) (err error) {
	tmp, err := os.MkdirTemp("", "weft-mesh-demo-")
	if err != nil {
		return err
	}
	m := &mesh{ctx: ctx, bin: bin, tmp: tmp, dataDir: filepath.Join(tmp, "pilot-data"), pilotLog: filepath.Join(tmp, "pilot.log"),
		hc: &http.Client{Timeout: requestTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
	defer func() {
		m.hc.CloseIdleConnections()
		if serr := m.stopAll(); serr != nil && err == nil {
			err = serr
		}
		if err != nil {
			m.dumpLogs()
		}
		if rerr := os.RemoveAll(tmp); rerr != nil && err == nil {
			err = rerr
		}
		fmt.Printf("\nStopped every process of the mesh demo and removed %s.\n", tmp)
	}()

	say("12. Part two, a real mesh: start a fresh pilot with its mesh CA, serving xDS and CSRs over TLS on %s:15012\n"+
		"    (the plaintext %s:15010 only serves readers)", pilotIP, pilotIP)
	if err := m.startPilot(); err != nil {
		return err
	}
	m.d = &demo{ctx: ctx, meshctl: filepath.Join(bin, "meshctl"), pilot: "http://" + pilotIP + ":15014"}
	say("13. Apply Services frontend and reviews, reviews' subsets v1/v2, and a Route sending 80%% to v1 and 20%% to v2")
	meshFile := filepath.Join(tmp, "mesh.yaml")
	if err := os.WriteFile(meshFile, []byte(meshYAML+"---\n"+fmt.Sprintf(routeTemplate, 80, 20)), 0o600); err != nil {
		return err
	}
	if err := m.d.step(0, "apply", "-f", meshFile); err != nil {
		return err
	}

	say("14. Start three workloads, each an application and a sidecar on its own loopback address. Each sidecar gets a\n" +
		"    bootstrap token for its service account, makes its key in memory, asks pilot's CA for its certificate\n" +
		"    (spiffe://cluster.local/ns/demo/sa/<app>) and then talks to pilot over mTLS on 15012")
	for i := range workloads {
		w := &workloads[i]
		var err error
		if w.token, err = m.mintToken(w); err != nil {
			return err
		}
		if err := m.startWorkload(w); err != nil {
			return err
		}
	}
	for i := range workloads {
		w := &workloads[i]
		took, err := m.waitReady(w)
		if err != nil {
			return err
		}
		fmt.Printf("%-10s app on %s:%s, sidecar inbound %s:15006, outbound %s:15001: ready after %s\n",
			w.name, w.ip, appPort(w), w.ip, w.ip, took.Round(time.Millisecond))
	}

	if err := m.showCertificates(); err != nil {
		return err
	}
	fmt.Println("Wait until pilot's latest revision is effective on every sidecar (ACKed and activated):")
	if err := m.d.step(0, "rollout", "status", "--wait", "--timeout", "20s"); err != nil {
		return err
	}

	say("15. The frontend calls reviews through its sidecar: frontend sidecar (outbound :15001) -> mTLS -> reviews sidecar (inbound :15006) -> reviews app")
	fmt.Printf("$ 200 x curl -H 'Host: reviews:9080' http://%s:15001/\n", workloads[0].ip)
	counts, failed := m.traffic(200)
	fmt.Printf("answers: %s; failed: %d\n", counts, failed)
	if failed > 0 || counts["reviews-v1"] < 120 || counts["reviews-v2"] < 15 {
		return fmt.Errorf("weighted route 80/20: got %s with %d failures", counts, failed)
	}
	fmt.Println("About 80% v1 and 20% v2, as the Route says.")
	if err := m.showMTLS(); err != nil {
		return err
	}

	say("16. Change the Route to send everything to v2, and time how long until the frontend's sidecar follows")
	routeFile := filepath.Join(tmp, "route-v2.yaml")
	// The whole desired state again, with the Route changed: the rest is unchanged.
	if err := os.WriteFile(routeFile, []byte(meshYAML+"---\n"+fmt.Sprintf(routeTemplate, 0, 100)), 0o600); err != nil {
		return err
	}
	start := time.Now()
	if err := m.d.step(0, "apply", "-f", routeFile); err != nil {
		return err
	}
	if err := m.d.step(0, "rollout", "status", "--wait", "--timeout", "20s"); err != nil {
		return err
	}
	took, err := m.converge("reviews-v2")
	if err != nil {
		return err
	}
	fmt.Printf("Converged %s after meshctl returned (%s including the apply): 50 requests in a row answered by reviews-v2.\n",
		took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	say("17. Kill pilot (SIGKILL). Sidecars keep serving from their validated snapshots; nothing asks pilot on the request path")
	if err := m.killPilot(); err != nil {
		return err
	}
	time.Sleep(1500 * time.Millisecond) // let the staleness age grow visibly
	counts, failed = m.traffic(200)
	fmt.Printf("With pilot dead: answers: %s; failed: %d\n", counts, failed)
	if failed > 0 || counts["reviews-v2"] != 200 {
		return fmt.Errorf("traffic without pilot: %s, %d failed", counts, failed)
	}
	age, err := m.routesAge(&workloads[0])
	if err != nil {
		return err
	}
	fmt.Printf("The frontend sidecar's /config_dump shows its routes are %s old (they expire after 24h and then fail closed).\n", age)

	say("18. Restart pilot on the same data directory; the sidecars reconnect by themselves")
	if err := m.startPilot(); err != nil {
		return err
	}
	if err := m.waitConnected(); err != nil {
		return err
	}
	// Registered sidecars are endpoints only while connected: a restarted pilot
	// learns them again as they reconnect, and pushes the endpoints then.
	took, err = m.converge("reviews-v2")
	if err != nil {
		return err
	}
	fmt.Printf("Every sidecar re-registered; requests flow to reviews-v2 again (%s after the last reconnect).\n", took.Round(time.Millisecond))
	// A sidecar that reconnected a moment ago may not have been sent its
	// snapshot yet (NOT_SENT): show the table once every stream has ACKed.
	if err := m.d.step(0, "rollout", "status", "--wait", "--timeout", "20s"); err != nil {
		return err
	}
	if err := m.d.step(0, "proxy-status"); err != nil {
		return err
	}
	counts, failed = m.traffic(50)
	fmt.Printf("After pilot's return: answers: %s; failed: %d\n", counts, failed)
	if failed > 0 {
		return fmt.Errorf("traffic after pilot restart: %d failed", failed)
	}
	say("19. Stop the sidecars (SIGTERM, graceful), the applications and pilot")
	return nil
}

func appPort(w *workload) string {
	if w.app == "frontend" {
		return "8080"
	}
	return "9080"
}

func (m *mesh) startPilot() error {
	logf, err := os.OpenFile(m.pilotLog, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Printf("$ pilot --data-dir %s --admin-addr %s:15014 --xds-addr %s:15010 --xds-tls-addr %s:15012 --webhook-addr %s:15017\n", m.dataDir, pilotIP, pilotIP, pilotIP, pilotIP)
	// Sidecars register over mTLS on 15012 with certificates from pilot's CA;
	// the plaintext port only serves readers.
	cmd := exec.Command(filepath.Join(m.bin, "pilot"), "--data-dir", m.dataDir, "--admin-addr", pilotIP+":15014", "--xds-addr", pilotIP+":15010",
		"--xds-tls-addr", pilotIP+":15012", "--webhook-addr", pilotIP+":15017")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting pilot: %w", err)
	}
	m.pilot, m.exited = cmd, make(chan error, 1)
	go func(c chan error) { c <- cmd.Wait() }(m.exited)
	if err := waitHealthy(m.ctx, "http://"+pilotIP+":15014", m.exited); err != nil {
		return err
	}
	// Sidecars trust the publisher key pilot writes next to its store, and
	// verify pilot with the CA root it writes under ca/.
	for _, f := range []string{filepath.Join(m.dataDir, "publisher.pub"), m.caRoot()} {
		for deadline := time.Now().Add(healthTimeout); ; {
			if _, err := os.Stat(f); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("pilot wrote no %s within %s", f, healthTimeout)
			}
			time.Sleep(20 * time.Millisecond) // polling with a deadline
		}
	}
	return nil
}

// caRoot is the mesh CA's root pilot writes; sidecars verify pilot with it.
func (m *mesh) caRoot() string { return filepath.Join(m.dataDir, "ca", "root.pem") }

// mintToken asks pilot's CA (meshctl token create) for a bootstrap token naming
// the workload's namespace and service account, into a file only its sidecar reads.
func (m *mesh) mintToken(w *workload) (string, error) {
	args := []string{"--pilot", m.d.pilot, "token", "create", "--namespace", meshNamespace, "--service-account", w.app, "--ttl", "1h"}
	f := filepath.Join(m.tmp, "token-"+w.name)
	fmt.Printf("$ meshctl %s > %s\n", strings.Join(args, " "), f)
	cmd := exec.CommandContext(m.ctx, m.d.meshctl, args...)
	cmd.Stderr = os.Stdout
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("meshctl token create for %s: %w", w.name, err)
	}
	return f, os.WriteFile(f, out, 0o600)
}

func (m *mesh) killPilot() error {
	if m.pilot == nil {
		return nil
	}
	fmt.Printf("$ kill -9 %d\n", m.pilot.Process.Pid)
	_ = m.pilot.Process.Kill()
	<-m.exited
	m.pilot = nil
	return nil
}

func (m *mesh) startWorkload(w *workload) error {
	ln, err := net.Listen("tcp", w.ip+":"+appPort(w))
	if err != nil {
		return fmt.Errorf("%s app: %w", w.name, err)
	}
	name := w.name
	w.srv = &http.Server{ReadHeaderTimeout: requestTimeout, Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprint(rw, name)
	})}
	go func() { _ = w.srv.Serve(ln) }()
	w.logPath = filepath.Join(m.tmp, w.name+".log")
	logf, err := os.Create(w.logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := []string{"--node-id", w.name, "--namespace", meshNamespace, "--service-account", w.app,
		"--labels", "app=" + w.app + ",version=" + w.version, "--address", w.ip, "--app-address", w.ip,
		"--pilot", pilotIP + ":15012", "--token-file", w.token, "--ca-root", m.caRoot(),
		"--publisher-key", filepath.Join(m.dataDir, "publisher.pub"),
		"--state-dir", filepath.Join(m.tmp, "state-"+w.name), "--admin-addr", w.ip + ":15000", "--outbound-addr", w.ip + ":15001"}
	fmt.Printf("$ sidecar %s\n", strings.Join(args, " "))
	w.cmd = exec.Command(filepath.Join(m.bin, "sidecar"), args...)
	w.cmd.Stdout, w.cmd.Stderr = logf, logf
	if err := w.cmd.Start(); err != nil {
		return fmt.Errorf("starting %s sidecar: %w", w.name, err)
	}
	w.exited = make(chan error, 1)
	go func(c chan error, cmd *exec.Cmd) { c <- cmd.Wait() }(w.exited, w.cmd)
	return nil
}

func (m *mesh) waitReady(w *workload) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(readyTimeout)
	var last string
	for time.Now().Before(deadline) {
		select {
		case err := <-w.exited:
			w.exited <- err
			return 0, fmt.Errorf("%s sidecar exited: %v", w.name, err)
		case <-m.ctx.Done():
			return 0, m.ctx.Err()
		default:
		}
		resp, err := m.hc.Get("http://" + w.ip + ":15021/healthz/ready")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start), nil
			}
			last = strings.TrimSpace(string(b))
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	return 0, fmt.Errorf("%s sidecar not ready after %s: %s", w.name, readyTimeout, last)
}

// counts is answers by body.
type counts map[string]int

func (c counts) String() string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, c[k]))
	}
	return strings.Join(parts, " ")
}

// call sends one request from the frontend through its sidecar to reviews.
func (m *mesh) call() (string, error) {
	req, err := http.NewRequestWithContext(m.ctx, http.MethodGet, "http://"+workloads[0].ip+":15001/", nil)
	if err != nil {
		return "", err
	}
	req.Host = "reviews:9080"
	resp, err := m.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%d %s (%s)", resp.StatusCode, strings.TrimSpace(string(b)), resp.Header.Get("x-weft-degraded"))
	}
	return string(b), nil
}

// traffic sends n requests, 8 at a time, and counts the answers.
func (m *mesh) traffic(n int) (counts, int) {
	c := counts{}
	failed := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan struct{})
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				body, err := m.call()
				mu.Lock()
				if err != nil {
					if failed == 0 {
						fmt.Printf("first failure: %v\n", err)
					}
					failed++
				} else {
					c[body]++
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	return c, failed
}

// converge waits until 50 requests in a row are answered by want.
func (m *mesh) converge(want string) (time.Duration, error) {
	start := time.Now()
	inRow := 0
	for time.Since(start) < convergeTimeout {
		body, err := m.call()
		if err == nil && body == want {
			inRow++
			if inRow == 50 {
				return time.Since(start), nil
			}
			continue
		}
		inRow = 0
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("route change did not converge within %s", convergeTimeout)
}

func (m *mesh) routesAge(w *workload) (string, error) {
	resp, err := m.hc.Get("http://" + w.ip + ":15000/config_dump")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var cd struct {
		Staleness []struct {
			Class string `json:"class"`
			Age   string `json:"age"`
		} `json:"staleness"`
	}
	if err := jsonDecode(resp.Body, &cd); err != nil {
		return "", fmt.Errorf("config_dump: %w", err)
	}
	for _, s := range cd.Staleness {
		if s.Class == "routes" {
			return s.Age, nil
		}
	}
	return "", errors.New("config_dump has no routes staleness")
}

// waitConnected waits until every sidecar's xDS stream is up again.
func (m *mesh) waitConnected() error {
	deadline := time.Now().Add(45 * time.Second) // reconnect backoff is capped at 30s
	for _, w := range workloads {
		for {
			resp, err := m.hc.Get("http://" + w.ip + ":15000/config_dump")
			if err == nil {
				var cd struct {
					XDS struct {
						Connected bool `json:"connected"`
					} `json:"xds"`
				}
				derr := jsonDecode(resp.Body, &cd)
				resp.Body.Close()
				if derr == nil && cd.XDS.Connected {
					fmt.Printf("%s reconnected to pilot\n", w.name)
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s did not reconnect to pilot", w.name)
			}
			time.Sleep(100 * time.Millisecond) // polling with a deadline
		}
	}
	return nil
}

// stopAll stops sidecars (SIGTERM), applications and pilot.
func (m *mesh) stopAll() error {
	var errs []error
	for i := range workloads {
		w := &workloads[i]
		if w.cmd != nil {
			_ = w.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-w.exited:
				if err != nil {
					errs = append(errs, fmt.Errorf("%s sidecar exited with %v", w.name, err))
				}
			case <-time.After(stopTimeout):
				_ = w.cmd.Process.Kill()
				<-w.exited
				errs = append(errs, fmt.Errorf("%s sidecar did not stop within %s of SIGTERM; killed", w.name, stopTimeout))
			}
			w.cmd = nil
		}
		if w.srv != nil {
			_ = w.srv.Close()
			w.srv = nil
		}
	}
	if m.pilot != nil {
		if err := stopPilot(m.pilot, m.exited); err != nil {
			errs = append(errs, err)
		}
		m.pilot = nil
	}
	return errors.Join(errs...)
}

func (m *mesh) dumpLogs() {
	for _, p := range append([]string{m.pilotLog}, workloadLogs()...) {
		if b, err := os.ReadFile(p); err == nil {
			fmt.Printf("\n### %s:\n%s", filepath.Base(p), b)
		}
	}
}

func workloadLogs() []string {
	var out []string
	for _, w := range workloads {
		if w.logPath != "" {
			out = append(out, w.logPath)
		}
	}
	return out
}

func jsonDecode(r io.Reader, v any) error {
	return json.NewDecoder(io.LimitReader(r, 8<<20)).Decode(v)
}

// showCertificates lists what pilot's CA issued and checks every workload has
// a valid certificate.
func (m *mesh) showCertificates() error {
	fmt.Println("Each sidecar got its certificate from pilot's CA (and pilot has its own serving and publisher certificates):")
	if err := m.d.step(0, "cert", "list"); err != nil {
		return err
	}
	resp, err := m.hc.Get(m.d.pilot + "/apis/ca/v1/certificates")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var list struct {
		Certificates []struct {
			SPIFFEID string `json:"spiffeId"`
			State    string `json:"state"`
		} `json:"certificates"`
	}
	if err := jsonDecode(resp.Body, &list); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	valid := map[string]bool{}
	for _, c := range list.Certificates {
		if c.State == "VALID" {
			valid[c.SPIFFEID] = true
		}
	}
	for _, w := range workloads {
		if id := "spiffe://cluster.local/ns/" + meshNamespace + "/sa/" + w.app; !valid[id] {
			return fmt.Errorf("pilot lists no valid certificate for %s (%s)", id, w.name)
		}
	}
	return nil
}

// showMTLS shows that the sidecar-to-sidecar hop was mutual TLS: handshakes
// the frontend made as a client and the reviews sidecars accepted (pooled:
// a handshake per connection, not per request), none refused.
func (m *mesh) showMTLS() error {
	fmt.Println("The sidecar-to-sidecar hop is mutual TLS with the workload certificates (each side checks the other's SPIFFE ID):")
	total := map[string]float64{}
	for _, w := range workloads {
		side := "server"
		if w.app == "frontend" {
			side = "client"
		}
		resp, err := m.hc.Get("http://" + w.ip + ":15000/metrics")
		if err != nil {
			return err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		var line []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "weft_sidecar_mtls_handshakes_total{") && strings.Contains(l, `side="`+side+`"`) && !strings.HasSuffix(l, " 0") {
				line = append(line, strings.TrimPrefix(l, "weft_sidecar_mtls_handshakes_total"))
				var v float64
				fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v)
				if strings.Contains(l, `result="ok"`) || strings.Contains(l, `result="resumed"`) {
					total[side] += v
				}
			}
		}
		fmt.Printf("  %-10s %s handshakes: %s\n", w.name, side, strings.Join(line, " "))
	}
	if total["client"] == 0 || total["server"] == 0 {
		return fmt.Errorf("no mTLS handshake between the sidecars (client %v, server %v)", total["client"], total["server"])
	}
	return nil
}
