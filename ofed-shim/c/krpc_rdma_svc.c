/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma: svc_rdma, a kernel RPC server transport (SVCXPRT *, struct xp_ops) over the
 * Rust core's Responder (see krpc_rdma_svc.h for the division of work and the locking).
 * Modelled on sys/rpc/svc_vc.c's per-connection transport: xp_recv hands the krpc one call
 * (struct rpc_msg + the arguments as an mbuf chain, *addrp NULL) and marks the transport
 * inactive (xprt_inactive_self) when nothing is queued; xp_stat says XPRT_DIED /
 * XPRT_MOREREQS / XPRT_IDLE; xp_reply sends the reply header (what xdr_replymsg encodes)
 * followed by the results chain and consumes it; xp_destroy frees everything. As
 * svc_vc_create_conn: xp_lock is sx_init'ed (and sx_destroy'ed by xp_destroy), xp_rtaddr /
 * xp_ltaddr are the connection's addresses, xp_sockref a nonzero value unique per
 * connection (the NFS reply cache's). A REPLY-direction message is dropped, not answered
 * (no backchannel: xp_p2 NULL; see svc.rs). svc_rdma_live counts the SVCXPRTs for
 * krpc_rdma_busy() (MOD_UNLOAD).
 *
 * Limits of this piece: per connection only (the connection is accepted by the Rust side
 * before svc_rdma_create; no rendezvous transport over a listener), no xp_ack (NULL, as
 * svc_dg: SVC_ACK is FALSE; the core does not report Send completions per reply), and
 * xp_idletimeout stays 0 (svc_checkidle would soshutdown a NULL xp_socket): the idle timeout
 * is svc_rdma's own (svc_rdma_idle, a callout). A call the krpc drops without replying keeps its Responder context (and
 * credit) until the connection goes unless the caller says so with svc_rdma_drop() (or
 * SVC_CONTROL(xprt, SVCRDMA_DROP_CALL, &xid)): struct xp_ops has no "request freed" hook
 * (see krpc_rdma_svc.h for the svc.c paths that need the call).
 *
 * The host tests compile this file unchanged over the emulated svc.c pieces
 * (../ofed-testkit/emu/kpi_emu_svc.h), reached through the FreeBSD header names of ../ofed-testkit/emu/include.
 */
#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/callout.h>
#include <sys/lock.h>
#include <sys/malloc.h>
#include <sys/mbuf.h>
#include <sys/mutex.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/sx.h>
#include <sys/endian.h>
#include <machine/atomic.h>
#include <rpc/rpc.h>

#include "krpc_rdma_clnt.h"
#include "krpc_rdma_svc.h"

static MALLOC_DEFINE(M_KRPC_SVC, "krpc_rdma_svc", "krpc-rdma RPC server transport");

/* What svc_vc.c's struct cf_conn is for a socket. */
struct svc_rdma {
	/*
	 * The Rust state (every krpc_svc_* call), sr_seq. An sx: what the core does under it may
	 * sleep in the verbs (rdma_disconnect when a peer breaks the protocol, ib_dereg_mr /
	 * ib_alloc_mr when a registration is reset, a release polling for its LOCAL_INV).
	 */
	struct sx	sr_lock;
	/*
	 * The completion upcall's (it may not sleep, so it never takes sr_lock), the sleepers'
	 * interlock, the idle callout's: sr_kick, sr_died and the idle fields.
	 */
	struct mtx	sr_wlock;
	uint64_t	sr_kick;	/* upcalls so far */
	struct krpc_svc	*sr_h;		/* Rust: connection + Responder */
	SVCXPRT		*sr_xprt;
	uint32_t	sr_seq;		/* replies posted (xp_reply's *seq) */
	int		sr_died;
	/* The idle timeout (svc_rdma_idle): under sr_wlock, the callout's mutex. */
	struct callout	sr_idle;
	time_t		sr_lastactive;	/* time_uptime of the last call handed up or reply */
	int		sr_idletimeout;	/* seconds; 0: none */
	u_int		sr_inflight;	/* calls handed up and not yet answered or dropped */
};

