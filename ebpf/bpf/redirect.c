//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Weft's outbound interception by cgroup eBPF (issue #10, item 6). Loaded and
// attached per pod cgroup by ebpf/redirect; every attachment is a bpf_link, so
// the programs go away with the process that attached them.
//
//   connect4/6     TCP to a non-loopback destination that is not one of the
//                  pod's own addresses -> the sidecar's outbound port on
//                  loopback; TCP/UDP to port 53 -> the DNS proxy. The
//                  original destination is saved by socket cookie.
//   sendmsg4/6     the same for unconnected UDP to port 53 (musl's resolver).
//   sockops        when the redirected connection is established, re-key the
//                  original destination by (netns cookie, 4-tuple): that is all
//                  the sidecar's accepted socket can name.
//   getsockopt     answers SO_ORIGINAL_DST (SOL_IP and SOL_IPV6, optname 80) on
//                  the sidecar's accepted socket from that map, as conntrack does
//                  in iptables mode, so the listener code is one.
//   getpeername4/6 the app sees its original peer, not the sidecar (for an
//                  MPTCP client, whose subflow the hooks saw, by 4-tuple).
//   recvmsg4/6     a DNS reply's source is the server the app asked (glibc
//                  drops replies from another address).
//   sock_release   forgets a socket's cookie entry.
//
// Exclusion: the sidecar's uid, and optionally SO_MARK (set before connect).
// A connection to one of the pod's own addresses (own_addrs, filled by the
// loader) stays in the pod, as with iptables, whose nat OUTPUT sees it leave
// by lo and returns it: the kernel has no helper for a cgroup sock_addr
// program to ask "is this address local" (no FIB lookup there, and
// bpf_sk_lookup finds sockets, not addresses).
// Addresses are kept in IPv6 form (IPv4 as ::ffff:a.b.c.d) so an AF_INET socket
// and an AF_INET6 socket with IPv4-mapped addresses give the same key.
//
// Pitfalls (shared/research/interception.md): context fields are written 32
// bits at a time (clang -O2 may merge two stores into one 64-bit store, which
// the verifier rejects: a compiler barrier separates them); a bpf_sock is
// read one word at a time at constant offsets.

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define AF_INET 2
#define AF_INET6 10
#define SOCK_STREAM 1
#define SOCK_DGRAM 2
#define SOL_IP 0
#define SOL_IPV6 41
#define SO_ORIGINAL_DST 80 /* also IP6T_SO_ORIGINAL_DST */
#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif
#define PAGE_SIZE_MIN 4096

#define barrier() asm volatile("" ::: "memory")

/* One 32-bit load of a context or socket field at its constant offset.
 * Plain C lets clang merge the loads of two branches into one through a
 * computed pointer, which the verifier refuses ("pointer arithmetic on sock
 * prohibited", "dereference of modified ctx ptr"). */
#define LOAD32(p, type, field)                                                 \
	({                                                                     \
		__u32 __v;                                                     \
		asm volatile("%0 = *(u32 *)(%1 + %2)"                          \
			     : "=r"(__v)                                       \
			     : "r"(p), "i"(__builtin_offsetof(type, field)));  \
		__v;                                                           \
	})
#define SK32(sk, field) LOAD32(sk, struct bpf_sock, field)
#define OPS32(s, field) LOAD32(s, struct bpf_sock_ops, field)
#define ADDR32(ctx, field) LOAD32(ctx, struct bpf_sock_addr, field)

enum config_flags {
	F_DNS = 1,         /* redirect port 53 to the DNS proxy */
	F_EXCLUDE_UID = 2, /* sockets of proxy_uid are not redirected */
	F_PROBE_ONLY = 4,  /* self-test: redirect nothing but the probe address */
};

