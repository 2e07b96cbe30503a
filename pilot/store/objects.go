package store

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/weft-mesh/weft/pilot/resource"
)

// What the backends (boltstore, etcdstore) share to serve Get, List and
// history pages: each mirrors its current objects in memory as Objects, under
// its own lock.

// ObjectKey is kind NUL namespace NUL name: its byte order is the (Kind,
// Namespace, Name) order List promises, since NUL sorts first and no part
// contains it. boltstore also keys its objects bucket with it: it must never
// change.
func ObjectKey(k resource.Key) string {
	return k.Kind + "\x00" + k.Namespace + "\x00" + k.Name
}

// ContentOf is what decides whether an update is a change: labels,
// annotations, spec and pilot's status (encoding/json sorts map keys, so equal
// content gives equal bytes).
func ContentOf(o *resource.Object) ([]byte, error) {
	b, err := json.Marshal(struct {
		Labels      map[string]string `json:"l,omitempty"`
		Annotations map[string]string `json:"a,omitempty"`
		Spec        any               `json:"s"`
		Status      *resource.Status  `json:"st,omitempty"` // pilot's (allocated VIPs): a change like the spec's
	}{o.Metadata.Labels, o.Metadata.Annotations, o.Spec, o.Status})
	if err != nil {
		return nil, fmt.Errorf("%s: encode content: %w", o.Key(), err)
	}
	return b, nil
}

// WireObject is an object as the backends store it (resource.Object's JSON),
// with the spec left raw until the kind is known.
type WireObject struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   resource.Metadata `json:"metadata"`
	Spec       json.RawMessage   `json:"spec"`
	Status     *resource.Status  `json:"status,omitempty"`
}

// DecodeObject reads a stored object back with its spec in the kind's typed
// struct.
func DecodeObject(data []byte) (*resource.Object, error) {
	var w WireObject
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("decode object: %w", err)
	}
	return w.Object()
}

// Object checks the kind and name and decodes the spec.
func (w *WireObject) Object() (*resource.Object, error) {
	key := resource.Key{Kind: w.Kind, Namespace: w.Metadata.Namespace, Name: w.Metadata.Name}
	info, err := resource.LookupKind(w.Kind)
	if err != nil || info.Kind != w.Kind {
		return nil, fmt.Errorf("decode object %s: kind: unknown kind %q", key, w.Kind)
	}
	if w.Metadata.Name == "" {
		return nil, fmt.Errorf("decode object %s: metadata.name: empty", key)
	}
	spec := info.NewSpec()
	if err := json.Unmarshal(w.Spec, spec); err != nil {
		return nil, fmt.Errorf("decode object %s: spec: %w", key, err)
	}
	return &resource.Object{APIVersion: w.APIVersion, Kind: w.Kind, Metadata: w.Metadata, Spec: spec, Status: w.Status}, nil
}

// Entry is one current object of a backend.
type Entry struct {
	Obj     *resource.Object
	Content []byte // ContentOf(Obj), to tell a real change from a re-apply
}

// Objects are a backend's current objects by ObjectKey.
type Objects map[string]Entry

// Get returns the object of key or ErrNotFound.
func (m Objects) Get(key resource.Key) (*resource.Object, error) {
	e, ok := m[ObjectKey(key)]
	if !ok {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	return e.Obj, nil
}

// List returns the objects of kind (a Kind name, from ListKind; every kind
// when empty) in namespace (every namespace when empty), sorted by key.
func (m Objects) List(kind, namespace string) []*resource.Object {
	keys := make([]string, 0, len(m))
	for k, e := range m {
		if (kind == "" || e.Obj.Kind == kind) && (namespace == "" || e.Obj.Metadata.Namespace == namespace) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]*resource.Object, len(keys))
	for i, k := range keys {
		out[i] = m[k].Obj
	}
	return out
}

// ListKind resolves List's kind argument (a Kind, its plural or its lower-case
// name; empty: every kind) to the Kind name, or an ErrInvalid error naming it.
func ListKind(kind string) (string, error) {
	if kind == "" {
		return "", nil
	}
	info, err := resource.LookupKind(kind)
	if err != nil {
		return "", fmt.Errorf("list: %w: %w", ErrInvalid, err)
	}
	return info.Kind, nil
}

// CheckHistoryPage checks HistoryPage's arguments: limit 1..MaxHistoryPage.
func CheckHistoryPage(limit int) error {
	if limit < 1 || limit > MaxHistoryPage {
		return fmt.Errorf("%w: history page limit %d outside 1..%d", ErrInvalid, limit, MaxHistoryPage)
	}
	return nil
}

// Page collects one object's events, oldest first: all of them (Limit 0, for
// History) or at most Limit (for a HistoryPage).
type Page struct {
	Limit  int
	Events []Event
	More   bool // an event past Limit was offered
}

// Full reports whether the page already holds Limit events; asked with one
// more event at hand, so it sets More when it does.
func (p *Page) Full() bool {
	if p.Limit > 0 && len(p.Events) == p.Limit {
		p.More = true
		return true
	}
	return false
}

// Add appends ev unless the page is Full; it reports whether it did.
func (p *Page) Add(ev Event) bool {
	if p.Full() {
		return false
	}
	p.Events = append(p.Events, ev)
	return true
}

// Result is the page as History and HistoryPage return it: an object with no
// retained event at all (after 0) is ErrNotFound.
func (p *Page) Result(key resource.Key, after Revision) ([]Event, bool, error) {
	if len(p.Events) == 0 && after == 0 {
		return nil, false, fmt.Errorf("history of %s: %w", key, ErrNotFound)
	}
	return p.Events, p.More, nil
}
