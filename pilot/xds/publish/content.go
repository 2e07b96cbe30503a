package publish

import (
	"crypto/ed25519"
	"sync"
	"time"

	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/pilot/xds/sign"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// contentCache holds, per manifest scope, the signed content statements of the
// scope's latest snapshots, so a change costs one signature per scope rather than
// one per sidecar, and unchanged content is not signed again (by the same
// publisher key: a new key signs anew). Safe for concurrent
// use; the lock covers map and slice updates only, never a signature: the
// stream that first needs an entry signs it (once) while the others of the scope
// wait on that entry alone.
type contentCache struct {
	validity time.Duration
	epoch    uint64 // Config.RollbackEpoch, signed into every content

	mu     sync.Mutex // guards scopes, every scopeContent, and the key id memo
	scopes map[string]*scopeContent
	// The key id of the last key get was given: every stream of a push asks
	// with the same key, and its id is a hash of the public key.
	lastKey   *byte
	lastKeyID string
}

type scopeContent struct {
	refs    int             // open watches of the scope; the entry goes with the last
	entries []*contentEntry // most recently added first, at most keepContent
}

// keepContent entries per scope: the latest snapshot and the one before, so
// streams still on the previous generation while meshcache publishes the next do
// not evict each other's signature.
const keepContent = 2

// contentEntry is one scope snapshot's content statement. base, scope, priv,
// keyID, issued and from are set at creation; signed and err once resolved.
type contentEntry struct {
	base   *snapshot.Snapshot
	scope  string
	priv   ed25519.PrivateKey
	keyID  string
	issued time.Time
	from   *contentEntry // same content signed before: its signature is reused
	once   sync.Once
	signed *manifest.Signed
	part   sign.ContentPart // signed, encoded as its part of every manifest of the scope
	err    error
}

func newContentCache(validity time.Duration, epoch uint64) *contentCache {
	return &contentCache{validity: validity, epoch: epoch, scopes: map[string]*scopeContent{}}
}

func (c *contentCache) acquire(scope string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sc := c.scopes[scope]
	if sc == nil {
		sc = &scopeContent{}
		c.scopes[scope] = sc
	}
	sc.refs++
}

func (c *contentCache) release(scope string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sc := c.scopes[scope]; sc != nil {
		if sc.refs--; sc.refs <= 0 {
			delete(c.scopes, scope)
		}
	}
}

// get returns the signed content statement of scope's snapshot base at now,
// signed by priv: the cached one while it is less than half its validity old,
// reused from an entry with the same content, or newly signed.
func (c *contentCache) get(scope string, base *snapshot.Snapshot, now time.Time, priv ed25519.PrivateKey) (*contentEntry, error) {
	half := c.validity / 2
	c.mu.Lock()
	keyID := c.keyIDLocked(priv)
	fresh := func(e *contentEntry) bool { return e.keyID == keyID && now.Before(e.issued.Add(half)) }
	sc := c.scopes[scope]
	if sc == nil { // not acquired (a test calling get directly): not kept
		sc = &scopeContent{}
	}
	var e *contentEntry
	for _, x := range sc.entries {
		if x.base == base && fresh(x) {
			e = x
			break
		}
	}
	if e == nil {
		e = &contentEntry{base: base, scope: scope, priv: priv, keyID: keyID, issued: now}
		// Only the newest content (by revision) is reused for a snapshot with
		// the same resources: reusing an older one would sign a revert (D at 5,
		// E at 6, D again at 7) as revision 5, and a sidecar running 6 refuses
		// a revision lower than its own.
		var newest *contentEntry
		for _, x := range sc.entries {
			if newest == nil || x.base.Revision > newest.base.Revision {
				newest = x
			}
		}
		if x := newest; x != nil && fresh(x) && x.base.Revision <= base.Revision && sameContent(base, x.base) {
			e.issued, e.from = x.issued, x
		}
		sc.entries = append([]*contentEntry{e}, sc.entries[:min(len(sc.entries), keepContent-1)]...)
	}
	c.mu.Unlock()
	c.resolve(e)
	return e, e.err
}

// keyIDLocked is manifest.KeyID of priv's public key, computed once per key:
// a key is immutable, so the same backing array means the same key.
func (c *contentCache) keyIDLocked(priv ed25519.PrivateKey) string {
	if len(priv) == ed25519.PrivateKeySize && &priv[0] == c.lastKey {
		return c.lastKeyID
	}
	id := manifest.KeyID(priv.Public().(ed25519.PublicKey))
	if len(priv) == ed25519.PrivateKeySize {
		c.lastKey, c.lastKeyID = &priv[0], id
	}
	return id
}

func (c *contentCache) resolve(e *contentEntry) {
	e.once.Do(func() {
		if e.from != nil {
			c.resolve(e.from)
			e.signed, e.part, e.err, e.from = e.from.signed, e.from.part, e.from.err, nil
			return
		}
		e.signed, e.err = sign.ContentAtEpoch(e.priv, e.scope, e.base, e.issued, c.validity, c.epoch)
		if e.err == nil {
			e.part, e.err = sign.EncodeContent(e.signed)
		}
	})
}
