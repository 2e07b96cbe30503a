package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/pilot/api"
	"github.com/weft-mesh/weft/pilot/store/boltstore"
)

const applyPath = api.Prefix + "/apply"

func jsonOf(t *testing.T, yamlDoc string) json.RawMessage {
	t.Helper()
	objs := mustDecode(t, yamlDoc)
	b, err := json.Marshal(objs[0])
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func envelope(t *testing.T, ifMatch map[string]int64, docs ...string) string {
	t.Helper()
	req := api.ApplyRequest{IfMatch: ifMatch}
	for _, d := range docs {
		req.Items = append(req.Items, jsonOf(t, d))
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestBulkApply(t *testing.T) {
	f := newFixture(t, api.Config{MaxApplyObjects: 3})
	both := svcReviews + "---\n" + svcRatings
	type step struct {
		name     string
		body     string
		hdr      map[string]string
		wantCode int
		wantRev  int64
		wantErrs []string
	}
	steps := []step{
		{name: "multi-doc YAML is one revision", body: both, wantCode: 200, wantRev: 1},
		{name: "same again changes nothing", body: both, wantCode: 200, wantRev: 1},
		{name: "JSON list", body: "[" + string(jsonOf(t, svcReviews2)) + "," + string(jsonOf(t, svcRatings)) + "]", wantCode: 200, wantRev: 2},
		{name: "envelope with stale ifMatch writes nothing", body: envelope(t, map[string]int64{"Service/shop/reviews": 1}, svcReviews, svcRatings),
			wantCode: 412, wantRev: 2, wantErrs: []string{"Service/shop/reviews: generation is 2, If-Match wanted 1"}},
		{name: "envelope ifMatch names no item", body: envelope(t, map[string]int64{"Service/shop/zzz": 1}, svcReviews),
			wantCode: 400, wantRev: 2, wantErrs: []string{`ifMatch["Service/shop/zzz"]: no such object in items`}},
		{name: "envelope negative ifMatch", body: envelope(t, map[string]int64{"Service/shop/reviews": -2}, svcReviews),
			wantCode: 400, wantRev: 2, wantErrs: []string{`ifMatch["Service/shop/reviews"]: generation -2 is negative`}},
		{name: "envelope unknown field", body: `{"items":[],"force":true}`, wantCode: 400, wantRev: 2,
			wantErrs: []string{`request body: apply envelope: json: unknown field "force"`}},
		{name: "envelope current ifMatch", body: envelope(t, map[string]int64{"Service/shop/reviews": 2}, svcReviews), wantCode: 200, wantRev: 3},
		{name: "If-Match header with two objects", body: both, hdr: map[string]string{"If-Match": "1"}, wantCode: 400, wantRev: 3,
			wantErrs: []string{"If-Match header applies to a body with exactly one object; use the ifMatch map of the JSON envelope for several"}},
		{name: "If-Match header stale single", body: svcRatings, hdr: map[string]string{"If-Match": "0"}, wantCode: 412, wantRev: 3},
		{name: "duplicate object", body: "[" + string(jsonOf(t, svcRatings)) + "," + string(jsonOf(t, svcRatings)) + "]", wantCode: 400, wantRev: 3,
			wantErrs: []string{"Service/shop/ratings: appears more than once in one apply"}},
		{name: "invalid YAML document: all errors, nothing written", body: both + "---\n" + svcBadPort, wantCode: 400, wantRev: 3},
		{name: "empty body", body: " \n", wantCode: 400, wantRev: 3, wantErrs: []string{"request body: empty body"}},
		{name: "too many objects", body: manyServices(4), wantCode: 400, wantRev: 3, wantErrs: []string{"request body: 4 objects, at most 3 per apply"}},
		{name: "malformed JSON list", body: "[{", wantCode: 400, wantRev: 3},
	}
	for _, s := range steps {
		a := f.do("POST", applyPath, s.body, s.hdr)
		if a.code != s.wantCode {
			t.Fatalf("%s: code %d, want %d; body %s", s.name, a.code, s.wantCode, a.body)
		}
		if got := a.hdr.Get(api.RevisionHeader); got != fmt.Sprint(s.wantRev) {
			t.Errorf("%s: revision header %q, want %d", s.name, got, s.wantRev)
		}
		if rev := f.revision(); rev != s.wantRev {
			t.Errorf("%s: store revision %d, want %d", s.name, rev, s.wantRev)
		}
		if s.wantErrs != nil {
			if d := cmp.Diff(s.wantErrs, errorsOf(t, a).Errors); d != "" {
				t.Errorf("%s: errors (-want +got):\n%s", s.name, d)
			}
		}
	}
}

func manyServices(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "---\napiVersion: mesh.weft.dev/v1alpha1\nkind: Service\nmetadata: {name: s%d, namespace: shop}\nspec:\n  ports: [{name: http, port: 80}]\n", i)
	}
	return b.String()
}

func TestBodyLimit(t *testing.T) {
	f := newFixture(t, api.Config{MaxBodyBytes: 1024})
	tests := []struct {
		name     string
		method   string
		path     string
		body     string
		wantCode int
	}{
		{name: "apply under limit", method: "POST", path: applyPath, body: svcReviews, wantCode: 200},
		{name: "apply over limit", method: "POST", path: applyPath, body: manyServices(20), wantCode: 413},
		{name: "put over limit", method: "PUT", path: nsPath + "/reviews", body: svcReviews + strings.Repeat("#", 2000), wantCode: 413},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := f.do(tt.method, tt.path, tt.body, nil)
			if a.code != tt.wantCode {
				t.Fatalf("code %d, want %d: %s", a.code, tt.wantCode, a.body)
			}
			if tt.wantCode == 413 {
				if d := cmp.Diff([]string{"request body is larger than 1024 bytes"}, errorsOf(t, a).Errors); d != "" {
					t.Errorf("errors (-want +got):\n%s", d)
				}
			}
		})
	}
}

