// Package servertest starts a real, in-process pilot (store, admin API, xDS
// server) on loopback ports for end-to-end tests, and offers the few admin calls
// those tests need (apply YAML, delete, read status). It is test support only.
package servertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/pilot/api"
	"github.com/weft-mesh/weft/pilot/server"
	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/status/outlieragg"
	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/tools/testkit"
)

// Pilot is a running pilot.
type Pilot struct {
	AdminURL   string // http://127.0.0.1:PORT
	XDSAddr    string // 127.0.0.1:PORT, plaintext
	XDSTLSAddr string // 127.0.0.1:PORT; "" without Options.CA
	DataDir    string

	cancel context.CancelFunc
	done   chan error
	hc     *http.Client
	tr     *http.Transport
}

// Options tune Start; the zero value is fine.
type Options struct {
	Limits  *server.XDSLimits    // nil: DefaultXDSLimits with a short debounce
	Logger  hclog.Logger         // nil: a null logger
	DataDir string               // "": t.TempDir()
	Status  *server.StatusLimits // nil: DefaultStatusLimits
	// Secure runs without --insecure-plaintext-registration (plaintext clients
	// read only). The zero value keeps it on, so tests of other features
	// register fake sidecars over plaintext as before.
	Secure bool
	// CA, when set, runs the TLS xDS listener with it.
	CA server.AuthorityFunc
	// Store, when set, wraps the store pilot's xDS server reads (a test that
	// holds back its watch decides when pilot compiles what was applied).
	Store func(store.Store) store.Store
}

// Start runs pilot until the test ends (Stop is registered with t.Cleanup).
func Start(t testing.TB, o Options) *Pilot {
	t.Helper()
	lim := server.DefaultXDSLimits()
	lim.Debounce, lim.MaxDelay = 10*time.Millisecond, 100*time.Millisecond
	if o.Limits != nil {
		lim = *o.Limits
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.DataDir == "" {
		o.DataDir = t.TempDir()
	}
	st := server.DefaultStatusLimits()
	if o.Status != nil {
		st = *o.Status
	}
	ctx, cancel := context.WithCancel(context.Background())
	admin, xds, xdsTLS := make(chan net.Addr, 1), make(chan net.Addr, 1), make(chan net.Addr, 1)
	p := &Pilot{DataDir: o.DataDir, cancel: cancel, done: make(chan error, 1), tr: &http.Transport{}}
	p.hc = &http.Client{Transport: p.tr, Timeout: 30 * time.Second}
	xdsFunc := server.ServeADS(lim)
	if o.Store != nil {
		serve := xdsFunc
		xdsFunc = func(ctx context.Context, env server.XDSEnv) error {
			env.Store = o.Store(env.Store)
			return serve(ctx, env)
		}
	}
	go func() {
		p.done <- server.Run(ctx, server.Config{
			DataDir: o.DataDir, AdminAddr: "127.0.0.1:0", XDSAddr: "127.0.0.1:0", XDSTLSAddr: "127.0.0.1:0", Logger: o.Logger,
			InsecurePlaintextRegistration: !o.Secure, CA: o.CA,
			Status: st, XDS: xdsFunc, OnReady: func(a net.Addr) { admin <- a }, OnXDSReady: func(a net.Addr) { xds <- a },
			OnXDSTLSReady: func(a net.Addr) { xdsTLS <- a },
		})
	}()
	for p.AdminURL == "" || p.XDSAddr == "" || (o.CA != nil && p.XDSTLSAddr == "") {
		select {
		case a := <-admin:
			p.AdminURL = "http://" + a.String()
		case a := <-xds:
			p.XDSAddr = a.String()
		case a := <-xdsTLS:
			p.XDSTLSAddr = a.String()
		case err := <-p.done:
			cancel()
			t.Fatalf("pilot stopped at start: %v", err)
		case <-time.After(20 * time.Second):
			cancel()
			t.Fatal("pilot not ready within 20s")
		}
	}
	t.Cleanup(func() { p.Stop(t) })
	return p
}

// Stop stops pilot and waits for it; safe to call twice.
func (p *Pilot) Stop(t testing.TB) {
	t.Helper()
	if p.cancel == nil {
		return
	}
	p.cancel()
	p.cancel = nil
	p.tr.CloseIdleConnections()
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("pilot stopped with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Error("pilot did not stop within 20s")
	}
}

func (p *Pilot) do(ctx context.Context, method, path, ctype string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, p.AdminURL+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return b, fmt.Errorf("%s %s: %d: %s", method, path, resp.StatusCode, bytes.TrimSpace(b))
	}
	return b, nil
}

