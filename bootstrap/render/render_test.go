package render

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/bootstrap/node"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var files = map[string]string{
	"full.yaml": `
node-id: reviews-v1-a
namespace: shop
service-account: reviews
labels: {app: reviews, version: v1}
address: 127.0.0.21
locality: eu-west/eu-west-1a
pilot: [127.0.0.1:15010, "pilot.weft:15010"]
publisher-key: /keys/publisher.pub
state-dir: /state/a
xds-mode: sotw
`,
	"full.json": `{"node-id":"reviews-v1-a","namespace":"shop","service-account":"reviews","labels":{"app":"reviews","version":"v1"},
"address":"127.0.0.21","locality":"eu-west/eu-west-1a","pilot":["127.0.0.1:15010","pilot.weft:15010"],
"publisher-key":"/keys/publisher.pub","state-dir":"/state/a","xds-mode":"sotw"}`,
	"unknown.yaml": "node-id: a\nnodeId: b\n",
	"empty.yaml":   "\n",
	"list.yaml":    "- a\n",
}

func readFile(name string) ([]byte, error) {
	if s, ok := files[name]; ok {
		return []byte(s), nil
	}
	return nil, fmt.Errorf("open %s: %w", name, fs.ErrNotExist)
}

var base = []string{"--node-id", "reviews-v1-a", "--namespace", "shop", "--service-account", "reviews",
	"--labels", "app=reviews,version=v1", "--address", "127.0.0.21", "--pilot", "127.0.0.1:15010,pilot.weft:15010",
	"--publisher-key", "/keys/publisher.pub", "--state-dir", "/state/a"}

func with(extra ...string) []string { return append(append([]string{}, base...), extra...) }

// without drops a flag and its value from base.
func without(name string, extra ...string) []string {
	var out []string
	for i := 0; i < len(base); i += 2 {
		if base[i] != name {
			out = append(out, base[i], base[i+1])
		}
	}
	return append(out, extra...)
}

func want(mut func(*Settings)) *Settings {
	s := &Settings{
		Node: node.Node{ID: "reviews-v1-a", Namespace: "shop", ServiceAccount: "reviews",
			Labels: map[string]string{"app": "reviews", "version": "v1"}, Address: "127.0.0.21", InboundPort: 15006},
		Pilot:        []string{"127.0.0.1:15010", "pilot.weft:15010"},
		PublisherKey: "/keys/publisher.pub",
		StateDir:     "/state/a",
		AdminAddr:    netip.MustParseAddrPort("127.0.0.1:15000"),
		OutboundAddr: netip.MustParseAddrPort("127.0.0.1:15001"),
		InboundAddr:  netip.MustParseAddrPort("127.0.0.21:15006"),
		ReadyAddr:    netip.MustParseAddrPort("127.0.0.21:15021"),
		AppAddress:   netip.MustParseAddr("127.0.0.1"),
		XDSMode:      "delta",
		TrustDomain:  DefaultTrustDomain,
		Concurrency:  DefaultConcurrency,
		Limits:       DefaultLimits(),
		DNS:          DefaultDNS(),
	}
	if mut != nil {
		mut(s)
	}
	return s
}

