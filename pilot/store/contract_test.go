package store_test

import (
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func svc(ns, name string) *resource.Object {
	return &resource.Object{Kind: resource.KindService, Metadata: resource.Metadata{Namespace: ns, Name: name},
		Spec: &resource.ServiceSpec{Ports: []resource.ServicePort{{Name: "http", Port: 80}}}}
}

func TestValidateMutations(t *testing.T) {
	neg := int64(-1)
	tests := []struct {
		name string
		muts []store.Mutation
		want string // exact error text; empty = valid
	}{
		{"valid put and delete", []store.Mutation{{Op: store.OpPut, Object: svc("default", "a")}, {Op: store.OpDelete, Object: &resource.Object{Kind: resource.KindService, Metadata: resource.Metadata{Namespace: "default", Name: "b"}}}}, ""},
		{"delete needs no spec", []store.Mutation{{Op: store.OpDelete, Object: &resource.Object{Kind: resource.KindMeshConfig, Metadata: resource.Metadata{Name: "mesh"}}}}, ""},
		{"nil object", []store.Mutation{{Op: store.OpPut}}, "invalid: mutation[0]: object is nil"},
		{"plural kind is not a Kind", []store.Mutation{{Op: store.OpPut, Object: &resource.Object{Kind: "services", Metadata: resource.Metadata{Namespace: "default", Name: "a"}, Spec: &resource.ServiceSpec{}}}},
			`invalid: mutation[0] services/default/a: kind: unknown kind "services"`},
		{"NUL in name", []store.Mutation{{Op: store.OpPut, Object: svc("default", "a\x00b")}}, "invalid: mutation[0] Service/default/a\x00b: metadata: name and namespace must not contain NUL"},
		{"negative If-Match", []store.Mutation{{Op: store.OpPut, Object: svc("default", "a"), IfMatch: &neg}}, "invalid: Service/default/a: If-Match generation -1 is negative"},
		{"empty op", []store.Mutation{{Object: svc("default", "a")}}, `invalid: Service/default/a: op "" is not PUT or DELETE`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := store.ValidateMutations(tc.muts)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || err.Error() != tc.want || !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("error %v, want %q wrapping ErrInvalid", err, tc.want)
			}
		})
	}
}

func TestConflictError(t *testing.T) {
	err := error(&store.ConflictError{Key: resource.Key{Kind: resource.KindService, Namespace: "default", Name: "a"}, Expected: 1, Actual: 3})
	if got, want := err.Error(), "Service/default/a: generation is 3, If-Match wanted 1"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, store.ErrConflict) {
		t.Fatal("ConflictError does not unwrap to ErrConflict")
	}
}
