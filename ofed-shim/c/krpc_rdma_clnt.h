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

#define KRPC_CLNT_ABI_VERSION	3

/* krpc_clnt_poll: the call ended (res filled); still waiting. */
#define KRPC_CLNT_DONE		0
#define KRPC_CLNT_PENDING	1
/* krpc_clnt_send: sent; no credit or send resource now (back-pressure); refused (res). */
#define KRPC_CLNT_SENT		0
#define KRPC_CLNT_AGAIN		2
#define KRPC_CLNT_REFUSED	3
/* krpc_clnt_link: the connection is up; an attempt is under way; none (lost, or the last
 * attempt failed). */
#define KRPC_CLNT_UP		0
#define KRPC_CLNT_CONNECTING	1
#define KRPC_CLNT_DOWN		2
/*
 * clnt_rdma's stock-NFS mode (see clnt_rdma_set_stock), through cl_control:
 * CLNT_CONTROL(cl, CLSET_RDMA_STOCK, &on) with info an int (nonzero: on);
 * CLNT_CONTROL(cl, CLGET_RDMA_STOCK, &on) stores 1 or 0 in the int info points at. Both
 * TRUE. Outside sys/rpc/clnt.h's CLSET_* / CLGET_* numbers (1-33 in 14.2) and svc_rdma's
 * SVCRDMA_* (0x52440001-0x52440003).
 */
#define CLSET_RDMA_STOCK	0x52440004
#define CLGET_RDMA_STOCK	0x52440005
/*
 * clnt_rdma's backchannel slots (RFC 8167; Macklem's xprt_rdma_connect(..., cbslots)):
 * CLNT_CONTROL(cl, CLSET_RDMA_CBSLOTS, &n) with n a uint32_t enables n reverse-direction
 * slots now (if connected) and on every later connection of a reconnecting CLIENT: at most
 * the connection's reserve (clnt_rdma_connect_cb / clnt_rdma_reconnect_create_cb's
 * cbslots, or the Requester's max_reverse_requests for clnt_rdma_create), FALSE beyond it;
 * e.g. the back channel's ca_maxrequests once CREATE_SESSION agreed it.
 * CLNT_CONTROL(cl, CLGET_RDMA_CBSLOTS, &n) stores the slots asked for.
 *
 * The backchannel SVCXPRT: CLNT_CONTROL(cl, CLSET_BACKCHANNEL, xprt) (sys/rpc/clnt.h's 29),
 * as the NFSv4.1 client does on clnt_vc (nfs_commonkrpc.c: svc_vc_create_backchannel, then
 * CLSET_BACKCHANNEL), with an xprt from svc_rdma_create_backchannel (any other is refused:
 * FALSE). The CLIENT takes a reference on it (SVC_ACQUIRE) and drops it in cl_destroy after
 * clearing its xp_p2 under xp_lock (clnt_vc_destroy's order). Reverse calls arriving on the
 * connection are then queued for it and the xprt activated (xprt_active), as clnt_vc's
 * soupcall hands a CALL to ct_backchannelxprt; its xp_recv hands them to svc.c's pool,
 * its xp_reply sends the reply on the CLIENT's connection (an inline RPC-over-RDMA reverse
 * reply: a reply larger than the inline size is answered SYSTEM_ERR instead). Without a
 * backchannel xprt a reverse call is answered SYSTEM_ERR by the transport at once.
 */
#define CLSET_RDMA_CBSLOTS	0x52440006
#define CLGET_RDMA_CBSLOTS	0x52440007

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
struct krpc_svc_call;
struct __rpc_svcxprt;
struct __rpc_svcpool;
struct mbuf;
struct __rpc_client;
struct sockaddr;
struct timeval;
struct vnet;

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
/* Route the CQ completion upcall to f(arg) (a dialed handle's later connections too). */
void krpc_clnt_set_upcall(struct krpc_clnt *h, void (*f)(void *), void *arg);
/*
 * A handle that makes its own connections, through rdma_cm to the len-byte struct sockaddr
 * at addr (copied) in vnet (NULL: the thread's); the first attempt starts here. Replies are
 * provisioned inline up to max_reply bytes (a reply chunk beyond the inline size). reconnect
 * nonzero: a lost connection is made again and the calls owed a reply are sent again with
 * their XIDs; calls made while no connection is up are held for the next one. 0 and *out,
 * or an errno (EINVAL, ENOMEM, the rdma_cm wrapper's).
 */
