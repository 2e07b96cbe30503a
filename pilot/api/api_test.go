package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/pilot/api"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store/boltstore"
)

const (
	svcReviews = `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports:
  - {name: http, port: 9080, targetPort: 9080, protocol: HTTP}
`
	svcReviews2 = `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports:
  - {name: http, port: 9081, protocol: HTTP}
`
	svcRatings = `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: ratings, namespace: shop}
spec:
  ports:
  - {name: http, port: 9080}
`
	svcBadPort = `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  ports:
  - {name: http, port: 70000, bogus: 1}
`
	routeToMissing = `apiVersion: mesh.weft.dev/v1alpha1
kind: Route
metadata: {name: cart, namespace: shop}
spec:
  hosts: [cart]
  http:
  - route:
    - destination: {service: cart, port: 80}
`
	meshConfig = `apiVersion: mesh.weft.dev/v1alpha1
kind: MeshConfig
metadata: {name: default}
spec:
  trustDomain: example.org
`
	nsPath = api.Prefix + "/namespaces/shop/services"
)

// fixture is a real API over a real boltstore in a temp dir, behind httptest.
type fixture struct {
	t   *testing.T
	srv *httptest.Server
	st  *boltstore.Store
}

func newFixture(t *testing.T, cfg api.Config) *fixture {
	t.Helper()
	st, err := boltstore.Open(t.TempDir())
	if err != nil {
		t.Fatalf("boltstore.Open: %v", err)
	}
	cfg.Store = st
	cfg.Logger = hclog.NewNullLogger()
	a, err := api.New(cfg)
	if err != nil {
		t.Fatalf("api.New: %v", err)
	}
	srv := httptest.NewServer(a)
	t.Cleanup(func() {
		srv.Close()
		if err := st.Close(); err != nil {
			t.Errorf("closing store: %v", err)
		}
	})
	return &fixture{t: t, srv: srv, st: st}
}

type answer struct {
	code int
	hdr  http.Header
	body []byte
}

func (f *fixture) do(method, path, body string, hdr map[string]string) answer {
	f.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, f.srv.URL+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return answer{code: resp.StatusCode, hdr: resp.Header, body: b}
}

