/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma: a kernel RPC client transport (CLIENT * with struct clnt_ops, after
 * sys/rpc/clnt_vc.c) over the Rust core's Requester.
 *
 * Division of work. The C side (krpc_rdma_clnt.c, compiled against sys/rpc/clnt.h, or
 * unchanged against ofed-testkit/emu/kpi_emu_rpc.h) owns the CLIENT, its lock, the XID, the RPC call
 * header (xid, CALL, 2, prog, vers, proc, credential, verifier: encoded from cl_auth's
 * ah_cred / ah_verf, which is what authnone_marshal and authunix_marshal put on the wire),
 * the timeout and the sleeping. The Rust side (ofed-shim/krpc-face/src/clnt.rs) owns the
 * connection and the Requester behind the opaque struct krpc_clnt: it walks the header
 * mbuf and the caller's args chain (markers intact, M_EXTPG pages by reference) through the
 * mbuf bridge, sends the call, reaps completions, parses the reply header and hands the
 * results back as an mbuf chain built by the bridge (DDP data as M_EXTPG mbufs).
 *
 * Locking. Every krpc_clnt_* call below is made with the CLIENT's lock held, an sx(9): they
 * allocate M_NOWAIT, but the verbs under them may sleep (rdma_disconnect at close,
 * ib_dereg_mr / ib_alloc_mr when a registration is reset). The CQ completion upcall, which
 * must not sleep, never takes it: it counts a wakeup under a second lock, a mutex that is
 * also the sleepers' interlock (a caller samples the count before it polls and sleeps only
 * if it has not moved), and calls wakeup(9); the thread sleeping in cl_call polls the
 * Requester itself.
 */
#ifndef KRPC_RDMA_CLNT_H
#define KRPC_RDMA_CLNT_H

#ifdef _KERNEL
#include <sys/types.h>
#else
#include <stddef.h>
#include <stdint.h>
#endif

#define KRPC_CLNT_ABI_VERSION	2

/* krpc_clnt_poll: the call ended (res filled); still waiting. */
#define KRPC_CLNT_DONE		0
#define KRPC_CLNT_PENDING	1
/* krpc_clnt_send: sent; no credit or send resource now (back-pressure); refused (res). */
#define KRPC_CLNT_SENT		0
#define KRPC_CLNT_AGAIN		2
#define KRPC_CLNT_REFUSED	3
/*
 * clnt_rdma's stock-NFS mode (see clnt_rdma_set_stock), through cl_control:
 * CLNT_CONTROL(cl, CLSET_RDMA_STOCK, &on) with info an int (nonzero: on);
 * CLNT_CONTROL(cl, CLGET_RDMA_STOCK, &on) stores 1 or 0 in the int info points at. Both
 * TRUE. Outside sys/rpc/clnt.h's CLSET_* / CLGET_* numbers (1-33 in 14.2) and svc_rdma's
 * SVCRDMA_* (0x52440001-0x52440003).
 */
#define CLSET_RDMA_STOCK	0x52440004
#define CLGET_RDMA_STOCK	0x52440005

/* What a call ended with: an enum clnt_stat value and its detail, flat. */
struct krpc_clnt_res {
	int32_t stat;		/* enum clnt_stat */
	int32_t err;		/* re_errno (FreeBSD numbers); re_why for RPC_AUTHERROR */
	uint32_t low;		/* re_vers.low (RPC_VERSMISMATCH, RPC_PROGVERSMISMATCH) */
	uint32_t high;		/* re_vers.high */
	uint32_t verf_flavor;	/* the reply verifier's flavor */
	uint32_t verf_len;	/* ... and length (its bytes are not kept) */
};

/* The client transport's counters (clnt_rdma_get_stats). */
struct krpc_clnt_stats {
	uint64_t stock_copies;	/* results whose DDP pages were copied into plain mbufs */
	uint64_t stock_bytes;	/* ... the page bytes copied */
};

struct krpc_clnt;	/* Rust: connection + Requester + bridge scratch */
struct mbuf;
struct __rpc_client;

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Rust (ofed-shim/krpc-face/src/clnt.rs) ---------------------------------------------- */