// Apply applies a YAML document set as one revision and returns that revision.
func (p *Pilot) Apply(t testing.TB, yaml string) int64 {
	t.Helper()
	b, err := p.do(context.Background(), http.MethodPost, api.Prefix+"/apply", "application/yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	var ar api.ApplyResponse
	if err := json.Unmarshal(b, &ar); err != nil {
		t.Fatalf("apply answer: %v", err)
	}
	return ar.Revision
}

// Delete deletes one namespaced object by plural kind ("workloads") and returns
// the new revision.
func (p *Pilot) Delete(t testing.TB, plural, ns, name string) int64 {
	t.Helper()
	b, err := p.do(context.Background(), http.MethodDelete, api.Prefix+"/namespaces/"+ns+"/"+plural+"/"+name, "", nil)
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	var dr api.DeleteResponse
	if err := json.Unmarshal(b, &dr); err != nil {
		t.Fatalf("delete answer: %v", err)
	}
	return dr.Revision
}

// Proxy reads one proxy's status; ok is false while pilot does not know it.
func (p *Pilot) Proxy(t testing.TB, id string) (status.ProxyStatus, bool) {
	t.Helper()
	var ps status.ProxyStatus
	b, err := p.do(context.Background(), http.MethodGet, "/apis/status/v1/proxies/"+id, "", nil)
	if err != nil {
		return ps, false
	}
	if err := json.Unmarshal(b, &ps); err != nil {
		t.Fatalf("proxy status: %v", err)
	}
	return ps, true
}

// Revision reads the rollout status of rev.
func (p *Pilot) Revision(t testing.TB, rev int64) status.RevisionStatus {
	t.Helper()
	var rs status.RevisionStatus
	b, err := p.do(context.Background(), http.MethodGet, fmt.Sprintf("/apis/status/v1/revisions/%d", rev), "", nil)
	if err != nil {
		t.Fatalf("revision status: %v", err)
	}
	if err := json.Unmarshal(b, &rs); err != nil {
		t.Fatalf("revision status: %v", err)
	}
	return rs
}

// Outliers reads the outlier aggregate (GET /apis/status/v1/outliers).
func (p *Pilot) Outliers(t testing.TB) outlieragg.View {
	t.Helper()
	var v outlieragg.View
	b, err := p.do(context.Background(), http.MethodGet, "/apis/status/v1/outliers", "", nil)
	if err != nil {
		t.Fatalf("outliers: %v", err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("outliers: %v", err)
	}
	return v
}

// WaitProxy waits up to d until node id is connected with a status cond accepts and
// returns that status; the failure names what and shows the last status seen.
func (p *Pilot) WaitProxy(t testing.TB, d time.Duration, id, what string, cond func(status.ProxyStatus) bool) status.ProxyStatus {
	t.Helper()
	var ps status.ProxyStatus
	testkit.Wait(t, d, func() error {
		var ok bool
		if ps, ok = p.Proxy(t, id); !ok {
			return fmt.Errorf("proxy %s: %s: not connected", id, what)
		}
		if !cond(ps) {
			return fmt.Errorf("proxy %s: %s: status %+v", id, what, ps)
		}
		return nil
	})
	return ps
}

// Metrics returns the admin /metrics page (Prometheus text format).
func (p *Pilot) Metrics(t testing.TB) string {
	t.Helper()
	b, err := p.do(context.Background(), http.MethodGet, "/metrics", "", nil)
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	return string(b)
}
