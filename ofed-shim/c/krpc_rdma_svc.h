/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma: a kernel RPC server transport (SVCXPRT * with struct xp_ops, after
 * sys/rpc/svc_vc.c) over the Rust core's Responder.
 *
 * Division of work. The C side (krpc_rdma_svc.c, compiled against sys/rpc/svc.h, or
 * unchanged against ofed-testkit/emu/kpi_emu_svc.h) owns the SVCXPRT, its mutex, the struct rpc_msg
 * (filled from the flat krpc_svc_call on receive; the reply header encoded from it as
 * xdr_replymsg does) and the waiting. The Rust side (ofed-shim/krpc-face/src/svc.rs) owns the
 * connection and the Responder behind the opaque struct krpc_svc: it polls, parses the RPC
 * call header (peer input, checked), answers what it cannot hand up (RPC_MISMATCH,
 * AUTH_BADCRED, GARBAGE_ARGS, SYSTEM_ERR), drops a REPLY-direction message (no backchannel;
 * counted in reverse_replies), hands the arguments up as an mbuf chain built by
 * the bridge (a WRITE's data as M_EXTPG mbufs over the RDMA-Read pages; ordinary mbufs in the
 * stock-NFS mode, svc_rdma_set_stock), and sends replies (M_EXTPG pages of a READ reply go by
 * RDMA Write into the client's write chunk).
 *
 * svc_rdma_create takes a connection the Rust side accepted; svc_rdma_listen is the
 * rendezvous SVCXPRT over a listening rdma_cm id whose xp_recv accepts each connection
 * request and makes an svc_rdma transport of it in the same pool (svc_vc_rendezvous_recv's
 * part for a listening socket).
 *
 * Locking. Every krpc_svc_* call below is made with the transport's lock held, an sx(9):
 * they allocate M_NOWAIT, but the verbs under them may sleep (rdma_disconnect when a peer
 * breaks the protocol, ib_dereg_mr / ib_alloc_mr when a registration is reset). The CQ
 * completion upcall, which must not sleep, never takes it: under a second lock, a mutex
 * (also the idle callout's and the sleepers' interlock), it counts itself, calls
 * xprt_active(9) and wakeup(9); xp_recv goes inactive only if no upcall came since its poll
 * began. xp_recv and xp_reply (pool threads) poll the Responder.
 */
#ifndef KRPC_RDMA_SVC_H
#define KRPC_RDMA_SVC_H

#ifdef _KERNEL
#include <sys/types.h>
#else
#include <stddef.h>
#include <stdint.h>
#endif

#define KRPC_SVC_ABI_VERSION	5

/* krpc_svc_recv: a call (*call, *args); nothing queued; the connection is gone. */
#define KRPC_SVC_CALL		0
#define KRPC_SVC_NONE		1
#define KRPC_SVC_DIED		2
/* krpc_svc_reply: posted, or queued in order behind replies waiting for send resources
 * (the chains are the transport's now); no reply slot now (nothing consumed: reap, wait,
 * retry); failed (the chains were consumed). */
#define KRPC_SVC_SENT		0
#define KRPC_SVC_AGAIN		2
#define KRPC_SVC_FAILED		3
/* krpc_svc_drop: the call's context was given back; (KRPC_SVC_FAILED: no such call). */
#define KRPC_SVC_DROPPED	0
/*
 * svc_rdma's xp_control request: "the krpc will not answer the call whose XID *in (a
 * uint32_t) points at" (SVC_CONTROL(rqstp->rq_xprt, SVCRDMA_DROP_CALL, &rqstp->rq_xid)).
 * TRUE when the call's context was given back, FALSE otherwise; every other transport's
 * xp_control answers FALSE to a request it does not know, so a generic caller may issue it
 * whatever the transport. The value is outside sys/rpc/svc.h's SVCGET_* / SVCSET_* (1-4).
 */
#define SVCRDMA_DROP_CALL	0x52440001
/*
 * svc_rdma's stock-NFS mode (see svc_rdma_set_stock), through xp_control:
 * SVC_CONTROL(xprt, SVCRDMA_SET_STOCK, &on) with in an int (nonzero: on) sets it, TRUE;
 * SVC_CONTROL(xprt, SVCRDMA_GET_STOCK, &on) stores 1 or 0 in the int in points at, TRUE.
 * Outside svc.h's SVCGET_* / SVCSET_* (1-4) and SVCRDMA_DROP_CALL.
 */
#define SVCRDMA_SET_STOCK	0x52440002
#define SVCRDMA_GET_STOCK	0x52440003
/* SVC_CONTROL(xprt, SVCRDMA_SET_CBSLOTS, &n), n a uint32_t: svc_rdma_set_cbslots. */
#define SVCRDMA_SET_CBSLOTS	0x52440008
/* krpc_svc_stat: enum xprt_stat values (XPRT_DIED, XPRT_MOREREQS, XPRT_IDLE). */
#define KRPC_SVC_STAT_DIED	0
#define KRPC_SVC_STAT_MOREREQS	1
#define KRPC_SVC_STAT_IDLE	2
/* krpc_listen_accept: a new connection (*out); no request pending; the listener is dead. */
#define KRPC_LISTEN_NEW		0
#define KRPC_LISTEN_NONE	1
#define KRPC_LISTEN_DIED	2

/* A received call's header, flat (the fields of struct rpc_msg's call_body). */
struct krpc_svc_call {
	uint32_t xid;
	uint32_t rpcvers;
	uint32_t prog;
	uint32_t vers;
	uint32_t proc_;	/* cb_proc */
	uint32_t cred_flavor;
	uint32_t cred_len;	/* bytes copied to the cred buffer (<= MAX_AUTH_BYTES) */
	uint32_t verf_flavor;
	uint32_t verf_len;	/* bytes copied to the verf buffer (<= MAX_AUTH_BYTES) */
};

/* The transport's counters (krpc_svc_get_stats). */
struct krpc_svc_stats {
	uint64_t calls;		/* handed up by xp_recv */
	uint64_t answered;	/* refused by the transport with an RPC reply (malformed) */
	uint64_t replies;	/* given to the transport by xp_reply (posted or queued) */
	uint64_t reply_failed;	/* xp_reply calls that could not be sent */
	uint64_t held;		/* reply chains kept until their pages are released, now */
	uint64_t released;	/* reply chains freed after their pages were released */
	uint64_t dropped;	/* calls the krpc will not answer: contexts given back */
	uint64_t reverse_replies; /* REPLY-direction messages dropped (no backchannel):
				   * contexts given back, nothing sent */
	/* Stock-NFS mode (svc_rdma_set_stock). */
	uint64_t stock_arg_copies; /* calls whose DDP pages were copied into plain mbufs */
	uint64_t stock_arg_bytes;  /* ... the page bytes copied */
	uint64_t stock_marked;	/* replies without a DDP marker whose READ / READLINK data
				 * the NFS reply hook found and sent by RDMA Write into the
				 * call's write chunk */
	uint64_t stock_reply_copies; /* ... whose data was copied into pages first */
	uint64_t stock_reply_bytes;  /* ... the bytes copied */
	/* The Responder's counters (RFC 8166 paths taken by the replies). */
	uint64_t write_chunks;	/* write chunks filled by RDMA Write */
	uint64_t long_replies;	/* replies sent through the reply chunk (RDMA_NOMSG) */
};

/* The rendezvous transport's counters (svc_rdma_listen_stats). */
struct krpc_listen_stats {
	uint64_t accepted;	/* connection requests that became svc_rdma transports */
	uint64_t refused;	/* ... rejected (no memory for the state, the accept failed) */
};

struct krpc_svc;	/* Rust: connection + Responder + bridge scratch */
struct krpc_listen;	/* Rust: listening rdma_cm id + what each connection is made with */
struct sockaddr;
struct vnet;
struct mbuf;
struct __rpc_svcxprt;
struct __rpc_svcpool;
struct __rpc_client;
struct krpc_clnt_res;
struct rpc_msg;
struct timeval;
struct rpc_callextra;

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Rust (ofed-shim/krpc-face/src/svc.rs) ----------------------------------------------- */

/*
 * The next call: reap completions (re-arming the CQ notification when nothing is queued),
 * answer malformed calls, and hand up one call: *call, its credential and verifier bytes
 * copied to cred / verf (MAX_AUTH_BYTES each; NULL only if the length is 0), *args the
 * arguments past the RPC header (NULL when empty), the caller's to m_freem.
 */
int krpc_svc_recv(struct krpc_svc *h, struct krpc_svc_call *call, void *cred, void *verf,
    struct mbuf **args);
/*
 * Reply to call xid: hdr (the RPC reply header) followed by res (the results, or NULL).
 * KRPC_SVC_SENT and KRPC_SVC_FAILED consume both chains (they are freed once the transport
 * holds no reference on their pages: after the reply's Send completed); KRPC_SVC_AGAIN
 * consumes nothing.
 */
int krpc_svc_reply(struct krpc_svc *h, uint32_t xid, struct mbuf *hdr, struct mbuf *res);
/* Reap completions, re-arm, free the reply chains whose pages were released. */
void krpc_svc_reap(struct krpc_svc *h);
/*
 * The krpc will not answer call xid (see svc_rdma_drop): its Responder context and credit
 * come back. KRPC_SVC_DROPPED, or KRPC_SVC_FAILED if no call xid is waiting for a reply.
 */
int krpc_svc_drop(struct krpc_svc *h, uint32_t xid);
/* KRPC_SVC_STAT_*. */
int krpc_svc_stat(struct krpc_svc *h);
/* The stock-NFS mode on (on != 0) or off (see svc_rdma_set_stock); whether it is on. */
void krpc_svc_set_stock(struct krpc_svc *h, int on);
int krpc_svc_get_stock(struct krpc_svc *h);
void krpc_svc_get_stats(struct krpc_svc *h, struct krpc_svc_stats *out);
/* Destroy the connection and the state: the Responder, then the held reply chains. */
void krpc_svc_free(struct krpc_svc *h);
/* Enable n reverse-direction slots (RFC 8167) on the connection (at most its Responder's
 * max_reverse_requests): 0 or EINVAL. */
int krpc_svc_set_cbslots(struct krpc_svc *h, uint32_t n);
/*
 * clnt_rdma_bck's send: the call hdr + args (walked, not consumed) as an inline reverse
 * call. KRPC_CLNT_SENT (its XID is now waited for); KRPC_CLNT_AGAIN (every reverse slot or
 * the client's grant in use, or no send buffer: reap, wait, retry); KRPC_CLNT_REFUSED with
 * *res: RPC_CANTSEND / EMSGSIZE for a call beyond the inline size (reverse calls carry no
 * chunks), RPC_CANTSEND / EINVAL without reverse slots, RPC_CANTRECV / ENOTCONN on a lost
 * connection (as clnt_bck_call on a connection the client closed).
 */
int krpc_svc_bck_send(struct krpc_svc *h, const struct mbuf *hdr, const struct mbuf *args,
    struct krpc_clnt_res *res);
/*
 * The callback xid's end: KRPC_CLNT_DONE with *res (RPC_CANTRECV / ENOTCONN when the
 * connection went with it outstanding) and *rep (the results past the reply header, NULL
 * when empty), or KRPC_CLNT_PENDING (reaped, the CQ notification re-armed).
 */
int krpc_svc_bck_poll(struct krpc_svc *h, uint32_t xid, struct mbuf **rep,
    struct krpc_clnt_res *res);
/* The caller gives up on callback xid: a late reply is dropped (its reverse slot stays taken
 * until the reply or the loss, as the core frees it). */
void krpc_svc_bck_abandon(struct krpc_svc *h, uint32_t xid);
/* Callbacks whose end arrived since the last call (wake their callers). */
uint32_t krpc_svc_bck_handed(struct krpc_svc *h);
/* Route the CQ completion upcall to f(arg) (f NULL: none). */
void krpc_svc_set_upcall(struct krpc_svc *h, void (*f)(void *), void *arg);
/* The connection's local and remote addresses (rdma_cm's route.addr) into *local and
 * *remote (struct sockaddr_storage). 0, or KRPC_SVC_FAILED (both zeroed: no cm id). */
struct sockaddr_storage;
int krpc_svc_addrs(struct krpc_svc *h, struct sockaddr_storage *local,
    struct sockaddr_storage *remote);

/*
 * Listen on the len-byte struct sockaddr at addr (rdma_cm, in vnet or NULL: the thread's):
 * 0 and *out, or an errno (EINVAL, ENOMEM, rdma_bind_addr's / rdma_listen's).
 */
int krpc_listen_create(struct vnet *vnet, const struct sockaddr *addr, uint32_t len,
    struct krpc_listen **out);
/*
 * Take connection requests until one is accepted (its Responder made, receives posted, the
 * accept sent with our RFC 8797 private data): KRPC_LISTEN_NEW and *out, the new
 * connection's state for svc_rdma_create; KRPC_LISTEN_NONE when none is pending (requests
 * that could not be served were rejected and counted); KRPC_LISTEN_DIED and *err once the
 * listener is dead (its device went away).
 */
int krpc_listen_accept(struct krpc_listen *l, struct krpc_svc **out, int32_t *err);
/* Call f(arg) (rdma_cm's handler context; f NULL: none) when a request is queued or the
 * listener dies; returns once no call of the old upcall is running. */
void krpc_listen_set_upcall(struct krpc_listen *l, void (*f)(void *), void *arg);
void krpc_listen_get_stats(struct krpc_listen *l, struct krpc_listen_stats *out);
/* Destroy the listener (pending requests rejected). */
void krpc_listen_free(struct krpc_listen *l);

/* ---- C (krpc_rdma_svc.c) ------------------------------------------------------------ */

/*
 * A rendezvous SVCXPRT listening on addr (AF_INET or AF_INET6) in vnet (NULL: the
 * thread's), registered with pool: each connection request is accepted by a pool thread
 * (xp_recv) and becomes an svc_rdma transport registered with the same pool, so the
 * programs registered with the pool (svc_reg) are served on it. As svc_vc_create for a
 * listening socket, it returns with the caller's reference (SVC_RELEASE it once the
 * programs are registered); svc.c unregisters it when its xp_stat says XPRT_DIED (the
 * listener's device went away), and the pool's destruction, or xprt_unregister, ends it.
 * NULL and *errorp (EAFNOSUPPORT, krpc_listen_create's) on failure.
 */
struct __rpc_svcxprt *svc_rdma_listen(struct __rpc_svcpool *pool, struct vnet *vnet,
    const struct sockaddr *addr, int *errorp);
/* The same over a listener the Rust side made (krpc_listen_*: a test's software one). */
struct __rpc_svcxprt *svc_rdma_listen_create(struct __rpc_svcpool *pool,
    struct krpc_listen *l);
/* A rendezvous transport's counters. */
void svc_rdma_listen_stats(struct __rpc_svcxprt *xprt, struct krpc_listen_stats *out);

/*
 * An SVCXPRT over h (which it takes: xp_destroy frees it), registered with pool
 * (xprt_register) and activated once. NULL when out of memory (h is then still the
 * caller's). As svc_vc_create, it returns holding two references: the registration's
 * (dropped when svc.c unregisters a transport that died, or by svcpool_destroy) and the
 * caller's, which the caller drops with SVC_RELEASE once it has registered its programs
 * (svc_reg), as nfsrvd_addsock does after svc_vc_create (nfs_nfsdkrpc.c:563). Without that
 * SVC_RELEASE the transport is never destroyed.
 */
struct __rpc_svcxprt *svc_rdma_create(struct __rpc_svcpool *pool, struct krpc_svc *h);
/* The same, under the krpc_ prefix of the names Rust imports (KrpcSvc::into_xprt). */
struct __rpc_svcxprt *krpc_svc_create(struct __rpc_svcpool *pool, struct krpc_svc *h);
/*
 * The caller will not answer the call xid it received on xprt: give its context (and the
 * credit it holds) back. Returns nonzero (TRUE) if the call was waiting for its reply.
 * Also reachable generically as SVC_CONTROL(xprt, SVCRDMA_DROP_CALL, &xid).
 *
 * Why a caller must call it. FreeBSD 14.2's sys/rpc/svc.c has no per-request callback into
 * the transport when a request ends without a reply: svc_freereq() calls the pool's
 * sp_done (the NFS server's own hook), SVCAUTH_RELEASE, SVC_RELEASE(rq_xprt) (the
 * transport's reference count, the same for every request, answered or not) and
 * m_freem(rq_args); struct xp_ops has no "request freed" entry. The requests 14.2 frees
 * unanswered are: svc_getreq()'s replay-cache lookup other than RS_NEW / RS_DONE (a
 * retransmission of a request still in progress: m_freem(args); goto call_done ->
 * svc_freereq), _authenticate() returning RPCSEC_GSS_NODISPATCH (RPCSEC_GSS context
 * establishment, no svcerr_auth), svc_sendreply_common() failing SVCAUTH_WRAP before
 * SVC_REPLY, svc_sendreply() failing to encode the results, and a dispatch routine that
 * svc_freereq()s without replying (the NFS server's nfssvc_program() for a duplicate
 * request cache hit on a request in progress, RC_DROPIT). On any of these paths the
 * caller (svc.c, or the dispatch routine) must call svc_rdma_drop(rqstp->rq_xprt, xid) (or
 * the SVC_CONTROL above) before svc_freereq(); msg.rm_xid in svc_getreq, rqstp->rq_xid
 * after it. Without it the context stays held until the connection goes, and the client,
 * which counts the call as outstanding, has one credit less until then.
 */
int svc_rdma_drop(struct __rpc_svcxprt *xprt, uint32_t xid);
/* The transport's counters (krpc_svc_get_stats under the transport's mutex). */
void svc_rdma_get_stats(struct __rpc_svcxprt *xprt, struct krpc_svc_stats *out);
/*
 * The stock-NFS mode of one transport, off by default (also SVC_CONTROL with
 * SVCRDMA_SET_STOCK / SVCRDMA_GET_STOCK). For a server that, as FreeBSD 14.2's NFS, only
 * mtod()s what it receives (nfs_commonsubs.c, nfs_nfsdport.c) and puts no DDP marker in its
 * replies (nfs_nfsdserv.c's READ):
 *   - the arguments are handed up in ordinary mbufs and clusters only: the pages a WRITE's
 *     data was RDMA-Read into (or a Long Call's) are copied into them once, no M_EXTPG mbuf
 *     and no marker (stock_arg_copies / stock_arg_bytes);
 *   - a reply without a marker to a call that carried a (non-empty) write chunk is given to
 *     the NFS reply hook (nfs-proto's locate_reply_item: NFSv3 READ and READLINK, from the
 *     call's program, version and procedure kept per call): the data it finds goes by RDMA
 *     Write into the write chunk as if a marker stood in front of it (stock_marked; data not
 *     already in pages is copied into pages first: stock_reply_copies / stock_reply_bytes).
 *     A reply the hook finds nothing in, or whose data exceeds the write chunk, goes as
 *     without the mode (inline, or Long Reply by the reply chunk).
 * Replies that carry a marker are sent as they are either way.
 */
void svc_rdma_set_stock(struct __rpc_svcxprt *xprt, int on);
/*
 * The idle timeout: a transport with no call in progress that received and sent nothing for
 * this many seconds is closed (marked dead: svc.c unregisters it, its xp_destroy disconnects),
 * what svc_vc's xp_idletimeout does for a socket. svc_rdma_idle_timeout (default 360, as
 * svc_vc; 0: none) is what new transports get; svc_rdma_set_idle_timeout changes one
 * transport's (0: none). svc_rdma_idle_closes counts the transports it closed.
 */
extern int svc_rdma_idle_timeout;
void svc_rdma_set_idle_timeout(struct __rpc_svcxprt *xprt, int secs);
u_int svc_rdma_idle_closes(void);
/*
 * The reverse-direction slots of one transport (also SVC_CONTROL with SVCRDMA_SET_CBSLOTS):
 * how many callbacks may be outstanding at once on its connection (NFSv4.1: the back
 * channel's ca_maxrequests), at most the Responder's max_reverse_requests (a connection made
 * without that reserve has none: EINVAL). 0 or EINVAL.
 */
int svc_rdma_set_cbslots(struct __rpc_svcxprt *xprt, uint32_t n);
/*
 * clnt_bck_create for svc_rdma: a CLIENT whose calls go to the client at the other end of
 * xprt's connection as RPC-over-RDMA reverse calls (RFC 8167), prog/vers, AUTH_NONE (set
 * cl_auth for AUTH_SYS). CLNT_CALL_MBUF sends the call inline (RPC_CANTSEND / EMSGSIZE when
 * it is larger than the inline size) and sleeps until its reply (matched by XID), its
 * timeout (RPC_TIMEDOUT), a signal with CLSET_INTERRUPTIBLE (RPC_INTR) or the loss of the
 * connection (RPC_CANTRECV), as clnt_bck_call. The CLIENT holds a reference on xprt
 * (SVC_ACQUIRE, dropped by cl_destroy); the slots must be enabled first
 * (svc_rdma_set_cbslots). NULL if xprt is not an svc_rdma transport or without memory.
 */
struct __rpc_client *clnt_rdma_bck_create(struct __rpc_svcxprt *xprt, uint32_t prog,
    uint32_t vers);
/* clnt_bck_call's shape (nfs_commonkrpc.c calls it with the session's xprt): CLNT_CALL_MBUF
 * on cl; RPC_CANTSEND / EINVAL when xprt is not the one cl was made on. */
int clnt_rdma_bck_call(struct __rpc_client *cl, struct rpc_callextra *ext, uint32_t proc,
    struct mbuf *args, struct mbuf **resultsp, struct timeval utimeout,
    struct __rpc_svcxprt *xprt);
/* The RPC reply header of svc_rdma's xp_reply (xdr_replymsg's bytes), shared with the
 * client's backchannel xprt. NULL without memory or for a verifier beyond MAX_AUTH_BYTES. */
struct mbuf *svc_rdma_reply_header(struct rpc_msg *msg);
/* SVCXPRTs of svc_rdma alive now (created, not yet destroyed). */
u_int krpc_svc_live(void);
/*
 * What keeps the module busy (MOD_UNLOAD refuses with EBUSY while nonzero): CLIENTs of
 * clnt_rdma and SVCXPRTs of svc_rdma alive (their ops tables are the module's) and the
 * bridge's M_EXTPG mbufs not yet freed (their ext_free routine is the module's). The sum;
 * each count in *clients / *xprts / *extpg when not NULL. In krpc_rdma_mbuf.c.
 */
uint64_t krpc_rdma_busy(uint64_t *clients, uint64_t *xprts, uint64_t *extpg);

#ifdef __cplusplus
}
#endif

_Static_assert(sizeof(struct krpc_svc_call) == 36, "krpc_svc_call size");
_Static_assert(sizeof(struct krpc_listen_stats) == 16, "krpc_listen_stats size");
_Static_assert(sizeof(struct krpc_svc_stats) == 120, "krpc_svc_stats size");

#endif /* KRPC_RDMA_SVC_H */
