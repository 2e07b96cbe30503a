package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/pilot/api"
	"github.com/weft-mesh/weft/pilot/store/boltstore"
)

// The admin path end to end (HTTP, decode, validation, cross-object checks over
// the whole store, bbolt commit with fsync): what `meshctl apply` costs.

func benchAPI(b *testing.B) *api.API {
	b.Helper()
	st, err := boltstore.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	a, err := api.New(api.Config{Store: st, Logger: hclog.NewNullLogger()})
	if err != nil {
		b.Fatal(err)
	}
	return a
}

func serviceDocs(first, n, port int) string {
	var sb strings.Builder
	for i := first; i < first+n; i++ {
		fmt.Fprintf(&sb, "---\napiVersion: mesh.weft.dev/v1alpha1\nkind: Service\nmetadata: {name: s%d, namespace: bench}\nspec:\n  ports: [{name: http, port: %d}]\n", i, port)
	}
	return sb.String()
}

func applyOnce(b *testing.B, a *api.API, body string) {
	req, err := http.NewRequest("POST", api.Prefix+"/apply", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.RemoteAddr = "127.0.0.1:1"
	rec := newDiscardRecorder()
	a.ServeHTTP(rec, req)
	if rec.code != http.StatusOK {
		b.Fatalf("apply: %d", rec.code)
	}
}

// BenchmarkAdminApplySingle: one new object per apply, into a growing store.
func BenchmarkAdminApplySingle(b *testing.B) {
	a := benchAPI(b)
	i := 0
	for b.Loop() {
		applyOnce(b, a, serviceDocs(i, 1, 80))
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "objects/s")
}

// BenchmarkAdminApplyBulk1000: 1,000 changed objects per apply, one revision each.
func BenchmarkAdminApplyBulk1000(b *testing.B) {
	a := benchAPI(b)
	port := 1
	bodies := [2]string{serviceDocs(0, 1000, 1), serviceDocs(0, 1000, 2)}
	for b.Loop() {
		applyOnce(b, a, bodies[port%2])
		port++
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "objects/s")
}

type discardRecorder struct {
	h    http.Header
	code int
}

func newDiscardRecorder() *discardRecorder { return &discardRecorder{h: http.Header{}, code: 200} }

func (d *discardRecorder) Header() http.Header         { return d.h }
func (d *discardRecorder) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardRecorder) WriteHeader(code int)        { d.code = code }
