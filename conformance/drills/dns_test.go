package drills

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	mdns "github.com/miekg/dns"

	"github.com/weft-mesh/weft/conformance/internal/drillkit"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/runtime"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
	"github.com/weft-mesh/weft/tools/testkit"
)

// dnsVIP is reviews' address in the DNS drill.
const dnsVIP = "240.240.7.7"

// lookupA asks the sidecar's DNS proxy for name's A records over network with
// miekg's client, and through Go's own resolver (PreferGo) over UDP.
func lookupA(t *testing.T, addr, network, name string) []string {
	t.Helper()
	m := new(mdns.Msg)
	m.SetQuestion(name, mdns.TypeA)
	r, _, err := (&mdns.Client{Net: network, Timeout: 2 * time.Second}).Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s: %v", network, name, err)
	}
	var out []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*mdns.A); ok {
			out = append(out, a.A.String())
		}
	}
	res := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	got, err := res.LookupHost(context.Background(), name)
	if err != nil || !slices.Equal(got, out) {
		t.Fatalf("Go resolver %s: %v %v, miekg client got %v", name, got, err, out)
	}
	return out
}

// Drill: the DNS proxy answers the mesh's names from the active configuration,
// so from the last-known-good: with pilot killed, and after the sidecar is
// restarted with pilot still dead (real processes; go-control-plane serves a
// hand-built name table, pilot the one it generates from the Service's
// spec.addresses).
func TestDrillDNSFromLastKnownGood(t *testing.T) {
	for i, kind := range drillkit.ControlPlanes {
		t.Run(kind, func(t *testing.T) {
			w, cp := drillkit.Setup(t, kind, fmt.Sprintf("127.77.8%d", i))
			dnsAddr := w.IP + ":15053"
			resolv := filepath.Join(t.TempDir(), "resolv.conf")
			// No nameserver: only the mesh's names can be answered, and no forward
			// can stand in for the table.
			if err := os.WriteFile(resolv, []byte("search shop.svc.cluster.local svc.cluster.local cluster.local\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			flags := []string{"--dns-addr", dnsAddr, "--dns-resolv-conf", resolv}
			var rev int64
			switch c := cp.(type) {
			case drillkit.RefCP:
				res := drillkit.MeshTo(w, w.IP[:len(w.IP)-1]+"2:8080")
				dt.WithDNS(res[xdsresource.ListenerType][0].(*listenerv3.Listener),
					dt.DNSMetadata("cluster.local", map[string][]string{"reviews.shop.svc.cluster.local": {dnsVIP}}))
				rev = 2
				c.Push(res, rev, 0)
			case *drillkit.PilotProc:
				// Pilot sends the name table to intercepted sidecars (the wire's VIP
				// chains need original destinations); no rules are installed here,
				// DNS is all this drill asks of it.
				flags = append(flags, "--intercept", "iptables", "--inbound-addr", w.IP+":15006")
				rev = c.ApplyRev(fmt.Sprintf(`apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  addresses: [%s]
  ports: [{name: http, port: 9080, targetPort: 8080, protocol: HTTP}]
`, dnsVIP))
			}
			sc := drillkit.StartSidecar(t, w, cp.Addr(), flags...)
			sc.WaitReady(10 * time.Second)
			testkit.Eventually(t, 10*time.Second, fmt.Sprintf("revision %d active", rev), func() bool { return sc.ConfigDump().Revision >= rev })
			if cd := sc.ConfigDump(); cd.DNS == nil || cd.DNS.Hosts != 1 {
				t.Fatalf("name table not active: %+v", cd.DNS)
			}
			for _, network := range []string{"udp", "tcp"} {
				if got := lookupA(t, dnsAddr, network, "reviews.shop.svc.cluster.local."); !slices.Equal(got, []string{dnsVIP}) {
					t.Fatalf("%s with pilot up: %v", network, got)
				}
			}
			testkit.Eventually(t, 5*time.Second, "last-known-good saved", func() bool { return !sc.ConfigDump().LastKnownGood.SavedAt.IsZero() })

			cp.Down()
			testkit.Eventually(t, 5*time.Second, "xDS stream noticed down", func() bool { return !sc.ConfigDump().XDS.Connected })
			if got := lookupA(t, dnsAddr, "udp", "reviews.shop."); !slices.Equal(got, []string{dnsVIP}) {
				t.Fatalf("pilot killed: %v", got)
			}

			sc.Terminate()
			sc = drillkit.StartSidecar(t, w, cp.Addr(), flags...)
			took := sc.WaitReady(2 * time.Second)
			cd := sc.ConfigDump()
			if cd.Active == nil || cd.Active.Source != runtime.SourceLKG || cd.DNS == nil || cd.DNS.Hosts != 1 {
				t.Fatalf("after restart: active %+v, dns %+v", cd.Active, cd.DNS)
			}
			for _, network := range []string{"udp", "tcp"} {
				for _, name := range []string{"reviews.shop.svc.cluster.local.", "reviews.shop.", "reviews."} {
					if got := lookupA(t, dnsAddr, network, name); !slices.Equal(got, []string{dnsVIP}) {
						t.Fatalf("%s %s after restart with pilot dead: %v", network, name, got)
					}
				}
			}
			if q := sc.ConfigDump().DNS.Queries; q["mesh"] == 0 || q["forwarded"] != 0 {
				t.Fatalf("queries %v", q)
			}
			t.Logf("%s: restarted with pilot dead, ready in %s, DNS answered %s from the last-known-good", kind, took.Round(time.Millisecond), dnsVIP)
		})
	}
}
