package server

import (
	"context"
	"errors"
	"testing"

	"github.com/weft-mesh/weft/bootstrap/inject"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/boltstore"
)

// TestInjectSettings: the webhook's settings come from the store on every
// review: no MeshConfig is the defaults, a stored one is read, and a store
// that fails is an error (the review is then refused, not guessed).
func TestInjectSettings(t *testing.T) {
	st, err := boltstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	settings := injectSettings(st, inject.Mesh{PilotAddress: "pilot.test:15012"}, "example.org")
	ctx := context.Background()
	cfg, err := settings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mesh.PilotAddress != "pilot.test:15012" || cfg.Mesh.TrustDomain != "example.org" || cfg.Sidecar != (inject.Sidecar{}) || cfg.Validate() != nil {
		t.Fatalf("no MeshConfig: %+v", cfg)
	}
	objs, err := resource.Decode([]byte("apiVersion: mesh.weft.dev/v1alpha1\nkind: MeshConfig\nmetadata: {name: default}\nspec: {trustDomain: example.org}\n"), "mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(ctx, []store.Mutation{{Op: store.OpPut, Object: objs[0]}}); err != nil {
		t.Fatal(err)
	}
	if cfg, err = settings(ctx); err != nil || cfg.Validate() != nil || cfg.Mesh.TrustDomain != "example.org" {
		t.Fatalf("with a MeshConfig: %+v %v", cfg, err)
	}
	st.Close()
	if _, err := settings(ctx); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("closed store: %v, want an error", err)
	}
}