static bool_t svc_rdma_recv(SVCXPRT *, struct rpc_msg *, struct sockaddr **,
    struct mbuf **);
static enum xprt_stat svc_rdma_stat(SVCXPRT *);
static bool_t svc_rdma_reply(SVCXPRT *, struct rpc_msg *, struct sockaddr *, struct mbuf *,
    uint32_t *);
static void svc_rdma_destroy(SVCXPRT *);
static bool_t svc_rdma_control(SVCXPRT *, const u_int, void *);

static const struct xp_ops svc_rdma_ops = {
	.xp_recv =	svc_rdma_recv,
	.xp_stat =	svc_rdma_stat,
	.xp_ack =	NULL,
	.xp_reply =	svc_rdma_reply,
	.xp_destroy =	svc_rdma_destroy,
	.xp_control =	svc_rdma_control,
};

/* SVCXPRTs alive (created, not yet destroyed): krpc_rdma_busy(), MOD_UNLOAD. */
static u_int svc_rdma_live;

u_int
krpc_svc_live(void)
{
	return (atomic_load_int(&svc_rdma_live));
}

/*
 * xp_sockref of the next connection. The NFS server's reply cache tells connections apart
 * by it (nfs_nfsdcache.c:633-639 matches an in-progress entry of the same connection,
 * nfsrc_trimcache(xp_sockref, ...) at nfs_nfsdkrpc.c:461/516 trims per connection, and 0
 * means "no connection" there, nfs_nfsdcache.c:853). nfsrvd_addsock gives the sockets it
 * creates ++sockref from 1 (nfs_nfsdkrpc.c:550); these have the top bit set, so they never
 * meet those.
 */
static uint64_t svc_rdma_sockref;

/*
 * The idle timeout of new transports, in seconds (0: none): svc_vc's (svc_vc.c:318,
 * xp_idletimeout = 6 * 60). svc.c's own idle check cannot serve a transport without a socket:
 * svc_checkidle ends an idle one with soshutdown(xp_socket) (svc.c:1105), so xp_idletimeout
 * stays 0 here and svc_rdma keeps the timer itself (svc_rdma_idle). FreeBSD: the loader
 * tunable krpc_rdma.svc_idle_timeout (krpc_rdma_mod.c).
 */
int svc_rdma_idle_timeout = 6 * 60;
/* Transports the idle timeout closed (svc_rdma_idle_closes). */
static u_int svc_rdma_idle_closed;

/*
 * The CQ completion upcall: never sleeps, never polls. Under sr_wlock it counts itself (an
 * xp_recv whose poll began before it does not go inactive), makes the transport active for
 * the pool's threads and wakes an xp_reply waiting for a send resource.
 */
static void
svc_rdma_upcall(void *arg)
{
	struct svc_rdma *sr = arg;

	mtx_lock(&sr->sr_wlock);
	sr->sr_kick++;
	xprt_active(sr->sr_xprt);
	/* Not sr: its first member is sr_lock, and an sx sleeps on its own address. */
	wakeup(&sr->sr_kick);
	mtx_unlock(&sr->sr_wlock);
}

/* (Re)start the idle check, every sixth of the timeout (at least a second). sr_wlock held. */
static void svc_rdma_idle(void *);

static void
svc_rdma_idle_arm(struct svc_rdma *sr)
{
	if (sr->sr_idletimeout > 0 && !sr->sr_died)
		callout_reset(&sr->sr_idle, hz * MAX(1, sr->sr_idletimeout / 6), svc_rdma_idle,
		    sr);
	else
		callout_stop(&sr->sr_idle);
}

/*
 * The idle check (the callout, sr_wlock held; never sleeps): a transport with no call in
 * progress and nothing received or sent for sr_idletimeout seconds is a dead or silent peer's,
 * holding its QP, receive buffers and credits. It is marked dead and activated: a pool thread
 * comes, xp_recv / xp_stat say XPRT_DIED, svc_getreq unregisters it, and the last
 * SVC_RELEASE's xp_destroy closes the connection (krpc_svc_free), outside any lock. Where
 * svc_checkidle would close a socket while a request is in progress, this waits for it.
 */