struct config {
	enum config_flags flags;
	__u32 proxy_uid;
	__u32 exclude_mark;   /* 0: none */
	__u16 outbound_port;  /* network order */
	__u16 dns_port;       /* network order */
	__u32 probe_ip4;      /* network order; 0: no probe (self-test only) */
	__u16 probe_port;     /* network order */
	__u16 probe_to_port;  /* network order: where the probe is sent */
};

struct orig_dst {
	__u32 addr[4];        /* IPv6 form, network order */
	__u16 port;           /* network order */
	__u16 family;         /* AF_INET or AF_INET6: what the app asked for */
};

struct tuple {
	__u64 netns;          /* netns cookie: loopback tuples repeat across pods */
	__u32 saddr[4];       /* the client's side, IPv6 form */
	__u32 daddr[4];
	__u16 sport;          /* network order */
	__u16 dport;          /* network order */
	__u32 pad;
};

enum stat {
	STAT_REDIRECTED = 0,
	STAT_DNS_REDIRECTED,
	STAT_EXCLUDED,
	STAT_ORIGDST_ANSWERED,
	STAT_ORIGDST_MISSED,
	STAT_SAVE_FAILED,
	STAT_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} config_map SEC(".maps");

/* Sizes are set by the loader (redirect.Config.MaxConns). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct orig_dst);
} cookie_orig SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct tuple);
	__type(value, struct orig_dst);
} tuple_orig SEC(".maps");

/* The pod's own addresses, IPv6 form, network order (the value is unused).
 * Sized by the loader (redirect.MaxOwnAddrs). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, struct in6_addr);
	__type(value, __u8);
} own_addrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, enum stat); /* also gives Go the names */
	__type(value, __u64);
} stats SEC(".maps");


static __always_inline void count(__u32 k)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &k);
	if (v)
		*v += 1;
}

static __always_inline struct config *get_config(void)
{
	__u32 k = 0;
	return bpf_map_lookup_elem(&config_map, &k);
}

static __always_inline int is_excluded(struct bpf_sock_addr *ctx, struct config *cfg)
{
	if ((cfg->flags & F_EXCLUDE_UID) &&
	    (__u32)bpf_get_current_uid_gid() == cfg->proxy_uid)
		return 1;
	if (cfg->exclude_mark) {
		struct bpf_sock *sk = ctx->sk;
		if (sk && sk->mark == cfg->exclude_mark)
			return 1;
	}
	return 0;
}

static __always_inline void save(void *ctx, __u32 a0, __u32 a1, __u32 a2, __u32 a3,
				 __u16 port, __u16 family)
{
	struct orig_dst o = {};
	o.addr[0] = a0;
	o.addr[1] = a1;
	o.addr[2] = a2;
	o.addr[3] = a3;
	o.port = port;
	o.family = family;
	__u64 cookie = bpf_get_socket_cookie(ctx);
	if (bpf_map_update_elem(&cookie_orig, &cookie, &o, BPF_ANY))
		count(STAT_SAVE_FAILED);
}

/* What to do with a connection (or datagram) to a0..a3 (IPv6 form) port, by
 * socket type. Returns the new port in network order, or 0 to leave it alone. */
static __always_inline __u16 target(struct config *cfg, __u32 type, __u32 a0, __u32 a1,
				    __u32 a2, __u32 a3, __u16 port, int loopback)
{
	if ((cfg->flags & F_DNS) && port == bpf_htons(53) &&
	    (type == SOCK_DGRAM || type == SOCK_STREAM))
		return cfg->dns_port;
	if (type != SOCK_STREAM || loopback)
		return 0;
	struct in6_addr k;
	k.in6_u.u6_addr32[0] = a0;
	k.in6_u.u6_addr32[1] = a1;
	k.in6_u.u6_addr32[2] = a2;
	k.in6_u.u6_addr32[3] = a3;
	if (bpf_map_lookup_elem(&own_addrs, &k))
		return 0;
	return cfg->outbound_port;
}

