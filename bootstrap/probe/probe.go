// Package probe is the wire shape of the application probes the injector moves
// behind the sidecar (bootstrap/inject writes it, sidecar/admin serves it): the
// environment variable WEFT_KUBE_APP_PROBERS holds a JSON object in the shape of
// Istio's ISTIO_KUBE_APP_PROBERS,
//
//	{"/app-health/web/livez": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "timeoutSeconds": 1}}
//
// one entry per rewritten Kubernetes HTTP probe, keyed by the path the kubelet
// now asks the sidecar for on 15021. It is a leaf: the sidecar links it, so it
// must not bring in Kubernetes' API types.
package probe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// EnvName is the weft-proxy container's environment variable holding the probers.
const EnvName = "WEFT_KUBE_APP_PROBERS"

// PathPrefix starts every rewritten probe's path: /app-health/<container>/<kind>.
const PathPrefix = "/app-health/"

// Kinds of probe, as the path's last segment (Istio's names).
const (
	Liveness  = "livez"
	Readiness = "readyz"
	Startup   = "startupz"
)

// Bounds of what Parse accepts (the injector refuses a pod past them).
const (
	// MaxBytes bounds the JSON (an environment variable; the kubelet's own
	// limits are far larger).
	MaxBytes = 64 << 10
	// MaxProbers: three probes for each of up to 64 containers would be 192; a pod
	// with more than this many HTTP probes is refused.
	MaxProbers = 64
	// MaxHeaders per probe, and the bytes of one path, header name or value.
	MaxHeaders     = 16
	MaxStringBytes = 1024
	// DefaultTimeout is the kubelet's default timeoutSeconds (1).
	DefaultTimeout = time.Second
	// MaxTimeoutSeconds bounds one forwarded probe: it must finish within the
	// sidecar's readiness server's write timeout (sidecar/admin WriteTimeout 30s).
	MaxTimeoutSeconds = 25
)

// Header is one of a probe's httpHeaders.
type Header struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// HTTPGet is the application's original probe target, its port resolved to a
// number (a named port is resolved by the injector against the container's ports).
type HTTPGet struct {
	Path        string   `json:"path,omitempty"` // with its query, if any; "" is "/"
	Port        int      `json:"port"`
	Scheme      string   `json:"scheme,omitempty"` // HTTP (default) or HTTPS (certificate not verified, as the kubelet)
	HTTPHeaders []Header `json:"httpHeaders,omitempty"`
}

// Prober is one rewritten probe.
type Prober struct {
	HTTPGet        *HTTPGet `json:"httpGet"`
	TimeoutSeconds int32    `json:"timeoutSeconds,omitempty"` // 0: DefaultTimeout
}

// Timeout is the prober's bound on one forwarded probe.
func (p Prober) Timeout() time.Duration {
	if p.TimeoutSeconds <= 0 {
		return DefaultTimeout
	}
	return time.Duration(p.TimeoutSeconds) * time.Second
}

// Probers maps a rewritten path (Key) to the original probe.
type Probers map[string]Prober

// Key is the path the kubelet asks the sidecar for: /app-health/<container>/<kind>.
func Key(container, kind string) string { return PathPrefix + container + "/" + kind }

// Encode is the JSON, keys sorted (deterministic: golden files compare it).
func (p Probers) Encode() (string, error) {
	if err := p.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("%s: %w", EnvName, err)
	}
	return string(b), nil
}

// Parse decodes and validates WEFT_KUBE_APP_PROBERS. Empty is no probers.
// Unknown fields are errors (the injector and the sidecar are one release).
func Parse(s string) (Probers, error) {
	if strings.TrimSpace(s) == "" {
		return Probers{}, nil
	}
	if len(s) > MaxBytes {
		return nil, fmt.Errorf("%s: %d bytes, limit %d", EnvName, len(s), MaxBytes)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	var p Probers
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%s: %w", EnvName, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: trailing data after the JSON object", EnvName)
	}
	if p == nil {
		return nil, fmt.Errorf("%s: null, want an object", EnvName)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// Validate checks every prober; errors name the key and field.
func (p Probers) Validate() error {
	if len(p) > MaxProbers {
		return fmt.Errorf("%s: %d probers, limit %d", EnvName, len(p), MaxProbers)
	}
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys) // report the same bad key every time
	for _, k := range keys {
		if err := validKey(k); err != nil {
			return fmt.Errorf("%s: key %q: %v", EnvName, k, err)
		}
		if err := p[k].validate(); err != nil {
			return fmt.Errorf("%s[%q]: %v", EnvName, k, err)
		}
	}
	return nil
}

func validKey(k string) error {
	rest, ok := strings.CutPrefix(k, PathPrefix)
	if !ok {
		return fmt.Errorf("want %s<container>/%s|%s|%s", PathPrefix, Liveness, Readiness, Startup)
	}
	container, kind, ok := strings.Cut(rest, "/")
	if !ok || !ValidContainerName(container) {
		return fmt.Errorf("want %s<container>/<kind> with a DNS-1123 label container name", PathPrefix)
	}
	switch kind {
	case Liveness, Readiness, Startup:
		return nil
	}
	return fmt.Errorf("kind %q, want %s, %s or %s", kind, Liveness, Readiness, Startup)
}

// ValidContainerName: a Kubernetes container name is a DNS-1123 label.
func ValidContainerName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0 && i < len(s)-1) {
			return false
		}
	}
	return true
}

func (p Prober) validate() error {
	if p.HTTPGet == nil {
		return fmt.Errorf("httpGet: required")
	}
	if p.TimeoutSeconds < 0 || p.TimeoutSeconds > MaxTimeoutSeconds {
		return fmt.Errorf("timeoutSeconds: %d outside 0..%d", p.TimeoutSeconds, MaxTimeoutSeconds)
	}
	g := p.HTTPGet
	if g.Port < 1 || g.Port > 65535 {
		return fmt.Errorf("httpGet.port: %d outside 1..65535", g.Port)
	}
	switch g.Scheme {
	case "", "HTTP", "HTTPS":
	default:
		return fmt.Errorf("httpGet.scheme: %q, want HTTP or HTTPS", g.Scheme)
	}
	if err := ValidPath(g.Path); err != nil {
		return fmt.Errorf("httpGet.path: %v", err)
	}
	if len(g.HTTPHeaders) > MaxHeaders {
		return fmt.Errorf("httpGet.httpHeaders: %d headers, limit %d", len(g.HTTPHeaders), MaxHeaders)
	}
	for i, h := range g.HTTPHeaders {
		if !httpguts.ValidHeaderFieldName(h.Name) || len(h.Name) > MaxStringBytes {
			return fmt.Errorf("httpGet.httpHeaders[%d].name: %q is not a header name", i, h.Name)
		}
		if !httpguts.ValidHeaderFieldValue(h.Value) || len(h.Value) > MaxStringBytes {
			return fmt.Errorf("httpGet.httpHeaders[%d].value: not a valid header value (control characters, or over %d bytes)", i, MaxStringBytes)
		}
	}
	return nil
}

// ValidPath: "" (the root) or an absolute request path with an optional query,
// at most MaxStringBytes, no control characters or spaces.
func ValidPath(path string) error {
	if path == "" {
		return nil
	}
	if len(path) > MaxStringBytes {
		return fmt.Errorf("%d bytes, limit %d", len(path), MaxStringBytes)
	}
	if path[0] != '/' || strings.ContainsFunc(path, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("%q is not an absolute path without spaces or control characters", path)
	}
	if _, err := url.ParseRequestURI(path); err != nil {
		return fmt.Errorf("%q: %v", path, err)
	}
	return nil
}
