package store

import (
	"errors"
	"slices"
	"testing"

	"github.com/weft-mesh/weft/pilot/resource"
)

func obj(kind, ns, name string) *resource.Object {
	return &resource.Object{Kind: kind, Metadata: resource.Metadata{Namespace: ns, Name: name}}
}

func TestObjectsGetList(t *testing.T) {
	m := Objects{}
	for _, o := range []*resource.Object{obj("Workload", "shop", "a"), obj("Service", "shop", "b"), obj("Service", "bank", "z"), obj("Service", "shop", "a")} {
		m[ObjectKey(o.Key())] = Entry{Obj: o}
	}
	if got, err := m.Get(resource.Key{Kind: "Service", Namespace: "shop", Name: "b"}); err != nil || got.Metadata.Name != "b" {
		t.Fatalf("Get = %v, %v", got, err)
	}
	if _, err := m.Get(resource.Key{Kind: "Service", Namespace: "shop", Name: "x"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a missing object: %v, want ErrNotFound", err)
	}
	names := func(os []*resource.Object) []string {
		var out []string
		for _, o := range os {
			out = append(out, o.Kind+"/"+o.Metadata.Namespace+"/"+o.Metadata.Name)
		}
		return out
	}
	for _, tc := range []struct {
		kind, ns string
		want     []string
	}{
		{"", "", []string{"Service/bank/z", "Service/shop/a", "Service/shop/b", "Workload/shop/a"}},
		{"Service", "", []string{"Service/bank/z", "Service/shop/a", "Service/shop/b"}},
		{"", "shop", []string{"Service/shop/a", "Service/shop/b", "Workload/shop/a"}},
		{"Service", "shop", []string{"Service/shop/a", "Service/shop/b"}},
		{"Workload", "bank", nil},
	} {
		if got := names(m.List(tc.kind, tc.ns)); !slices.Equal(got, tc.want) {
			t.Errorf("List(%q, %q) = %v, want %v", tc.kind, tc.ns, got, tc.want)
		}
	}
}

func TestListKind(t *testing.T) {
	for _, tc := range []struct{ in, want string }{{"", ""}, {"Service", "Service"}, {"services", "Service"}, {"service", "Service"}} {
		if got, err := ListKind(tc.in); err != nil || got != tc.want {
			t.Errorf("ListKind(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := ListKind("Gadget"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ListKind(Gadget) = %v, want ErrInvalid", err)
	}
}

func TestCheckHistoryPage(t *testing.T) {
	for _, tc := range []struct {
		limit int
		ok    bool
	}{{0, false}, {1, true}, {MaxHistoryPage, true}, {MaxHistoryPage + 1, false}} {
		if err := CheckHistoryPage(tc.limit); (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("CheckHistoryPage(%d) = %v, want ok %v", tc.limit, err, tc.ok)
		}
	}
}

func TestPage(t *testing.T) {
	key := resource.Key{Kind: "Service", Namespace: "shop", Name: "a"}
	evs := []Event{{Revision: 1}, {Revision: 2}, {Revision: 3}}
	for _, tc := range []struct {
		limit    int
		want     []Revision
		wantMore bool
	}{{0, []Revision{1, 2, 3}, false}, {2, []Revision{1, 2}, true}, {3, []Revision{1, 2, 3}, false}} {
		p := Page{Limit: tc.limit}
		for _, ev := range evs {
			if !p.Add(ev) {
				break
			}
		}
		got, more, err := p.Result(key, 0)
		var revs []Revision
		for _, ev := range got {
			revs = append(revs, ev.Revision)
		}
		if err != nil || more != tc.wantMore || !slices.Equal(revs, tc.want) {
			t.Errorf("limit %d: %v more %v err %v; want %v more %v", tc.limit, revs, more, err, tc.want, tc.wantMore)
		}
	}
	var empty Page
	if _, _, err := empty.Result(key, 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("no event at all: %v, want ErrNotFound", err)
	}
	if evs, more, err := empty.Result(key, 3); err != nil || more || len(evs) != 0 {
		t.Errorf("no event after revision 3: %v %v %v, want an empty page", evs, more, err)
	}
}
