package meshctl

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	jsonpatch "github.com/evanphx/json-patch/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/weft-mesh/weft/bootstrap/inject"
	"github.com/weft-mesh/weft/pilot/resource"
)

const injectUse = "inject -f FILE [--meshconfig FILE] [--inject-pilot-addr HOST:PORT] [--trust-domain TD] [-n NS]"

// Bounds of `meshctl inject`'s input.
const (
	MaxInjectBytes     = 16 << 20
	MaxInjectDocuments = 1024
)

// injectDoc is one document of the input.
type injectDoc struct {
	json []byte
	tm   metav1.TypeMeta
}

// inject is `meshctl inject -f FILE`: the webhook's mutation offline. Each
// Pod, Deployment, StatefulSet, DaemonSet and Job (also as an item of a v1
// List, as `kubectl get -o yaml` prints) is injected with the same
// bootstrap/inject.Mutate and its JSONPatch applied to the document as the API
// server applies the webhook's (so the output is the object the cluster would
// store); other documents pass through. A Namespace document in the input is
// honoured as the webhook's namespaceSelector would be. Output: YAML, one
// document per input document; why a workload was not injected goes to stderr.
// Any error prints no output (nothing half-injected).
func (e *env) inject(args []string) error {
	fs := flag.NewFlagSet("inject", flag.ContinueOnError)
	path := fs.String("f", "", "YAML file of Kubernetes objects (multi-document; - for stdin)")
	meshConfig := fs.String("meshconfig", "", "a MeshConfig YAML whose spec.sidecar (image, cpu, memory) and trustDomain injection uses (default: the defaults, as pilot without one)")
	pilotAddr := fs.String("inject-pilot-addr", inject.DefaultPilotAddress, "injected sidecars' --pilot (pilot's --inject-pilot-addr)")
	trustDomain := fs.String("trust-domain", "", "the mesh's trust domain (pilot's --trust-domain; default the MeshConfig's, else "+inject.DefaultTrustDomain+")")
	namespace := fs.String("n", "", "namespace of objects that name none (default: default)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if *path == "" || len(pos) > 0 {
		return fail(ExitOther, "usage: meshctl %s", injectUse)
	}
	cfg := inject.Config{Mesh: inject.Mesh{PilotAddress: *pilotAddr, TrustDomain: *trustDomain}}
	if *meshConfig != "" {
		mc, err := readMeshConfig(*meshConfig)
		if err != nil {
			return err
		}
		cfg.Sidecar = meshSidecar(mc)
		if cfg.Mesh.TrustDomain == "" {
			cfg.Mesh.TrustDomain = mc.TrustDomain
		}
	}
	if err := cfg.Validate(); err != nil {
		return fail(ExitInvalid, "%v", err)
	}
	data, err := readInput(*path)
	if err != nil {
		return err
	}
	docs, err := splitDocuments(data, *path)
	if err != nil {
		return err
	}
	out, notes, err := injectDocuments(docs, *namespace, cfg)
	if err != nil {
		return fail(ExitInvalid, "%s: %v", *path, err)
	}
	for _, n := range notes {
		fmt.Fprintln(e.stderr, "meshctl inject: "+n)
	}
	if _, err := e.stdout.Write(out); err != nil {
		return fail(ExitOther, "writing output: %v", err)
	}
	return nil
}

func readInput(path string) ([]byte, error) {
	var r io.Reader
	if path == "-" {
		r = os.Stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, fail(ExitInvalid, "%v", err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, MaxInjectBytes+1))
	if err != nil {
		return nil, fail(ExitInvalid, "%s: %v", path, err)
	}
	if len(data) > MaxInjectBytes {
		return nil, fail(ExitInvalid, "%s: over %d bytes", path, MaxInjectBytes)
	}
	return data, nil
}

// readMeshConfig reads the MeshConfig of a Weft resource file (strictly, as
// meshctl apply would).
func readMeshConfig(path string) (*resource.MeshConfigSpec, error) {
	objs, err := resource.DecodePath(path)
	if err != nil {
		return nil, &cliError{code: ExitInvalid, msg: err.Error(), lines: errorLines(err)}
	}
	var found *resource.MeshConfigSpec
	for _, o := range objs {
		if s, ok := o.Spec.(*resource.MeshConfigSpec); ok {
			if found != nil {
				return nil, fail(ExitInvalid, "--meshconfig %s: more than one MeshConfig", path)
			}
			found = s
		}
	}
	if found == nil {
		return nil, fail(ExitInvalid, "--meshconfig %s: no MeshConfig in it", path)
	}
	return found, nil
}

// meshSidecar is MeshConfig's spec.sidecar (API.md), as pilot reads it
// (pilot/server); unset fields are injection's defaults.
func meshSidecar(spec *resource.MeshConfigSpec) inject.Sidecar {
	if spec.Sidecar == nil {
		return inject.Sidecar{}
	}
	return inject.Sidecar{Image: spec.Sidecar.Image, CPU: spec.Sidecar.CPU, Memory: spec.Sidecar.Memory}
}

