package drillkit

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/weft-mesh/weft/pilot/api"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

// ControlPlane is what a drill does to the xDS server: go-control-plane in-process
// (the interop referee) or the real bin/pilot process.
type ControlPlane interface {
	Addr() string
	Down() // killed: streams cut at once
	Up()
}

type RefCP struct{ *RefServer }

// Down stops the server (every stream cut) and Up starts it again.
func (r RefCP) Down() { r.Stop() }

func (r RefCP) Up() { r.start() }

// PilotProc is a real bin/pilot, restarted by up after down.
type PilotProc struct {
	t       testing.TB
	ip      string
	dataDir string
	extra   []string // flags added to every start
	*proc.PilotProcess
}

func StartPilot(t testing.TB, ip string, extra ...string) *PilotProc {
	t.Helper()
	p := &PilotProc{t: t, ip: ip, dataDir: filepath.Join(t.TempDir(), "pilot"), extra: extra}
	p.Up()
	return p
}

func (p *PilotProc) Addr() string { return p.XDSAddr() }

func (p *PilotProc) Up() {
	p.t.Helper()
	p.PilotProcess = proc.StartPilot(p.t, p.ip, p.dataDir, append([]string{"--log-level", "info"}, p.extra...)...)
	p.Grace = PilotGrace
}

// PilotGrace is pilot's SIGTERM-to-SIGKILL time: it closes its store and streams.
const PilotGrace = 15 * time.Second

// Down kills pilot with SIGKILL.
func (p *PilotProc) Down() {
	p.t.Helper()
	if err := p.Kill(); err != nil {
		p.t.Fatal(err)
	}
}

// ApplyYAML applies YAML with meshctl.
func (p *PilotProc) ApplyYAML(yaml string) { p.t.Helper(); p.Apply(p.t, yaml) }

// MeshYAML: Service reviews (port 9080 -> the app's 8080) with one static Workload
// at the application's address.
func MeshYAML(appIP string) string { return ServiceYAML("reviews", appIP) }

// ServiceYAML: Service name in namespace shop (port 9080 -> the app's 8080)
// with one static Workload name-a, service account name, at appIP.
func ServiceYAML(name, appIP string) string {
	return fmt.Sprintf(`apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: %[1]s, namespace: shop}
spec:
  selector: {app: %[1]s}
  ports: [{name: http, port: 9080, targetPort: 8080, protocol: HTTP}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: %[1]s-a, namespace: shop, labels: {app: %[1]s}}
spec:
  address: %[2]s
  serviceAccount: %[1]s
`, name, appIP)
}

// Setup starts an application "v1" and a control plane serving a sidecar
// workload on ip base.1 (the app on base.2) and returns them; kind is "pilot" or
// "go-control-plane".
func Setup(t testing.TB, kind, base string) (Workload, ControlPlane) {
	t.Helper()
	sidecarIP, appIP := base+".1", base+".2"
	StartApp(t, appIP+":8080", "v1")
	if kind == "pilot" {
		p := StartPilot(t, sidecarIP)
		p.ApplyYAML(MeshYAML(appIP))
		w := Workload{IP: sidecarIP, NodeID: "productpage-a", StateDir: filepath.Join(t.TempDir(), "state"), KeyFile: p.KeyFile()}
		return w, p
	}
	priv := NewKey(t)
	w := NewWorkload(t, sidecarIP, "productpage-a", priv.Public().(ed25519.PublicKey))
	ref := NewRefServer(t, sidecarIP+":15010", priv, w.NodeID)
	ref.Push(MeshTo(w, appIP+":8080"), 1, 0)
	return w, RefCP{ref}
}

var ControlPlanes = []string{"pilot", "go-control-plane"}

// ApplyRev applies YAML through pilot's admin API and returns the store
// revision the apply produced.
func (p *PilotProc) ApplyRev(yaml string) int64 {
	p.t.Helper()
	resp, err := Client.Post(p.URL()+api.Prefix+"/apply", "application/yaml", bytes.NewReader([]byte(yaml)))
	if err != nil {
		p.t.Fatalf("apply: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var ar api.ApplyResponse
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &ar) != nil || !ar.Changed {
		p.t.Fatalf("apply: %d %s", resp.StatusCode, b)
	}
	return ar.Revision
}