static void
svc_rdma_idle(void *arg)
{
	struct svc_rdma *sr = arg;

	if (sr->sr_died)
		return;
	if (sr->sr_inflight == 0 && time_uptime - sr->sr_lastactive >= sr->sr_idletimeout) {
		sr->sr_died = 1;
		atomic_add_int(&svc_rdma_idle_closed, 1);
		xprt_active(sr->sr_xprt);
		return;
	}
	svc_rdma_idle_arm(sr);
}

u_int
svc_rdma_idle_closes(void)
{
	return (atomic_load_int(&svc_rdma_idle_closed));
}

void
svc_rdma_set_idle_timeout(SVCXPRT *xprt, int secs)
{
	struct svc_rdma *sr = xprt->xp_p1;

	mtx_lock(&sr->sr_wlock);
	sr->sr_idletimeout = MAX(secs, 0);
	sr->sr_lastactive = time_uptime;
	svc_rdma_idle_arm(sr);
	mtx_unlock(&sr->sr_wlock);
}

struct __rpc_svcxprt *
svc_rdma_create(struct __rpc_svcpool *pool, struct krpc_svc *h)
{
	SVCXPRT *xprt;
	struct svc_rdma *sr;

	sr = malloc(sizeof(*sr), M_KRPC_SVC, M_WAITOK | M_ZERO);
	if (sr == NULL)
		return (NULL);
	xprt = svc_xprt_alloc();
	if (xprt == NULL) {
		free(sr, M_KRPC_SVC);
		return (NULL);
	}
	sx_init(&sr->sr_lock, "krpc_rdma_svc");
	mtx_init(&sr->sr_wlock, "krpc_rdma_svc wake", NULL, MTX_DEF);
	callout_init_mtx(&sr->sr_idle, &sr->sr_wlock, 0);
	sr->sr_h = h;
	sr->sr_xprt = xprt;
	sr->sr_idletimeout = MAX(svc_rdma_idle_timeout, 0);
	sr->sr_lastactive = time_uptime;
	/* As every svc_vc create (svc_vc.c:231, 307, 368): clnt_bck.c:320 takes it to send on
	 * the transport. Destroyed in svc_rdma_destroy. */
	sx_init(&xprt->xp_lock, "xprt->xp_lock");
	xprt->xp_pool = pool;
	xprt->xp_p1 = sr;
	/* No backchannel CLIENT (clnt_bck) on this transport: a REPLY is dropped (svc.rs). */
	xprt->xp_p2 = NULL;
	xprt->xp_netid = NULL;
	xprt->xp_ops = &svc_rdma_ops;
	/*
	 * The connection's addresses (rdma_cm's route.addr), as svc_vc_create_conn fills
	 * xp_rtaddr from the peer and xp_ltaddr from the socket (svc_vc.c:320, 328): export
	 * checks and svc.c's replies (svc.c:778) read them. Zero if the id has none.
	 */
	krpc_svc_addrs(h, &xprt->xp_ltaddr, &xprt->xp_rtaddr);
	xprt->xp_sockref = (atomic_fetchadd_64(&svc_rdma_sockref, 1) + 1) | (1ULL << 63);
	xprt_register(xprt);
	krpc_svc_set_upcall(h, svc_rdma_upcall, sr);
	/* Calls that arrived before the upcall was set: the first xp_recv polls for them. */
	xprt_active(xprt);
	mtx_lock(&sr->sr_wlock);
	svc_rdma_idle_arm(sr);
	mtx_unlock(&sr->sr_wlock);
	atomic_add_int(&svc_rdma_live, 1);
	return (xprt);
}

struct __rpc_svcxprt *
krpc_svc_create(struct __rpc_svcpool *pool, struct krpc_svc *h)
{
	return (svc_rdma_create(pool, h));
}