// splitDocuments splits multi-document YAML (or JSON) into JSON documents;
// empty and comment-only documents are dropped.
func splitDocuments(data []byte, path string) ([]injectDoc, error) {
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs []injectDoc
	for n := 1; ; n++ {
		b, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fail(ExitInvalid, "%s: document %d: %v", path, n, err)
		}
		js, err := yaml.YAMLToJSON(b)
		if err != nil {
			return nil, fail(ExitInvalid, "%s: document %d: %v", path, n, err)
		}
		if t := bytes.TrimSpace(js); len(t) == 0 || string(t) == "null" {
			n--
			continue
		}
		if len(docs) == MaxInjectDocuments {
			return nil, fail(ExitInvalid, "%s: more than %d documents", path, MaxInjectDocuments)
		}
		var tm metav1.TypeMeta
		if err := utiljson.Unmarshal(js, &tm); err != nil {
			return nil, fail(ExitInvalid, "%s: document %d: not a Kubernetes object: %v", path, n, err)
		}
		if tm.APIVersion == "" || tm.Kind == "" {
			return nil, fail(ExitInvalid, "%s: document %d: apiVersion and kind are required", path, n)
		}
		docs = append(docs, injectDoc{json: js, tm: tm})
	}
}

// injectDocuments is the whole transformation, pure: documents in, YAML out,
// plus a note for each workload not injected.
func injectDocuments(docs []injectDoc, defaultNS string, cfg inject.Config) ([]byte, []string, error) {
	nsLabels := map[string]map[string]string{}
	for _, d := range docs {
		if d.tm.APIVersion == "v1" && d.tm.Kind == "Namespace" {
			var ns struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			}
			if err := utiljson.Unmarshal(d.json, &ns); err != nil {
				return nil, nil, fmt.Errorf("a Namespace document: %v", err)
			}
			l := ns.Metadata.Labels
			if l == nil {
				l = map[string]string{}
			}
			nsLabels[ns.Metadata.Name] = l
		}
	}
	var out bytes.Buffer
	var notes []string
	for i, d := range docs {
		where := fmt.Sprintf("document %d", i+1)
		var js []byte
		var err error
		if d.tm.APIVersion == "v1" && d.tm.Kind == "List" {
			js, err = injectList(d.json, where, defaultNS, nsLabels, cfg, &notes)
		} else {
			js, err = injectOne(d.json, d.tm, where, defaultNS, nsLabels, cfg, &notes)
		}
		if err != nil {
			return nil, nil, err
		}
		y, err := yaml.JSONToYAML(js)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %v", where, err)
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(y)
	}
	return out.Bytes(), notes, nil
}

// injectOne injects one object (JSON) when it is a kind injection handles;
// anything else is returned as it is.
func injectOne(js []byte, tm metav1.TypeMeta, where, defaultNS string, nsLabels map[string]map[string]string, cfg inject.Config, notes *[]string) ([]byte, error) {
	obj := inject.New(schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind))
	if obj == nil {
		return js, nil
	}
	// Case-sensitive, as the API server (and the webhook) read it.
	if err := utiljson.Unmarshal(js, obj); err != nil {
		return nil, fmt.Errorf("%s (%s): %v", where, tm.Kind, err)
	}
	meta := obj.(metav1.Object) // every kind inject.New makes has ObjectMeta
	ns := meta.GetNamespace()
	if ns == "" {
		ns = defaultNS
	}
	in := inject.Input{Object: obj, Namespace: ns}
	if l, ok := nsLabels[ns]; ok {
		in.NamespaceLabels = l
	}
	res, err := inject.Mutate(in, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", where, err)
	}
	if res.Skipped != "" {
		*notes = append(*notes, fmt.Sprintf("%s (%s %s): not injected: %s", where, tm.Kind, meta.GetName(), res.Skipped))
		return js, nil
	}
	out, err := applyJSONPatch(js, res.Patch)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", where, err)
	}
	return out, nil
}

// injectList injects each item of a v1 List (what `kubectl get -o yaml` prints).
func injectList(js []byte, where, defaultNS string, nsLabels map[string]map[string]string, cfg inject.Config, notes *[]string) ([]byte, error) {
	var list map[string]any
	if err := utiljson.Unmarshal(js, &list); err != nil {
		return nil, fmt.Errorf("%s (List): %v", where, err)
	}
	items, _ := list["items"].([]any)
	for k, it := range items {
		ij, err := utiljson.Marshal(it)
		if err != nil {
			return nil, fmt.Errorf("%s item %d: %v", where, k, err)
		}
		var tm metav1.TypeMeta
		if err := utiljson.Unmarshal(ij, &tm); err != nil {
			return nil, fmt.Errorf("%s item %d: not a Kubernetes object: %v", where, k, err)
		}
		if ij, err = injectOne(ij, tm, fmt.Sprintf("%s item %d", where, k), defaultNS, nsLabels, cfg, notes); err != nil {
			return nil, err
		}
		var v any
		if err := utiljson.Unmarshal(ij, &v); err != nil {
			return nil, fmt.Errorf("%s item %d: %v", where, k, err)
		}
		items[k] = v
	}
	return utiljson.Marshal(list)
}

// applyJSONPatch applies ops to doc as the API server applies a webhook's patch.
func applyJSONPatch(doc []byte, ops []inject.Op) ([]byte, error) {
	pj, err := utiljson.Marshal(ops)
	if err != nil {
		return nil, err
	}
	p, err := jsonpatch.DecodePatch(pj)
	if err != nil {
		return nil, fmt.Errorf("patch: %w", err)
	}
	out, err := p.Apply(doc)
	if err != nil {
		return nil, fmt.Errorf("applying the patch: %w", err)
	}
	return out, nil
}