static __always_inline int redirect4(struct bpf_sock_addr *ctx)
{
	struct config *cfg = get_config();
	if (!cfg)
		return 1;
	__u32 ip = ctx->user_ip4;
	__u16 port = (__u16)ctx->user_port;
	if (cfg->probe_ip4 && ip == cfg->probe_ip4 && port == cfg->probe_port &&
	    ctx->type == SOCK_STREAM) {
		/* The self-test's probe, from the sidecar itself: never excluded. */
		save(ctx, 0, 0, bpf_htonl(0xffff), ip, port, AF_INET);
		ctx->user_ip4 = bpf_htonl(0x7f000001);
		ctx->user_port = cfg->probe_to_port;
		count(STAT_REDIRECTED);
		return 1;
	}
	if (cfg->flags & F_PROBE_ONLY)
		return 1;
	int loopback = (bpf_ntohl(ip) >> 24) == 127;
	__u16 to = target(cfg, ctx->type, 0, 0, bpf_htonl(0xffff), ip, port, loopback);
	if (!to)
		return 1;
	if (is_excluded(ctx, cfg)) {
		count(STAT_EXCLUDED);
		return 1;
	}
	save(ctx, 0, 0, bpf_htonl(0xffff), ip, port, AF_INET);
	ctx->user_ip4 = bpf_htonl(0x7f000001);
	ctx->user_port = to;
	count(to == cfg->dns_port && port == bpf_htons(53) ? STAT_DNS_REDIRECTED : STAT_REDIRECTED);
	return 1;
}

static __always_inline int redirect6(struct bpf_sock_addr *ctx)
{
	struct config *cfg = get_config();
	if (!cfg)
		return 1;
	__u32 a0 = ADDR32(ctx, user_ip6[0]), a1 = ADDR32(ctx, user_ip6[1]);
	__u32 a2 = ADDR32(ctx, user_ip6[2]), a3 = ADDR32(ctx, user_ip6[3]);
	__u16 port = (__u16)ctx->user_port;
	int mapped = a0 == 0 && a1 == 0 && a2 == bpf_htonl(0xffff);
	if (mapped && cfg->probe_ip4 && a3 == cfg->probe_ip4 && port == cfg->probe_port &&
	    ctx->type == SOCK_STREAM) {
		save(ctx, a0, a1, a2, a3, port, AF_INET6);
		ctx->user_ip6[3] = bpf_htonl(0x7f000001);
		ctx->user_port = cfg->probe_to_port;
		count(STAT_REDIRECTED);
		return 1;
	}
	if (cfg->flags & F_PROBE_ONLY)
		return 1;
	int loopback;
	if (mapped)
		loopback = (bpf_ntohl(a3) >> 24) == 127;
	else
		loopback = a0 == 0 && a1 == 0 && a2 == 0 && a3 == bpf_htonl(1);
	__u16 to = target(cfg, ctx->type, a0, a1, a2, a3, port, loopback);
	if (!to)
		return 1;
	if (is_excluded(ctx, cfg)) {
		count(STAT_EXCLUDED);
		return 1;
	}
	save(ctx, a0, a1, a2, a3, port, AF_INET6);
	if (mapped) {
		/* ::ffff:127.0.0.1: the same IPv4 listener as connect4's. */
		ctx->user_ip6[3] = bpf_htonl(0x7f000001);
	} else {
		ctx->user_ip6[0] = 0;
		ctx->user_ip6[1] = 0;
		ctx->user_ip6[2] = 0;
		ctx->user_ip6[3] = bpf_htonl(1);
	}
	ctx->user_port = to;
	count(to == cfg->dns_port && port == bpf_htons(53) ? STAT_DNS_REDIRECTED : STAT_REDIRECTED);
	return 1;
}

SEC("cgroup/connect4")
int weft_connect4(struct bpf_sock_addr *ctx)
{
	return redirect4(ctx);
}

