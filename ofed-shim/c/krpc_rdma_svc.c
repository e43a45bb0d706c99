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

/*
 * Callbacks (clnt_rdma_bck) whose reply a reap found (sr_lock held): wake their callers,
 * who sleep on sr_kick as an xp_reply waiting for a send resource does.
 */
static void
svc_rdma_bck_wake(struct svc_rdma *sr)
{
	if (krpc_svc_bck_handed(sr->sr_h) == 0)
		return;
	mtx_lock(&sr->sr_wlock);
	sr->sr_kick++;
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
	/*
	 * Not used by svc_rdma: a clnt_rdma_bck CLIENT's replies are matched by XID in the
	 * Rust state (svc.rs), not through xp_p2 (svc_vc's clnt_bck_svccall); nfsd may set it.
	 */
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
	svc_rdma_bck_wake(sr);
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
	svc_rdma_bck_wake(sr);
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
struct mbuf *
svc_rdma_reply_header(struct rpc_msg *msg)
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
	hdr = svc_rdma_reply_header(msg);
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
		svc_rdma_bck_wake(sr);
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
	case SVCRDMA_SET_CBSLOTS:
		return (svc_rdma_set_cbslots(xprt, *(uint32_t *)in) == 0);
	default:
		return (FALSE);
	}
}

/* ---- the rendezvous transport (svc_rdma_listen) ----------------------------------------- */

/* What svc_vc's rendezvous is for a listening socket. */
int
svc_rdma_set_cbslots(SVCXPRT *xprt, uint32_t n)
{
	struct svc_rdma *sr = xprt->xp_p1;
	int error;

	sx_xlock(&sr->sr_lock);
	error = krpc_svc_set_cbslots(sr->sr_h, n);
	sx_xunlock(&sr->sr_lock);
	return (error);
}

/* ---- clnt_rdma_bck: callbacks on svc_rdma's connection (clnt_bck.c's part) --------------- */

/* What clnt_bck.c's struct ct_data is for the callbacks; under the transport's sr_lock. */
struct cb_rdma {
	SVCXPRT		*cb_xprt;	/* its svc_rdma transport (a reference held) */
	uint32_t	cb_xid;		/* the last XID used */
	uint32_t	cb_prog;
	uint32_t	cb_vers;
	struct timeval	cb_wait;	/* CLSET_TIMEOUT; tv_usec == -1: the caller's */
	const char	*cb_waitchan;
	int		cb_interruptible;
	int		cb_threads;	/* callers inside cl_call */
	int		cb_closing;
	struct rpc_err	cb_error;	/* the last call's (cl_geterr) */
};

static enum clnt_stat clnt_rdma_bck_ccall(CLIENT *, struct rpc_callextra *, rpcproc_t,
    struct mbuf *, struct mbuf **, struct timeval);
static void clnt_rdma_bck_abort(CLIENT *);
static void clnt_rdma_bck_geterr(CLIENT *, struct rpc_err *);
static bool_t clnt_rdma_bck_freeres(CLIENT *, xdrproc_t, void *);
static void clnt_rdma_bck_close(CLIENT *);
static void clnt_rdma_bck_destroy(CLIENT *);
static bool_t clnt_rdma_bck_control(CLIENT *, u_int, void *);

static const struct clnt_ops clnt_rdma_bck_ops = {
	.cl_call =	clnt_rdma_bck_ccall,
	.cl_abort =	clnt_rdma_bck_abort,
	.cl_geterr =	clnt_rdma_bck_geterr,
	.cl_freeres =	clnt_rdma_bck_freeres,
	.cl_close =	clnt_rdma_bck_close,
	.cl_destroy =	clnt_rdma_bck_destroy,
	.cl_control =	clnt_rdma_bck_control,
};

