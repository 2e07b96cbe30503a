package drills

import (
	"crypto/ed25519"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/weft-mesh/weft/tools/testkit/proc"
)

// controlPlane is what a drill does to the xDS server: go-control-plane in-process
// (the interop referee) or the real bin/pilot process.
type controlPlane interface {
	addr() string
	down() // killed: streams cut at once
	up()
}

type refCP struct{ *refServer }

func (r refCP) addr() string { return r.refServer.addr }
func (r refCP) down()        { r.stop() }
func (r refCP) up()          { r.start() }

// pilotProc is a real bin/pilot, restarted by up after down.
type pilotProc struct {
	t       *testing.T
	ip      string
	dataDir string
	extra   []string // flags added to every start
	*proc.PilotProcess
}

func startPilot(t *testing.T, ip string, extra ...string) *pilotProc {
	t.Helper()
	p := &pilotProc{t: t, ip: ip, dataDir: filepath.Join(t.TempDir(), "pilot"), extra: extra}
	p.up()
	return p
}

func (p *pilotProc) addr() string { return p.XDSAddr() }

func (p *pilotProc) up() {
	p.t.Helper()
	p.PilotProcess = proc.StartPilot(p.t, p.ip, p.dataDir, append([]string{"--log-level", "info"}, p.extra...)...)
	p.Grace = pilotGrace
}

// pilotGrace is pilot's SIGTERM-to-SIGKILL time: it closes its store and streams.
const pilotGrace = 15 * time.Second

// down kills pilot with SIGKILL.
func (p *pilotProc) down() {
	p.t.Helper()
	if err := p.Kill(); err != nil {
		p.t.Fatal(err)
	}
}

// apply applies YAML with meshctl.
func (p *pilotProc) apply(yaml string) { p.t.Helper(); p.Apply(p.t, yaml) }

// meshYAML: Service reviews (port 9080 -> the app's 8080) with one static Workload
// at the application's address.
func meshYAML(appIP string) string {
	return fmt.Sprintf(`apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports: [{name: http, port: 9080, targetPort: 8080, protocol: HTTP}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: reviews-a, namespace: shop, labels: {app: reviews}}
spec:
  address: %s
  serviceAccount: reviews
`, appIP)
}

// setup starts an application "v1" and a control plane serving a sidecar
// workload on ip base.1 (the app on base.2) and returns them; kind is "pilot" or
// "go-control-plane".
func setup(t *testing.T, kind, base string) (ws, controlPlane) {
	t.Helper()
	sidecarIP, appIP := base+".1", base+".2"
	startApp(t, appIP+":8080", "v1")
	if kind == "pilot" {
		p := startPilot(t, sidecarIP)
		p.apply(meshYAML(appIP))
		w := ws{ip: sidecarIP, nodeID: "productpage-a", stateDir: filepath.Join(t.TempDir(), "state"), keyFile: p.KeyFile()}
		return w, p
	}
	priv := newKey(t)
	w := newWorkload(t, sidecarIP, "productpage-a", priv.Public().(ed25519.PublicKey))
	ref := newRefServer(t, sidecarIP+":15010", priv, w.nodeID)
	ref.push(meshTo(w, appIP+":8080"), 1, 0)
	return w, refCP{ref}
}

var controlPlanes = []string{"pilot", "go-control-plane"}