int krpc_clnt_dial(struct vnet *vnet, const struct sockaddr *addr, uint32_t len,
    uint32_t max_reply, int reconnect, struct krpc_clnt **out);
/*
 * A dialed handle's connection: reap, then, when it reconnects and is down, start the next
 * attempt if it is due at now_ms (a monotonic clock of the caller's). KRPC_CLNT_UP /
 * _CONNECTING / _DOWN; *wait_ms how long until the next attempt is due (0: none to wait
 * for), *failed the attempts failed since the last connection, *err the last failure's errno
 * (FreeBSD's ENOTCONN for a refused or unreachable attempt, or the wrapper's), *handed the
 * calls of others that ended (wake them). A handle made by clnt_rdma_create reports
 * KRPC_CLNT_UP until its connection is lost.
 */
int krpc_clnt_link(struct krpc_clnt *h, uint64_t now_ms, uint32_t *wait_ms, uint32_t *failed,
    int32_t *err, uint32_t *handed);
/* The stock-NFS mode on (on != 0) or off (see clnt_rdma_set_stock); whether it is on. */
void krpc_clnt_set_stock(struct krpc_clnt *h, int on);
int krpc_clnt_get_stock(struct krpc_clnt *h);
void krpc_clnt_get_stats(struct krpc_clnt *h, struct krpc_clnt_stats *out);
/* krpc_clnt_dial with cbslots reverse slots reserved and enabled on every connection (the
 * receive and send buffers grown by as many); cbslots 0: as krpc_clnt_dial. */
int krpc_clnt_dial_cb(struct vnet *vnet, const struct sockaddr *addr, uint32_t len,
    uint32_t max_reply, int reconnect, uint32_t cbslots, struct krpc_clnt **out);
/* The reverse slots to enable (CLSET_RDMA_CBSLOTS): 0 or an errno (EINVAL beyond the
 * reserve, ENOTCONN); the slots asked for. */
int krpc_clnt_set_cbslots(struct krpc_clnt *h, uint32_t n);
uint32_t krpc_clnt_get_cbslots(struct krpc_clnt *h);
/* A backchannel xprt registered (on != 0) or gone (its reverse calls not yet answered are
 * answered SYSTEM_ERR by the transport). */
void krpc_clnt_set_bc(struct krpc_clnt *h, int on);
/* Reverse calls queued for the backchannel xprt's xp_recv. */
uint32_t krpc_clnt_bc_pending(struct krpc_clnt *h);
/*
 * The backchannel xprt's xp_recv: reap (*handed: calls of others that ended: wake them),
 * then the next reverse call as krpc_svc_recv hands a call up (KRPC_SVC_CALL with *call,
 * cred / verf, *args; KRPC_SVC_NONE; KRPC_SVC_DIED once the connection is gone for good).
 * A reverse call whose RPC header cannot be handed up is answered here.
 */
int krpc_clnt_bc_recv(struct krpc_clnt *h, struct krpc_svc_call *call, void *cred, void *verf,
    struct mbuf **args, uint32_t *handed);
/* The backchannel xprt's xp_reply to reverse call xid: hdr + res as krpc_svc_reply
 * (KRPC_SVC_SENT, KRPC_SVC_AGAIN: nothing consumed, reap and retry; KRPC_SVC_FAILED). */
int krpc_clnt_bc_reply(struct krpc_clnt *h, uint32_t xid, struct mbuf *hdr, struct mbuf *res);
/* The backchannel's consumer will not answer reverse call xid: the transport answers
 * SYSTEM_ERR. KRPC_SVC_DROPPED, or KRPC_SVC_FAILED if no such call is waiting. */
int krpc_clnt_bc_drop(struct krpc_clnt *h, uint32_t xid);

/* ---- C (krpc_rdma_clnt.c) ---------------------------------------------------------- */

/* A CLIENT over h (which it takes: cl_destroy frees it) for program prog, version vers.
 * NULL when out of memory (h is then still the caller's). */
