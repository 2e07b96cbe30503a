package inject

import (
	"io/fs"
	"net/netip"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/weft-mesh/weft/bootstrap/intercept"
	"github.com/weft-mesh/weft/bootstrap/render"
	"github.com/weft-mesh/weft/tools/testkit/certfiles"
)

// injected is the mutated testdata/pod.yaml.
func injected(t *testing.T) *corev1.Pod {
	t.Helper()
	_, obj := readObject(t, "pod.yaml")
	res, err := Mutate(Input{Object: obj}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	return res.Object.(*corev1.Pod)
}

// TestInitArgsParse: weft-init's command line is one `sidecar intercept`
// accepts (bootstrap/intercept's own parser), meaning what the pod asked.
func TestInitArgsParse(t *testing.T) {
	init := injected(t).Spec.InitContainers[0]
	if init.Name != InitName || init.Command[0] != Binary || init.Args[0] != "intercept" {
		t.Fatalf("init container %s %v %v", init.Name, init.Command, init.Args)
	}
	p, err := intercept.ParseArgs(init.Args[1:])
	if err != nil {
		t.Fatalf("sidecar intercept refuses the injected arguments %v: %v", init.Args, err)
	}
	c := p.Config
	if c.OutboundPort != intercept.DefaultOutboundPort || c.InboundPort != intercept.DefaultInboundPort || c.ProxyUID != intercept.DefaultProxyUID ||
		c.ProxyGID != intercept.DefaultProxyGID || c.DNSPort != intercept.DefaultDNSPort || !c.DNS || c.Mode != intercept.ModeIPTables || p.DryRun || p.Remove {
		t.Errorf("parsed %+v", p)
	}
	if len(c.ExcludeInboundPorts) != 1 || len(c.ExcludeCIDRs) != 2 || c.ExcludeCIDRs[1] != netip.MustParsePrefix("169.254.169.254/32") {
		t.Errorf("annotations not carried: exclude inbound %v, CIDRs %v", c.ExcludeInboundPorts, c.ExcludeCIDRs)
	}
}

// expand is the kubelet's $(VAR) expansion of a container's args with env.
func expand(args []string, env map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		out[i] = a
	}
	return out
}

// TestProxyArgsParse: weft-proxy's command line, as the kubelet expands it,
// is one the sidecar accepts (bootstrap/render.Parse, with the token and CA
// root files where the projected volume puts them), and means this pod.
func TestProxyArgsParse(t *testing.T) {
	proxy := injected(t).Spec.InitContainers[1]
	root, err := os.ReadFile(certfiles.NewCA(t, "cluster.local").RootFile)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{TokenFile: []byte("a.b.c\n"), CARootFile: root}
	readFile := func(p string) ([]byte, error) {
		if b, ok := files[p]; ok {
			return b, nil
		}
		return nil, fs.ErrNotExist
	}
	args := expand(proxy.Args, map[string]string{"POD_NAME": "web", "POD_NAMESPACE": "shop", "POD_IP": "10.1.2.3"})
	s, err := render.Parse(args, readFile)
	if err != nil {
		t.Fatalf("the sidecar refuses the injected arguments %v: %v", args, err)
	}
	if s.Node.ID != "web.shop" || s.Node.Namespace != "shop" || s.Node.ServiceAccount != "web" || s.Node.Address != "10.1.2.3" ||
		s.Node.Labels["app"] != "web" || s.Node.Labels["version"] != "v1" || s.TokenFile != TokenFile || s.CARoot != CARootFile ||
		s.StateDir != StateDir || s.Pilot[0] != DefaultPilotAddress || s.ReadyAddr.Port() != HealthPort || s.Intercept != "auto" {
		t.Errorf("settings %+v", s)
	}
}
