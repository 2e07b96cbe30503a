package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/weft-mesh/weft/bootstrap/inject"
	"github.com/weft-mesh/weft/bootstrap/webhook"
	"github.com/weft-mesh/weft/pilot/server"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(proc.Cleanup)) }

// decoder is Kubernetes' own universal deserializer over the kinds deploy/
// uses, strict: an unknown or duplicated field is an error.
func decoder(t *testing.T) runtime.Decoder {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, rbacv1.AddToScheme, admissionregistrationv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}

// objects decodes every document of every manifest.
func objects(t *testing.T) []runtime.Object {
	t.Helper()
	dec := decoder(t)
	files, err := fs.Glob(Manifests, "*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("manifests: %v %v", files, err)
	}
	var out []runtime.Object
	for _, f := range files {
		data, err := Manifests.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for n := 1; ; n++ {
			doc, err := rd.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s document %d: %v", f, n, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, gvk, err := dec.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s document %d: strict decode: %v", f, n, err)
			}
			t.Logf("%s: %s", f, gvk.Kind)
			out = append(out, obj)
		}
	}
	return out
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.Bytes()
}

func only[T runtime.Object](t *testing.T, objs []runtime.Object) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if x, ok := o.(T); ok {
			found = append(found, x)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("%d objects of type %T, want 1", len(found), zero)
	}
	return found[0]
}

// TestStrictDecoding: the decoder the manifests pass does refuse unknown and
// duplicated fields (so TestManifests proves something).
func TestStrictDecoding(t *testing.T) {
	dec := decoder(t)
	for _, doc := range []string{
		"apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {prots: [{port: 1}]}\n",
		"apiVersion: v1\nkind: Service\nmetadata: {name: a, name: b}\n",
		"apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata: {name: a}\nwebhooks: [{name: a.b.c, failurepolicy: Fail}]\n",
	} {
		if _, _, err := dec.Decode([]byte(doc), nil, nil); err == nil || !strings.Contains(err.Error(), "strict decoding error") {
			t.Errorf("%q: %v, want a strict decoding error", doc, err)
		}
	}
}

// TestManifests: every document decodes strictly, and the manifests agree with
// the code: the Service exposes pilot's ports and selects its pods, the webhook
// calls bootstrap/webhook's path on that Service by the DNS name pilot's
// certificate carries, selects namespaces by inject's label, states its
// failurePolicy, and pilot runs with those addresses.
func TestManifests(t *testing.T) {
	objs := objects(t)
	ns := only[*corev1.Namespace](t, objs)
	if ns.Name != inject.DefaultSystemNamespace || ns.Labels[inject.NamespaceLabel] == inject.NamespaceEnabled {
		t.Errorf("namespace %s %v: want %s, not selected for injection", ns.Name, ns.Labels, inject.DefaultSystemNamespace)
	}
	dep := only[*appsv1.Deployment](t, objs)
	svc := only[*corev1.Service](t, objs)
	sa := only[*corev1.ServiceAccount](t, objs)
	rb := only[*rbacv1.RoleBinding](t, objs)
	hook := only[*admissionregistrationv1.MutatingWebhookConfiguration](t, objs)

	for _, o := range []interface{ GetNamespace() string }{dep, svc, sa, rb} {
		if o.GetNamespace() != ns.Name {
			t.Errorf("%T in namespace %q, want %s", o, o.GetNamespace(), ns.Name)
		}
	}
	if dep.Spec.Template.Spec.ServiceAccountName != sa.Name || rb.Subjects[0].Name != sa.Name || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("pilot's ServiceAccount: deployment uses %q, binding %q, automount %v", dep.Spec.Template.Spec.ServiceAccountName, rb.Subjects[0].Name, sa.AutomountServiceAccountToken)
	}
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %s=%s does not select pilot's pods %v", k, v, dep.Spec.Template.Labels)
		}
	}
	var ports []int32
	for _, p := range svc.Spec.Ports {
		ports = append(ports, p.Port)
	}
	if !slices.Equal(ports, []int32{15010, 15012, 15014, 15017}) {
		t.Errorf("Service ports %v, want 15010 15012 15014 15017", ports)
	}

	if len(hook.Webhooks) != 1 {
		t.Fatalf("%d webhooks, want 1", len(hook.Webhooks))
	}
	w := hook.Webhooks[0]
	cc := w.ClientConfig.Service
	if cc == nil || cc.Name+"."+cc.Namespace+".svc" != server.DefaultWebhookDNS || cc.Name != svc.Name || cc.Path == nil || *cc.Path != webhook.Path ||
		cc.Port == nil || *cc.Port != 15017 {
		t.Errorf("webhook clientConfig %+v: want Service %s, path %s, port 15017", cc, server.DefaultWebhookDNS, webhook.Path)
	}
	if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("failurePolicy %v: want it stated (Fail)", w.FailurePolicy)
	}
	if w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNone || !slices.Equal(w.AdmissionReviewVersions, []string{"v1"}) {
		t.Errorf("sideEffects %v, admissionReviewVersions %v: want None, [v1]", w.SideEffects, w.AdmissionReviewVersions)
	}
	if w.NamespaceSelector == nil || w.NamespaceSelector.MatchLabels[inject.NamespaceLabel] != inject.NamespaceEnabled {
		t.Errorf("namespaceSelector %+v: want %s=%s", w.NamespaceSelector, inject.NamespaceLabel, inject.NamespaceEnabled)
	}
	if len(w.MatchConditions) != 1 || !strings.Contains(w.MatchConditions[0].Expression, "'"+inject.InjectAnnotation+"'] != 'false'") {
		t.Errorf("matchConditions %+v: want the opt-out annotation (%s) kept from pilot", w.MatchConditions, inject.InjectAnnotation)
	}
	if len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) ||
		!slices.Equal(w.Rules[0].Resources, []string{"pods"}) || !slices.Equal(w.Rules[0].APIGroups, []string{""}) {
		t.Errorf("rules %+v: want CREATE of core/v1 pods", w.Rules)
	}
	if w.TimeoutSeconds == nil || *w.TimeoutSeconds > 30 || *w.TimeoutSeconds < int32(webhook.WriteTimeout/time.Second) {
		t.Errorf("timeoutSeconds %v: want at most 30 and at least the webhook's write timeout %v", w.TimeoutSeconds, webhook.WriteTimeout)
	}

	if len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("pilot: want one container")
	}
	args := dep.Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"--webhook-addr=:15017", "--webhook-san=" + server.DefaultWebhookDNS, "--inject-pilot-addr=" + inject.DefaultPilotAddress, "--xds-tls-addr=:15012"} {
		if !slices.Contains(args, want) {
			t.Errorf("pilot's args lack %s: %v", want, args)
		}
	}
	if dep.Spec.Template.Annotations[inject.InjectAnnotation] != "false" {
		t.Error("pilot's pods are not opted out of injection")
	}
	if *dep.Spec.Replicas != 1 || dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Error("pilot with the embedded store: one replica, strategy Recreate")
	}
}

// TestPilotFlagsExist: every flag the Deployment gives pilot is one the real
// pilot binary has.
func TestPilotFlagsExist(t *testing.T) {
	dep := only[*appsv1.Deployment](t, objects(t))
	out, err := exec.Command(proc.Build(t, proc.Pilot), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("pilot --help: %v\n%s", err, out)
	}
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.Contains(string(out), "\n  -"+name+" ") && !strings.Contains(string(out), "\n  -"+name+"\n") {
			t.Errorf("pilot has no flag %s (from %q)", name, a)
		}
	}
}
