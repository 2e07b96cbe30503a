// Package webhook is the mutating admission webhook that injects the sidecar:
// Kubernetes POSTs an admission.k8s.io/v1 AdmissionReview to /inject (HTTPS,
// pilot's :15017, a serving certificate from the mesh CA), the answer carries
// bootstrap/inject's JSONPatch.
//
// Answers, by what came in:
//   - a review this package cannot read (not JSON, not an AdmissionReview v1,
//     no request or uid, an object that does not decode as its kind, a body over
//     MaxRequestBytes): allowed, no patch, and the error logged. The pod is
//     admitted as it is; whether a broken webhook call blocks pods is the
//     cluster's choice (failurePolicy), not this decoder's.
//   - not a CREATE, or a kind injection does not handle: allowed, no patch.
//   - skipped (opted out, already injected, namespace never injected,
//     hostNetwork): allowed, no patch.
//   - a pod that should be injected but cannot be (a reserved name or port, a
//     bad annotation, a named probe port that does not exist): refused, with the
//     error naming the field. Admitting it without the sidecar would silently
//     leave it outside the mesh's policy.
//   - the injection settings (MeshConfig) unreadable: refused (transient).
//   - otherwise: allowed with the patch.
package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/weft-mesh/weft/bootstrap/inject"
)

// Path is where the API server sends reviews (the MutatingWebhookConfiguration's
// clientConfig.service.path).
const Path = "/inject"

// Bounds of the webhook server.
const (
	// MaxRequestBytes bounds one AdmissionReview: an object is at most 1.5 MiB
	// in etcd, and a CREATE carries it once (no oldObject).
	MaxRequestBytes = 4 << 20
	// The API server waits at most 30s (timeoutSeconds, default 10s) for a review.
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 10 * time.Second
	WriteTimeout      = 10 * time.Second
	IdleTimeout       = 90 * time.Second
	MaxHeaderBytes    = 16 << 10
	ShutdownTimeout   = 5 * time.Second
	// SettingsTimeout bounds reading the injection settings for one review.
	SettingsTimeout = 2 * time.Second
)

// APIVersion and Kind of every review.
const (
	APIVersion = "admission.k8s.io/v1"
	Kind       = "AdmissionReview"
)

// Outcomes, as the metric's result label.
const (
	Injected  = "injected"
	Skipped   = "skipped"
	Ignored   = "ignored"   // not a CREATE, or not a kind injection handles
	Malformed = "malformed" // allowed unchanged, error logged
	Denied    = "denied"
)

// ErrMalformed wraps every error of Decode.
var ErrMalformed = errors.New("malformed AdmissionReview")

// Decode reads an AdmissionReview request. The envelope is read leniently
// (fields a newer API server adds are ignored), and must be admission.k8s.io/v1
// with a request and a uid. The uid is returned when it could be read, also
// with an error, so the answer can name it.
func Decode(body []byte) (*admissionv1.AdmissionRequest, string, error) {
	var r admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	var uid string
	if r.Request != nil {
		uid = string(r.Request.UID)
	}
	switch {
	case r.APIVersion != APIVersion || r.Kind != Kind:
		return nil, uid, fmt.Errorf("%w: apiVersion %q kind %q, want %s %s", ErrMalformed, r.APIVersion, r.Kind, APIVersion, Kind)
	case r.Request == nil:
		return nil, uid, fmt.Errorf("%w: no request", ErrMalformed)
	case uid == "":
		return nil, uid, fmt.Errorf("%w: request.uid: empty", ErrMalformed)
	}
	return r.Request, uid, nil
}

// Respond answers one decoded request with the injection settings cfg. It is
// pure. The outcome is one of the constants above; err, when set, is what to
// log (a Malformed object or a Denied pod).
func Respond(req *admissionv1.AdmissionRequest, cfg inject.Config) (resp *admissionv1.AdmissionResponse, outcome string, err error) {
	allow := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	gvk := schema.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind}
	obj := inject.New(gvk)
	if req.Operation != admissionv1.Create || obj == nil || req.SubResource != "" {
		return allow, Ignored, nil
	}
	if len(bytes.TrimSpace(req.Object.Raw)) == 0 {
		return allow, Malformed, fmt.Errorf("%w: request.object: empty", ErrMalformed)
	}
	// Case-sensitive, as the API server reads it: "Metadata" is not metadata
	// (encoding/json would take it, and the patch's paths would then miss).
	if err := utiljson.Unmarshal(req.Object.Raw, obj); err != nil {
		return allow, Malformed, fmt.Errorf("%w: request.object as %s: %v", ErrMalformed, gvk.Kind, err)
	}
	res, err := inject.Mutate(inject.Input{Object: obj, Namespace: req.Namespace}, cfg)
	if err != nil {
		return deny(req, err), Denied, err
	}
	if res.Skipped != "" {
		return allow, Skipped, nil
	}
	patch, err := json.Marshal(res.Patch)
	if err != nil {
		return deny(req, err), Denied, err
	}
	pt := admissionv1.PatchTypeJSONPatch
	allow.Patch, allow.PatchType = patch, &pt
	return allow, Injected, nil
}