CLIENT *
clnt_rdma_bck_create(SVCXPRT *xprt, uint32_t prog, uint32_t vers)
{
	static uint32_t disrupt;
	struct timeval now;
	struct cb_rdma *cb;
	CLIENT *cl;

	if (xprt == NULL || xprt->xp_ops != &svc_rdma_ops)
		return (NULL);
	cl = malloc(sizeof(*cl), M_KRPC_SVC, M_WAITOK | M_ZERO);
	cb = malloc(sizeof(*cb), M_KRPC_SVC, M_WAITOK | M_ZERO);
	if (cl == NULL || cb == NULL) {
		if (cl != NULL)
			free(cl, M_KRPC_SVC);
		if (cb != NULL)
			free(cb, M_KRPC_SVC);
		return (NULL);
	}
	/* As clnt_bck_create: the first XID from a counter and the time of day. */
	if (atomic_load_int(&disrupt) == 0)
		atomic_cmpset_int(&disrupt, 0, (uint32_t)(uintptr_t)xprt);
	getmicrotime(&now);
	cb->cb_xid = (atomic_fetchadd_int(&disrupt, 1) + 1) ^ (uint32_t)now.tv_sec ^
	    (uint32_t)now.tv_usec;
	SVC_ACQUIRE(xprt);
	cb->cb_xprt = xprt;
	cb->cb_prog = prog;
	cb->cb_vers = vers;
	cb->cb_wait.tv_sec = -1;
	cb->cb_wait.tv_usec = -1;
	cb->cb_waitchan = "rpcbck";
	cl->cl_refs = 1;
	cl->cl_ops = &clnt_rdma_bck_ops;
	cl->cl_private = cb;
	cl->cl_auth = authnone_create();
	cl->cl_netid = NULL;
	cl->cl_tp = NULL;
	atomic_add_int(&svc_rdma_live, 1);
	return (cl);
}

int
clnt_rdma_bck_call(CLIENT *cl, struct rpc_callextra *ext, uint32_t proc, struct mbuf *args,
    struct mbuf **resultsp, struct timeval utimeout, SVCXPRT *xprt)
{
	struct cb_rdma *cb = cl->cl_private;
	struct rpc_err *errp;

	if (cl->cl_ops != &clnt_rdma_bck_ops || cb->cb_xprt != xprt) {
		errp = ext != NULL ? &ext->rc_err : &cb->cb_error;
		errp->re_status = RPC_CANTSEND;
		errp->re_errno = EINVAL;
		*resultsp = NULL;
		return (RPC_CANTSEND);
	}
	return (CLNT_CALL_MBUF(cl, ext, proc, args, resultsp, utimeout));
}

/* Ticks left of timo since start (<= 0: expired). */
static int
clnt_rdma_left(int start, int timo)
{
	return (timo - (int)((u_int)ticks - (u_int)start));
}

/* Sleep on sr_kick (sr_lock held, dropped while asleep) unless it moved since gen. */
static int
svc_rdma_bck_sleep(struct svc_rdma *sr, uint64_t gen, int pri, const char *wmesg, int timo)
{
	int error = 0;

	mtx_lock(&sr->sr_wlock);
	sx_xunlock(&sr->sr_lock);
	if (sr->sr_kick == gen)
		error = msleep(&sr->sr_kick, &sr->sr_wlock, pri, wmesg, timo);
	mtx_unlock(&sr->sr_wlock);
	sx_xlock(&sr->sr_lock);
	return (error);
}

static uint64_t
svc_rdma_bck_gen(struct svc_rdma *sr)
{
	uint64_t k;

	mtx_lock(&sr->sr_wlock);
	k = sr->sr_kick;
	mtx_unlock(&sr->sr_wlock);
	return (k);
}

/*
 * As clnt_bck_call: the call goes out on the connection (an inline reverse call), the
 * caller sleeps until its reply (every waiter and the pool threads reap, for all), its
 * timeout, a signal, or the loss of the connection. Unlike clnt_bck the args chain is not
 * consumed (as clnt_rdma_call and clnt_vc: the caller frees it).
 */
static enum clnt_stat
clnt_rdma_bck_ccall(CLIENT *cl, struct rpc_callextra *ext, rpcproc_t proc, struct mbuf *args,
    struct mbuf **resultsp, struct timeval utimeout)
{
	struct cb_rdma *cb = cl->cl_private;
	struct svc_rdma *sr = cb->cb_xprt->xp_p1;
	AUTH *auth = (ext != NULL && ext->rc_auth != NULL) ? ext->rc_auth : cl->cl_auth;
	struct rpc_err *errp = ext != NULL ? &ext->rc_err : &cb->cb_error;
	struct krpc_clnt_res res;
	struct mbuf *hdr, *rep = NULL;
	struct timeval tv;
	uint32_t xid, prog, vers;
	uint64_t gen;
	enum clnt_stat stat;
	int error, rc, start, timo, left, pri;

