package resource

import "fmt"

// notEnforcedKinds are kinds pilot stores and compiles that no Weft sidecar acts on
// yet, each with why: applying one answers a warning, so no policy is accepted and
// silently left unenforced. Remove an entry when sidecars enforce the kind.
// Empty since issue #9: PeerAuthentication (mTLS chains by mode for sidecars
// with an identity, auto-mTLS to their endpoints), AuthorizationPolicy and
// Override (RBAC filters) are all enforced.
var notEnforcedKinds = map[string]string{}

// overrideActionWhy is why an Override whose action is ALLOW is not enforced:
// pilot sends overrides as one RBAC DENY filter before every other policy
// (issue #9's wire), and an emergency allow has no place in it.
const overrideActionWhy = "only DENY overrides are sent to sidecars; an ALLOW override blocks and allows nothing"

// notEnforcedMeshFields are MeshConfig fields stored but not acted on yet.
var notEnforcedMeshFields = []struct {
	field string
	set   func(*MeshConfigSpec) bool
	why   string
}{
	// defaultMtls is enforced (the mode of workloads no PeerAuthentication
	// selects), certificateTTL is the CA's lifetime, serviceAddressRange is
	// pilot's own (VIP allocation), sidecar is what the injection webhook and
	// meshctl inject add.
	{
		// Stays while explicit mode exists: it is a property of interception.
		field: "spec.outboundTrafficPolicy",
		set:   func(s *MeshConfigSpec) bool { return s.OutboundTrafficPolicy == OutboundRegistryOnly },
		why: "REGISTRY_ONLY applies only to intercepted sidecars (--intercept=iptables|ebpf|auto): " +
			"the app of an explicit-mode sidecar reaches non-mesh addresses directly, without the sidecar",
	},
}

// notEnforcedStalenessClasses are StalenessPolicy classes whose bound is fixed
// by the state itself (a certificate's NotAfter, a CRL's NextUpdate), so a rule
// for them bounds nothing.
var notEnforcedStalenessClasses = map[string]string{
	"secrets":    "a sidecar trusts its own certificate until its NotAfter and not past it, whatever a rule says (mTLS fails closed there; renewal starts at half its lifetime)",
	"revocation": "a sidecar uses a revocation list until its NextUpdate plus the sidecar's --crl-grace (default 1h), whatever a rule says; then new mTLS handshakes are refused",
}

// unenforcedKindWarnings are o's warnings for a kind, field or staleness class no
// sidecar enforces yet.
func unenforcedKindWarnings(o *Object) []string {
	w := func(field, why string) string {
		return (&FieldError{Object: o.Key().String(), Field: field,
			Detail: fmt.Sprintf("accepted but not enforced by Weft sidecars yet: %s", why)}).Error()
	}
	if why, ok := notEnforcedKinds[o.Kind]; ok {
		return []string{w("kind", why)}
	}
	var out []string
	switch s := o.Spec.(type) {
	case *MeshConfigSpec:
		for _, f := range notEnforcedMeshFields {
			if s != nil && f.set(s) {
				out = append(out, w(f.field, f.why))
			}
		}
	case *OverrideSpec:
		if s != nil && s.Action == "ALLOW" {
			out = append(out, w("spec.action", overrideActionWhy))
		}
	case *StalenessPolicySpec:
		if s == nil {
			return nil
		}
		for i, r := range s.Rules {
			if why, ok := notEnforcedStalenessClasses[r.Resource]; ok {
				out = append(out, w(string(path("spec.rules").index(i).child("resource")), fmt.Sprintf("%s: %s", r.Resource, why)))
			}
		}
	}
	return out
}