static bool_t
svc_rdma_recv(SVCXPRT *xprt, struct rpc_msg *msg, struct sockaddr **addrp,
    struct mbuf **mp)
{
	struct svc_rdma *sr = xprt->xp_p1;
	struct krpc_svc_call c;
	struct mbuf *args = NULL;
	uint64_t kick;
	int rc, died;

	*addrp = NULL;
	*mp = NULL;
	memset(&c, 0, sizeof(c));
	sx_xlock(&sr->sr_lock);
	mtx_lock(&sr->sr_wlock);
	kick = sr->sr_kick;
	died = sr->sr_died;
	mtx_unlock(&sr->sr_wlock);
	/* A transport the idle timeout ended hands nothing up (xp_stat says XPRT_DIED). */
	rc = died ? KRPC_SVC_DIED : krpc_svc_recv(sr->sr_h, &c,
	    msg->rm_call.cb_cred.oa_base, msg->rm_call.cb_verf.oa_base, &args);
	if (rc != KRPC_SVC_CALL) {
		/*
		 * As svc_vc_recv with nothing readable: inactive, unless an upcall came since the
		 * poll began (it re-armed nothing we saw): then the transport stays active and a
		 * pool thread polls again.
		 */
		mtx_lock(&sr->sr_wlock);
		if (rc == KRPC_SVC_DIED)
			sr->sr_died = 1;
		if (sr->sr_kick == kick || sr->sr_died)
			xprt_inactive_self(xprt);
		mtx_unlock(&sr->sr_wlock);
		sx_xunlock(&sr->sr_lock);
		return (FALSE);
	}
	mtx_lock(&sr->sr_wlock);
	sr->sr_lastactive = time_uptime;
	sr->sr_inflight++;
	mtx_unlock(&sr->sr_wlock);
	sx_xunlock(&sr->sr_lock);
	/*
	 * Never a NULL chain, even for a call without arguments (NFS's NULL): svc_vc always
	 * hands one up, and svc_getreq's consumers mtod() it (nfs_nfsdkrpc.c).
	 */
	if (args == NULL)
		args = m_get(M_WAITOK, MT_DATA);
	msg->rm_xid = c.xid;
	msg->rm_direction = CALL;
	msg->rm_call.cb_rpcvers = c.rpcvers;
	msg->rm_call.cb_prog = c.prog;
	msg->rm_call.cb_vers = c.vers;
	msg->rm_call.cb_proc = c.proc_;
	msg->rm_call.cb_cred.oa_flavor = (enum_t)c.cred_flavor;
	msg->rm_call.cb_cred.oa_length = c.cred_len;
	msg->rm_call.cb_verf.oa_flavor = (enum_t)c.verf_flavor;
	msg->rm_call.cb_verf.oa_length = c.verf_len;
	*mp = args;
	return (TRUE);
}

static enum xprt_stat
svc_rdma_stat(SVCXPRT *xprt)
{
	struct svc_rdma *sr = xprt->xp_p1;
	int st, died;

	sx_xlock(&sr->sr_lock);
	mtx_lock(&sr->sr_wlock);
	died = sr->sr_died;
	mtx_unlock(&sr->sr_wlock);
	st = died ? KRPC_SVC_STAT_DIED : krpc_svc_stat(sr->sr_h);
	if (st == KRPC_SVC_STAT_DIED && !died) {
		mtx_lock(&sr->sr_wlock);
		sr->sr_died = 1;
		mtx_unlock(&sr->sr_wlock);
	}
	sx_xunlock(&sr->sr_lock);
	switch (st) {
	case KRPC_SVC_STAT_DIED:
		return (XPRT_DIED);
	case KRPC_SVC_STAT_MOREREQS:
		return (XPRT_MOREREQS);
	default:
		return (XPRT_IDLE);
	}
}

/* Big-endian word at p (unaligned). */
static char *
svc_rdma_put32(char *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, sizeof(v));
	return (p + sizeof(v));
}

/*
 * The reply header, as xdr_replymsg encodes struct rpc_msg (RFC 5531 reply_body): xid,
 * REPLY, then MSG_ACCEPTED (verifier, accept_stat, PROG_MISMATCH's low/high) or MSG_DENIED
 * (RPC_MISMATCH's low/high, AUTH_ERROR's auth_stat). One mbuf or cluster; may sleep.
 */
