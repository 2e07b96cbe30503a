package ir

import "sync"

// memo caches values derived from an immutable Mesh (e.g. gen's wire-ready
// per-namespace pieces shared by every proxy of that namespace). Each key is
// computed at most once; concurrent callers of the same key wait for the first.
// The zero value is ready to use.
type memo struct {
	entries sync.Map // key -> *memoEntry
}

type memoEntry struct {
	once sync.Once
	val  any
	err  error
}

// Derive returns build()'s result for key, computing it once per Mesh. build must
// be a pure function of the Mesh (and key), so caching it does not change what
// any caller observes: the Mesh stays immutable in every way that matters. Keys
// should be unexported types of the calling package so packages cannot collide.
func (m *Mesh) Derive(key any, build func() (any, error)) (any, error) {
	return m.memo.derive(key, build)
}

func (m *memo) derive(key any, build func() (any, error)) (any, error) {
	e, _ := m.entries.LoadOrStore(key, &memoEntry{})
	me := e.(*memoEntry)
	me.once.Do(func() { me.val, me.err = build() })
	return me.val, me.err
}