struct __rpc_client *clnt_rdma_create(struct krpc_clnt *h, uint32_t prog, uint32_t vers);
/* The same, under the krpc_ prefix of the names Rust imports (KrpcClnt::into_client). */
struct __rpc_client *krpc_clnt_create(struct krpc_clnt *h, uint32_t prog, uint32_t vers);
/*
 * A CLIENT over a handle that makes its own connections (krpc_clnt_dial, or a test's
 * software dialer), which it takes (freed on failure too); reconnect as the handle was made.
 * wait NULL: returns at once (calls wait for the connection); else returns once the
 * connection is up, or NULL with *errorp (ETIMEDOUT after *wait; without reconnection also
 * the failed attempt's errno: ENOTCONN when the server refused or could not be reached).
 */
struct __rpc_client *clnt_rdma_dialed(struct krpc_clnt *h, uint32_t prog, uint32_t vers,
    int reconnect, struct timeval *wait, int *errorp);
/*
 * A CLIENT connected to addr (AF_INET or AF_INET6; rdma_cm, in vnet or NULL: the thread's)
 * for prog/vers, replies inline up to recvsz bytes: returns once the connection is up, or
 * NULL with *errorp (EAFNOSUPPORT, ENOMEM, ETIMEDOUT after *wait, ENOTCONN when the server
 * refused or could not be reached). No reconnection: once lost, calls fail as on a
 * clnt_rdma_create CLIENT.
 */
struct __rpc_client *clnt_rdma_connect(struct vnet *vnet, const struct sockaddr *addr,
    uint32_t prog, uint32_t vers, size_t recvsz, struct timeval *wait, int *errorp);
/*
 * What clnt_reconnect_create is for TCP, over RPC-over-RDMA: a CLIENT that makes its
 * connection to addr itself (the first attempt starts here) and again after a loss, sending
 * the calls owed a reply again with their XIDs (see krpc_clnt_dial); calls wait for a
 * connection within their timeout (CLSET_RETRIES: at most that many failed attempts).
 * sendsz is not used (calls beyond the inline size go as Long Calls). NULL on failure.
 */
struct __rpc_client *clnt_rdma_reconnect_create(struct vnet *vnet,
    const struct sockaddr *addr, uint32_t prog, uint32_t vers, size_t sendsz, size_t recvsz);
/* clnt_rdma_connect / clnt_rdma_reconnect_create with cbslots reverse-direction slots
 * reserved on every connection and enabled once it is up (Macklem's cbslots). */
struct __rpc_client *clnt_rdma_connect_cb(struct vnet *vnet, const struct sockaddr *addr,
    uint32_t prog, uint32_t vers, size_t recvsz, uint32_t cbslots, struct timeval *wait,
    int *errorp);
struct __rpc_client *clnt_rdma_reconnect_create_cb(struct vnet *vnet,
    const struct sockaddr *addr, uint32_t prog, uint32_t vers, size_t sendsz, size_t recvsz,
    uint32_t cbslots);
/*
 * A backchannel SVCXPRT for CLSET_BACKCHANNEL on a clnt_rdma CLIENT (what
 * svc_vc_create_backchannel is for clnt_vc), registered with pool (unlike
 * svc_vc_create_backchannel, so that xprt_active reaches the pool's threads) and returned
 * with the caller's reference, as svc_rdma_create. Until CLSET_BACKCHANNEL its xp_recv hands
 * nothing up; after the CLIENT is destroyed its xp_stat says XPRT_DIED (svc.c unregisters
 * it). SVC_CONTROL(xprt, SVCRDMA_DROP_CALL, &xid) as on svc_rdma. NULL without memory.
 */
struct __rpc_svcxprt *svc_rdma_create_backchannel(struct __rpc_svcpool *pool);
/* The RPC call header of clnt_rdma (AUTH_NONE / AUTH_SYS), shared with clnt_rdma_bck. */
struct __auth;
struct mbuf *clnt_rdma_call_header(uint32_t xid, uint32_t prog, uint32_t vers, uint32_t proc,
    struct __auth *auth, int *errorp);
/* The length of the struct sockaddr at sa by its family (AF_INET, AF_INET6); 0 for any other
 * (what krpc_clnt_dial and krpc_listen_create are given). */
uint32_t krpc_sockaddr_len(const struct sockaddr *sa);
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
