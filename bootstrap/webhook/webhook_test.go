package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/weft-mesh/weft/bootstrap/inject"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var update = flag.Bool("update", false, "rewrite the golden files")

// syncBuffer is a log sink the server's goroutines write and the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type server struct {
	url      string
	logs     *syncBuffer
	reg      *prometheus.Registry
	settings atomic.Int64 // calls of Settings
}

// newServer serves the handler on a real HTTP server (plain HTTP here; pilot's
// TLS is tested with the real binary in pilot/cmd/pilot).
func newServer(t *testing.T, settings func(context.Context) (inject.Config, error)) *server {
	t.Helper()
	s := &server{logs: &syncBuffer{}, reg: prometheus.NewRegistry()}
	if settings == nil {
		settings = func(context.Context) (inject.Config, error) { return inject.Config{}, nil }
	}
	h, err := New(Config{Logger: hclog.New(&hclog.LoggerOptions{Output: s.logs, Level: hclog.Debug}), Registerer: s.reg,
		Settings: func(ctx context.Context) (inject.Config, error) { s.settings.Add(1); return settings(ctx) }})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	s.url = hs.URL + Path
	return s
}

func (s *server) post(t *testing.T, body []byte) []byte {
	t.Helper()
	resp, err := http.Post(s.url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%s %s: %s", resp.Status, resp.Header.Get("Content-Type"), out)
	}
	return out
}

func (s *server) count(result string) float64 {
	mfs, _ := s.reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// strictResponse decodes a response review with unknown fields refused.
func strictResponse(t *testing.T, b []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	var r admissionv1.AdmissionReview
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("response does not decode strictly: %v\n%s", err, b)
	}
	if r.APIVersion != APIVersion || r.Kind != Kind || r.Response == nil || r.Request != nil {
		t.Fatalf("response envelope: %s", b)
	}
	return r.Response
}

func request(t *testing.T, b []byte) *admissionv1.AdmissionRequest {
	t.Helper()
	req, _, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// strictObject decodes JSON into the typed object of gvk, unknown fields refused.
func strictObject(t *testing.T, gvk schema.GroupVersionKind, b []byte) runtime.Object {
	t.Helper()
	obj := inject.New(gvk)
	if err := yaml.UnmarshalStrict(b, obj); err != nil {
		t.Fatalf("strict decode of %s: %v\n%s", gvk.Kind, err, b)
	}
	return obj
}

func gvkOf(req *admissionv1.AdmissionRequest) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind}
}

func applyPatch(t *testing.T, doc, patch []byte) []byte {
	t.Helper()
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("decode patch: %v\n%s", err, patch)
	}
	out, err := p.Apply(doc)
	if err != nil {
		t.Fatalf("apply patch: %v\n%s", err, patch)
	}
	return out
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// golden compares got with testdata/name (rewritten with -update).
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s differs (-want +got; -update rewrites):\n%s", path, d)
	}
}

// GoldenReviews are the request files of TestGolden, one per workload kind
// plus a Pod as a ReplicaSet creates it (defaulted fields, generateName, the
// service-account token volume). meshctl's tests read them too.
var GoldenReviews = []string{"pod", "replicaset-pod", "deployment", "statefulset", "daemonset", "job"}

// TestGolden: each real AdmissionReview request gets the golden response; its
// patch, applied to the request's object with a JSONPatch library and decoded
// strictly, is bootstrap/inject's mutated object; the patched object reviewed
// again is allowed unchanged (idempotent).
func TestGolden(t *testing.T) {
	s := newServer(t, nil)
	for _, name := range GoldenReviews {
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata", name+".request.json"))
			if err != nil {
				t.Fatal(err)
			}
			out := s.post(t, body)
			golden(t, name+".response.json", append(out, '\n'))
			resp := strictResponse(t, out)
			req := request(t, body)
			if resp.UID != req.UID || !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch || len(resp.Patch) == 0 {
				t.Fatalf("response: uid %q allowed %v patchType %v patch %d bytes", resp.UID, resp.Allowed, resp.PatchType, len(resp.Patch))
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, resp.Patch, "", "  "); err != nil {
				t.Fatal(err)
			}
			golden(t, name+".patch.json", append(pretty.Bytes(), '\n'))

			patched := applyPatch(t, req.Object.Raw, resp.Patch)
			got := strictObject(t, gvkOf(req), patched)
			want, err := inject.Mutate(inject.Input{Object: strictObject(t, gvkOf(req), req.Object.Raw), Namespace: req.Namespace}, inject.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(mustJSON(t, want.Object), mustJSON(t, got)); d != "" {
				t.Errorf("patched object differs from inject.Mutate's (-mutate +patched):\n%s", d)
			}

			// Twice: the injected object comes back allowed without a patch.
			var again admissionv1.AdmissionReview
			if err := json.Unmarshal(body, &again); err != nil {
				t.Fatal(err)
			}
			again.Request.Object.Raw = patched
			second := strictResponse(t, s.post(t, []byte(mustJSON(t, again))))
			if !second.Allowed || second.Patch != nil || second.PatchType != nil {
				t.Errorf("second review: allowed %v patch %s: want allowed, no patch", second.Allowed, second.Patch)
			}
		})
	}
	if n := s.count(Injected); n != float64(len(GoldenReviews)) {
		t.Errorf("injected counter %v, want %d", n, len(GoldenReviews))
	}
	if n := s.count(Skipped); n != float64(len(GoldenReviews)) {
		t.Errorf("skipped counter %v, want %d (the second reviews)", n, len(GoldenReviews))
	}
}

