package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/weft-mesh/weft/bootstrap/probe"
)

// Bounds of the application probe forwarding (/app-health/...).
const (
	// MaxAppProbesInFlight: one more concurrent probe is answered 503 at once,
	// so a flood of probe requests on 15021 cannot become a flood on the app.
	MaxAppProbesInFlight = 16
	// MaxAppProbeBody is how much of the app's answer is read (then discarded).
	MaxAppProbeBody = 4 << 10
	// MaxAppProbeHeaderBytes bounds the app's response head.
	MaxAppProbeHeaderBytes = 16 << 10
)

// appProber forwards the kubelet's rewritten probes to the application's
// original ones (bootstrap/inject moved them behind the sidecar, as Istio's probe
// rewrite does: with interception and STRICT mTLS the kubelet could no longer
// reach the app's port itself). Only the configured paths are served, each to
// its fixed port on the app address with its fixed path and headers: the
// request's own path, query, headers and body are never passed on, so this is
// not a proxy anyone could aim elsewhere.
type appProber struct {
	probers probe.Probers
	addr    netip.Addr
	client  *http.Client
	slots   chan struct{} // cap MaxAppProbesInFlight
}

func newAppProber(p probe.Probers, addr netip.Addr) *appProber {
	if !addr.IsValid() {
		addr = netip.MustParseAddr("127.0.0.1")
	}
	return &appProber{probers: p, addr: addr, slots: make(chan struct{}, MaxAppProbesInFlight),
		client: &http.Client{
			// The kubelet does not verify an HTTPS probe's certificate either.
			Transport: &http.Transport{DisableKeepAlives: true, MaxResponseHeaderBytes: MaxAppProbeHeaderBytes,
				TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // #nosec: as the kubelet's HTTPS probe
				DialContext:     (&net.Dialer{}).DialContext, Proxy: nil},
			// A redirect's status is the answer (the kubelet counts 3xx as success).
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}}
}

// ServeHTTP answers GET /app-health/<container>/<kind> with the app's status
// code, or 404 for a path not configured, 503 when the app cannot be reached in
// the probe's timeout or MaxAppProbesInFlight are running.
func (a *appProber) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, ok := a.probers[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	select {
	case a.slots <- struct{}{}:
		defer func() { <-a.slots }()
	default:
		http.Error(w, "app probe: too many probes in flight", http.StatusServiceUnavailable)
		return
	}
	code, err := a.probe(r.Context(), p)
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		http.Error(w, "app probe: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(code)
}

func (a *appProber) probe(ctx context.Context, p probe.Prober) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, p.Timeout())
	defer cancel()
	scheme := "http"
	if p.HTTPGet.Scheme == "HTTPS" {
		scheme = "https"
	}
	path := p.HTTPGet.Path
	if path == "" {
		path = "/"
	}
	url := scheme + "://" + net.JoinHostPort(a.addr.String(), strconv.Itoa(p.HTTPGet.Port)) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("User-Agent", "weft-prober/1.0")
	for _, h := range p.HTTPGet.HTTPHeaders {
		if http.CanonicalHeaderKey(h.Name) == "Host" {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return 0, fmt.Errorf("no answer from port %d within %v", p.HTTPGet.Port, p.Timeout())
		}
		return 0, fmt.Errorf("port %d: %v", p.HTTPGet.Port, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxAppProbeBody))
	return resp.StatusCode, nil
}

// liveHandler is /healthz/live: 200 while the sidecar's process answers HTTP
// at all (its liveness; readiness is /healthz/ready).
func liveHandler(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprintln(w, "live")
}

// appProbeTimeoutBound keeps a forwarded probe within the readiness server's
// write timeout (probe.MaxTimeoutSeconds is below it).
var _ = [1]struct{}{}[time.Duration(probe.MaxTimeoutSeconds)*time.Second/WriteTimeout]
