package runtime

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/listener"
)

// backend answers its name; with a release channel it first signals started and
// waits for release.
func backend(t *testing.T, name string, started chan<- struct{}, release <-chan struct{}) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if release != nil {
			started <- struct{}{}
			<-release
		}
		fmt.Fprint(w, name)
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// A request that started on the old configuration finishes on it, while requests
// after the swap use the new one.
func TestInFlightRequestFinishesOnOldConfig(t *testing.T) {
	e := newEnv(t)
	r := e.runtime()
	started, release := make(chan struct{}, 1), make(chan struct{})
	slow := backend(t, "old", started, release)
	fast := backend(t, "new", nil, nil)

	log := hclog.NewNullLogger()
	hp, tp := dt.Proxies(t, log, r.Degraded)
	srv, err := listener.New(listener.Config{Name: "outbound", Logger: log, Snapshot: r, HTTP: hp, TCP: tp})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := dt.Serve(t, srv, nil)
	ctx := context.Background()

	activate := func(res dt.Resources, rev int64) {
		t.Helper()
		if err := r.Apply(ctx, e.update(r, res, fmt.Sprint(rev), e.sign(res, signOpts{revision: rev}))); err != nil {
			t.Fatal(err)
		}
	}
	mesh := func(up string) dt.Resources {
		return dt.Simple("outbound", addr, false, dt.MustAddr(up))
	}
	activate(mesh(slow), 1)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	get := func() (string, error) {
		resp, err := client.Get("http://" + addr.String() + "/")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}

	var wg sync.WaitGroup
	var first string
	var firstErr error
	wg.Add(1)
	go func() { defer wg.Done(); first, firstErr = get() }()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("first request never reached the old backend")
	}
	activate(mesh(fast), 2) // swap while the first request is in flight
	if got, err := get(); err != nil || got != "new" {
		t.Fatalf("request after the swap = %q %v, want new", got, err)
	}
	close(release)
	wg.Wait()
	if firstErr != nil || first != "old" {
		t.Fatalf("in-flight request = %q %v, want old", first, firstErr)
	}
}
