package etcd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weft-mesh/weft/conformance/internal/drillkit"
	"github.com/weft-mesh/weft/internal/edkey"
	"github.com/weft-mesh/weft/pilot/api"
	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/etcdstore"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/certfiles"
	"github.com/weft-mesh/weft/tools/testkit/etcdtest"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

// bulkObjects is the size of every apply of the etcd drill.
const bulkObjects = 1000

// bulkBody is one apply of bulkObjects Services, all labelled with the round,
// whose port also changes with it (so every object changes every round).
func bulkBody(round int) []byte {
	items := make([]map[string]any, bulkObjects)
	for i := range items {
		items[i] = map[string]any{
			"apiVersion": "mesh.weft.dev/v1alpha1", "kind": "Service",
			"metadata": map[string]any{"namespace": "bulk", "name": fmt.Sprintf("s%04d", i),
				"labels": map[string]string{"app": "bulk", "round": strconv.Itoa(round)}},
			"spec": map[string]any{"selector": map[string]string{"app": "bulk"},
				"ports": []map[string]any{{"name": "http", "port": 1000 + round%60000, "targetPort": 8080, "protocol": "HTTP"}}},
		}
	}
	b, err := json.Marshal(map[string]any{"items": items})
	if err != nil {
		panic(err)
	}
	return b
}

// applied is one round of the loop as pilot answered it.
type applied struct {
	round int
	rev   int64 // 0: the apply failed (it may or may not have committed)
	err   string
}

// bulkApply posts one round to pilot's admin API.
func bulkApply(hc *http.Client, p *proc.PilotProcess, round int) applied {
	resp, err := hc.Post(p.URL()+"/apis/mesh.weft.dev/v1alpha1/apply", "application/json", bytes.NewReader(bulkBody(round)))
	if err != nil {
		return applied{round: round, err: err.Error()}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return applied{round: round, err: fmt.Sprintf("%s: %s", resp.Status, body)}
	}
	var ar struct {
		Revision int64 `json:"revision"`
	}
	if err := json.Unmarshal(body, &ar); err != nil || ar.Revision == 0 {
		return applied{round: round, err: fmt.Sprintf("answer %q: %v", body, err)}
	}
	return applied{round: round, rev: ar.Revision}
}