SEC("cgroup/connect6")
int weft_connect6(struct bpf_sock_addr *ctx)
{
	return redirect6(ctx);
}

/* Unconnected UDP only (the kernel runs these hooks when sendmsg names an
 * address); target() leaves everything but port 53 alone for datagrams. */
SEC("cgroup/sendmsg4")
int weft_sendmsg4(struct bpf_sock_addr *ctx)
{
	return redirect4(ctx);
}

SEC("cgroup/sendmsg6")
int weft_sendmsg6(struct bpf_sock_addr *ctx)
{
	return redirect6(ctx);
}

SEC("sockops")
int weft_sockops(struct bpf_sock_ops *s)
{
	if (s->op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB)
		return 1;
	struct tuple t = {};
	t.netns = bpf_get_netns_cookie(s);
	__u32 family = OPS32(s, family);
	if (family == AF_INET) {
		t.saddr[2] = bpf_htonl(0xffff);
		t.saddr[3] = OPS32(s, local_ip4);
		t.daddr[2] = bpf_htonl(0xffff);
		t.daddr[3] = OPS32(s, remote_ip4);
	} else if (family == AF_INET6) {
		t.saddr[0] = OPS32(s, local_ip6[0]);
		t.saddr[1] = OPS32(s, local_ip6[1]);
		t.saddr[2] = OPS32(s, local_ip6[2]);
		t.saddr[3] = OPS32(s, local_ip6[3]);
		t.daddr[0] = OPS32(s, remote_ip6[0]);
		t.daddr[1] = OPS32(s, remote_ip6[1]);
		t.daddr[2] = OPS32(s, remote_ip6[2]);
		t.daddr[3] = OPS32(s, remote_ip6[3]);
	} else {
		return 1;
	}
	t.sport = bpf_htons((__u16)OPS32(s, local_port));
	t.dport = (__u16)(OPS32(s, remote_port) >> 16); /* be16 in the high half */
	__u64 cookie = bpf_get_socket_cookie(s);
	struct orig_dst *o = bpf_map_lookup_elem(&cookie_orig, &cookie);
	if (o) {
		bpf_map_update_elem(&tuple_orig, &t, o, BPF_ANY);
		return 1;
	}
	/* Not redirected (e.g. an explicit client of 127.0.0.1:15001): an
	 * entry left by an earlier connection on the same tuple must not answer
	 * for this one. */
	struct config *cfg = get_config();
	if (cfg && t.dport == cfg->outbound_port)
		bpf_map_delete_elem(&tuple_orig, &t);
	return 1;
}

