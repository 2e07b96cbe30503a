package api_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/weft-mesh/weft/pilot/api"
)

// TestApplyWarnsNotEnforced: applying a policy field sidecars store but do not
// enforce (here maxRequests and retryBudget for a TCP-only Service) answers a
// warning naming the object and the field, in the body and in Warning headers,
// and the apply succeeds; the same policy for an HTTP Service warns nothing.
func TestApplyWarnsNotEnforced(t *testing.T) {
	f := newFixture(t, api.Config{})
	const doc = `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: db, namespace: shop}
spec:
  ports:
  - {name: sql, port: 5432, protocol: %s}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: DestinationPolicy
metadata: {name: db, namespace: shop}
spec:
  service: db
  connectionPool: {maxConnections: 10, maxRequests: 5, retryBudget: {percent: 20}}
`
	apply := func(proto string) (api.ApplyResponse, []string) {
		t.Helper()
		a := f.do("POST", applyPath, fmt.Sprintf(doc, proto), nil)
		if a.code != 200 {
			t.Fatalf("apply: %d %s", a.code, a.body)
		}
		var r api.ApplyResponse
		if err := json.Unmarshal(a.body, &r); err != nil {
			t.Fatal(err)
		}
		return r, a.hdr.Values("Warning")
	}
	r, hdrs := apply("TCP")
	const why = ": not enforced: Service shop/db has only TCP ports, and a TCP connection has no requests, retries or pending queue (maxConnections applies)"
	want := []string{
		"DestinationPolicy/shop/db: spec.connectionPool.maxRequests" + why,
		"DestinationPolicy/shop/db: spec.connectionPool.retryBudget" + why,
	}
	if d := cmp.Diff(want, r.Warnings); d != "" {
		t.Errorf("warnings (-want +got):\n%s", d)
	}
	var wantHdrs []string
	for _, w := range want {
		wantHdrs = append(wantHdrs, "299 - "+strconv.Quote(w))
	}
	if d := cmp.Diff(wantHdrs, hdrs); d != "" {
		t.Errorf("Warning headers (-want +got):\n%s", d)
	}
	if r, hdrs := apply("HTTP"); len(r.Warnings) != 0 || len(hdrs) != 0 {
		t.Errorf("HTTP Service: warnings %q, headers %q; want none", r.Warnings, hdrs)
	}
}

// TestApplyWarnsMTLSWithPlaintextRegistration: while pilot lets plaintext
// clients register, a PeerAuthentication and a MeshConfig defaultMtls do not
// reach the sidecars registered that way, and applying them says so; without
// the flag the same objects warn nothing.
func TestApplyWarnsMTLSWithPlaintextRegistration(t *testing.T) {
	const doc = `apiVersion: mesh.weft.dev/v1alpha1
kind: PeerAuthentication
metadata: {name: default, namespace: shop}
spec: {mtls: STRICT}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: MeshConfig
metadata: {name: default}
spec: {defaultMtls: STRICT}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: MeshConfig
metadata: {name: default}
spec: {trustDomain: cluster.local}
`
	const why = ": accepted but not enforced for sidecars registered without a certificate: pilot runs with --insecure-plaintext-registration"
	for _, tc := range []struct {
		plaintext bool
		want      []string
	}{
		{false, nil},
		// The second MeshConfig leaves defaultMtls out: its default is a mode too.
		{true, []string{"PeerAuthentication/shop/default: spec.mtls" + why, "MeshConfig/default: spec.defaultMtls" + why, "MeshConfig/default: spec.defaultMtls" + why}},
	} {
		f := newFixture(t, api.Config{PlaintextRegistration: tc.plaintext})
		var got []string
		for i, part := range []string{doc[:strings.Index(doc, "---")], doc[strings.Index(doc, "---"):strings.LastIndex(doc, "---")], doc[strings.LastIndex(doc, "---"):]} {
			a := f.do("POST", applyPath, part, nil)
			if a.code != 200 {
				t.Fatalf("plaintext=%v apply %d: %d %s", tc.plaintext, i, a.code, a.body)
			}
			var r api.ApplyResponse
			if err := json.Unmarshal(a.body, &r); err != nil {
				t.Fatal(err)
			}
			got = append(got, r.Warnings...)
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("plaintext=%v warnings (-want +got):\n%s", tc.plaintext, d)
		}
	}
}
