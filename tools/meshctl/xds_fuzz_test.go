package meshctl_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-mesh/weft/tools/meshctl"
)

// FuzzStatusAnswers feeds arbitrary pilot answers (status code and body) to
// proxy-status, rollout status and config-dump: meshctl must never panic or
// hang, and must exit with one of its documented codes.
func FuzzStatusAnswers(f *testing.F) {
	f.Add(200, []byte(`{"proxies":[{"node":"a","status":"SYNCED","types":[{"type":"CDS","typeUrl":"type.googleapis.com/envoy.config.cluster.v3.Cluster","status":"NACKED","error":"x\ny"}]}]}`))
	f.Add(200, []byte(`{"revision":3,"connected":2,"effective":1,"rejected":1,"rejections":[{"node":"n","type":"CDS","error":"bad"}]}`))
	f.Add(200, []byte(`{"revision":3,"connected":0,"converged":true,"convergenceSeconds":0.5}`))
	f.Add(404, []byte(`{"error":"proxy \"x\": not found"}`))
	f.Add(500, []byte(`not json`))
	f.Add(200, []byte(`{"node":"a","types":[{"type":"CDS","resources":[{"name":"c"}]}]}`))

	var code atomic.Int32
	var body atomic.Pointer[[]byte]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.Header().Set("X-Weft-Revision", "3")
		}
		w.WriteHeader(int(code.Load()))
		_, _ = w.Write(*body.Load())
	}))
	defer srv.Close()

	f.Fuzz(func(t *testing.T, status int, b []byte) {
		if status < 200 || status > 599 {
			status = 200
		}
		code.Store(int32(status))
		body.Store(&b)
		for _, args := range [][]string{
			{"proxy-status"},
			{"rollout", "status"},
			{"rollout", "status", "3"}, // not --wait: its poll interval would make each run 200ms
			{"config-dump", "a"},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			var out, errb bytes.Buffer
			got := meshctl.Run(ctx, append([]string{"--pilot", srv.URL}, args...), &out, &errb)
			cancel()
			switch got {
			case meshctl.ExitOK, meshctl.ExitInvalid, meshctl.ExitOther, meshctl.ExitConflict, meshctl.ExitNotFound:
			default:
				t.Fatalf("%v: exit %d", args, got)
			}
		}
	})
}
