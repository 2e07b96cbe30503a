package gen

import (
	"fmt"
	"slices"
	"testing"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/compile"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/resource"
)

// benchInput is a mesh of services spread over namespaces: each Service has an
// HTTP port and 3 Workloads in 3 zones; every 10th has a DestinationPolicy with
// two subsets and a weighted Route across them.
func benchInput(services, namespaces int) compile.Input {
	var objs []*resource.Object
	o := func(kind, ns, name string, labels map[string]string, spec any) {
		objs = append(objs, &resource.Object{APIVersion: resource.APIVersion, Kind: kind,
			Metadata: resource.Metadata{Name: name, Namespace: ns, Labels: labels}, Spec: spec})
	}
	for i := range services {
		ns := fmt.Sprintf("ns-%d", i%namespaces)
		name := fmt.Sprintf("svc-%d", i)
		o(resource.KindService, ns, name, nil, &resource.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []resource.ServicePort{{Name: "http", Port: 8080, TargetPort: 8080, Protocol: "HTTP"}},
		})
		for j := range 3 {
			o(resource.KindWorkload, ns, fmt.Sprintf("%s-%d", name, j), map[string]string{"app": name, "version": fmt.Sprintf("v%d", j%2)},
				&resource.WorkloadSpec{Address: fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1), ServiceAccount: name, Locality: fmt.Sprintf("r/z%d", j), Weight: 1})
		}
		if (i/10)%10 == 0 { // 100 services, spread over the namespaces
			o(resource.KindDestinationPolicy, ns, name, nil, &resource.DestinationPolicySpec{Service: name, LoadBalancer: "LEAST_REQUEST",
				Subsets:        []resource.Subset{{Name: "v0", Labels: map[string]string{"version": "v0"}}, {Name: "v1", Labels: map[string]string{"version": "v1"}}},
				ConnectionPool: &resource.ConnectionPool{MaxRequests: 100}})
			o(resource.KindRoute, ns, name, nil, &resource.RouteSpec{Hosts: []string{name}, HTTP: []resource.HTTPRoute{{
				Route:   []resource.RouteDestination{{Destination: resource.Destination{Service: name, Subset: "v0"}, Weight: 90}, {Destination: resource.Destination{Service: name, Subset: "v1"}, Weight: 10}},
				Timeout: "1s",
			}}})
		}
	}
	return compile.Input{Revision: 1, Objects: objs}
}

