package h2client_test

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/weft-mesh/weft/sidecar/h2client"
)

// BenchmarkRoundTrip is one small GET on a pooled connection to net/http's
// h2c server (1 KiB answer), with this client or net/http's (-benchmem:
// allocations per request, the client's and the server's together).
func BenchmarkRoundTrip(b *testing.B) {
	body := make([]byte, 1024)
	addr := h2cServer(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1024")
		w.Write(body)
	}), 0)
	for _, name := range []string{"weft", "std"} {
		b.Run(name, func(b *testing.B) {
			var rt interface {
				RoundTrip(*http.Request) (*http.Response, error)
			}
			if name == "weft" {
				rt = dial(b, addr, h2client.Config{})
			} else {
				var p http.Protocols
				p.SetUnencryptedHTTP2(true)
				tr := &http.Transport{Protocols: &p, DisableCompression: true}
				cc, err := tr.NewClientConn(context.Background(), "http", addr)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { cc.Close() })
				rt = cc
			}
			req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
			buf := make([]byte, 2048)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(resp.Body, buf[:1024]); err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
			}
		})
	}
}
