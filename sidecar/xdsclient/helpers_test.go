package xdsclient

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/weft-mesh/weft/bootstrap/node"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Test resources stand in for what sidecar/xdsresource decodes: a listener refers to
// the route names in its stat_prefix (comma separated), an EDS cluster to its own
// ClusterLoadAssignment. A name starting with "bad" fails validation.

type testListener struct{ routes []string }

func (l testListener) References() (string, []string) { return TypeRoute, l.routes }

type testCluster struct {
	name string
	eds  bool
}

func (c testCluster) References() (string, []string) {
	if !c.eds {
		return TypeEndpoint, nil
	}
	return TypeEndpoint, []string{c.name}
}

var errInvalid = errors.New("invalid")

func testDecode(typeURL string, a *anypb.Any) (string, any, error) {
	m, err := a.UnmarshalNew()
	if err != nil {
		return "", nil, fmt.Errorf("unmarshal: %w", err)
	}
	var name string
	var v any
	switch r := m.(type) {
	case *listenerv3.Listener:
		name = r.GetName()
		var routes []string
		if r.GetStatPrefix() != "" {
			routes = strings.Split(r.GetStatPrefix(), ",")
		}
		v = testListener{routes: routes}
	case *clusterv3.Cluster:
		name = r.GetName()
		v = testCluster{name: name, eds: r.GetType() == clusterv3.Cluster_EDS}
	case *routev3.RouteConfiguration:
		name, v = r.GetName(), r.GetName()
	case *endpointv3.ClusterLoadAssignment:
		name, v = r.GetClusterName(), r.GetClusterName()
	default:
		return "", nil, fmt.Errorf("unexpected %T", m)
	}
	if strings.HasPrefix(name, "bad") {
		return name, nil, errInvalid
	}
	return name, v, nil
}

func listener(name string, routes ...string) *listenerv3.Listener {
	return &listenerv3.Listener{Name: name, StatPrefix: strings.Join(routes, ",")}
}

func cluster(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}}
}

func route(name string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: name}
}

func endpoints(name string) *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{ClusterName: name}
}

func mustAny(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var allTypes = []string{TypeCluster, TypeEndpoint, TypeListener, TypeRoute}

func testNode() *node.Node {
	return &node.Node{ID: "sidecar-1", Namespace: "shop", ServiceAccount: "reviews", Address: "127.0.0.21", InboundPort: 15006, Labels: map[string]string{"app": "reviews"}}
}

// applier records the candidates it is given and can be told to reject.
type applier struct {
	mu     sync.Mutex
	calls  []*Update
	reject error
}

func (a *applier) apply(_ context.Context, u *Update) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, u)
	return a.reject
}

func (a *applier) setReject(err error) {
	a.mu.Lock()
	a.reject = err
	a.mu.Unlock()
}

func testConfig(t testing.TB, mode Mode, ap *applier, servers ...string) Config {
	if len(servers) == 0 {
		servers = []string{"127.0.0.1:1"}
	}
	return Config{
		Node:         testNode(),
		Servers:      servers,
		Mode:         mode,
		Types:        allTypes,
		Decode:       testDecode,
		Apply:        ap.apply,
		Logger:       hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Warn, Output: testWriter{t}}),
		Backoff:      Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		ConfirmAfter: 50 * time.Millisecond,
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// names lists the names held for a type, sorted.
func names(u *Update, typeURL string) []string {
	return slices.Sorted(maps.Keys(u.Resources[typeURL]))
}

// waitTimeout bounds every wait on the client's state in these tests.
const waitTimeout = 10 * time.Second