/* Send the call hdr + args (the chains are walked, not consumed: the caller keeps them
 * until the call ended). KRPC_CLNT_SENT; KRPC_CLNT_AGAIN: no credit or send resource now
 * (back-pressure: reap, retry, sleep); KRPC_CLNT_REFUSED: *res says how (RPC_CANTSEND &
 * co, re_errno in FreeBSD's numbers). */
int krpc_clnt_send(struct krpc_clnt *h, const struct mbuf *hdr, const struct mbuf *args,
    struct krpc_clnt_res *res);
/* Reap completions (every caller's replies are kept for it), re-arm the CQ notification,
 * and report call xid: KRPC_CLNT_DONE with *res (and *rep: the results past the reply
 * header, NULL when empty, the caller's to m_freem) or KRPC_CLNT_PENDING. */
int krpc_clnt_poll(struct krpc_clnt *h, uint32_t xid, struct mbuf **rep,
    struct krpc_clnt_res *res, uint32_t *handed);
/* Reap completions only (a caller waiting for credit). For both: *handed is how many calls
 * of other callers ended meanwhile (wake them). */
void krpc_clnt_reap(struct krpc_clnt *h, uint32_t *handed);
/* The caller gives up on xid (timeout, signal): its registrations are revoked before this
 * returns, its pages handed back; a late reply is dropped. */
void krpc_clnt_abandon(struct krpc_clnt *h, uint32_t xid);
/* Requester::close: disconnect, every pending call ends (ESHUTDOWN). */
void krpc_clnt_close(struct krpc_clnt *h);
/* Destroy the connection and the state (after krpc_clnt_close). */
void krpc_clnt_free(struct krpc_clnt *h);
/* Route the CQ completion upcall to f(arg). */
void krpc_clnt_set_upcall(struct krpc_clnt *h, void (*f)(void *), void *arg);
/* The stock-NFS mode on (on != 0) or off (see clnt_rdma_set_stock); whether it is on. */
void krpc_clnt_set_stock(struct krpc_clnt *h, int on);
int krpc_clnt_get_stock(struct krpc_clnt *h);
void krpc_clnt_get_stats(struct krpc_clnt *h, struct krpc_clnt_stats *out);

/* ---- C (krpc_rdma_clnt.c) ---------------------------------------------------------- */

/* A CLIENT over h (which it takes: cl_destroy frees it) for program prog, version vers.
 * NULL when out of memory (h is then still the caller's). */
struct __rpc_client *clnt_rdma_create(struct krpc_clnt *h, uint32_t prog, uint32_t vers);
/* The same, under the krpc_ prefix of the names Rust imports (KrpcClnt::into_client). */
struct __rpc_client *krpc_clnt_create(struct krpc_clnt *h, uint32_t prog, uint32_t vers);
/* CLIENTs of clnt_rdma alive now (created, not yet destroyed). */
u_int krpc_clnt_live(void);
/*
 * The stock-NFS mode of one CLIENT, off by default (also CLNT_CONTROL with CLSET_RDMA_STOCK
 * / CLGET_RDMA_STOCK). For a client that, as FreeBSD 14.2's NFS, only mtod()s the results
 * (nfs_commonsubs.c): they are handed back in ordinary mbufs and clusters only, the pages a
 * READ's data was RDMA-Written into copied into them once, no M_EXTPG mbuf and no marker
 * (counted: stock_copies / stock_bytes). Calls are sent as without it: a call without a
 * marker inline or as a Long Call.
 */
void clnt_rdma_set_stock(struct __rpc_client *cl, int on);
/* The CLIENT's counters (krpc_clnt_get_stats under its lock). */
void clnt_rdma_get_stats(struct __rpc_client *cl, struct krpc_clnt_stats *out);

#ifdef __cplusplus
}
#endif

_Static_assert(sizeof(struct krpc_clnt_res) == 24, "krpc_clnt_res size");
_Static_assert(sizeof(struct krpc_clnt_stats) == 16, "krpc_clnt_stats size");

#endif /* KRPC_RDMA_CLNT_H */