static struct mbuf *
svc_rdma_header(struct rpc_msg *msg)
{
	const struct opaque_auth *verf = &msg->acpted_rply.ar_verf;
	struct mbuf *m;
	char *p;
	u_int pad;

	if (msg->rm_reply.rp_stat == MSG_ACCEPTED && verf->oa_length > MAX_AUTH_BYTES)
		return (NULL);
	m = m_getcl(M_WAITOK, MT_DATA, 0);
	if (m == NULL)
		return (NULL);
	p = mtod(m, char *);
	p = svc_rdma_put32(p, msg->rm_xid);
	p = svc_rdma_put32(p, REPLY);
	p = svc_rdma_put32(p, (uint32_t)msg->rm_reply.rp_stat);
	if (msg->rm_reply.rp_stat == MSG_ACCEPTED) {
		p = svc_rdma_put32(p, (uint32_t)verf->oa_flavor);
		p = svc_rdma_put32(p, verf->oa_length);
		if (verf->oa_length > 0) {
			memcpy(p, verf->oa_base, verf->oa_length);
			pad = roundup2(verf->oa_length, 4) - verf->oa_length;
			if (pad > 0)
				memset(p + verf->oa_length, 0, pad);
			p += verf->oa_length + pad;
		}
		p = svc_rdma_put32(p, (uint32_t)msg->acpted_rply.ar_stat);
		if (msg->acpted_rply.ar_stat == PROG_MISMATCH) {
			p = svc_rdma_put32(p, msg->acpted_rply.ar_vers.low);
			p = svc_rdma_put32(p, msg->acpted_rply.ar_vers.high);
		}
	} else {
		p = svc_rdma_put32(p, (uint32_t)msg->rjcted_rply.rj_stat);
		if (msg->rjcted_rply.rj_stat == RPC_MISMATCH) {
			p = svc_rdma_put32(p, msg->rjcted_rply.rj_vers.low);
			p = svc_rdma_put32(p, msg->rjcted_rply.rj_vers.high);
		} else {
			p = svc_rdma_put32(p, (uint32_t)msg->rjcted_rply.rj_why);
		}
	}
	m->m_len = (int)(p - mtod(m, char *));
	return (m);
}

/*
 * As svc_vc_reply: the header, then (MSG_ACCEPTED / SUCCESS only) the results m; m is
 * consumed in every case. A Responder without a send resource now: reap, sleep until the
 * upcall (or a tick) and retry; the pool thread may sleep here.
 */
static bool_t
svc_rdma_reply(SVCXPRT *xprt, struct rpc_msg *msg, struct sockaddr *addr, struct mbuf *m,
    uint32_t *seq)
{
	struct svc_rdma *sr = xprt->xp_p1;
	struct mbuf *hdr;
	uint64_t kick;
	int rc;

	if (!(msg->rm_reply.rp_stat == MSG_ACCEPTED &&
	    msg->acpted_rply.ar_stat == SUCCESS) && m != NULL) {
		m_freem(m);
		m = NULL;
	}
	hdr = svc_rdma_header(msg);
	if (hdr == NULL) {
		if (m != NULL)
			m_freem(m);
		return (FALSE);
	}
	sx_xlock(&sr->sr_lock);
	for (;;) {
		mtx_lock(&sr->sr_wlock);
		kick = sr->sr_kick;
		mtx_unlock(&sr->sr_wlock);
		rc = krpc_svc_reply(sr->sr_h, msg->rm_xid, hdr, m);
		if (rc != KRPC_SVC_AGAIN)
			break;
		krpc_svc_reap(sr->sr_h);
		rc = krpc_svc_reply(sr->sr_h, msg->rm_xid, hdr, m);
		if (rc != KRPC_SVC_AGAIN)
			break;
		/* Until an upcall since the attempt (or a tick), without sr_lock. */
		mtx_lock(&sr->sr_wlock);
		sx_xunlock(&sr->sr_lock);
		if (sr->sr_kick == kick)
			msleep(&sr->sr_kick, &sr->sr_wlock, 0, "rdmarep", hz / 100 + 1);
		mtx_unlock(&sr->sr_wlock);
		sx_xlock(&sr->sr_lock);
	}
	if (rc == KRPC_SVC_SENT) {
		sr->sr_seq++;
		if (seq != NULL)
			*seq = sr->sr_seq;
	}
	/* The call ended (sent, or failed with its chains consumed). A reply svc.c sends for a
	 * call not handed up (a replay-cache hit) fails here and must not count. */
	mtx_lock(&sr->sr_wlock);
	if (sr->sr_inflight > 0)
		sr->sr_inflight--;
	sr->sr_lastactive = time_uptime;
	mtx_unlock(&sr->sr_wlock);
	sx_xunlock(&sr->sr_lock);
	return (rc == KRPC_SVC_SENT);
}

