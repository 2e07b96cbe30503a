package api

import (
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
)

// plaintextWhy is why an mTLS mode does not reach every sidecar while pilot lets
// plaintext clients register: such a sidecar proved no identity, so pilot sends
// it no TLS chains and its peers reach it in plaintext (pilot/xds/gen).
const plaintextWhy = "accepted but not enforced for sidecars registered without a certificate: pilot runs with --insecure-plaintext-registration"

// plaintextWarnings are the warnings of the mTLS settings among muts while
// pilot accepts plaintext registration (Config.PlaintextRegistration), so that no
// mode is silently left unenforced.
func plaintextWarnings(muts []store.Mutation) []string {
	var out []string
	for _, m := range muts {
		if m.Op == store.OpDelete {
			continue
		}
		o := m.Object
		field := ""
		switch o.Spec.(type) {
		case *resource.PeerAuthenticationSpec:
			field = "spec.mtls"
		case *resource.MeshConfigSpec:
			// Also when the field is left out: its default (STRICT) is a mode
			// too, and it does not apply to these sidecars either.
			field = "spec.defaultMtls"
		}
		if field != "" {
			out = append(out, (&resource.FieldError{Object: o.Key().String(), Field: field, Detail: plaintextWhy}).Error())
		}
	}
	return out
}