// TestEtcdLeaderKilledDuringBulkApplies: bin/pilot on a real 3-member etcd 3.4
// cluster applies 1,000 Services per revision in a loop; the etcd leader is
// SIGKILLed twice during it (the second time while the first is still down is
// not done: a 3-member cluster needs 2). Every revision in the store holds
// exactly one whole round (1,000 objects, one round label), every apply pilot
// confirmed is there at the revision it answered, and pilot, never restarted,
// keeps applying after each kill and serves the last round.
func TestEtcdLeaderKilledDuringBulkApplies(t *testing.T) {
	const ip = "127.93.1.1"
	c := etcdtest.Start(t, etcdtest.Options{})
	p := proc.StartPilot(t, ip, filepath.Join(t.TempDir(), "pilot"), "--store", "etcd", "--etcd-endpoints", strings.Join(c.Endpoints, ","))
	hc := &http.Client{Timeout: 60 * time.Second}

	var (
		mu      sync.Mutex
		results []applied
	)
	ok := func() int { // confirmed applies so far
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range results {
			if r.rev != 0 {
				n++
			}
		}
		return n
	}
	stop := make(chan struct{})
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		for round := 1; ; round++ {
			select {
			case <-stop:
				return
			default:
			}
			r := bulkApply(hc, p, round)
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		}
	}()
	waitOK := func(n int, what string) {
		t.Helper()
		testkit.Wait(t, 90*time.Second, func() error {
			select {
			case <-p.Exited():
				t.Fatalf("pilot exited: %v", p.Err())
			default:
			}
			if got := ok(); got < n {
				return fmt.Errorf("%s: %d of %d applies confirmed", what, got, n)
			}
			return nil
		})
	}
	waitOK(3, "before the kill")
	for kill := 1; kill <= 2; kill++ {
		lead := c.WaitLeader(t)
		before := ok()
		t.Logf("kill %d: SIGKILL etcd leader %s after %d confirmed applies", kill, lead.Name, before)
		lead.Kill(t)
		waitOK(before+3, fmt.Sprintf("after kill %d", kill))
		c.Restart(t, lead)
	}
	close(stop)
	<-loopDone

	// Read the whole history back through a store of the test's own.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := etcdstore.Open(ctx, etcdstore.Config{Endpoints: c.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	head, err := st.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, err := st.Watch(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	roundAt := map[store.Revision]int{} // revision -> its round
	count := map[store.Revision]int{}
	for n := 0; n < int(head)*bulkObjects; n++ {
		var ev store.Event
		select {
		case ev = <-w.Events():
		case <-ctx.Done():
			t.Fatalf("reading history: %d events read, head %d: %v", n, head, ctx.Err())
		}
		if ev.Op != store.OpPut || ev.Object.Metadata.Namespace != "bulk" {
			t.Fatalf("revision %d: unexpected %s %s", ev.Revision, ev.Op, ev.Object)
		}
		round, err := strconv.Atoi(ev.Object.Metadata.Labels["round"])
		if err != nil {
			t.Fatalf("revision %d: %s has no round label", ev.Revision, ev.Object)
		}
		if r, seen := roundAt[ev.Revision]; seen && r != round {
			t.Fatalf("revision %d mixes rounds %d and %d: not all or nothing", ev.Revision, r, round)
		}
		roundAt[ev.Revision] = round
		count[ev.Revision]++
	}
	prev := 0
	for rev := store.Revision(1); rev <= head; rev++ {
		if count[rev] != bulkObjects {
			t.Fatalf("revision %d holds %d objects, want %d: not all or nothing", rev, count[rev], bulkObjects)
		}
		if roundAt[rev] <= prev {
			t.Fatalf("revision %d holds round %d after round %d", rev, roundAt[rev], prev)
		}
		prev = roundAt[rev]
	}
	mu.Lock()
	defer mu.Unlock()
	failed := 0
	for _, r := range results {
		if r.rev == 0 {
			failed++
			t.Logf("round %d: apply failed (allowed while etcd elects): %s", r.round, r.err)
			continue
		}
		if roundAt[store.Revision(r.rev)] != r.round {
			t.Fatalf("round %d confirmed at revision %d, which holds round %d", r.round, r.rev, roundAt[store.Revision(r.rev)])
		}
	}
	t.Logf("%d rounds of %d objects: %d confirmed, %d failed during elections; store head %d, every revision whole", len(results), bulkObjects, len(results)-failed, failed, head)

	// Pilot still serves the newest round without a restart.
	last := roundAt[head]
	testkit.Wait(t, 30*time.Second, func() error {
		resp, err := hc.Get(p.URL() + "/apis/mesh.weft.dev/v1alpha1/namespaces/bulk/services/s0999")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var got api.ObjectResponse
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			return err
		}
		if got.Object == nil || got.Object.Metadata.Labels["round"] != strconv.Itoa(last) {
			return fmt.Errorf("pilot serves %+v, want round %d", got.Object, last)
		}
		return nil
	})
	t.Logf("pilot logged %d commits of unknown outcome (resolved by reading the log back) and %d log re-reads",
		strings.Count(p.Logs.String(), "commit outcome unknown"), strings.Count(p.Logs.String(), "reading the log again"))
}

// TestEtcd37Smoke: bin/pilot on a 3-member etcd 3.7 cluster over TLS with
// client certificates (--etcd-ca, --etcd-cert, --etcd-key; the store contract
// runs fully on 3.7 in pilot/store/etcdstore): a bulk apply of 1,000 objects is
// one revision, and a second pilot replica on the same cluster serves it.
func TestEtcd37Smoke(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Binary: etcdtest.Etcd37Binary(t), TLS: true})
	flags := []string{"--store", "etcd", "--etcd-endpoints", strings.Join(c.Endpoints, ","),
		"--etcd-ca", c.TLS.CAFile, "--etcd-cert", c.TLS.CertFile, "--etcd-key", c.TLS.KeyFile}
	p1 := proc.StartPilot(t, "127.93.2.1", filepath.Join(t.TempDir(), "p1"), flags...)
	hc := &http.Client{Timeout: 60 * time.Second}
	r := bulkApply(hc, p1, 7)
	if r.rev != 1 {
		t.Fatalf("bulk apply on a fresh store: %+v, want revision 1", r)
	}
	p2 := proc.StartPilot(t, "127.93.2.2", filepath.Join(t.TempDir(), "p2"), flags...)
	resp, err := hc.Get(p2.URL() + "/apis/mesh.weft.dev/v1alpha1/namespaces/bulk/services")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Items) != bulkObjects {
		t.Fatalf("second replica lists %d services (%v), want %d", len(list.Items), err, bulkObjects)
	}
}