// review builds a request review of a Pod object (JSON) with operation op.
func review(t *testing.T, op admissionv1.Operation, kind schema.GroupVersionKind, object string) []byte {
	t.Helper()
	r := admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{UID: "u-1", Operation: op, Namespace: "shop", Kind: metavOf(kind)}}
	r.APIVersion, r.Kind = APIVersion, Kind
	if object == "" {
		return []byte(mustJSON(t, r))
	}
	// The object is spliced in as written (RawExtension's MarshalJSON refuses
	// some of the broken objects these tests send).
	env := mustJSON(t, r)
	return []byte(strings.Replace(env, `"operation"`, `"object":`+object+`,"operation"`, 1))
}

func metavOf(g schema.GroupVersionKind) metav1.GroupVersionKind {
	return metav1.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind}
}

const plainPod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"shop"},"spec":{"containers":[{"name":"app","image":"app:1"}]}}`

func TestOptedOutUntouched(t *testing.T) {
	s := newServer(t, nil)
	obj := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","annotations":{"sidecar.weft.dev/inject":"false"}},"spec":{"containers":[{"name":"app","image":"app:1"}]}}`
	resp := strictResponse(t, s.post(t, review(t, admissionv1.Create, inject.PodKind, obj)))
	if !resp.Allowed || resp.Patch != nil || resp.PatchType != nil || resp.Result != nil || resp.UID != "u-1" {
		t.Fatalf("opted-out pod: %+v, want allowed with no patch", resp)
	}
}

func TestIgnored(t *testing.T) {
	s := newServer(t, nil)
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"update", review(t, admissionv1.Update, inject.PodKind, plainPod)},
		{"delete", review(t, admissionv1.Delete, inject.PodKind, plainPod)},
		{"a Service", review(t, admissionv1.Create, schema.GroupVersionKind{Version: "v1", Kind: "Service"}, `{"kind":"Service"}`)},
		{"a ReplicaSet", review(t, admissionv1.Create, schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"}, `{}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := strictResponse(t, s.post(t, tc.body))
			if !resp.Allowed || resp.Patch != nil {
				t.Fatalf("%+v: want allowed, no patch", resp)
			}
		})
	}
	if n := s.settings.Load(); n != 0 {
		t.Errorf("settings read %d times for reviews that need none", n)
	}
	if n := s.count(Ignored); n != 4 {
		t.Errorf("ignored counter %v, want 4", n)
	}
}