func (f *fixture) revision() int64 {
	f.t.Helper()
	rev, err := f.st.Revision(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return int64(rev)
}

// decodeErrors is what resource.Decode itself reports for doc, so the API's 400
// body is compared exactly against the resource package's messages.
func decodeErrors(t *testing.T, doc string) []string {
	t.Helper()
	_, err := resource.Decode([]byte(doc), "request body")
	var el resource.ErrorList
	if !errors.As(err, &el) {
		t.Fatalf("Decode of invalid fixture: want ErrorList, got %v", err)
	}
	out := make([]string, len(el))
	for i, e := range el {
		out[i] = e.Error()
	}
	return out
}

func errorsOf(t *testing.T, a answer) api.ErrorResponse {
	t.Helper()
	var er api.ErrorResponse
	if err := json.Unmarshal(a.body, &er); err != nil {
		t.Fatalf("error body %q: %v", a.body, err)
	}
	return er
}

// TestResourceLifecycle walks one store through every endpoint; each step
// depends on the ones before, so the table is ordered.
func TestResourceLifecycle(t *testing.T) {
	f := newFixture(t, api.Config{})
	type step struct {
		name     string
		method   string
		path     string
		body     string
		hdr      map[string]string
		wantCode int
		wantRev  int64    // X-Weft-Revision and body revision
		wantErrs []string // exact ErrorResponse.Errors when non-nil
		check    func(t *testing.T, a answer)
	}
	objectGen := func(gen, rev int64) func(*testing.T, answer) {
		return func(t *testing.T, a answer) {
			var r api.ObjectResponse
			if err := json.Unmarshal(a.body, &r); err != nil {
				t.Fatal(err)
			}
			if r.Object.Metadata.Generation != gen || r.Object.Metadata.Revision != rev {
				t.Errorf("object generation/revision = %d/%d, want %d/%d", r.Object.Metadata.Generation, r.Object.Metadata.Revision, gen, rev)
			}
		}
	}
	steps := []step{
		{name: "empty list", method: "GET", path: nsPath, wantCode: 200, wantRev: 0, check: func(t *testing.T, a answer) {
			if !bytes.Contains(a.body, []byte(`"items": []`)) {
				t.Errorf("empty list body %s", a.body)
			}
		}},
		{name: "create by PUT", method: "PUT", path: nsPath + "/reviews", body: svcReviews, wantCode: 200, wantRev: 1, check: objectGen(1, 1)},
		{name: "get", method: "GET", path: nsPath + "/reviews", wantCode: 200, wantRev: 1, check: objectGen(1, 1)},
		{name: "get yaml", method: "GET", path: nsPath + "/reviews", hdr: map[string]string{"Accept": "application/yaml"}, wantCode: 200, wantRev: 1, check: func(t *testing.T, a answer) {
			for _, want := range []string{"kind: Service", "generation: 1", "revision: 1"} {
				if !bytes.Contains(a.body, []byte(want)) {
					t.Errorf("YAML body lacks %q:\n%s", want, a.body)
				}
			}
		}},
		{name: "same PUT changes nothing", method: "PUT", path: nsPath + "/reviews", body: svcReviews, wantCode: 200, wantRev: 1, check: objectGen(1, 1)},
		{name: "path and body disagree", method: "PUT", path: nsPath + "/ratings", body: svcReviews, wantCode: 400, wantRev: 1,
			wantErrs: []string{"PUT Service/shop/ratings: body is Service/shop/reviews; the path and the body's kind, namespace and name must match"}},
		{name: "invalid body, all errors", method: "PUT", path: nsPath + "/reviews", body: svcBadPort, wantCode: 400, wantRev: 1,
			wantErrs: decodeErrors(t, svcBadPort)},
		{name: "stale If-Match", method: "PUT", path: nsPath + "/reviews", body: svcReviews2, hdr: map[string]string{"If-Match": "7"}, wantCode: 412, wantRev: 1,
			wantErrs: []string{"Service/shop/reviews: generation is 1, If-Match wanted 7"}, check: func(t *testing.T, a answer) {
				want := &api.Conflict{Object: "Service/shop/reviews", Expected: 7, Actual: 1}
				if d := cmp.Diff(want, errorsOf(t, a).Conflict); d != "" {
					t.Errorf("conflict (-want +got):\n%s", d)
				}
			}},
		{name: "bad If-Match", method: "PUT", path: nsPath + "/reviews", body: svcReviews2, hdr: map[string]string{"If-Match": "abc"}, wantCode: 400, wantRev: 1,
			wantErrs: []string{`If-Match: "abc" is not a generation (a number >= 0)`}},
		{name: "If-Match current (quoted)", method: "PUT", path: nsPath + "/reviews", body: svcReviews2, hdr: map[string]string{"If-Match": `"1"`}, wantCode: 200, wantRev: 2, check: objectGen(2, 2)},
		{name: "JSON PUT", method: "PUT", path: nsPath + "/ratings", body: `{"apiVersion":"mesh.weft.dev/v1alpha1","kind":"Service","metadata":{"name":"ratings","namespace":"shop"},"spec":{"ports":[{"name":"http","port":9080}]}}`,
			wantCode: 200, wantRev: 3, check: objectGen(1, 3)},
		{name: "list namespace", method: "GET", path: nsPath, wantCode: 200, wantRev: 3, check: func(t *testing.T, a answer) {
			var r api.ListResponse
			if err := json.Unmarshal(a.body, &r); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, o := range r.Items {
				names = append(names, o.Metadata.Name)
			}
			if d := cmp.Diff([]string{"ratings", "reviews"}, names); d != "" {
				t.Errorf("names (-want +got):\n%s", d)
			}
		}},
		{name: "list all namespaces", method: "GET", path: api.Prefix + "/services", wantCode: 200, wantRev: 3},
		{name: "list other namespace empty", method: "GET", path: api.Prefix + "/namespaces/other/services", wantCode: 200, wantRev: 3},
		{name: "history", method: "GET", path: nsPath + "/reviews/history", wantCode: 200, wantRev: 3, check: func(t *testing.T, a answer) {
			var r api.HistoryResponse
			if err := json.Unmarshal(a.body, &r); err != nil {
				t.Fatal(err)
			}
			var got [][3]any
			for _, h := range r.History {
				got = append(got, [3]any{h.Revision, h.Op, h.Generation})
			}
			if d := cmp.Diff([][3]any{{int64(1), "PUT", int64(1)}, {int64(2), "PUT", int64(2)}}, got); d != "" {
				t.Errorf("history (-want +got):\n%s", d)
			}
		}},
		{name: "get missing", method: "GET", path: nsPath + "/nope", wantCode: 404, wantRev: 3, wantErrs: []string{"Service/shop/nope: not found"}},
		{name: "history missing", method: "GET", path: nsPath + "/nope/history", wantCode: 404, wantRev: 3},
		{name: "history first page", method: "GET", path: nsPath + "/reviews/history?limit=1", wantCode: 200, wantRev: 3, check: func(t *testing.T, a answer) {
			var r api.HistoryResponse
			if err := json.Unmarshal(a.body, &r); err != nil {
				t.Fatal(err)
			}
			if len(r.History) != 1 || r.History[0].Revision != 1 || r.Next != 1 {
				t.Errorf("page 1 = %+v, want revision 1 and next 1", r)
			}
		}},
		{name: "history last page", method: "GET", path: nsPath + "/reviews/history?limit=1&after=1", wantCode: 200, wantRev: 3, check: func(t *testing.T, a answer) {
			var r api.HistoryResponse
			if err := json.Unmarshal(a.body, &r); err != nil {
				t.Fatal(err)
			}
			if len(r.History) != 1 || r.History[0].Revision != 2 || r.Next != 0 {
				t.Errorf("page 2 = %+v, want revision 2 and no next", r)
			}
		}},
		{name: "history limit at the bound", method: "GET", path: nsPath + "/reviews/history?limit=1000", wantCode: 200, wantRev: 3},
		{name: "history limit past the bound", method: "GET", path: nsPath + "/reviews/history?limit=1001", wantCode: 400, wantRev: 3, wantErrs: []string{`limit="1001": want 1..1000`}},
		{name: "history bad after", method: "GET", path: nsPath + "/reviews/history?after=-1", wantCode: 400, wantRev: 3, wantErrs: []string{`after="-1": not a revision (a number >= 0)`}},
		{name: "unknown plural", method: "GET", path: api.Prefix + "/namespaces/shop/widgets", wantCode: 404, wantRev: 3,
			wantErrs: []string{`not found: unknown resource "widgets"`}},
		{name: "namespaced kind on cluster path", method: "GET", path: api.Prefix + "/services/reviews", wantCode: 404, wantRev: 3},
		{name: "method not allowed", method: "POST", path: nsPath + "/reviews", body: svcReviews, wantCode: 405, wantRev: 3},
		{name: "route to missing service warns", method: "PUT", path: api.Prefix + "/namespaces/shop/routes/cart", body: routeToMissing, wantCode: 200, wantRev: 4,
			check: func(t *testing.T, a answer) {
				var r api.ObjectResponse
				if err := json.Unmarshal(a.body, &r); err != nil {
					t.Fatal(err)
				}
				if len(r.Warnings) == 0 || len(a.hdr.Values("Warning")) != len(r.Warnings) {
					t.Errorf("warnings body %q, headers %q: want the same non-empty set", r.Warnings, a.hdr.Values("Warning"))
				}
				for _, w := range r.Warnings {
					if !strings.HasPrefix(w, "Route/shop/cart: ") {
						t.Errorf("warning %q does not name the route", w)
					}
				}
			}},
		{name: "unrelated write repeats no old warning", method: "PUT", path: nsPath + "/ratings", body: svcRatings, wantCode: 200, wantRev: 4, check: func(t *testing.T, a answer) {
			if w := a.hdr.Values("Warning"); len(w) != 0 {
				t.Errorf("warnings %q for an unrelated unchanged write", w)
			}
		}},
		{name: "meshconfig cluster-wide", method: "PUT", path: api.Prefix + "/meshconfigs/default", body: meshConfig, wantCode: 200, wantRev: 5, check: objectGen(1, 5)},
		{name: "meshconfig get", method: "GET", path: api.Prefix + "/meshconfigs/default", wantCode: 200, wantRev: 5},
		{name: "meshconfig history", method: "GET", path: api.Prefix + "/meshconfigs/default/history", wantCode: 200, wantRev: 5},
		{name: "meshconfig bad sub-path", method: "GET", path: api.Prefix + "/meshconfigs/default/status", wantCode: 404, wantRev: 5},
		{name: "meshconfig on namespaced path", method: "GET", path: api.Prefix + "/namespaces/shop/meshconfigs/default", wantCode: 404, wantRev: 5},
		{name: "delete stale If-Match", method: "DELETE", path: nsPath + "/ratings", hdr: map[string]string{"If-Match": "3"}, wantCode: 412, wantRev: 5},
		{name: "delete", method: "DELETE", path: nsPath + "/ratings", hdr: map[string]string{"If-Match": "1"}, wantCode: 200, wantRev: 6},
		{name: "delete again", method: "DELETE", path: nsPath + "/ratings", wantCode: 404, wantRev: 6},
		{name: "history keeps deleted", method: "GET", path: nsPath + "/ratings/history", wantCode: 200, wantRev: 6, check: func(t *testing.T, a answer) {
			var r api.HistoryResponse
			if err := json.Unmarshal(a.body, &r); err != nil {
				t.Fatal(err)
			}
			if n := len(r.History); n != 2 || r.History[1].Op != "DELETE" || r.History[1].Revision != 6 {
				t.Errorf("history %+v: want PUT then DELETE at 6", r.History)
			}
		}},
	}
	for _, s := range steps {
		a := f.do(s.method, s.path, s.body, s.hdr)
		if a.code != s.wantCode {
			t.Fatalf("%s: code %d, want %d; body %s", s.name, a.code, s.wantCode, a.body)
		}
		if got := a.hdr.Get(api.RevisionHeader); got != strconv.FormatInt(s.wantRev, 10) {
			t.Errorf("%s: %s = %q, want %d", s.name, api.RevisionHeader, got, s.wantRev)
		}
		if a.hdr.Get("Content-Type") == "application/json" {
			var rv struct{ Revision *int64 }
			if err := json.Unmarshal(a.body, &rv); err != nil || rv.Revision == nil || *rv.Revision != s.wantRev {
				t.Errorf("%s: body revision %v (err %v), want %d", s.name, rv.Revision, err, s.wantRev)
			}
		}
		if s.wantErrs != nil {
			if d := cmp.Diff(s.wantErrs, errorsOf(t, a).Errors); d != "" {
				t.Errorf("%s: errors (-want +got):\n%s", s.name, d)
			}
		}
		if s.check != nil {
			s.check(t, a)
		}
	}
}

func mustDecode(t *testing.T, doc string) []*resource.Object {
	t.Helper()
	objs, err := resource.Decode([]byte(doc), "fixture")
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return objs
}