func deny(req *admissionv1.AdmissionRequest, err error) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Reason: metav1.StatusReasonBadRequest, Code: http.StatusBadRequest,
		Message: "weft sidecar injection: " + err.Error(),
	}}
}

// Review is one whole exchange: the request body in, the response body and the
// outcome out; logErr is what the caller logs. settings is called only for a
// review that needs it.
func Review(body []byte, settings func() (inject.Config, error)) (out []byte, outcome string, logErr error) {
	req, uid, err := Decode(body)
	var resp *admissionv1.AdmissionResponse
	switch {
	case err != nil:
		resp, outcome, logErr = &admissionv1.AdmissionResponse{UID: types.UID(uid), Allowed: true}, Malformed, err
	case needsSettings(req):
		cfg, serr := settings()
		if serr != nil {
			serr = fmt.Errorf("injection settings: %w", serr)
			resp, outcome, logErr = deny(req, serr), Denied, serr
			break
		}
		resp, outcome, logErr = Respond(req, cfg)
	default:
		resp, outcome, logErr = Respond(req, inject.Config{})
	}
	out, err = json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: Kind}, Response: resp})
	if err != nil { // cannot happen with these types; answered allowed all the same
		return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"","allowed":true}}`), Malformed, err
	}
	return out, outcome, logErr
}

func needsSettings(req *admissionv1.AdmissionRequest) bool {
	return req.Operation == admissionv1.Create && req.SubResource == "" &&
		inject.New(schema.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind}) != nil
}

// Config of the handler.
type Config struct {
	Logger hclog.Logger // required
	// Settings returns the injection settings (MeshConfig's sidecar, the mesh's)
	// for one review; required. ctx is bounded by SettingsTimeout.
	Settings func(ctx context.Context) (inject.Config, error)
	// Registerer, when set, gets weft_pilot_webhook_reviews_total{result}.
	Registerer prometheus.Registerer
}

// Handler serves Path.
type Handler struct {
	cfg     Config
	reviews *prometheus.CounterVec
}

// New checks cfg.
func New(cfg Config) (*Handler, error) {
	if cfg.Logger == nil || cfg.Settings == nil {
		return nil, errors.New("webhook: Logger and Settings are required")
	}
	h := &Handler{cfg: cfg, reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "weft_pilot_webhook_reviews_total", Help: "Admission reviews answered by the injection webhook, by result.",
	}, []string{"result"})}
	for _, r := range []string{Injected, Skipped, Ignored, Malformed, Denied} {
		h.reviews.WithLabelValues(r)
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(h.reviews); err != nil {
			return nil, fmt.Errorf("webhook: metrics: %w", err)
		}
	}
	return h, nil
}

// ServeHTTP answers POST Path; anything else is 404 or 405.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	var out []byte
	var outcome string
	var logErr error
	if err != nil {
		// Too large or cut off: nothing to read a uid from.
		out, outcome, _ = Review(nil, nil)
		logErr = fmt.Errorf("%w: body: %v (limit %d bytes)", ErrMalformed, err, MaxRequestBytes)
	} else {
		out, outcome, logErr = Review(body, func() (inject.Config, error) {
			ctx, cancel := context.WithTimeout(r.Context(), SettingsTimeout)
			defer cancel()
			return h.cfg.Settings(ctx)
		})
	}
	h.reviews.WithLabelValues(outcome).Inc()
	switch {
	case outcome == Malformed:
		h.cfg.Logger.Error("admission review answered allowed without injection", "error", logErr, "remote", r.RemoteAddr)
	case logErr != nil:
		h.cfg.Logger.Warn("admission review denied", "error", logErr)
	case outcome == Injected:
		h.cfg.Logger.Info("sidecar injected", "bytes", len(out))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}

// ServeTLS serves h over TLS on ln until ctx ends (then shuts down gracefully,
// bounded by ShutdownTimeout). cert gives the serving certificate per handshake
// (pilot/ca's, renewed at half life).
func ServeTLS(ctx context.Context, ln net.Listener, h http.Handler, cert func(*tls.ClientHelloInfo) (*tls.Certificate, error), log hclog.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout, WriteTimeout: WriteTimeout,
		IdleTimeout: IdleTimeout, MaxHeaderBytes: MaxHeaderBytes,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cert, NextProtos: []string{"h2", "http/1.1"}},
		ErrorLog:  log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("webhook serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-errc
	if err != nil {
		return fmt.Errorf("webhook shutdown %s: %w", ln.Addr(), err)
	}
	return nil
}
