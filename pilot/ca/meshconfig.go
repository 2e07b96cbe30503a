package ca

import (
	"context"
	"time"

	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
)

// MeshConfigReadTimeout bounds one read of MeshConfig/default.
const MeshConfigReadTimeout = time.Second

// MeshConfigDurations returns ServiceConfig.CertTTL and CRLValidity read from
// MeshConfig/default in st on every call (certificateTTL, crlValidity; both
// validated on write). Absent, unset or unreadable: 0, so the defaults apply.
func MeshConfigDurations(st store.Store) (certTTL, crlValidity func() time.Duration) {
	read := func(field func(*resource.MeshConfigSpec) resource.Duration) func() time.Duration {
		return func() time.Duration {
			ctx, cancel := context.WithTimeout(context.Background(), MeshConfigReadTimeout)
			defer cancel()
			o, err := st.Get(ctx, resource.Key{Kind: resource.KindMeshConfig, Name: "default"})
			if err != nil {
				return 0
			}
			s, ok := o.Spec.(*resource.MeshConfigSpec)
			if !ok || s == nil || field(s) == "" {
				return 0
			}
			d, err := time.ParseDuration(string(field(s)))
			if err != nil {
				return 0
			}
			return d
		}
	}
	return read(func(s *resource.MeshConfigSpec) resource.Duration { return s.CertificateTTL }),
		read(func(s *resource.MeshConfigSpec) resource.Duration { return s.CRLValidity })
}
