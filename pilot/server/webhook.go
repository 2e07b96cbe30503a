package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/weft-mesh/weft/bootstrap/inject"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
)

// DefaultWebhookAddr is the injection webhook's port (DESIGN.md, Ports). pilot's
// --webhook-addr defaults to it; Config.WebhookAddr "" is off.
const DefaultWebhookAddr = ":15017"

// DefaultWebhookDNS is the DNS name the API server calls the webhook by: the
// Service weft-pilot in namespace weft-system (deploy/). pilot's serving
// certificate carries it (pilot's --webhook-san).
const DefaultWebhookDNS = "weft-pilot.weft-system.svc"

// injectSettings returns the webhook's Settings: MeshConfig/default's
// spec.sidecar read from st on every review (a change applies to the next pod),
// with mesh as given and the trust domain pilot runs with.
func injectSettings(st store.Store, mesh inject.Mesh, trustDomain string) func(ctx context.Context) (inject.Config, error) {
	mesh.TrustDomain = trustDomain
	return func(ctx context.Context) (inject.Config, error) {
		cfg := inject.Config{Mesh: mesh}
		o, err := st.Get(ctx, resource.Key{Kind: resource.KindMeshConfig, Name: "default"})
		switch {
		case errors.Is(err, store.ErrNotFound):
			return cfg, nil // no MeshConfig: the defaults
		case err != nil:
			return inject.Config{}, fmt.Errorf("reading MeshConfig/default: %w", err)
		}
		if spec, ok := o.Spec.(*resource.MeshConfigSpec); ok && spec != nil {
			cfg.Sidecar = meshSidecar(spec)
		}
		return cfg, nil
	}
}

// meshSidecar is MeshConfig's spec.sidecar (API.md); unset fields are
// injection's defaults (the same as resource's).
func meshSidecar(spec *resource.MeshConfigSpec) inject.Sidecar {
	if spec.Sidecar == nil {
		return inject.Sidecar{}
	}
	return inject.Sidecar{Image: spec.Sidecar.Image, CPU: spec.Sidecar.CPU, Memory: spec.Sidecar.Memory}
}