SEC("cgroup/getsockopt")
int weft_getsockopt(struct bpf_sockopt *ctx)
{
	int level = ctx->level;
	if (ctx->optname != SO_ORIGINAL_DST || (level != SOL_IP && level != SOL_IPV6)) {
		/* Past a page the program sees only a prefix of the buffer: 0
		 * tells the kernel to keep its own answer (prog_cgroup_sockopt.rst). */
		if (ctx->optlen > PAGE_SIZE_MIN)
			ctx->optlen = 0;
		return 1;
	}
	struct bpf_sock *sk = ctx->sk;
	if (!sk)
		return 1;
	/* The accepted socket's local side is the sidecar's listener, its
	 * remote side the client: the client's tuple reversed. */
	struct tuple t = {};
	t.netns = bpf_get_netns_cookie(ctx);
	__u32 family = SK32(sk, family);
	if (family == AF_INET) {
		t.saddr[2] = bpf_htonl(0xffff);
		t.saddr[3] = SK32(sk, dst_ip4);
		t.daddr[2] = bpf_htonl(0xffff);
		t.daddr[3] = SK32(sk, src_ip4);
	} else if (family == AF_INET6) {
		t.saddr[0] = SK32(sk, dst_ip6[0]);
		t.saddr[1] = SK32(sk, dst_ip6[1]);
		t.saddr[2] = SK32(sk, dst_ip6[2]);
		t.saddr[3] = SK32(sk, dst_ip6[3]);
		t.daddr[0] = SK32(sk, src_ip6[0]);
		t.daddr[1] = SK32(sk, src_ip6[1]);
		t.daddr[2] = SK32(sk, src_ip6[2]);
		t.daddr[3] = SK32(sk, src_ip6[3]);
	} else {
		return 1;
	}
	/* dst_port is a be16 followed by 16 zero bits: its word's low half
	 * in memory order. src_port is in host order. */
	t.sport = (__u16)SK32(sk, dst_port);
	t.dport = bpf_htons((__u16)SK32(sk, src_port));
	struct orig_dst *o = bpf_map_lookup_elem(&tuple_orig, &t);
	if (!o) {
		count(STAT_ORIGDST_MISSED);
		return 1;
	}
	int v4 = o->addr[0] == 0 && o->addr[1] == 0 && o->addr[2] == bpf_htonl(0xffff);
	if (level == SOL_IP) {
		/* As conntrack: SOL_IP names an IPv4 destination only. */
		if (!v4)
			return 1;
		struct sockaddr_in *sa = ctx->optval;
		if ((void *)(sa + 1) > ctx->optval_end)
			return 1;
		sa->sin_family = AF_INET;
		sa->sin_port = o->port;
		sa->sin_addr.s_addr = o->addr[3];
		__builtin_memset(sa->__pad, 0, sizeof(sa->__pad));
		ctx->optlen = sizeof(*sa);
	} else {
		/* SOL_IPV6: an IPv6 destination, or an IPv4 one as ::ffff:a.b.c.d. */
		struct sockaddr_in6 *sa = ctx->optval;
		if ((void *)(sa + 1) > ctx->optval_end)
			return 1;
		sa->sin6_family = AF_INET6;
		sa->sin6_port = o->port;
		sa->sin6_flowinfo = 0;
		sa->sin6_addr.in6_u.u6_addr32[0] = o->addr[0];
		sa->sin6_addr.in6_u.u6_addr32[1] = o->addr[1];
		sa->sin6_addr.in6_u.u6_addr32[2] = o->addr[2];
		sa->sin6_addr.in6_u.u6_addr32[3] = o->addr[3];
		sa->sin6_scope_id = 0;
		ctx->optlen = sizeof(*sa);
	}
	barrier(); /* keep optlen and retval two 32-bit stores */
	ctx->retval = 0;
	count(STAT_ORIGDST_ANSWERED);
	return 1;
}

/* The original destination of the app's socket behind ctx: by its cookie, or,
 * for an MPTCP socket (the hooks ran on its first subflow, whose cookie is
 * another), by the 4-tuple sockops saved, when its peer is the sidecar. */
static __always_inline struct orig_dst *peer_orig(struct bpf_sock_addr *ctx, int v6)
{
	__u64 cookie = bpf_get_socket_cookie(ctx);
	struct orig_dst *o = bpf_map_lookup_elem(&cookie_orig, &cookie);
	if (o)
		return o;
	struct config *cfg = get_config();
	struct bpf_sock *sk = ctx->sk;
	if (!cfg || !sk || (__u16)ctx->user_port != cfg->outbound_port ||
	    SK32(sk, protocol) != IPPROTO_MPTCP)
		return 0;
	struct tuple t = {};
	t.netns = bpf_get_netns_cookie(ctx);
	if (v6) {
		t.saddr[0] = SK32(sk, src_ip6[0]);
		t.saddr[1] = SK32(sk, src_ip6[1]);
		t.saddr[2] = SK32(sk, src_ip6[2]);
		t.saddr[3] = SK32(sk, src_ip6[3]);
		t.daddr[0] = ADDR32(ctx, user_ip6[0]);
		t.daddr[1] = ADDR32(ctx, user_ip6[1]);
		t.daddr[2] = ADDR32(ctx, user_ip6[2]);
		t.daddr[3] = ADDR32(ctx, user_ip6[3]);
	} else {
		t.saddr[2] = bpf_htonl(0xffff);
		t.saddr[3] = SK32(sk, src_ip4);
		t.daddr[2] = bpf_htonl(0xffff);
		t.daddr[3] = ADDR32(ctx, user_ip4);
	}
	t.sport = bpf_htons((__u16)SK32(sk, src_port));
	t.dport = cfg->outbound_port;
	return bpf_map_lookup_elem(&tuple_orig, &t);
}

