package probe

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseRoundTrip(t *testing.T) {
	in := Probers{
		Key("web", Liveness):  {HTTPGet: &HTTPGet{Path: "/healthz", Port: 8080}, TimeoutSeconds: 3},
		Key("web", Readiness): {HTTPGet: &HTTPGet{Path: "/ready?x=1", Port: 9901, Scheme: "HTTPS", HTTPHeaders: []Header{{Name: "X-A", Value: "b"}}}},
		Key("db", Startup):    {HTTPGet: &HTTPGet{Port: 5432}},
	}
	js, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	// Istio's ISTIO_KUBE_APP_PROBERS shape, keys sorted.
	want := `{"/app-health/db/startupz":{"httpGet":{"port":5432}},"/app-health/web/livez":{"httpGet":{"path":"/healthz","port":8080},"timeoutSeconds":3},` +
		`"/app-health/web/readyz":{"httpGet":{"path":"/ready?x=1","port":9901,"scheme":"HTTPS","httpHeaders":[{"name":"X-A","value":"b"}]}}}`
	if js != want {
		t.Errorf("encode:\n got %s\nwant %s", js, want)
	}
	out, err := Parse(js)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(in, out); d != "" {
		t.Errorf("round trip (-in +out):\n%s", d)
	}
	if out[Key("db", Startup)].Timeout() != DefaultTimeout || out[Key("web", Liveness)].Timeout() != 3*time.Second {
		t.Error("timeouts")
	}
	if p, err := Parse("  "); err != nil || len(p) != 0 {
		t.Errorf("empty: %v %v", p, err)
	}
}

func TestParseErrors(t *testing.T) {
	many := func(n int) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `"/app-health/c%d/livez":{"httpGet":{"port":80}}`, i)
		}
		b.WriteString("}")
		return b.String()
	}
	headers := func(n int) string {
		var h []string
		for i := range n {
			h = append(h, fmt.Sprintf(`{"name":"X-%d","value":"v"}`, i))
		}
		return `{"/app-health/a/livez":{"httpGet":{"port":80,"httpHeaders":[` + strings.Join(h, ",") + `]}}}`
	}
	for _, tc := range []struct{ name, in, want string }{
		{"probers at bound", many(MaxProbers), ""},
		{"probers past bound", many(MaxProbers + 1), "65 probers, limit 64"},
		{"headers at bound", headers(MaxHeaders), ""},
		{"headers past bound", headers(MaxHeaders + 1), "17 headers, limit 16"},
		{"too long", `{"x":"` + strings.Repeat("a", MaxBytes) + `"}`, "bytes, limit 65536"},
		{"unknown field", `{"/app-health/a/livez":{"httpGet":{"port":80},"tcpSocket":{}}}`, "unknown field"},
		{"trailing", `{} {}`, "trailing data"},
		{"null", `null`, "null, want an object"},
		{"bad key", `{"/healthz":{"httpGet":{"port":80}}}`, `key "/healthz"`},
		{"bad kind", `{"/app-health/a/alive":{"httpGet":{"port":80}}}`, `kind "alive"`},
		{"bad container", `{"/app-health/A_b/livez":{"httpGet":{"port":80}}}`, "DNS-1123 label"},
		{"no httpGet", `{"/app-health/a/livez":{}}`, "httpGet: required"},
		{"port", `{"/app-health/a/livez":{"httpGet":{"port":0}}}`, "httpGet.port: 0 outside 1..65535"},
		{"scheme", `{"/app-health/a/livez":{"httpGet":{"port":80,"scheme":"ftp"}}}`, `httpGet.scheme: "ftp"`},
		{"path", `{"/app-health/a/livez":{"httpGet":{"port":80,"path":"x"}}}`, "httpGet.path"},
		{"path space", `{"/app-health/a/livez":{"httpGet":{"port":80,"path":"/a b"}}}`, "httpGet.path"},
		{"header name", `{"/app-health/a/livez":{"httpGet":{"port":80,"httpHeaders":[{"name":"a b","value":""}]}}}`, "httpHeaders[0].name"},
		{"header value", `{"/app-health/a/livez":{"httpGet":{"port":80,"httpHeaders":[{"name":"a","value":"x\r\ny: z"}]}}}`, "httpHeaders[0].value"},
		{"timeout at bound", `{"/app-health/a/livez":{"httpGet":{"port":80},"timeoutSeconds":25}}`, ""},
		{"timeout past bound", `{"/app-health/a/livez":{"httpGet":{"port":80},"timeoutSeconds":26}}`, "timeoutSeconds: 26 outside 0..25"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.in)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), EnvName) {
				t.Fatalf("err %v: want %s... %q", err, EnvName, tc.want)
			}
		})
	}
}