/* SVC_RELEASE's last reference (after xprt_unregister): the connection, the Responder (its
 * contexts: calls never answered), the held reply chains, the SVCXPRT. */
static void
svc_rdma_destroy(SVCXPRT *xprt)
{
	struct svc_rdma *sr = xprt->xp_p1;

	/*
	 * Under no lock: callout_drain and krpc_svc_set_upcall return once no call of the idle
	 * check or of the old upcall (both take sr_wlock) is still running on another CPU;
	 * after them, nothing touches sr.
	 */
	callout_drain(&sr->sr_idle);
	krpc_svc_set_upcall(sr->sr_h, NULL, NULL);
	krpc_svc_free(sr->sr_h);
	mtx_destroy(&sr->sr_wlock);
	sx_destroy(&sr->sr_lock);
	free(sr, M_KRPC_SVC);
	/* The lock goes before the transport, as on svc_vc's create failure paths
	 * (svc_vc.c:260, 348; svc_vc_destroy_common, svc_vc.c:508, leaves it). */
	sx_destroy(&xprt->xp_lock);
	svc_xprt_free(xprt);
	atomic_subtract_int(&svc_rdma_live, 1);
}

int
svc_rdma_drop(SVCXPRT *xprt, uint32_t xid)
{
	struct svc_rdma *sr = xprt->xp_p1;
	int rc;

	sx_xlock(&sr->sr_lock);
	rc = krpc_svc_drop(sr->sr_h, xid);
	if (rc == KRPC_SVC_DROPPED) {
		mtx_lock(&sr->sr_wlock);
		if (sr->sr_inflight > 0)
			sr->sr_inflight--;
		mtx_unlock(&sr->sr_wlock);
	}
	sx_xunlock(&sr->sr_lock);
	return (rc == KRPC_SVC_DROPPED);
}

void
svc_rdma_get_stats(SVCXPRT *xprt, struct krpc_svc_stats *out)
{
	struct svc_rdma *sr = xprt->xp_p1;

	sx_xlock(&sr->sr_lock);
	krpc_svc_get_stats(sr->sr_h, out);
	sx_xunlock(&sr->sr_lock);
}

void
svc_rdma_set_stock(SVCXPRT *xprt, int on)
{
	struct svc_rdma *sr = xprt->xp_p1;

	sx_xlock(&sr->sr_lock);
	krpc_svc_set_stock(sr->sr_h, on);
	sx_xunlock(&sr->sr_lock);
}

/*
 * SVCRDMA_DROP_CALL (svc_rdma_drop through the ops table), SVCRDMA_SET_STOCK and
 * SVCRDMA_GET_STOCK; as the kernel's svc_vc_control, no other request means anything here.
 */
