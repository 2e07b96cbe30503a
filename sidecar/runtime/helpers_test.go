package runtime

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/weft-mesh/weft/certs/manifest"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/runtime/staleness"
	"github.com/weft-mesh/weft/sidecar/xdsclient"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

const nodeID = "reviews-v1-a"

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// logBuf collects log output.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) lines(substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ln := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(ln, substr) {
			out = append(out, ln)
		}
	}
	return out
}

type env struct {
	t     testing.TB
	priv  ed25519.PrivateKey
	pub   ed25519.PublicKey
	clock *clock
	dir   string
	logs  *logBuf
	rts   []*Runtime // every runtime made, so a restart and a file read see their writes
}

// flush waits for every runtime's last-known-good writes, as the sidecar does on
// shutdown: a test reading the file, or starting a new runtime on it, calls it.
func (e *env) flush() {
	for _, r := range e.rts {
		r.Flush()
	}
}

func newEnv(t testing.TB) *env {
	t.Helper()
	seed := make([]byte, ed25519.SeedSize)
	seed[0] = 42
	priv := ed25519.NewKeyFromSeed(seed)
	return &env{t: t, priv: priv, pub: priv.Public().(ed25519.PublicKey), clock: &clock{now: t0}, dir: t.TempDir(), logs: &logBuf{}}
}

func (e *env) config() Config {
	return Config{
		NodeID:       nodeID,
		PublisherKey: e.pub,
		StateDir:     e.dir,
		Logger:       hclog.New(&hclog.LoggerOptions{Name: "runtime", Level: hclog.Debug, Output: e.logs}),
		Now:          e.clock.Now,
	}
}

func (e *env) runtime(mod ...func(*Config)) *Runtime {
	e.t.Helper()
	cfg := e.config()
	for _, m := range mod {
		m(&cfg)
	}
	e.flush() // a new runtime on the same state dir is a restart: the old one stopped
	r, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(e.rts) == 0 {
		e.t.Cleanup(e.flush) // before the state dir is removed
	}
	e.rts = append(e.rts, r)
	return r
}

// mesh is a one-listener config routing everything to cluster "backend".
func mesh(backends ...string) dt.Resources {
	var ups []netip.AddrPort
	for _, b := range backends {
		ups = append(ups, dt.MustAddr(b))
	}
	return dt.Simple("outbound", dt.MustAddr("127.0.0.1:15001"), false, ups...)
}

// update decodes res through r into a candidate; version is every resource's version.
func (e *env) update(r *Runtime, res dt.Resources, version string, extra ...*anypb.Any) *xdsclient.Update {
	e.t.Helper()
	u := &xdsclient.Update{Resources: map[string]map[string]xdsclient.Resource{}, Versions: map[string]string{}}
	add := func(typ string, a *anypb.Any) {
		name, v, err := r.Decode(typ, a)
		if err != nil {
			e.t.Fatalf("decode %s: %v", typ, err)
		}
		if u.Resources[typ] == nil {
			u.Resources[typ] = map[string]xdsclient.Resource{}
		}
		u.Resources[typ][name] = xdsclient.Resource{Name: name, Version: version, Value: v, Raw: a}
		u.Versions[typ] = version
	}
	for typ, ms := range res {
		for _, m := range ms {
			add(typ, dt.Any(m))
		}
	}
	for _, a := range extra {
		add(a.GetTypeUrl(), a)
	}
	return u
}

type signOpts struct {
	node     string
	priv     ed25519.PrivateKey
	issued   time.Time
	validity time.Duration
	revision int64
	epoch    uint64 // the content's rollback epoch
	extra    []manifest.Entry
	scope    string // content scope; default "test-scope"
	bindTo   string // binding scope; default scope
	// notCurrent signs a binding that says pilot timed out waiting for the
	// compile of streamRev and sent older content.
	notCurrent bool
	streamRev  int64
	// chain is the publisher's certificate chain (a publisher under the CA).
	chain []*x509.Certificate
	// rootCA is a ROOTCA Secret's Any.value the snapshot carries: covered by
	// the digest and committed apart in the content.
	rootCA []byte
}

// sign signs a manifest covering res.
func (e *env) sign(res dt.Resources, o signOpts) *anypb.Any {
	e.t.Helper()
	if o.node == "" {
		o.node = nodeID
	}
	if o.priv == nil {
		o.priv = e.priv
	}
	if o.issued.IsZero() {
		o.issued = e.clock.Now()
	}
	if o.validity == 0 {
		o.validity = 24 * time.Hour
	}
	if o.revision == 0 {
		o.revision = 1
	}
	if o.scope == "" {
		o.scope = "test-scope"
	}
	if o.bindTo == "" {
		o.bindTo = o.scope
	}
	entries := append([]manifest.Entry(nil), o.extra...)
	for typ, ms := range res {
		for _, msg := range ms {
			a := dt.Any(msg)
			name := nameOf(e.t, typ, a)
			entries = append(entries, manifest.Entry{TypeURL: typ, Name: name, SHA256: manifest.Hash(a.GetValue())})
		}
	}
	if o.rootCA != nil {
		entries = append(entries, manifest.Entry{TypeURL: manifest.SecretTypeURL, Name: manifest.RootCAName, SHA256: manifest.Hash(o.rootCA)})
	}
	d, err := manifest.Digest(entries)
	if err != nil {
		e.t.Fatal(err)
	}
	content := manifest.Content{Scope: o.scope, Revision: o.revision, Digest: d, Count: len(entries),
		IssuedAt: o.issued, ValidUntil: o.issued.Add(o.validity), RollbackEpoch: o.epoch}
	if o.rootCA != nil {
		content.RootCA, content.HasRootCA = manifest.Hash(o.rootCA), true
	}
	c, err := manifest.SignContent(o.priv, content)
	if err != nil {
		e.t.Fatal(err)
	}
	bd, err := manifest.SignBinding(o.priv, manifest.Binding{NodeID: o.node, Scope: o.bindTo, IssuedAt: o.issued, ValidUntil: o.issued.Add(o.validity),
		Current: !o.notCurrent, StreamRevision: o.streamRev})
	if err != nil {
		e.t.Fatal(err)
	}
	sm, err := manifest.Assemble(c, bd, o.chain...)
	if err != nil {
		e.t.Fatal(err)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(sm)
	if err != nil {
		e.t.Fatal(err)
	}
	return &anypb.Any{TypeUrl: manifest.TypeURL, Value: b}
}

func nameOf(t testing.TB, typ string, a *anypb.Any) string {
	t.Helper()
	r := &Runtime{cfg: Config{InsecureSkipManifest: true}}
	name, _, err := r.Decode(typ, a)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// overrides is the staleness set with short routing bounds.
func overrides(t *testing.T, o ...string) staleness.Set {
	t.Helper()
	s, err := ParseOverrides(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
