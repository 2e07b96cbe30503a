package meshctl_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/yaml"

	"github.com/weft-mesh/weft/bootstrap/inject"
	"github.com/weft-mesh/weft/bootstrap/webhook"
	"github.com/weft-mesh/weft/tools/meshctl"
)

// webhookReviews are bootstrap/webhook's golden requests (one per workload kind).
var webhookReviews = []string{"pod", "replicaset-pod", "deployment", "statefulset", "daemonset", "job"}

const webhookTestdata = "../../bootstrap/webhook/testdata"

// normal is a JSON document re-encoded with sorted keys, for comparison.
func normal(t *testing.T, js []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(js, &v); err != nil {
		t.Fatalf("%v\n%s", err, js)
	}
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// splitYAML returns each output document as JSON.
func splitYAML(t *testing.T, out string) [][]byte {
	t.Helper()
	var docs [][]byte
	for _, d := range strings.Split(out, "\n---\n") {
		js, err := yaml.YAMLToJSON([]byte(d))
		if err != nil {
			t.Fatalf("%v\n%s", err, d)
		}
		docs = append(docs, js)
	}
	return docs
}

// TestInjectMatchesWebhook: the objects of the webhook's golden reviews in one
// multi-document file, with a Service between them that passes through;
// meshctl inject's output for each is what the webhook's patch makes of it.
// Run on its own output, meshctl inject changes nothing.
func TestInjectMatchesWebhook(t *testing.T) {
	var in bytes.Buffer
	var want []string
	for i, name := range webhookReviews {
		body, err := os.ReadFile(filepath.Join(webhookTestdata, name+".request.json"))
		if err != nil {
			t.Fatal(err)
		}
		var req admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &req); err != nil {
			t.Fatal(err)
		}
		obj := req.Request.Object.Raw
		// The webhook's answer, live; its golden file is checked in bootstrap/webhook.
		out, outcome, err := webhook.Review(body, func() (inject.Config, error) { return inject.Config{}, nil })
		if err != nil || outcome != webhook.Injected {
			t.Fatalf("%s: webhook %s %v", name, outcome, err)
		}
		var resp admissionv1.AdmissionReview
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Fatal(err)
		}
		p, err := jsonpatch.DecodePatch(resp.Response.Patch)
		if err != nil {
			t.Fatal(err)
		}
		patched, err := p.Apply(obj)
		if err != nil {
			t.Fatal(err)
		}
		// A Pod created by a ReplicaSet has no namespace in its object (the
		// request has it); say it in the file, as a manifest would.
		if req.Request.Namespace != "" && !bytes.Contains(obj, []byte(`"namespace"`)) {
			t.Fatalf("%s: object without a namespace", name)
		}
		y, err := yaml.JSONToYAML(obj)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			in.WriteString("---\n# a comment between documents\n")
		}
		in.Write(y)
		want = append(want, normal(t, patched))
		if i == 2 {
			in.WriteString("---\napiVersion: v1\nkind: Service\nmetadata: {name: reviews, namespace: shop}\nspec:\n  ports: [{port: 9080}]\n")
			want = append(want, normal(t, []byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"reviews","namespace":"shop"},"spec":{"ports":[{"port":9080}]}}`)))
		}
	}
	in.WriteString("---\n") // an empty last document is dropped
	file := filepath.Join(t.TempDir(), "app.yaml")
	if err := os.WriteFile(file, in.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	r := run("inject", "-f", file)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("inject: exit %d stderr %q", r.code, r.stderr)
	}
	docs := splitYAML(t, r.stdout)
	if len(docs) != len(want) {
		t.Fatalf("%d documents out, want %d:\n%s", len(docs), len(want), r.stdout)
	}
	for i := range docs {
		if d := cmp.Diff(want[i], normal(t, docs[i])); d != "" {
			t.Errorf("document %d: meshctl inject differs from the webhook's patch applied (-webhook +meshctl):\n%s", i+1, d)
		}
	}

	// Twice: the output injected again is the same output.
	again := filepath.Join(t.TempDir(), "again.yaml")
	if err := os.WriteFile(again, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	r2 := run("inject", "-f", again)
	if r2.code != 0 || r2.stdout != r.stdout {
		t.Fatalf("second inject: exit %d, output changed:\n%s", r2.code, cmp.Diff(r.stdout, r2.stdout))
	}
	if n := strings.Count(r2.stderr, "not injected: already injected"); n != len(webhookReviews) {
		t.Errorf("second inject: %d already-injected notes, want %d:\n%s", n, len(webhookReviews), r2.stderr)
	}
}

const plainDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: %s}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      %s
    spec:
      containers: [{name: web, image: web:1}]
`

func injectFile(t *testing.T, content string, args ...string) result {
	t.Helper()
	f := filepath.Join(t.TempDir(), "in.yaml")
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return run(append([]string{"inject", "-f", f}, args...)...)
}

func TestInjectPolicy(t *testing.T) {
	// Opted out: the document comes out as it went in, and stderr says why.
	in := fmt.Sprintf(plainDeployment, "shop", `annotations: {sidecar.weft.dev/inject: "false"}`)
	r := injectFile(t, in)
	inJSON, err := yaml.YAMLToJSON([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	outJSON, err := yaml.YAMLToJSON([]byte(r.stdout))
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 0 || normal(t, inJSON) != normal(t, outJSON) || !strings.Contains(r.stderr, `document 1 (Deployment web): not injected: opted out`) {
		t.Fatalf("opted out: exit %d stderr %q out:\n%s", r.code, r.stderr, r.stdout)
	}

	// A Namespace in the file is honoured as the webhook's namespaceSelector.
	off := "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n---\n" + fmt.Sprintf(plainDeployment, "shop", "")
	if r := injectFile(t, off); r.code != 0 || strings.Contains(r.stdout, inject.ProxyName) || !strings.Contains(r.stderr, "namespace shop is not labelled weft-injection=enabled") {
		t.Fatalf("unlabelled namespace: exit %d stderr %q out:\n%s", r.code, r.stderr, r.stdout)
	}
	on := "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop, labels: {weft-injection: enabled}}\n---\n" + fmt.Sprintf(plainDeployment, "shop", "")
	if r := injectFile(t, on); r.code != 0 || !strings.Contains(r.stdout, inject.ProxyName) || r.stderr != "" {
		t.Fatalf("labelled namespace: exit %d stderr %q", r.code, r.stderr)
	}
	// -n names the namespace of objects without one; kube-system is never injected.
	if r := injectFile(t, strings.Replace(fmt.Sprintf(plainDeployment, "x", ""), "namespace: x", "", 1), "-n", "kube-system"); r.code != 0 || !strings.Contains(r.stderr, "never injected") {
		t.Fatalf("-n kube-system: exit %d stderr %q", r.code, r.stderr)
	}

	// Settings: --inject-pilot-addr and the MeshConfig's trust domain reach the sidecar.
	mc := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(mc, []byte("apiVersion: mesh.weft.dev/v1alpha1\nkind: MeshConfig\nmetadata: {name: default}\nspec: {trustDomain: example.org, sidecar: {image: reg.example/sidecar:2, cpu: 250m}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = injectFile(t, fmt.Sprintf(plainDeployment, "shop", ""), "--meshconfig", mc, "--inject-pilot-addr", "pilot.mesh:15012")
	if r.code != 0 || !strings.Contains(r.stdout, "--trust-domain=example.org") || !strings.Contains(r.stdout, "--pilot=pilot.mesh:15012") ||
		strings.Count(r.stdout, "image: reg.example/sidecar:2") != 2 || strings.Count(r.stdout, "cpu: 250m") != 2 {
		t.Fatalf("settings: exit %d stderr %q", r.code, r.stderr)
	}
}

func TestInjectErrors(t *testing.T) {
	many := strings.Repeat("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n", meshctl.MaxInjectDocuments)
	for _, tc := range []struct {
		name, in string
		args     []string
		want     string
	}{
		{"no kind", "metadata: {name: a}\n", nil, "document 1: apiVersion and kind are required"},
		{"not YAML", "a: [\n", nil, "document 1:"},
		{"uninjectable", fmt.Sprintf(plainDeployment, "shop", "annotations: {sidecar.weft.dev/inject: maybe}"), nil,
			`document 1: Deployment/shop/web: spec.template.metadata.annotations[sidecar.weft.dev/inject]: "maybe", want "true" or "false"`},
		{"second document bad", fmt.Sprintf(plainDeployment, "shop", "") + "---\n" + strings.Replace(fmt.Sprintf(plainDeployment, "shop", ""), "image: web:1", "image: web:1, ports: [{containerPort: 15006}]", 1), nil,
			"document 2: Deployment/shop/web: spec.template.spec.containers[0].ports[0].containerPort: 15006"},
		{"documents at the bound", many, nil, ""},
		{"documents past the bound", many + "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n", nil, "more than 1024 documents"},
		{"bad pilot address", fmt.Sprintf(plainDeployment, "shop", ""), []string{"--inject-pilot-addr", "pilot"}, `pilot address: "pilot" is not HOST:PORT`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := injectFile(t, tc.in, tc.args...)
			if tc.want == "" {
				if r.code != 0 {
					t.Fatalf("exit %d: %s", r.code, r.stderr)
				}
				return
			}
			if r.code != meshctl.ExitInvalid || r.stdout != "" || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d stdout %d bytes stderr %q: want exit 1, no output, %q", r.code, len(r.stdout), r.stderr, tc.want)
			}
		})
	}
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, bytes.Repeat([]byte("#"), meshctl.MaxInjectBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := run("inject", "-f", big); r.code != meshctl.ExitInvalid || !strings.Contains(r.stderr, "over 16777216 bytes") {
		t.Fatalf("input past the bound: exit %d stderr %q", r.code, r.stderr)
	}
	if r := run("inject"); r.code != meshctl.ExitOther || !strings.Contains(r.stderr, "usage: meshctl inject -f FILE") {
		t.Fatalf("no -f: exit %d stderr %q", r.code, r.stderr)
	}
}

// TestInjectList: the items of a v1 List (`kubectl get deploy -o yaml`) are
// injected as the same objects would be as documents of their own.
func TestInjectList(t *testing.T) {
	dep := fmt.Sprintf(plainDeployment, "shop", "")
	depJSON, err := yaml.YAMLToJSON([]byte(dep))
	if err != nil {
		t.Fatal(err)
	}
	list := `{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":""},"items":[` + string(depJSON) +
		`,{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"shop"},"data":{"a":"1"}}]}`
	r := injectFile(t, list)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("List: exit %d stderr %q", r.code, r.stderr)
	}
	single := injectFile(t, dep)
	if single.code != 0 {
		t.Fatal(single.stderr)
	}
	var got struct {
		Items []json.RawMessage `json:"items"`
	}
	js, err := yaml.YAMLToJSON([]byte(r.stdout))
	if err != nil || json.Unmarshal(js, &got) != nil || len(got.Items) != 2 {
		t.Fatalf("List output %v:\n%s", err, r.stdout)
	}
	want, err := yaml.YAMLToJSON([]byte(single.stdout))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(normal(t, want), normal(t, got.Items[0])); d != "" {
		t.Errorf("List item differs from the same Deployment injected alone:\n%s", d)
	}
	if !strings.Contains(string(got.Items[1]), `"data":{"a":"1"}`) {
		t.Errorf("ConfigMap item changed: %s", got.Items[1])
	}
	// An item that cannot be injected names its place.
	bad := strings.Replace(list, `"template":{"metadata":{"labels"`, `"template":{"metadata":{"annotations":{"sidecar.weft.dev/inject":"no"},"labels"`, 1)
	if bad == list {
		t.Fatal("test: the template was not found in the List")
	}
	if r := injectFile(t, bad); r.code != meshctl.ExitInvalid || !strings.Contains(r.stderr, "document 1 item 0: Deployment/shop/web: spec.template.metadata.annotations") {
		t.Fatalf("bad item: exit %d stderr %q", r.code, r.stderr)
	}
}