func BenchmarkCompile1000Services(b *testing.B) {
	in := benchInput(1000, 10)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := compile.Compile(in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProxy1000Services measures one proxy's snapshot in a 1,000-service
// mesh. "warm" is the steady state (the per-mesh shared pieces already built
// by an earlier proxy); "cold" includes building them, i.e. the first proxy
// after a new revision. "full" kinds get every service: a proxyless client, or
// a sidecar in a single-namespace mesh.
func BenchmarkProxy1000Services(b *testing.B) {
	proxyless := &node.Node{ID: "grpc-client"}
	sidecar := func(ns string) *node.Node {
		return &node.Node{ID: "s", Namespace: ns, Address: "10.200.0.1", Labels: map[string]string{"app": "svc-0"}}
	}
	cases := []struct {
		name       string
		namespaces int
		node       *node.Node
	}{
		{"proxyless-full", 10, proxyless},
		{"sidecar-full-1ns", 1, sidecar("ns-0")},
		{"sidecar-10ns", 10, sidecar("ns-0")},
	}
	for _, c := range cases {
		in := benchInput(1000, c.namespaces)
		for _, warm := range []bool{true, false} {
			name := c.name + "/cold"
			if warm {
				name = c.name + "/warm"
			}
			b.Run(name, func(b *testing.B) {
				mesh := mustMesh(b, in)
				if warm {
					mustProxy(b, mesh, c.node)
				}
				b.ReportAllocs()
				for b.Loop() {
					if !warm {
						b.StopTimer()
						mesh = mustMesh(b, in)
						b.StartTimer()
					}
					mustProxy(b, mesh, c.node)
				}
			})
		}
	}
}

func mustMesh(b *testing.B, in compile.Input) *ir.Mesh {
	b.Helper()
	m, err := compile.Compile(in)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// TestBenchInputConsistent keeps the benchmark's mesh honest: it compiles
// without warnings and every kind of proxy gets a consistent snapshot of the
// expected size (for a sidecar, one our sidecar accepts).
func TestBenchInputConsistent(t *testing.T) {
	m, err := compile.Compile(benchInput(1000, 10))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Warnings) != 0 {
		t.Fatalf("warnings: %v", m.Warnings[:min(5, len(m.Warnings))])
	}
	tests := []struct {
		node     *node.Node
		clusters int
	}{
		{&node.Node{ID: "proxyless"}, 1200}, // 1000 + 100 policies x 2 subsets
		{&node.Node{ID: "s", Namespace: "ns-0", Address: "10.200.0.1", Labels: map[string]string{"app": "svc-0"}}, 121}, // 100 + 10x2 + inbound
	}
	for _, tt := range tests {
		s := mustProxy(t, m, tt.node)
		if err := Consistent(s); err != nil {
			t.Errorf("%s: %v", tt.node.ID, err)
		}
		if tt.node.Registers() {
			if err := sidecarAccepts(s); err != nil {
				t.Errorf("%s: our sidecar rejects it: %v", tt.node.ID, err)
			}
		}
		if got := len(s.Resources["type.googleapis.com/envoy.config.cluster.v3.Cluster"]); got != tt.clusters {
			t.Errorf("%s: %d clusters, want %d", tt.node.ID, got, tt.clusters)
		}
	}
}

// BenchmarkRevision1000Services10000Sidecars is one store revision end to end as
// the ADS server sees it: compile a 1,000-service mesh and generate the
// snapshots of 10,000 registered sidecars (10 namespaces, each sidecar backing
// one of the 1,000 services, so 1,000 workload classes).
func BenchmarkRevision1000Services10000Sidecars(b *testing.B) {
	in := benchInput(1000, 10)
	nodes := make([]*node.Node, 10000)
	for i := range nodes {
		svc := i % 1000
		nodes[i] = &node.Node{ID: fmt.Sprintf("sidecar-%d", i), Namespace: fmt.Sprintf("ns-%d", svc%10),
			Address: fmt.Sprintf("10.%d.%d.%d", 100+i/62500, i/250%250, i%250+1), Labels: map[string]string{"app": fmt.Sprintf("svc-%d", svc)}}
	}
	in.Proxies = nodes
	b.Run("full", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			mesh := mustMesh(b, in)
			for _, n := range nodes {
				mustProxy(b, mesh, n)
			}
		}
	})
	// Issue #10's wire: every Service has a VIP (as pilot allocates) and
	// every sidecar is intercepted, so each outbound listener carries chains
	// by VIP:port, the passthrough pieces and its scope's DNS name table.
	b.Run("full-vips-intercepted", func(b *testing.B) {
		vin := in
		vin.Objects = slices.Clone(in.Objects)
		n := 0
		for i, o := range vin.Objects {
			if o.Kind == resource.KindService {
				cp := *o
				cp.Status = &resource.Status{Addresses: []string{fmt.Sprintf("240.240.%d.%d", n/250, n%250+1)}}
				vin.Objects[i] = &cp
				n++
			}
		}
		inodes := make([]*node.Node, len(nodes))
		for i, nd := range nodes {
			cp := *nd
			cp.Interception = node.InterceptionIPTables
			inodes[i] = &cp
		}
		vin.Proxies = inodes
		b.ReportAllocs()
		for b.Loop() {
			mesh := mustMesh(b, vin)
			for _, n := range inodes {
				mustProxy(b, mesh, n)
			}
		}
	})
	// One Workload's address flips every revision and compile gets the
	// previous mesh: what the load test's single endpoint change costs.
	b.Run("one-endpoint-change", func(b *testing.B) {
		var w *resource.Object
		for i, o := range in.Objects {
			if o.Kind == resource.KindWorkload && o.Metadata.Name == "svc-500-0" {
				cp := *o
				spec := *o.Spec.(*resource.WorkloadSpec)
				cp.Spec = &spec
				w = &cp
				in.Objects = append(slices.Clone(in.Objects[:i]), append([]*resource.Object{w}, in.Objects[i+1:]...)...)
				break
			}
		}
		prev := mustMesh(b, in)
		for _, n := range nodes {
			mustProxy(b, prev, n)
		}
		addrs := [2]string{"10.250.0.1", "10.250.0.2"}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			w.Spec.(*resource.WorkloadSpec).Address = addrs[i%2]
			in.Previous = prev
			mesh := mustMesh(b, in)
			for _, n := range nodes {
				mustProxy(b, mesh, n)
			}
			prev = mesh
		}
	})
}
