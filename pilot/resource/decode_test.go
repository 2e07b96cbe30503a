package resource

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	svcA = "apiVersion: mesh.weft.dev/v1alpha1\nkind: Service\nmetadata: {name: a, namespace: shop}\nspec: {ports: [{name: http, port: 80}]}\n"
	svcB = "apiVersion: mesh.weft.dev/v1alpha1\nkind: Service\nmetadata: {name: b, namespace: shop}\nspec: {ports: [{name: http, port: 80}]}\n"
)

func keys(objs []*Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.Key().String())
	}
	return out
}

func TestDecodeMultiDocument(t *testing.T) {
	for _, tc := range []struct {
		name     string
		input    string
		wantKeys []string
	}{
		{name: "empty_input", input: ""},
		{name: "only_comments", input: "# nothing here\n---\n# nor here\n"},
		{name: "one", input: svcA, wantKeys: []string{"Service/shop/a"}},
		{name: "leading_and_trailing_markers", input: "---\n" + svcA + "---\n", wantKeys: []string{"Service/shop/a"}},
		{name: "empty_documents_skipped", input: svcA + "---\n---\n# comment\n---\n" + svcB, wantKeys: []string{"Service/shop/a", "Service/shop/b"}},
		{name: "marker_with_comment", input: svcA + "--- # next\n" + svcB, wantKeys: []string{"Service/shop/a", "Service/shop/b"}},
		{name: "crlf", input: strings.ReplaceAll(svcA+"---\n"+svcB, "\n", "\r\n"), wantKeys: []string{"Service/shop/a", "Service/shop/b"}},
		{name: "block_scalar_keeps_inner_dashes", input: strings.Replace(svcA, "metadata: {name: a, namespace: shop}", "metadata:\n  name: a\n  namespace: shop\n  annotations:\n    note: |\n      ---- not a marker\n      --x", 1), wantKeys: []string{"Service/shop/a"}},
		{name: "json_document", input: `{"apiVersion":"mesh.weft.dev/v1alpha1","kind":"Service","metadata":{"name":"a","namespace":"shop"},"spec":{"ports":[{"name":"http","port":80}]}}`, wantKeys: []string{"Service/shop/a"}},
		{name: "json_list", input: `[{"apiVersion":"mesh.weft.dev/v1alpha1","kind":"Service","metadata":{"name":"a","namespace":"shop"},"spec":{"ports":[{"name":"http","port":80}]}},
 {"apiVersion":"mesh.weft.dev/v1alpha1","kind":"Service","metadata":{"name":"b","namespace":"shop"},"spec":{"ports":[{"name":"http","port":80}]}}]`, wantKeys: []string{"Service/shop/a", "Service/shop/b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Decode([]byte(tc.input), "t.yaml")
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := cmp.Diff(tc.wantKeys, keys(objs)); diff != "" {
				t.Errorf("keys (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeDocumentErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		input   string
		wantErr []string
	}{
		{
			name:  "errors_from_every_document_in_order",
			input: svcA + "---\n" + strings.Replace(svcB, "port: 80", "port: 0", 1) + "---\nkind: Service\n---\n" + strings.Replace(svcA, "Service", "Servce", 1),
			wantErr: []string{
				"Service/shop/b: spec.ports[0].port: port 0 out of range 1..65535",
				"t.yaml: document 3 (Service): apiVersion: required",
				"t.yaml: document 3 (Service): metadata.name: required",
				"t.yaml: document 3 (Service): spec: required",
				"t.yaml: document 4: kind: unknown kind \"Servce\" (known: MeshConfig, Service, Workload, DestinationPolicy, Route, PeerAuthentication, AuthorizationPolicy, StalenessPolicy, Override)",
			},
		},
		{
			name:    "yaml_syntax_error_has_file_line",
			input:   svcA + "---\n# comment\nkind: Service\nmetadata: {name: a}\nspec: [\n",
			wantErr: []string{"t.yaml: document 2: invalid YAML: yaml: line 9: did not find expected node content"},
		},
		{
			name:    "duplicate_yaml_key",
			input:   "kind: Service\nkind: Route\n",
			wantErr: []string{`t.yaml: document 1: invalid YAML: yaml: unmarshal errors: line 2: key "kind" already set in map`},
		},
		{
			name:    "not_an_object",
			input:   "just a string\n---\n[1]\n",
			wantErr: []string{"t.yaml: document 1: expected an object with apiVersion, kind, metadata and spec, got string", "t.yaml: document 2[0]: expected an object with apiVersion, kind, metadata and spec, got number 1"},
		},
		{
			name:    "kind_missing_or_wrong_type",
			input:   "metadata: {name: a}\n---\nkind: 7\n",
			wantErr: []string{"t.yaml: document 1: kind: required", "t.yaml: document 2: kind: unknown kind number 7 (known: MeshConfig, Service, Workload, DestinationPolicy, Route, PeerAuthentication, AuthorizationPolicy, StalenessPolicy, Override)"},
		},
		{
			name:    "metadata_wrong_type",
			input:   "apiVersion: mesh.weft.dev/v1alpha1\nkind: Service\nmetadata: {name: 5}\nspec: {ports: [{name: http, port: 80}]}\n",
			wantErr: []string{"t.yaml: document 1 (Service): metadata.name: expected a string, got number 5"},
		},
		{
			name:    "duplicate_object",
			input:   svcA + "---\n" + svcB + "---\n" + svcA,
			wantErr: []string{"Service/shop/a: duplicate object: also defined in t.yaml: document 1"},
		},
		{
			name:    "yaml_infinity",
			input:   strings.Replace(doc("DestinationPolicy", "{name: d}", "{service: a, localRateLimit: {requestsPerSecond: .inf}}"), "", "", 1),
			wantErr: []string{"t.yaml: document 1: invalid YAML: json: unsupported value: +Inf"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Decode([]byte(tc.input), "t.yaml")
			if err == nil || objs != nil {
				t.Fatalf("Decode = %d objects, %v; want errors", len(objs), err)
			}
			if diff := cmp.Diff(tc.wantErr, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeGenerationAndRevisionKept(t *testing.T) {
	in := strings.Replace(svcA, "namespace: shop}", "namespace: shop, generation: 3, revision: 42}", 1)
	objs, err := Decode([]byte(in), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := objs[0].Metadata; got.Generation != 3 || got.Revision != 42 {
		t.Errorf("metadata = %+v, want generation 3, revision 42", got)
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDecodePath(t *testing.T) {
	dir := t.TempDir()
	svcC := strings.ReplaceAll(svcA, "name: a", "name: c")
	writeFiles(t, dir, map[string]string{
		"b.yml":            svcB,
		"a.yaml":           svcA,
		"c.JSON":           `{"apiVersion":"mesh.weft.dev/v1alpha1","kind":"Service","metadata":{"name":"c","namespace":"shop"},"spec":{"ports":[{"name":"http","port":80}]}}`,
		"notes.txt":        "not yaml",
		".hidden.yaml":     "garbage: [",
		"sub/d.yaml":       svcC,
		"bad/x.yaml":       "garbage: [",
		"dup/one.yaml":     svcA,
		"dup/two.yaml":     svcA,
		"broken/one.yaml":  svcA,
		"broken/two.yaml":  strings.Replace(svcB, "port: 80", "port: 0", 1),
		"empty/README.txt": "nothing",
	})
	t.Run("directory_sorted_not_recursive", func(t *testing.T) {
		objs, err := DecodePath(dir)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"Service/shop/a", "Service/shop/b", "Service/shop/c"}, keys(objs)); diff != "" {
			t.Errorf("keys (-want +got):\n%s", diff)
		}
	})
	t.Run("single_file", func(t *testing.T) {
		objs, err := DecodePath(filepath.Join(dir, "b.yml"))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"Service/shop/b"}, keys(objs)); diff != "" {
			t.Errorf("keys (-want +got):\n%s", diff)
		}
	})
	for _, tc := range []struct {
		name, path, wantErr string
	}{
		{name: "duplicates_across_files", path: "dup", wantErr: "Service/shop/a: duplicate object: also defined in " + filepath.Join(dir, "dup", "one.yaml") + ": document 1"},
		{name: "all_or_nothing", path: "broken", wantErr: "Service/shop/b: spec.ports[0].port: port 0 out of range 1..65535"},
		{name: "no_files", path: "empty", wantErr: "decode " + filepath.Join(dir, "empty") + ": no *.yaml, *.yml or *.json files in directory"},
		{name: "missing", path: "nope", wantErr: "decode " + filepath.Join(dir, "nope") + ": stat " + filepath.Join(dir, "nope") + ": no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := DecodePath(filepath.Join(dir, tc.path))
			if err == nil || objs != nil {
				t.Fatalf("DecodePath = %d objects, %v; want error", len(objs), err)
			}
			if err.Error() != tc.wantErr {
				t.Errorf("error = %q\nwant    %q", err, tc.wantErr)
			}
		})
	}
}

func TestDecodeJSONObject(t *testing.T) {
	const ok = `{"apiVersion":"mesh.weft.dev/v1alpha1","kind":"Workload","metadata":{"name":"w"},"spec":{"address":"10.0.0.1"}}`
	o, err := DecodeJSONObject([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	want := object(KindWorkload, meta("default", "w"), &WorkloadSpec{Address: "10.0.0.1", ServiceAccount: "default", Weight: 1})
	if diff := cmp.Diff(want, o); diff != "" {
		t.Errorf("object (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		name, input, wantErr string
	}{
		{name: "duplicate_key", input: `{"kind":"Workload","kind":"Service"}`, wantErr: "request body: invalid JSON: kind: duplicate key"},
		{name: "nested_duplicate_key", input: `{"spec":{"ports":[{"a":1,"a":2}]}}`, wantErr: "request body: invalid JSON: spec.ports[0].a: duplicate key"},
		{name: "trailing_data", input: ok + ` {}`, wantErr: "request body: invalid JSON: unexpected data after the top-level value"},
		{name: "syntax", input: `{"kind":`, wantErr: "request body: invalid JSON: unexpected EOF"},
		{name: "list", input: `[` + ok + `]`, wantErr: "request body: expected one object, got list"},
		{name: "unknown_field", input: strings.Replace(ok, `"address"`, `"adress"`, 1), wantErr: "Workload/default/w: spec.adress: unknown field"},
		{name: "case_sensitive_fields", input: strings.Replace(ok, `"address"`, `"Address"`, 1), wantErr: "Workload/default/w: spec.Address: unknown field"},
		{name: "validation", input: strings.Replace(ok, `10.0.0.1`, `10.0.0.300`, 1), wantErr: `Workload/default/w: spec.address: "10.0.0.300" is not an IPv4 or IPv6 literal`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := DecodeJSONObject([]byte(tc.input))
			if err == nil || o != nil {
				t.Fatalf("DecodeJSONObject = %v, %v; want error", o, err)
			}
			if err.Error() != tc.wantErr {
				t.Errorf("error = %q\nwant    %q", err, tc.wantErr)
			}
		})
	}
}
