package xdsclient

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/anypb"
)

// Resource is one decoded resource as the client holds it.
type Resource struct {
	Name    string
	Version string     // per-resource version (delta) or the response's version_info (SotW)
	Value   any        // what Decode returned
	Raw     *anypb.Any // the wire form, for persistence and hashing; read-only
}

// Update is a complete state: every subscribed type, committed or candidate. It is
// immutable once built; a new response produces a new Update sharing the unchanged
// per-type maps.
type Update struct {
	// Resources by type URL, then name.
	Resources map[string]map[string]Resource
	// Versions by type URL: SotW version_info, or delta system_version_info
	// (informational in delta).
	Versions map[string]string
	// Missing lists, by type URL, names the state references that have not arrived
	// yet (being fetched). Apply should treat them as warming, not as errors.
	Missing map[string][]string
	// Changed is the type URL of the response that produced this candidate; empty for
	// an initial state.
	Changed string
}

// ShortName is the last dotted segment of a type URL: "Listener", "Cluster".
func ShortName(typeURL string) string {
	if i := strings.LastIndexByte(typeURL, '.'); i >= 0 {
		return typeURL[i+1:]
	}
	if i := strings.LastIndexByte(typeURL, '/'); i >= 0 {
		return typeURL[i+1:]
	}
	return typeURL
}

func emptyUpdate() *Update {
	return &Update{Resources: map[string]map[string]Resource{}, Versions: map[string]string{}, Missing: map[string][]string{}}
}

// clone copies the outer maps; the per-type maps are shared until replaced.
func (u *Update) clone() *Update {
	n := &Update{
		Resources: make(map[string]map[string]Resource, len(u.Resources)),
		Versions:  make(map[string]string, len(u.Versions)),
		Missing:   map[string][]string{},
		Changed:   u.Changed,
	}
	for k, v := range u.Resources {
		n.Resources[k] = v
	}
	for k, v := range u.Versions {
		n.Versions[k] = v
	}
	return n
}

// references computes, for each named type, the sorted set of names referenced by
// any value in the state.
func references(u *Update, named map[string]bool) map[string][]string {
	sets := map[string]map[string]bool{}
	add := func(t string, names []string) {
		if !named[t] {
			return
		}
		s := sets[t]
		if s == nil {
			s = map[string]bool{}
			sets[t] = s
		}
		for _, n := range names {
			if n != "" {
				s[n] = true
			}
		}
	}
	for _, byName := range u.Resources {
		for _, r := range byName {
			if ref, ok := r.Value.(Referencer); ok {
				add(ref.References())
			}
			if mref, ok := r.Value.(MultiReferencer); ok {
				for t, names := range mref.AllReferences() {
					add(t, names)
				}
			}
		}
	}
	out := make(map[string][]string, len(sets))
	for t, s := range sets {
		names := make([]string, 0, len(s))
		for n := range s {
			names = append(names, n)
		}
		slices.Sort(names)
		out[t] = names
	}
	return out
}

// settle prunes named resources that nothing references any more and records what
// is referenced but absent. It mutates u, which must be a fresh clone.
func settle(u *Update, named map[string]bool) map[string][]string {
	refs := references(u, named)
	for t := range named {
		want := refs[t]
		have := u.Resources[t]
		pruned := false
		for name := range have {
			if _, ok := slices.BinarySearch(want, name); !ok {
				pruned = true
				break
			}
		}
		if pruned {
			kept := make(map[string]Resource, len(want))
			for _, name := range want {
				if r, ok := have[name]; ok {
					kept[name] = r
				}
			}
			u.Resources[t] = kept
		}
		var missing []string
		for _, name := range want {
			if _, ok := u.Resources[t][name]; !ok {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			u.Missing[t] = missing
		}
	}
	return refs
}
