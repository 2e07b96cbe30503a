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
	objs, err := resource.Decode([]byte("apiVersion: mesh.weft.dev/v1alpha1\nkind: MeshConfig\nmetadata: {name: default}\nspec: {trustDomain: example.org, sidecar: {image: reg.example/weft/sidecar:1.2, memory: 128Mi}}\n"), "mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(ctx, []store.Mutation{{Op: store.OpPut, Object: objs[0]}}); err != nil {
		t.Fatal(err)
	}
	// The stored MeshConfig's sidecar (resource's defaults fill what it leaves out).
	want := inject.Sidecar{Image: "reg.example/weft/sidecar:1.2", CPU: resource.DefaultSidecarCPU, Memory: "128Mi"}
	if cfg, err = settings(ctx); err != nil || cfg.Validate() != nil || cfg.Mesh.TrustDomain != "example.org" || cfg.Sidecar != want {
		t.Fatalf("with a MeshConfig: %+v %v, want sidecar %+v", cfg, err, want)
	}
	st.Close()
	if _, err := settings(ctx); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("closed store: %v, want an error", err)
	}
}

// TestSidecarDefaultsAgree: resource's MeshConfig defaults and injection's are
// one set of numbers.
func TestSidecarDefaultsAgree(t *testing.T) {
	if resource.DefaultSidecarImage != inject.DefaultImage || resource.DefaultSidecarCPU != inject.DefaultCPU || resource.DefaultSidecarMemory != inject.DefaultMemory {
		t.Errorf("resource %s %s %s, inject %s %s %s", resource.DefaultSidecarImage, resource.DefaultSidecarCPU, resource.DefaultSidecarMemory,
			inject.DefaultImage, inject.DefaultCPU, inject.DefaultMemory)
	}
}