func TestAuth(t *testing.T) {
	st, err := boltstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	newAPI := func(cfg api.Config) *api.API {
		cfg.Store, cfg.Logger = st, hclog.NewNullLogger()
		a, err := api.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	local := newAPI(api.Config{})
	remote := newAPI(api.Config{AllowRemote: true, Token: []byte("s3cret")})
	tests := []struct {
		name     string
		api      *api.API
		remote   string
		auth     string
		path     string
		wantCode int
	}{
		{name: "loopback v4", api: local, remote: "127.0.0.1:5555", path: "/healthz", wantCode: 200},
		{name: "loopback v6", api: local, remote: "[::1]:5555", path: "/healthz", wantCode: 200},
		{name: "remote refused", api: local, remote: "10.1.2.3:5555", path: "/healthz", wantCode: 403},
		{name: "remote refused on API", api: local, remote: "192.168.0.9:5555", path: nsPath, wantCode: 403},
		{name: "garbage remote refused", api: local, remote: "nonsense", path: "/healthz", wantCode: 403},
		{name: "allowed remote without token", api: remote, remote: "10.1.2.3:5555", path: nsPath, wantCode: 401},
		{name: "allowed remote wrong token", api: remote, remote: "10.1.2.3:5555", auth: "Bearer nope", path: nsPath, wantCode: 401},
		{name: "allowed remote wrong scheme", api: remote, remote: "10.1.2.3:5555", auth: "Basic s3cret", path: nsPath, wantCode: 401},
		{name: "allowed remote token", api: remote, remote: "10.1.2.3:5555", auth: "Bearer s3cret", path: nsPath, wantCode: 200},
		{name: "token required on loopback too", api: remote, remote: "127.0.0.1:5555", path: "/healthz", wantCode: 401},
		{name: "token on loopback", api: remote, remote: "127.0.0.1:5555", auth: "Bearer s3cret", path: "/metrics", wantCode: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", tt.path, nil)
			req.RemoteAddr = tt.remote
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			rec := httptest.NewRecorder()
			tt.api.ServeHTTP(rec, req)
			if rec.Code != tt.wantCode {
				t.Errorf("code %d, want %d: %s", rec.Code, tt.wantCode, rec.Body)
			}
		})
	}
}

func TestNewConfig(t *testing.T) {
	st, err := boltstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	log := hclog.NewNullLogger()
	tests := []struct {
		name    string
		cfg     api.Config
		wantErr string
	}{
		{name: "ok", cfg: api.Config{Store: st, Logger: log}},
		{name: "no store", cfg: api.Config{Logger: log}, wantErr: "api: Config.Store is required"},
		{name: "no logger", cfg: api.Config{Store: st}, wantErr: "api: Config.Logger is required"},
		{name: "remote without token", cfg: api.Config{Store: st, Logger: log, AllowRemote: true}, wantErr: "api: Config.AllowRemote requires a Token"},
		{name: "negative body limit", cfg: api.Config{Store: st, Logger: log, MaxBodyBytes: -1}, wantErr: "api: Config.MaxBodyBytes -1 is negative"},
		{name: "negative object limit", cfg: api.Config{Store: st, Logger: log, MaxApplyObjects: -1}, wantErr: "api: Config.MaxApplyObjects -1 is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := api.New(tt.cfg)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.wantErr {
				t.Errorf("New error %q, want %q", got, tt.wantErr)
			}
		})
	}
}

func TestHealthzAndMetrics(t *testing.T) {
	f := newFixture(t, api.Config{})
	if a := f.do("POST", applyPath, svcReviews, nil); a.code != http.StatusOK {
		t.Fatalf("apply: %d %s", a.code, a.body)
	}
	h := f.do("GET", "/healthz", "", nil)
	if h.code != 200 || h.hdr.Get(api.RevisionHeader) != "1" {
		t.Errorf("healthz %d revision %q", h.code, h.hdr.Get(api.RevisionHeader))
	}
	m := f.do("GET", "/metrics", "", nil)
	for _, want := range []string{
		"weft_pilot_store_revision 1",
		`weft_pilot_admin_requests_total{code="200",method="POST"} 1`,
		`weft_pilot_apply_duration_seconds_count{outcome="ok"} 1`,
	} {
		if !strings.Contains(string(m.body), want) {
			t.Errorf("metrics lack %q:\n%s", want, m.body)
		}
	}
}