static bool_t
svc_rdma_control(SVCXPRT *xprt, const u_int rq, void *in)
{
	struct svc_rdma *sr = xprt->xp_p1;

	if (in == NULL)
		return (FALSE);
	switch (rq) {
	case SVCRDMA_DROP_CALL:
		return (svc_rdma_drop(xprt, *(uint32_t *)in) ? TRUE : FALSE);
	case SVCRDMA_SET_STOCK:
		svc_rdma_set_stock(xprt, *(int *)in);
		return (TRUE);
	case SVCRDMA_GET_STOCK:
		sx_xlock(&sr->sr_lock);
		*(int *)in = krpc_svc_get_stock(sr->sr_h);
		sx_xunlock(&sr->sr_lock);
		return (TRUE);
	default:
		return (FALSE);
	}
}

/* ---- the rendezvous transport (svc_rdma_listen) ----------------------------------------- */

/* What svc_vc's rendezvous is for a listening socket. */
struct svc_rdma_listen {
	struct sx	sl_lock;	/* every krpc_listen_* call; sl_died, sl_error */
	struct mtx	sl_wlock;	/* the upcall's (it may not sleep): sl_kick */
	uint64_t	sl_kick;	/* upcalls so far */
	struct krpc_listen *sl_h;	/* Rust: the listener */
	SVCXPRT		*sl_xprt;
	int		sl_died;
	int		sl_error;
};

static bool_t svc_rdma_rendezvous_recv(SVCXPRT *, struct rpc_msg *, struct sockaddr **,
    struct mbuf **);
static enum xprt_stat svc_rdma_rendezvous_stat(SVCXPRT *);
static void svc_rdma_rendezvous_destroy(SVCXPRT *);
static bool_t svc_rdma_rendezvous_control(SVCXPRT *, const u_int, void *);

static const struct xp_ops svc_rdma_rendezvous_ops = {
	.xp_recv =	svc_rdma_rendezvous_recv,
	.xp_stat =	svc_rdma_rendezvous_stat,
	.xp_ack =	NULL,
	.xp_reply =	NULL,	/* never a call to reply to (as svc_vc's rendezvous) */
	.xp_destroy =	svc_rdma_rendezvous_destroy,
	.xp_control =	svc_rdma_rendezvous_control,
};

/* The listener's upcall (a request queued, the device gone): make the transport active. */
static void
svc_rdma_listen_upcall(void *arg)
{
	struct svc_rdma_listen *sl = arg;

	mtx_lock(&sl->sl_wlock);
	sl->sl_kick++;
	xprt_active(sl->sl_xprt);
	mtx_unlock(&sl->sl_wlock);
}

struct __rpc_svcxprt *
svc_rdma_listen_create(struct __rpc_svcpool *pool, struct krpc_listen *h)
{
	SVCXPRT *xprt;
	struct svc_rdma_listen *sl;

	sl = malloc(sizeof(*sl), M_KRPC_SVC, M_WAITOK | M_ZERO);
	if (sl == NULL)
		return (NULL);
	xprt = svc_xprt_alloc();
	if (xprt == NULL) {
		free(sl, M_KRPC_SVC);
		return (NULL);
	}
	sx_init(&sl->sl_lock, "krpc_rdma_listen");
	mtx_init(&sl->sl_wlock, "krpc_rdma_listen wake", NULL, MTX_DEF);
	sl->sl_h = h;
	sl->sl_xprt = xprt;
	sx_init(&xprt->xp_lock, "xprt->xp_lock");
	xprt->xp_pool = pool;
	xprt->xp_p1 = sl;
	xprt->xp_p2 = NULL;
	xprt->xp_netid = NULL;
	xprt->xp_ops = &svc_rdma_rendezvous_ops;
	xprt_register(xprt);
	krpc_listen_set_upcall(h, svc_rdma_listen_upcall, sl);
	/* Requests queued before the upcall was set: the first xp_recv takes them. */
	xprt_active(xprt);
	atomic_add_int(&svc_rdma_live, 1);
	return (xprt);
}

