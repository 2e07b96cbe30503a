package resource

import (
	"strings"
	"testing"
)

// Kinds, MeshConfig fields and staleness classes no sidecar enforces yet answer a
// warning naming the object and field; what sidecars do enforce answers none.
func TestUnenforcedKindWarnings(t *testing.T) {
	obj := func(kind, ns string, spec any) *Object {
		return &Object{APIVersion: APIVersion, Kind: kind, Metadata: Metadata{Name: "x", Namespace: ns}, Spec: spec}
	}
	for _, tc := range []struct {
		name string
		o    *Object
		want []string // substrings, one per warning, in order
	}{
		{"peer authentication", obj(KindPeerAuthentication, "shop", &PeerAuthenticationSpec{MTLS: "STRICT"}), nil},
		{"authorization policy", obj(KindAuthorizationPolicy, "shop", &AuthorizationPolicySpec{}), nil},
		{"deny override", obj(KindOverride, "shop", &OverrideSpec{TTL: "1m", Action: "DENY"}), nil},
		{"allow override", obj(KindOverride, "shop", &OverrideSpec{TTL: "1m", Action: "ALLOW"}),
			[]string{"Override/shop/x: spec.action: accepted but not enforced by Weft sidecars yet: only DENY overrides"}},
		{"mesh config trust domain only", obj(KindMeshConfig, "", &MeshConfigSpec{TrustDomain: "example.org"}), nil},
		{"mesh config mtls and ttl", obj(KindMeshConfig, "", &MeshConfigSpec{DefaultMTLS: "STRICT", CertificateTTL: "24h"}), nil},
		{"staleness for routing classes", obj(KindStalenessPolicy, "shop", &StalenessPolicySpec{Rules: []StalenessRule{
			{Resource: "routes"}, {Resource: "endpoints"}}}), nil},
		{"staleness for secrets and authorization", obj(KindStalenessPolicy, "shop", &StalenessPolicySpec{Rules: []StalenessRule{
			{Resource: "routes"}, {Resource: "secrets"}, {Resource: "authorization"}}}),
			[]string{"spec.rules[1].resource: accepted but not enforced by Weft sidecars yet: secrets:"}},
		{"service", obj(KindService, "shop", &ServiceSpec{}), nil},
		{"service addresses", obj(KindService, "shop", &ServiceSpec{Addresses: []string{"240.240.0.1"}}), nil},
		{"mesh config interception defaults", obj(KindMeshConfig, "", &MeshConfigSpec{ServiceAddressRange: "10.0.0.0/8", OutboundTrafficPolicy: "ALLOW_ANY",
			Sidecar: &SidecarConfig{Image: DefaultSidecarImage, CPU: DefaultSidecarCPU, Memory: DefaultSidecarMemory}}), nil},
		{"mesh config sidecar set", obj(KindMeshConfig, "", &MeshConfigSpec{Sidecar: &SidecarConfig{Image: "x/y:z", CPU: DefaultSidecarCPU, Memory: DefaultSidecarMemory}}), nil},
		{"mesh config registry only", obj(KindMeshConfig, "", &MeshConfigSpec{OutboundTrafficPolicy: "REGISTRY_ONLY"}),
			[]string{"MeshConfig/x: spec.outboundTrafficPolicy: accepted but not enforced by Weft sidecars yet: REGISTRY_ONLY applies only to intercepted sidecars"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := unenforcedKindWarnings(tc.o)
			if len(got) != len(tc.want) {
				t.Fatalf("warnings %q, want %d", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %d: %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}
