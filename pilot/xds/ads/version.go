package ads

import (
	"sort"

	"github.com/weft-mesh/weft/pilot/xds/ads/acktrack"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// emptyVersion is the version of an empty set (snapshot.Version returns "").
const emptyVersion = "empty"

// selection is the resources of one type a subscription selects from a snapshot.
type selection struct {
	names   []string            // sorted names that exist in the snapshot
	only    map[string]struct{} // nil for a wildcard (everything); else the explicit subscription
	version string              // version of exactly these resources
}

// selectFor computes what st selects from s for typ. A wildcard costs nothing (the
// snapshot precomputed its version); explicit names cost O(names).
func selectFor(s *snapshot.Snapshot, typ string, st acktrack.State) selection {
	if st.Wildcard {
		v := s.Version(typ)
		if v == "" {
			v = emptyVersion
		}
		return selection{names: nil, version: v}
	}
	rs := s.Resources[typ]
	names := make([]string, 0, len(st.Subscribed))
	for n := range st.Subscribed {
		if _, ok := rs[n]; ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return selection{names: names, only: nonNil(st.Subscribed), version: namesVersion(rs, names)}
}

func nonNil(m map[string]struct{}) map[string]struct{} {
	if m == nil {
		return map[string]struct{}{}
	}
	return m
}

// all returns the selected names (for a wildcard, every name in s).
func (sel selection) all(s *snapshot.Snapshot, typ string) []string {
	if sel.only == nil {
		return s.Names(typ)
	}
	return sel.names
}

// namesVersion is snapshot.NamesVersion, with the ADS's own name for an empty set.
func namesVersion(rs map[string]snapshot.Resource, names []string) string {
	if len(names) == 0 {
		return emptyVersion
	}
	return snapshot.NamesVersion(rs, names)
}