func TestDenied(t *testing.T) {
	s := newServer(t, nil)
	obj := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"app","image":"app:1","ports":[{"containerPort":15001}]}]}}`
	resp := strictResponse(t, s.post(t, review(t, admissionv1.Create, inject.PodKind, obj)))
	if resp.Allowed || resp.Patch != nil || resp.Result == nil || resp.Result.Code != http.StatusBadRequest ||
		!strings.Contains(resp.Result.Message, "weft sidecar injection: Pod/shop/p: spec.containers[0].ports[0].containerPort: 15001 is one of the sidecar's ports") {
		t.Fatalf("%+v %+v: want denied naming the field", resp, resp.Result)
	}
	if !strings.Contains(s.logs.String(), "admission review denied") {
		t.Errorf("not logged:\n%s", s.logs.String())
	}

	// MeshConfig unreadable: denied, transiently.
	bad := newServer(t, func(context.Context) (inject.Config, error) { return inject.Config{}, errors.New("store closed") })
	resp = strictResponse(t, bad.post(t, review(t, admissionv1.Create, inject.PodKind, plainPod)))
	if resp.Allowed || !strings.Contains(resp.Result.Message, "injection settings: store closed") {
		t.Fatalf("%+v: want denied", resp.Result)
	}
	// Bad settings (an invalid MeshConfig sidecar): denied, naming the field.
	inv := newServer(t, func(context.Context) (inject.Config, error) {
		return inject.Config{Sidecar: inject.Sidecar{Memory: "1Ki"}}, nil
	})
	resp = strictResponse(t, inv.post(t, review(t, admissionv1.Create, inject.PodKind, plainPod)))
	if resp.Allowed || !strings.Contains(resp.Result.Message, "MeshConfig spec.sidecar.memory") {
		t.Fatalf("%+v: want denied", resp.Result)
	}
}

// TestMalformed: every review that cannot be read is answered allowed, with
// no patch, the uid when it could be read, and a logged error.
func TestMalformed(t *testing.T) {
	s := newServer(t, nil)
	pad := func(b []byte, n int) []byte { return append(b, bytes.Repeat([]byte(" "), n-len(b))...) }
	valid := review(t, admissionv1.Create, inject.PodKind, plainPod)
	for _, tc := range []struct {
		name, uid, want string
		body            []byte
	}{
		{"empty", "", "unexpected end of JSON input", nil},
		{"not JSON", "", "invalid character", []byte("<xml/>")},
		{"null", "", "want admission.k8s.io/v1 AdmissionReview", []byte("null")},
		{"array", "", "cannot unmarshal array", []byte("[]")},
		{"v1beta1", "u", `admission.k8s.io/v1beta1`, []byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u"}}`)},
		{"no request", "", "no request", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`)},
		{"no uid", "", "request.uid: empty", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"CREATE"}}`)},
		{"uid not a string", "", "cannot unmarshal number", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}`)},
		{"no object", "u-1", "request.object: empty", review(t, admissionv1.Create, inject.PodKind, "")},
		{"object not a pod", "u-1", "request.object as Pod", review(t, admissionv1.Create, inject.PodKind, `{"spec":{"containers":"app"}}`)},
		{"object a string", "u-1", "request.object as Pod", review(t, admissionv1.Create, inject.PodKind, `"pod"`)},
		{"deployment object not one", "u-1", "request.object as Deployment", review(t, admissionv1.Create, inject.DeploymentKind, `{"spec":{"template":7}}`)},
		{"body past the bound", "", "limit 4194304 bytes", pad(valid, MaxRequestBytes+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.count(Malformed)
			resp := strictResponse(t, s.post(t, tc.body))
			if !resp.Allowed || resp.Patch != nil || resp.PatchType != nil || resp.Result != nil || string(resp.UID) != tc.uid {
				t.Fatalf("%+v: want allowed, no patch, uid %q", resp, tc.uid)
			}
			if s.count(Malformed) != before+1 {
				t.Error("malformed counter not incremented")
			}
			if logs := s.logs.String(); !strings.Contains(logs, "answered allowed without injection") || !strings.Contains(logs, tc.want) {
				t.Errorf("log does not say it (want %q):\n%s", tc.want, logs)
			}
		})
	}
	// At the bound, the same review is read and injected.
	resp := strictResponse(t, s.post(t, pad(valid, MaxRequestBytes)))
	if !resp.Allowed || resp.Patch == nil {
		t.Fatalf("review of exactly %d bytes: %+v, want injected", MaxRequestBytes, resp)
	}
}

func TestMethodAndPath(t *testing.T) {
	s := newServer(t, nil)
	resp, err := http.Get(s.url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET %s: %s", Path, resp.Status)
	}
	resp, err = http.Post(strings.TrimSuffix(s.url, Path)+"/mutate", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST /mutate: %s", resp.Status)
	}
}

func TestNewChecks(t *testing.T) {
	if _, err := New(Config{Logger: hclog.NewNullLogger()}); err == nil {
		t.Error("New without Settings: want an error")
	}
	if _, err := New(Config{Settings: func(context.Context) (inject.Config, error) { return inject.Config{}, nil }}); err == nil {
		t.Error("New without Logger: want an error")
	}
}
