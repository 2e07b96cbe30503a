package resource

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// doc builds one YAML document from flow-style metadata and spec.
func doc(kind, meta, spec string) string {
	return "apiVersion: mesh.weft.dev/v1alpha1\nkind: " + kind + "\nmetadata: " + meta + "\nspec: " + spec + "\n"
}

// decodeCase is one row of a per-kind table: a document and either the object it
// decodes to (want, optional) or the exact error lines.
type decodeCase struct {
	name    string
	yaml    string
	want    *Object
	wantErr []string
}

func runDecodeCases(t *testing.T, cases []decodeCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Decode([]byte(tc.yaml), "t.yaml")
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("Decode succeeded, want errors:\n%s", strings.Join(tc.wantErr, "\n"))
				}
				if objs != nil {
					t.Errorf("Decode returned %d objects with an error", len(objs))
				}
				if diff := cmp.Diff(tc.wantErr, strings.Split(err.Error(), "\n")); diff != "" {
					t.Errorf("errors (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if len(objs) != 1 {
				t.Fatalf("Decode returned %d objects, want 1", len(objs))
			}
			if tc.want != nil {
				if diff := cmp.Diff(tc.want, objs[0]); diff != "" {
					t.Errorf("object (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func meta(ns, name string) Metadata { return Metadata{Namespace: ns, Name: name} }

func object(kind string, m Metadata, spec any) *Object {
	return &Object{APIVersion: APIVersion, Kind: kind, Metadata: m, Spec: spec}
}
