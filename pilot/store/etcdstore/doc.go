// Package etcdstore is Weft's store on etcd (3.4 and later), for several pilot
// replicas sharing one store. It passes the same contract (storetest) as the
// embedded boltstore.
//
// # Design: a log of change sets in etcd, a head key, state in memory
//
// etcd limits one transaction to --max-txn-ops operations (default 128) and one
// request to --max-request-bytes (default 1.5 MiB), yet one Apply may change
// store.MaxMutationsPerApply (10,000) objects atomically. So objects are not etcd
// keys written by the apply. Instead each Apply appends one record, its whole
// change set, to a log, and one small transaction commits it:
//
//	<prefix>l/head            the Weft revision R (decimal)
//	<prefix>l/r/<R, 20 digits> the change set of revision R: every event, each
//	                           object fully resolved (generation, revision),
//	                           inline, or a manifest naming its chunks
//	<prefix>l/compacted       history before this revision is gone
//	<prefix>c/<id>/<i>        chunk i of a large change set (id: random, per attempt)
//	<prefix>ci/<R>            the chunk id of revision R, for compaction
//	<prefix>s/manifest        the newest snapshot (revision, chunk count, SHA-256)
//	<prefix>s/<S>/<i>         chunk i of the snapshot of all objects at revision S
//
// The commit of revision R is one etcd transaction: If(l/head == R-1) Then(put
// l/head = R, put l/r/R). A change set larger than InlineBytes is first written
// as chunks of ChunkBytes, each its own request, attached to a lease (so the
// chunks of an attempt that never commits disappear with it); the commit then
// also re-puts every chunk key without the lease (etcd's ignore_value), which
// both makes the chunks permanent and fails the whole commit if any of them has
// expired. A commit therefore has 2 (inline) or 3 + chunks operations, so a
// change set may have at most MaxTxnOps-3 chunks: at the defaults (1 MiB
// chunks, 128 ops) 125 MiB, above store.MaxApplyBytes (64 MiB). Whatever the
// size, the commit is one etcd transaction: a revision is all there or absent.
//
// Weft's revision is the value of l/head, incremented by exactly one per
// committed Apply; it is not etcd's revision, which also counts chunk writes,
// lease detaches, snapshots and other users of the cluster.
//
// If-Match and generations: an Apply plans against this replica's in-memory
// state at revision H (preconditions, generations, unchanged objects) and its
// commit compares l/head with H; if another replica committed first, the
// transaction fails, the replica catches up to the head the failed transaction
// read, and plans again (at most MaxCommitAttempts times). A commit whose
// outcome is unknown (a leader lost mid-request) is resolved by reading
// l/r/H+1 back: the change set carries the attempt's id.
//
// Each Store follows the log with one etcd watch on <prefix>l/ (resuming after
// etcd's own compaction or a lost leader by reading the log), applies each
// record to its state (store.Objects, as boltstore's) and fans revisions out
// to its watchers (pilot/store/watchhub, as boltstore): bounded per watcher,
// one sender goroutine each, a watcher that falls WatchBuffer revisions behind
// is cut with store.ErrWatchOverflow. Get, List and
// Revision first read l/head from etcd (a linearizable read) and wait until the
// local state has caught up to it, so a read after an Apply through any replica
// sees it. Watch catch-up and History read the log.
//
// Limits (Config, each tested at its bound and one past): InlineBytes (512
// KiB) and ChunkBytes (1 MiB) must leave RequestOverhead (8 KiB) below
// MaxRequestBytes (etcd's 1.5 MiB); a commit holds at most MaxTxnOps-3 chunks;
// ChunkLeaseTTL (60s) bounds staging + commit; MaxCommitAttempts (32) bounds
// re-planning after other replicas commit first; ApplyTimeout (60s) bounds one
// Apply in all; RequestTimeout (10s) bounds the store's own requests and a
// read's catch-up. etcd's refusals (request too large, too many operations, an
// expired chunk) fail an Apply at once; any other failed commit is read back.
//
// Sets (store.Sets, the CA's shared revocations) live outside the log, under
// <prefix>x/<set>/: a record per key under r/, and rev, re-put by each
// SetApply in the same transaction (at most store.MaxSetApply + 1 operations),
// whose ModRevision is the set's revision.
//
// Replicas find each other through the store: Announce puts a replica's admin
// URL under <prefix>replicas/ on a lease, Replicas lists the live ones (pilot's
// status API fans out over them).
//
// ShareRegistrations shares the registrations of each replica's connected
// sidecars under <prefix>registrations/<replica>/<node>, on that replica's
// own lease, and follows the others' with a watch (Registrations), so every
// replica compiles the same endpoints.
//
// Compact(before) writes a snapshot of the state (chunked, no size limit), then
// moves l/compacted and s/manifest in one transaction, then deletes log records,
// chunks and older snapshots below it. A replica starting reads the snapshot and
// the log after it. etcd's own MVCC history is not compacted by Weft (the cluster
// may be shared): run etcd with --auto-compaction-retention; Weft resumes its
// watch by reading the log when etcd compacted past it.
package etcdstore