	*resultsp = NULL;
	memset(&res, 0, sizeof(res));
	sx_xlock(&sr->sr_lock);
	if (cb->cb_closing) {
		sx_xunlock(&sr->sr_lock);
		errp->re_status = RPC_CANTSEND;
		errp->re_errno = ESHUTDOWN;
		return (RPC_CANTSEND);
	}
	cb->cb_threads++;
	xid = ++cb->cb_xid;
	prog = cb->cb_prog;
	vers = cb->cb_vers;
	tv = cb->cb_wait.tv_usec == -1 ? utimeout : cb->cb_wait;
	pri = cb->cb_interruptible ? PCATCH : 0;
	sx_xunlock(&sr->sr_lock);

	hdr = clnt_rdma_call_header(xid, prog, vers, proc, auth, &error);
	sx_xlock(&sr->sr_lock);
	if (hdr == NULL) {
		stat = RPC_CANTENCODEARGS;
		res.err = error;
		goto out;
	}
	timo = tvtohz(&tv);
	start = ticks;
	for (;;) {
		if (sr->sr_died) {
			/* As clnt_bck_call on a connection going down: RPC_CANTRECV. */
			stat = RPC_CANTRECV;
			res.err = ENOTCONN;
			goto out;
		}
		gen = svc_rdma_bck_gen(sr);
		rc = krpc_svc_bck_send(sr->sr_h, hdr, args, &res);
		if (rc == KRPC_CLNT_AGAIN) {
			krpc_svc_reap(sr->sr_h);
			svc_rdma_bck_wake(sr);
			rc = krpc_svc_bck_send(sr->sr_h, hdr, args, &res);
		}
		if (rc != KRPC_CLNT_AGAIN)
			break;
		left = clnt_rdma_left(start, timo);
		if (left <= 0) {
			stat = RPC_TIMEDOUT;
			res.err = ETIMEDOUT;
			goto out;
		}
		error = svc_rdma_bck_sleep(sr, gen, pri, cb->cb_waitchan, MIN(left, hz));
		if (error == EINTR || error == ERESTART) {
			stat = RPC_CANTSEND;
			res.err = error;
			goto out;
		}
	}
	if (rc != KRPC_CLNT_SENT) {
		stat = (enum clnt_stat)res.stat;
		goto out;
	}
	mtx_lock(&sr->sr_wlock);
	sr->sr_lastactive = time_uptime;
	mtx_unlock(&sr->sr_wlock);
	for (;;) {
		gen = svc_rdma_bck_gen(sr);
		rc = krpc_svc_bck_poll(sr->sr_h, xid, &rep, &res);
		svc_rdma_bck_wake(sr);
		if (rc == KRPC_CLNT_DONE) {
			stat = (enum clnt_stat)res.stat;
			break;
		}
		/* clnt_bck's "rpc-based message passing": a zero timeout does not wait. */
		if (tv.tv_sec == 0 && tv.tv_usec == 0) {
			krpc_svc_bck_abandon(sr->sr_h, xid);
			stat = RPC_TIMEDOUT;
			break;
		}
		left = clnt_rdma_left(start, timo);
		if (left <= 0) {
			krpc_svc_bck_abandon(sr->sr_h, xid);
			stat = RPC_TIMEDOUT;
			res.err = ETIMEDOUT;
			break;
		}
		if (sr->sr_died || cb->cb_closing) {
			krpc_svc_bck_abandon(sr->sr_h, xid);
			stat = RPC_CANTRECV;
			res.err = cb->cb_closing ? ESHUTDOWN : ENOTCONN;
			break;
		}
		/* At most a second: the loss is seen by a poll, whoever's upcall came. */
		error = svc_rdma_bck_sleep(sr, gen, pri, cb->cb_waitchan, MIN(left, hz));
		if (error != 0 && error != EWOULDBLOCK) {
			/* As clnt_bck_call: EINTR is RPC_INTR, any other error RPC_CANTRECV. */
			krpc_svc_bck_abandon(sr->sr_h, xid);
			stat = error == EINTR ? RPC_INTR : RPC_CANTRECV;
			res.err = error;
			break;
		}
	}
out:
	errp->re_status = stat;
	switch (stat) {
	case RPC_VERSMISMATCH:
	case RPC_PROGVERSMISMATCH:
		errp->re_vers.low = res.low;
		errp->re_vers.high = res.high;
		break;
	case RPC_AUTHERROR:
		errp->re_why = (enum auth_stat)res.err;
		break;
	default:
		errp->re_errno = res.err;
		break;
	}
	if (errp != &cb->cb_error)
		cb->cb_error = *errp;
	cb->cb_threads--;
	if (cb->cb_closing && cb->cb_threads == 0)
		wakeup(&cb->cb_threads);
	sx_xunlock(&sr->sr_lock);
	if (hdr != NULL)
		m_freem(hdr);
	if (stat == RPC_SUCCESS && rep == NULL)
		rep = m_get(M_WAITOK, MT_DATA);
	if (stat == RPC_SUCCESS)
		*resultsp = rep;
	else if (rep != NULL)
		m_freem(rep);
	return (stat);
}

