package activation

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/listener"
)

// Requests never wait on an activation: while a 1,000 Services × 10 rules
// candidate is being compiled (held there by the test, so the activation is in
// progress for as long as the test needs), a request that starts then is routed
// on the active configuration and completes, and one that started before the
// activation completes on the old configuration after the swap.
func TestRequestsDuringBigActivation(t *testing.T) {
	// The application: "/slow" waits for release.
	started, release := make(chan struct{}, 1), make(chan struct{})
	appLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	app := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started <- struct{}{}
			<-release
		}
		io.WriteString(w, "app")
	})}
	go app.Serve(appLn)
	defer app.Close()

	// Compile: the second and later activations stop at compiling until let go.
	compiling, proceed := make(chan struct{}, 1), make(chan struct{})
	compiles := 0
	compile := func(state map[string]map[string]any) (*dataplane.Config, error) {
		compiles++ // Apply calls Compile under the runtime's lock: no race
		if compiles > 1 {
			compiling <- struct{}{}
			<-proceed
		}
		return dataplane.Compile(state)
	}
	f := newFixtureWith(t, appLn.Addr().(*net.TCPAddr).Port, compile)
	f.activate(t, f.snaps[0])

	log := hclog.NewNullLogger()
	hp, tp := dt.Proxies(t, log, f.rt.Degraded)
	srv, err := listener.New(listener.Config{Name: "outbound", Logger: log, Snapshot: f.rt, HTTP: hp, TCP: tp,
		Destination: servicePort{}})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := dt.Serve(t, srv, nil)

	client := &http.Client{Timeout: heldClientTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	type result struct {
		body string
		err  error
	}
	get := func(path string) result {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr.String()+path, nil)
		if err != nil {
			return result{err: err}
		}
		req.Host = "svc-0"
		resp, err := client.Do(req)
		if err != nil {
			return result{err: err}
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = &statusError{resp.StatusCode, string(b)}
		}
		return result{string(b), err}
	}

	// Decoded first, as the xDS client does before it applies: the request held
	// across the activation is held for Apply only.
	old := f.rt.Load()
	u := decode(t, f.rt, f.snaps[1])
	before := make(chan result, 1)
	go func() { before <- get("/slow") }() // in flight when the activation starts
	select {
	case <-started:
	case r := <-before:
		t.Fatalf("the first request = %q %v before reaching the application", r.body, r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never reached the application")
	}
	applied := make(chan error, 1)
	go func() { applied <- f.rt.Apply(context.Background(), u) }()
	select {
	case <-compiling:
	case <-time.After(10 * time.Second):
		t.Fatal("the activation never reached compile")
	}
	// The activation is in progress and holds the runtime's lock. A new request
	// is served on the active configuration, now.
	during := make(chan result, 1)
	go func() { during <- get("/") }()
	select {
	case r := <-during:
		if r.err != nil || r.body != "app" {
			t.Fatalf("request during the activation = %q %v, want app", r.body, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a request started during the activation waited for it")
	}
	if f.rt.Load() != old {
		t.Fatal("the configuration changed before the activation finished")
	}
	close(proceed)
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	if f.rt.Load() == old {
		t.Fatal("the activation did not swap a new configuration in")
	}
	close(release)
	if r := <-before; r.err != nil || r.body != "app" {
		t.Fatalf("request in flight across the swap = %q %v, want app", r.body, r.err)
	}
	if r := get("/"); r.err != nil || r.body != "app" {
		t.Fatalf("request after the swap = %q %v, want app", r.body, r.err)
	}
}

// heldClientTimeout bounds every request of TestRequestsDuringBigActivation,
// including the one held in the application across a whole activation.
const heldClientTimeout = 10 * time.Second

// servicePort says every connection was sent to a Service port 8080, as the
// redirect of a captured outbound connection would.
type servicePort struct{}

func (servicePort) Destination(net.Conn) (netip.AddrPort, error) {
	return netip.MustParseAddrPort("10.0.0.1:8080"), nil
}

type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string { return "status " + strconv.Itoa(e.code) + ": " + e.body }