struct __rpc_svcxprt *
svc_rdma_listen(struct __rpc_svcpool *pool, struct vnet *vnet, const struct sockaddr *addr,
    int *errorp)
{
	struct krpc_listen *h;
	SVCXPRT *xprt;
	uint32_t len;
	int error;

	len = krpc_sockaddr_len(addr);
	if (len == 0) {
		*errorp = EAFNOSUPPORT;
		return (NULL);
	}
	error = krpc_listen_create(vnet, addr, len, &h);
	if (error != 0) {
		*errorp = error;
		return (NULL);
	}
	xprt = svc_rdma_listen_create(pool, h);
	if (xprt == NULL) {
		krpc_listen_free(h);
		*errorp = ENOMEM;
		return (NULL);
	}
	/* The address listened on, as svc_vc_create fills xp_ltaddr from the socket. */
	memcpy(&xprt->xp_ltaddr, addr, len);
	*errorp = 0;
	return (xprt);
}

/*
 * A pool thread's turn: accept one connection request and make an svc_rdma transport of it
 * (registered with the pool; our reference dropped as svc_vc_rendezvous_recv does), staying
 * active for the next; with none pending, inactive unless an upcall came since the poll
 * began. There is never a call to hand up.
 */
static bool_t
svc_rdma_rendezvous_recv(SVCXPRT *xprt, struct rpc_msg *msg, struct sockaddr **addrp,
    struct mbuf **mp)
{
	struct svc_rdma_listen *sl = xprt->xp_p1;
	struct krpc_svc *h = NULL;
	SVCXPRT *nx;
	uint64_t kick;
	int32_t err = 0;
	int rc;

	*addrp = NULL;
	*mp = NULL;
	sx_xlock(&sl->sl_lock);
	mtx_lock(&sl->sl_wlock);
	kick = sl->sl_kick;
	mtx_unlock(&sl->sl_wlock);
	rc = sl->sl_died ? KRPC_LISTEN_DIED : krpc_listen_accept(sl->sl_h, &h, &err);
	if (rc == KRPC_LISTEN_DIED && !sl->sl_died) {
		sl->sl_died = 1;
		sl->sl_error = err;
	}
	if (rc != KRPC_LISTEN_NEW) {
		mtx_lock(&sl->sl_wlock);
		if (sl->sl_kick == kick || sl->sl_died)
			xprt_inactive_self(xprt);
		mtx_unlock(&sl->sl_wlock);
		sx_xunlock(&sl->sl_lock);
		return (FALSE);
	}
	sx_xunlock(&sl->sl_lock);
	nx = svc_rdma_create(xprt->xp_pool, h);
	if (nx == NULL)
		krpc_svc_free(h);	/* the connection goes with its state */
	else
		SVC_RELEASE(nx);	/* the pool's registration keeps it */
	return (FALSE);
}

static enum xprt_stat
svc_rdma_rendezvous_stat(SVCXPRT *xprt)
{
	struct svc_rdma_listen *sl = xprt->xp_p1;
	int died;

	sx_xlock(&sl->sl_lock);
	died = sl->sl_died;
	sx_xunlock(&sl->sl_lock);
	return (died ? XPRT_DIED : XPRT_IDLE);
}

/* SVC_RELEASE's last reference: the listener (pending requests rejected), the SVCXPRT. */
static void
svc_rdma_rendezvous_destroy(SVCXPRT *xprt)
{
	struct svc_rdma_listen *sl = xprt->xp_p1;

	/* Returns once no call of the upcall (it takes sl_wlock) is still running. */
	krpc_listen_set_upcall(sl->sl_h, NULL, NULL);
	krpc_listen_free(sl->sl_h);
	mtx_destroy(&sl->sl_wlock);
	sx_destroy(&sl->sl_lock);
	free(sl, M_KRPC_SVC);
	sx_destroy(&xprt->xp_lock);
	svc_xprt_free(xprt);
	atomic_subtract_int(&svc_rdma_live, 1);
}

static bool_t
svc_rdma_rendezvous_control(SVCXPRT *xprt, const u_int rq, void *in)
{
	return (FALSE);
}

void
svc_rdma_listen_stats(SVCXPRT *xprt, struct krpc_listen_stats *out)
{
	struct svc_rdma_listen *sl = xprt->xp_p1;

	sx_xlock(&sl->sl_lock);
	krpc_listen_get_stats(sl->sl_h, out);
	sx_xunlock(&sl->sl_lock);
}