// replicaStatus is a status API answer across replicas.
type replicaStatus struct {
	Proxies []struct {
		Node           string     `json:"node"`
		Status         string     `json:"status"`
		Replica        string     `json:"replica"`
		DisconnectedAt *time.Time `json:"disconnectedAt"`
	} `json:"proxies"`
	Replicas []struct {
		ID    string `json:"id"`
		Error string `json:"error"`
	} `json:"replicas"`
}

func getJSON(hc *http.Client, u string, v any) error {
	resp, err := hc.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s: %s", u, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// TestTwoPilotReplicasOnEtcd: two bin/pilot replicas on one etcd cluster,
// sharing the CA root, the token key and the publisher key from files; real
// sidecars list both (--pilot a,b) and spread over them, with 200 requests a
// second through them in all. Either replica's proxy status lists every
// sidecar (fan-out). One replica is SIGKILLed: no request fails, every sidecar
// it served reconnects to the survivor within 5s, the survivor's status shows
// all of them connected to it, and a change applied after the kill converges
// on all.
func TestTwoPilotReplicasOnEtcd(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	root := certfiles.NewCA(t, "cluster.local")
	keys := t.TempDir()
	tokenKey, pubKey := filepath.Join(keys, "token.key"), filepath.Join(keys, "publisher.key")
	for _, f := range []string{tokenKey, pubKey} {
		if _, _, err := edkey.LoadOrCreate(f, "shared key"); err != nil {
			t.Fatal(err)
		}
	}
	flags := []string{"--store", "etcd", "--etcd-endpoints", strings.Join(c.Endpoints, ","),
		"--ca-root-cert", root.RootCertFile, "--ca-root-key", root.RootKeyFile, "--ca-token-key", tokenKey, "--publisher-key-file", pubKey}
	pilots := []*proc.PilotProcess{
		proc.StartPilot(t, "127.93.4.1", filepath.Join(t.TempDir(), "p1"), flags...),
		proc.StartPilot(t, "127.93.4.2", filepath.Join(t.TempDir(), "p2"), flags...),
	}
	const appIP = "127.93.5.100"
	drillkit.StartApp(t, appIP+":8080", "v1")
	pilots[0].Apply(t, drillkit.MeshYAML(appIP))
	const n, rate = 6, 200
	both := pilots[0].XDSAddr() + "," + pilots[1].XDSAddr()
	var workloads []drillkit.Workload
	for i := range n {
		w := drillkit.Workload{IP: fmt.Sprintf("127.93.5.%d", i+1), NodeID: fmt.Sprintf("replica-node-%d", i), StateDir: t.TempDir(), KeyFile: pilots[0].KeyFile()}
		drillkit.StartSidecar(t, w, both).WaitReady(60 * time.Second)
		workloads = append(workloads, w)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	statusOf := func(p *proc.PilotProcess) (replicaStatus, error) {
		var rs replicaStatus
		return rs, getJSON(hc, p.URL()+"/apis/status/v1/proxies", &rs)
	}
	perReplica := map[string]int{}
	for _, p := range pilots {
		testkit.Wait(t, 30*time.Second, func() error {
			rs, err := statusOf(p)
			if err != nil {
				return err
			}
			clear(perReplica)
			for _, px := range rs.Proxies {
				if px.DisconnectedAt == nil {
					perReplica[px.Replica]++
				}
			}
			if total := perReplica[pilots[0].URL()] + perReplica[pilots[1].URL()]; total != n {
				return fmt.Errorf("%s lists %d connected sidecars (%v), want %d", p.URL(), total, perReplica, n)
			}
			return nil
		})
	}
	t.Logf("sidecars per replica: %v", perReplica)
	victim, survivor := pilots[0], pilots[1]
	if perReplica[pilots[1].URL()] > perReplica[pilots[0].URL()] {
		victim, survivor = pilots[1], pilots[0]
	}
	moved := perReplica[victim.URL()]
	loadStart := time.Now()
	var loads []*drillkit.Loadgen
	for _, w := range workloads {
		loads = append(loads, drillkit.StartRate(t, w, "reviews:9080", (rate+n-1)/n))
	}
	testkit.Eventually(t, 10*time.Second, "load running through every sidecar", func() bool {
		for _, lg := range loads {
			if len(lg.Since(loadStart)) < 10 {
				return false
			}
		}
		return true
	})
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var reconnected time.Duration
	testkit.Wait(t, 60*time.Second, func() error {
		rs, err := statusOf(survivor)
		if err != nil {
			return err
		}
		on := 0
		for _, px := range rs.Proxies {
			if px.DisconnectedAt == nil && px.Replica == survivor.URL() {
				on++
			}
		}
		if on != n {
			return fmt.Errorf("%d of %d sidecars connected to the survivor", on, n)
		}
		reconnected = time.Since(killed)
		return nil
	})
	t.Logf("replica with %d of %d sidecars SIGKILLed: all connected to the survivor %.2fs later (bound of the issue: 5s)", moved, n, reconnected.Seconds())
	if reconnected > 5*time.Second {
		t.Errorf("sidecars took %s to reconnect to the survivor, want at most 5s", reconnected)
	}
	// What an operator runs: meshctl proxy-status from the survivor lists all.
	out, err := exec.Command(proc.Build(t, proc.Meshctl), "--pilot", survivor.URL(), "proxy-status").CombinedOutput()
	if err != nil {
		t.Fatalf("meshctl proxy-status: %v\n%s", err, out)
	}
	for _, w := range workloads {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(w.NodeID) + `\s.*` + regexp.QuoteMeta(survivor.URL()) + `$`).Match(out) {
			t.Fatalf("meshctl proxy-status from the survivor does not list %s on it:\n%s", w.NodeID, out)
		}
	}
	t.Logf("meshctl proxy-status from the survivor:\n%s", out)
	survivor.Apply(t, `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: ratings, namespace: shop}
spec:
  selector: {app: ratings}
  ports: [{name: http, port: 9080, targetPort: 9080, protocol: HTTP}]
`)
	testkit.Wait(t, 30*time.Second, func() error {
		var rv struct {
			Revision  int64 `json:"revision"`
			Connected int   `json:"connected"`
			Effective int   `json:"effective"`
			Converged bool  `json:"converged"`
		}
		if err := getJSON(hc, survivor.URL()+"/apis/status/v1/revisions/latest", &rv); err != nil {
			return err
		}
		if !rv.Converged || rv.Connected != n || rv.Revision < 2 {
			return fmt.Errorf("rollout of the change after the kill: %+v", rv)
		}
		return nil
	})
	// Keep the load on for 3s worth of requests after the kill.
	testkit.Eventually(t, 30*time.Second, "3s of load answered after the kill", func() bool {
		sent := 0
		for _, lg := range loads {
			sent += len(lg.Since(killed))
		}
		return sent >= 3*rate
	})
	loadFor := time.Since(loadStart)
	total, failed, first := 0, 0, ""
	for _, lg := range loads {
		lg.Stop()
		for _, r := range lg.Since(loadStart) {
			total++
			if !r.OK() || r.Body != "v1 /drill" {
				if failed++; first == "" {
					first = fmt.Sprintf("code %d body %q err %v", r.Code, r.Body, r.Err)
				}
			}
		}
	}
	t.Logf("%d requests in %.1fs (%.0f/s) through %d sidecars across the kill, %d failed", total, loadFor.Seconds(), float64(total)/loadFor.Seconds(), n, failed)
	if failed != 0 {
		t.Fatalf("%d of %d requests failed, first: %s", failed, total, first)
	}
	// Open-loop at 200/s; on a 2-core machine shared with other tests (load
	// averages of 30+ seen) the generator itself falls behind, so only half
	// the rate is required to count as load.
	if want := int(loadFor.Seconds() * rate * 0.5); total < want {
		t.Fatalf("only %d requests in %s, want at least %d", total, loadFor, want)
	}
}