static void
clnt_rdma_bck_abort(CLIENT *cl)
{
}

static void
clnt_rdma_bck_geterr(CLIENT *cl, struct rpc_err *errp)
{
	struct cb_rdma *cb = cl->cl_private;
	struct svc_rdma *sr = cb->cb_xprt->xp_p1;

	sx_xlock(&sr->sr_lock);
	*errp = cb->cb_error;
	sx_xunlock(&sr->sr_lock);
}

static bool_t
clnt_rdma_bck_freeres(CLIENT *cl, xdrproc_t xdr_res, void *res_ptr)
{
	return (TRUE);
}

/* Later calls are refused, callers waiting end (RPC_CANTRECV / ESHUTDOWN); returns once no
 * caller is inside cl_call. The connection stays (it is the transport's). */
static void
clnt_rdma_bck_close(CLIENT *cl)
{
	struct cb_rdma *cb = cl->cl_private;
	struct svc_rdma *sr = cb->cb_xprt->xp_p1;

	sx_xlock(&sr->sr_lock);
	cb->cb_closing = 1;
	mtx_lock(&sr->sr_wlock);
	sr->sr_kick++;
	wakeup(&sr->sr_kick);
	mtx_unlock(&sr->sr_wlock);
	while (cb->cb_threads > 0) {
		mtx_lock(&sr->sr_wlock);
		sx_xunlock(&sr->sr_lock);
		(void)msleep(&cb->cb_threads, &sr->sr_wlock, 0, "rpcclose", hz / 10 + 1);
		mtx_unlock(&sr->sr_wlock);
		sx_xlock(&sr->sr_lock);
	}
	sx_xunlock(&sr->sr_lock);
}

static void
clnt_rdma_bck_destroy(CLIENT *cl)
{
	struct cb_rdma *cb = cl->cl_private;
	SVCXPRT *xprt = cb->cb_xprt;

	clnt_rdma_bck_close(cl);
	/* cl_auth is its owner's, as clnt_rdma_destroy. */
	free(cb, M_KRPC_SVC);
	free(cl, M_KRPC_SVC);
	atomic_subtract_int(&svc_rdma_live, 1);
	/* May be the last reference: the transport goes (xp_destroy) with it. */
	SVC_RELEASE(xprt);
}

static bool_t
clnt_rdma_bck_control(CLIENT *cl, u_int request, void *info)
{
	struct cb_rdma *cb = cl->cl_private;
	struct svc_rdma *sr = cb->cb_xprt->xp_p1;
	struct timeval *tv;
	bool_t ok = TRUE;

	sx_xlock(&sr->sr_lock);
	switch (request) {
	case CLSET_TIMEOUT:
		tv = info;
		if (tv->tv_sec < 0 || tv->tv_usec < 0 || tv->tv_usec >= 1000000)
			ok = FALSE;
		else
			cb->cb_wait = *tv;
		break;
	case CLGET_TIMEOUT:
		*(struct timeval *)info = cb->cb_wait;
		break;
	case CLGET_XID:
		*(uint32_t *)info = cb->cb_xid;
		break;
	case CLSET_XID:
		cb->cb_xid = *(uint32_t *)info - 1;
		break;
	case CLGET_VERS:
		*(uint32_t *)info = cb->cb_vers;
		break;
	case CLSET_VERS:
		cb->cb_vers = *(uint32_t *)info;
		break;
	case CLGET_PROG:
		*(uint32_t *)info = cb->cb_prog;
		break;
	case CLSET_PROG:
		cb->cb_prog = *(uint32_t *)info;
		break;
	case CLSET_WAITCHAN:
		cb->cb_waitchan = (const char *)info;
		break;
	case CLGET_WAITCHAN:
		*(const char **)info = cb->cb_waitchan;
		break;
	case CLSET_INTERRUPTIBLE:
		cb->cb_interruptible = *(int *)info != 0;
		break;
	case CLGET_INTERRUPTIBLE:
		*(int *)info = cb->cb_interruptible;
		break;
	default:
		ok = FALSE;
		break;
	}
	sx_xunlock(&sr->sr_lock);
	return (ok);
}

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