func fromFile(s *Settings) {
	s.XDSMode = "sotw"
	s.Node.Locality = node.Locality{Region: "eu-west", Zone: "eu-west-1a"}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want *Settings
		err  string
	}{
		{"flags with defaults", base, want(nil), ""},
		{"every flag", with("--admin-addr", "127.0.0.21:16000", "--outbound-addr", "127.0.0.21:16001", "--inbound-addr", "127.0.0.21:16006",
			"--ready-addr", "127.0.0.21:16021", "--app-address", "127.0.0.22", "--xds-mode", "sotw", "--locality", "r/z/s"),
			want(func(s *Settings) {
				s.AdminAddr = netip.MustParseAddrPort("127.0.0.21:16000")
				s.OutboundAddr = netip.MustParseAddrPort("127.0.0.21:16001")
				s.InboundAddr = netip.MustParseAddrPort("127.0.0.21:16006")
				s.ReadyAddr = netip.MustParseAddrPort("127.0.0.21:16021")
				s.AppAddress = netip.MustParseAddr("127.0.0.22")
				s.XDSMode = "sotw"
				s.Node.InboundPort = 16006
				s.Node.Locality = node.Locality{Region: "r", Zone: "z", SubZone: "s"}
			}), ""},
		{"IPv6 address", without("--address", "--address", "::1", "--admin-addr", "[::1]:15000", "--outbound-addr", "[::1]:15001"),
			want(func(s *Settings) {
				s.Node.Address = "::1"
				s.AdminAddr = netip.MustParseAddrPort("[::1]:15000")
				s.OutboundAddr = netip.MustParseAddrPort("[::1]:15001")
				s.InboundAddr = netip.MustParseAddrPort("[::1]:15006")
				s.ReadyAddr = netip.MustParseAddrPort("[::1]:15021")
			}), ""},
		{"yaml bootstrap", []string{"--bootstrap", "full.yaml"}, want(fromFile), ""},
		{"json bootstrap", []string{"--bootstrap", "full.json"}, want(fromFile), ""},
		{"flags override the file", []string{"--bootstrap", "full.yaml", "--address", "127.0.0.30", "--labels", "app=x", "--pilot", "10.0.0.1:1", "--xds-mode", "delta"},
			want(func(s *Settings) {
				fromFile(s)
				s.XDSMode = "delta"
				s.Node.Address = "127.0.0.30"
				s.Node.Labels = map[string]string{"app": "x"}
				s.Pilot = []string{"10.0.0.1:1"}
				s.InboundAddr = netip.MustParseAddrPort("127.0.0.30:15006")
				s.ReadyAddr = netip.MustParseAddrPort("127.0.0.30:15021")
			}), ""},
		{"runtime flags override the file", []string{"--bootstrap", "full.yaml", "--insecure-skip-manifest", "--staleness", "routes=1s/3s"},
			want(func(s *Settings) {
				fromFile(s)
				s.InsecureSkipManifest = true
				s.Staleness = []string{"routes=1s/3s"}
			}), ""},
		{"concurrency at the bound", with("--concurrency", fmt.Sprint(MaxConcurrency)), want(func(s *Settings) { s.Concurrency = MaxConcurrency }), ""},
		{"concurrency one past the bound", with("--concurrency", fmt.Sprint(MaxConcurrency+1)), nil, "sidecar settings: concurrency: 257 outside 1..256"},
		{"negative concurrency", with("--concurrency", "-1"), nil, "sidecar settings: concurrency: -1 outside 1..256"},
		{"h2-server weft", with("--h2-server", "weft"), want(func(s *Settings) { s.H2Server = "weft" }), ""},
		{"h2-server std", with("--h2-server", "std"), want(func(s *Settings) { s.H2Server = "std" }), ""},
		{"h2-server unknown", with("--h2-server", "nghttp2"), nil, `sidecar settings: h2-server: "nghttp2" is neither weft nor std`},
		{"h2-client weft", with("--h2-client", "weft"), want(func(s *Settings) { s.H2Client = "weft" }), ""},
		{"h2-client std", with("--h2-client", "std"), want(func(s *Settings) { s.H2Client = "std" }), ""},
		{"h2-client unknown", with("--h2-client", "nghttp2"), nil, `sidecar settings: h2-client: "nghttp2" is neither weft nor std`},
		{"pprof on the loopback admin address", with("--pprof"), want(func(s *Settings) { s.Pprof = true }), ""},
		{"empty labels", without("--labels", "--labels", ""), want(func(s *Settings) { s.Node.Labels = map[string]string{} }), ""},

		{"unknown flag", with("--nope"), nil, "sidecar settings: flag provided but not defined: -nope"},
		{"positional", with("extra"), nil, `sidecar settings: unexpected argument "extra"`},
		{"missing node-id", without("--node-id"), nil, "sidecar settings: node-id: required"},
		{"node-id with space", without("--node-id", "--node-id", "a b"), nil, `sidecar settings: node-id: "a b" contains whitespace or control characters`},
		{"node-id too long", without("--node-id", "--node-id", strings.Repeat("a", 254)), nil, "sidecar settings: node-id: 254 bytes, limit 253"},
		{"missing namespace", without("--namespace"), nil, "sidecar settings: namespace: required"},
		{"bad namespace", without("--namespace", "--namespace", "Shop"), nil, `sidecar settings: namespace: "Shop" is not a DNS-1123 label (lowercase letters, digits, '-', at most 63)`},
		{"namespace ends with dash", without("--namespace", "--namespace", "shop-"), nil, `sidecar settings: namespace: "shop-" is not a DNS-1123 label (lowercase letters, digits, '-', at most 63)`},
		{"missing service account", without("--service-account"), nil, "sidecar settings: service-account: required"},
		{"label without =", without("--labels", "--labels", "app=a,version"), nil, `sidecar settings: labels: item 1 "version": want key=value`},
		{"label repeated", without("--labels", "--labels", "app=a,app=b"), nil, `sidecar settings: labels: item 1: key "app" repeated`},
		{"label empty key", without("--labels", "--labels", "=a"), nil, "sidecar settings: labels: empty key"},
		{"missing address", without("--address"), nil, "sidecar settings: address: required"},
		{"bad address", without("--address", "--address", "localhost"), nil, `sidecar settings: address: "localhost" is not an IP literal`},
		{"missing pilot", without("--pilot"), nil, "sidecar settings: pilot: at least one HOST:PORT required"},
		{"pilot without port", without("--pilot", "--pilot", "127.0.0.1"), nil, `sidecar settings: pilot[0]: "127.0.0.1" is not HOST:PORT with a port in 1..65535`},
		{"pilot port 0", without("--pilot", "--pilot", "a:1,b:0"), nil, `sidecar settings: pilot[1]: "b:0" is not HOST:PORT with a port in 1..65535`},
		{"pilot empty item", without("--pilot", "--pilot", "a:1,"), nil, `sidecar settings: pilot[1]: "" is not HOST:PORT with a port in 1..65535`},
		{"pilot twice", without("--pilot", "--pilot", "a:1,a:1"), nil, "sidecar settings: pilot[1]: a:1 listed twice"},
		{"too many pilots", without("--pilot", "--pilot", strings.TrimSuffix(strings.Repeat("a:1,", 17), ",")), nil, "sidecar settings: pilot: 17 addresses, limit 16"},
		{"missing publisher key", without("--publisher-key"), nil, "sidecar settings: publisher-key or ca-root: required (whom manifests are trusted from)"},
		{"missing state dir", without("--state-dir"), nil, "sidecar settings: state-dir: required"},
		{"bad admin addr", with("--admin-addr", "127.0.0.1"), nil, `sidecar settings: admin-addr: "127.0.0.1" is not IP:PORT with a port in 1..65535`},
		{"port zero", with("--ready-addr", "127.0.0.1:0"), nil, `sidecar settings: ready-addr: "127.0.0.1:0" is not IP:PORT with a port in 1..65535`},
		{"hostname listener", with("--inbound-addr", "localhost:15006"), nil, `sidecar settings: inbound-addr: "localhost:15006" is not IP:PORT with a port in 1..65535`},
		{"listener clash", with("--outbound-addr", "127.0.0.1:15000"), nil, "sidecar settings: outbound-addr: 127.0.0.1:15000 already used by admin-addr"},
		{"bad app address", with("--app-address", "app"), nil, `sidecar settings: app-address: "app" is not an IP literal`},
		{"pprof on a non-loopback admin address", with("--pprof", "--admin-addr", "10.0.0.1:15000"), nil,
			"sidecar settings: pprof: admin-addr 10.0.0.1:15000 is not a loopback address; the profiler is served on loopback only"},
		{"bad xds mode", with("--xds-mode", "incremental"), nil, `sidecar settings: xds-mode: "incremental", want delta or sotw`},
		{"bad locality", with("--locality", "a/b/c/d"), nil, `sidecar settings: locality: locality "a/b/c/d": want region/zone/subzone`},
		{"bootstrap missing", []string{"--bootstrap", "nope.yaml"}, nil, "sidecar settings: bootstrap: open nope.yaml: file does not exist"},
		{"bootstrap unknown key", []string{"--bootstrap", "unknown.yaml"}, nil, `sidecar settings: bootstrap unknown.yaml: error unmarshaling JSON: while decoding JSON: json: unknown field "nodeId"`},
		{"bootstrap empty", []string{"--bootstrap", "empty.yaml"}, nil, "sidecar settings: bootstrap empty.yaml: empty"},
		{"bootstrap not a map", []string{"--bootstrap", "list.yaml"}, nil, "sidecar settings: bootstrap list.yaml: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal array into Go value of type render.File"},
		{"file values are validated too", []string{"--bootstrap", "full.yaml", "--namespace", ""}, nil, "sidecar settings: namespace: required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.args, readFile)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err || !errors.Is(err, ErrUsage) {
					t.Fatalf("err = %v\nwant  %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b }), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeFileLimit(t *testing.T) {
	_, err := DecodeFile(make([]byte, MaxBootstrapSize+1))
	if err == nil || err.Error() != "65537 bytes, limit 65536" {
		t.Fatalf("err = %v", err)
	}
}

func TestLabelsLimits(t *testing.T) {
	many := map[string]string{}
	for i := range MaxLabels + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	tests := []struct {
		labels map[string]string
		err    string
	}{
		{many, "labels: 65 labels, limit 64"},
		{map[string]string{strings.Repeat("k", 257): "v"}, `labels: "` + strings.Repeat("k", 257) + `": key or value longer than 256 bytes`},
		{map[string]string{"a b": "v"}, `labels: "a b": key or value contains '=', ',' or whitespace`},
		{map[string]string{"a": "x,y"}, `labels: "a": key or value contains '=', ',' or whitespace`},
	}
	for _, tc := range tests {
		if err := checkLabels(tc.labels); err == nil || err.Error() != tc.err {
			t.Errorf("err = %v, want %s", err, tc.err)
		}
	}
}

// FuzzDecodeFile: any bootstrap file either fails cleanly or yields settings that
// pass the node's own validation and keep listeners distinct.
func FuzzDecodeFile(f *testing.F) {
	f.Add([]byte(files["full.yaml"]))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := DecodeFile(data)
		if err != nil {
			return
		}
		s, err := file.Settings()
		if err != nil {
			return
		}
		if err := s.Node.Validate(); err != nil {
			t.Fatalf("settings accepted an invalid node: %v", err)
		}
		seen := map[netip.AddrPort]bool{}
		for _, ap := range []netip.AddrPort{s.AdminAddr, s.OutboundAddr, s.InboundAddr, s.ReadyAddr} {
			if seen[ap] || ap.Port() == 0 {
				t.Fatalf("listener %v repeated or without port", ap)
			}
			seen[ap] = true
		}
		if s.XDSMode != "delta" && s.XDSMode != "sotw" {
			t.Fatalf("xds mode %q", s.XDSMode)
		}
	})
}

// TestParseRealFile goes through os.ReadFile, as cmd/sidecar does.
func TestParseRealFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bootstrap.yaml")
	if err := os.WriteFile(path, []byte(files["full.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Parse([]string{"--bootstrap", path, "--state-dir", "/state/b"}, os.ReadFile)
	if err != nil {
		t.Fatal(err)
	}
	if got.StateDir != "/state/b" || got.Node.ID != "reviews-v1-a" || got.XDSMode != "sotw" {
		t.Fatalf("got %+v", got)
	}
}
