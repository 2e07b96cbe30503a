package main

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/pilot/api"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/boltstore"
	"github.com/weft-mesh/weft/tools/meshctl"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

const vipMesh = `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  ports: [{name: http, port: 9080}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: ratings, namespace: shop}
spec:
  ports: [{name: http, port: 9080}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: db, namespace: shop}
spec:
  ports: [{name: pg, port: 5432, protocol: TCP}]
  addresses: [10.96.0.10]
`

// vips lists shop's Services with their stored VIPs from pilot's API.
func vips(t *testing.T, p *proc.PilotProcess) map[string]string {
	t.Helper()
	resp, err := http.Get(p.URL() + api.Prefix + "/namespaces/shop/services")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var lr struct {
		Items []struct {
			Metadata struct{ Name string }
			Spec     struct{ Addresses []string }
			Status   *struct{ Addresses []string }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&lr); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, it := range lr.Items {
		a := strings.Join(it.Spec.Addresses, ",")
		if it.Status != nil {
			a += "status:" + strings.Join(it.Status.Addresses, ",")
		}
		out[it.Metadata.Name] = a
	}
	return out
}

// VIPs pilot allocates are stored with their Services (and a Service stored
// without one gets one when pilot starts): the real pilot binary,
// killed (no clean shutdown) and started again on its data directory, keeps
// them, and a re-apply of the same files changes nothing; a new Service takes
// the next free address. meshctl get shows them.
func TestVIPsSurviveRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pilot")
	// A Service stored before pilot allocated VIPs gets one at start.
	st, err := boltstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	legacy := &resource.Object{APIVersion: resource.APIVersion, Kind: resource.KindService, Metadata: resource.Metadata{Namespace: "shop", Name: "legacy"},
		Spec: &resource.ServiceSpec{Ports: []resource.ServicePort{{Name: "http", Port: 80, TargetPort: 80, Protocol: "HTTP"}}}}
	if _, err := st.Apply(context.Background(), []store.Mutation{{Op: store.OpPut, Object: legacy}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	p := proc.StartPilot(t, "127.91.21.1", dir)
	p.Apply(t, vipMesh)
	want := map[string]string{"legacy": "status:240.240.0.1", "reviews": "status:240.240.0.3", "ratings": "status:240.240.0.2", "db": "10.96.0.10"}
	got := vips(t, p)
	if len(got) != 4 || got["legacy"] != want["legacy"] || got["reviews"] != want["reviews"] || got["ratings"] != want["ratings"] || got["db"] != want["db"] {
		t.Fatalf("allocated %v, want %v", got, want)
	}
	var out, errb strings.Builder
	if code := meshctl.Run(context.Background(), []string{"--pilot", p.URL(), "get", "svc", "-n", "shop"}, &out, &errb); code != 0 {
		t.Fatalf("meshctl get svc: %d %s", code, errb.String())
	}
	for _, line := range []string{`(?m)^Service +shop +db +10\.96\.0\.10 +1 +3$`, `(?m)^Service +shop +ratings +240\.240\.0\.2 +1 +3$`, `(?m)^Service +shop +reviews +240\.240\.0\.3 +1 +3$`, `(?m)^Service +shop +legacy +240\.240\.0\.1 +2 +2$`} {
		if !regexp.MustCompile(line).MatchString(out.String()) {
			t.Errorf("meshctl get svc:\n%s\nwant a line matching %s", out.String(), line)
		}
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.Exited()

	p = proc.StartPilot(t, "127.91.21.1", dir)
	if got := vips(t, p); len(got) != 4 || got["reviews"] != want["reviews"] || got["ratings"] != want["ratings"] || got["legacy"] != want["legacy"] {
		t.Fatalf("after the restart %v, want %v", got, want)
	}
	p.Apply(t, vipMesh+"---\n"+strings.ReplaceAll(strings.SplitN(vipMesh, "---\n", 2)[0], "reviews", "details"))
	got = vips(t, p)
	if got["reviews"] != want["reviews"] || got["ratings"] != want["ratings"] || got["details"] != "status:240.240.0.4" {
		t.Fatalf("after a re-apply and a new Service: %v", got)
	}
	if err := p.Stop(5 * time.Second); err != nil {
		t.Logf("stop: %v", err)
	}
}