SEC("cgroup/getpeername4")
int weft_getpeername4(struct bpf_sock_addr *ctx)
{
	struct orig_dst *o = peer_orig(ctx, 0);
	if (!o || o->family != AF_INET)
		return 1;
	ctx->user_ip4 = o->addr[3];
	ctx->user_port = o->port;
	return 1;
}

SEC("cgroup/getpeername6")
int weft_getpeername6(struct bpf_sock_addr *ctx)
{
	struct orig_dst *o = peer_orig(ctx, 1);
	if (!o || o->family != AF_INET6)
		return 1;
	ctx->user_ip6[0] = o->addr[0];
	ctx->user_ip6[1] = o->addr[1];
	ctx->user_ip6[2] = o->addr[2];
	ctx->user_ip6[3] = o->addr[3];
	ctx->user_port = o->port;
	return 1;
}

/* A datagram from the DNS proxy to a socket whose query was redirected:
 * the app sees it come from the server it asked. */
SEC("cgroup/recvmsg4")
int weft_recvmsg4(struct bpf_sock_addr *ctx)
{
	struct config *cfg = get_config();
	if (!cfg || ctx->user_ip4 != bpf_htonl(0x7f000001) || (__u16)ctx->user_port != cfg->dns_port)
		return 1;
	__u64 cookie = bpf_get_socket_cookie(ctx);
	struct orig_dst *o = bpf_map_lookup_elem(&cookie_orig, &cookie);
	if (!o || o->family != AF_INET || o->port != bpf_htons(53))
		return 1;
	ctx->user_ip4 = o->addr[3];
	ctx->user_port = o->port;
	return 1;
}

SEC("cgroup/recvmsg6")
int weft_recvmsg6(struct bpf_sock_addr *ctx)
{
	struct config *cfg = get_config();
	if (!cfg || (__u16)ctx->user_port != cfg->dns_port)
		return 1;
	__u32 a0 = ADDR32(ctx, user_ip6[0]), a1 = ADDR32(ctx, user_ip6[1]);
	__u32 a2 = ADDR32(ctx, user_ip6[2]), a3 = ADDR32(ctx, user_ip6[3]);
	int from_proxy = a0 == 0 && a1 == 0 &&
		((a2 == bpf_htonl(0xffff) && a3 == bpf_htonl(0x7f000001)) ||
		 (a2 == 0 && a3 == bpf_htonl(1)));
	if (!from_proxy)
		return 1;
	__u64 cookie = bpf_get_socket_cookie(ctx);
	struct orig_dst *o = bpf_map_lookup_elem(&cookie_orig, &cookie);
	if (!o || o->family != AF_INET6 || o->port != bpf_htons(53))
		return 1;
	ctx->user_ip6[0] = o->addr[0];
	ctx->user_ip6[1] = o->addr[1];
	ctx->user_ip6[2] = o->addr[2];
	ctx->user_ip6[3] = o->addr[3];
	ctx->user_port = o->port;
	return 1;
}

SEC("cgroup/sock_release")
int weft_sock_release(struct bpf_sock *sk)
{
	__u64 cookie = bpf_get_socket_cookie(sk);
	bpf_map_delete_elem(&cookie_orig, &cookie);
	return 1;
}

char __license[] SEC("license") = "Dual BSD/GPL";
