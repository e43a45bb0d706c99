/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma: clnt_rdma, a kernel RPC client transport (CLIENT *, struct clnt_ops) over the
 * Rust core's Requester (see krpc_rdma_clnt.h for the division of work and the locking).
 * Modelled on sys/rpc/clnt_vc.c: the same XID handling (the first XID from a counter shared
 * by every CLIENT xor the time of day), timeout rules (CLSET_TIMEOUT overrides the caller's
 * timeout; a zero timeout sends and returns RPC_TIMEDOUT without waiting), wait channel and
 * interruptible sleep (EINTR: RPC_INTR, ERESTART: RPC_CANTRECV), the same cl_control
 * requests where they mean something without a socket, and cl_destroy leaves cl_auth to
 * its owner. cr_lock is an sx (the core may sleep in the verbs under it); the upcall only
 * takes cr_wlock, the sleepers' interlock. clnt_rdma_live counts the CLIENTs
 * for krpc_rdma_busy() (MOD_UNLOAD).
 *
 * Limits of this piece: only AUTH_NONE and AUTH_SYS credentials (their marshalled form is
 * ah_cred / ah_verf as they are; RPCSEC_GSS marshals per call and is refused with
 * RPC_CANTENCODEARGS / EOPNOTSUPP), the reply verifier is not passed to AUTH_VALIDATE
 * (authnone/authunix accept any), no rc_feedback / rc_timers.
 *
 * Connections. clnt_rdma_create takes a connection the Rust side made. clnt_rdma_connect
 * makes one itself (krpc_clnt_dial: rdma_cm to an address) and returns once it is up.
 * clnt_rdma_reconnect_create is what clnt_reconnect_create is for TCP: the CLIENT makes its
 * connection, and makes it again after a loss (backoff 0, then 100 ms doubling to 30 s);
 * calls made while it is down wait for it, and the calls owed a reply are sent again with
 * their XIDs on the new connection, so each gets one reply (clnt_rc makes new calls with new
 * XIDs instead). A caller waiting for its reply drives that (krpc_clnt_link) between its
 * sleeps; CLSET_RETRIES bounds the failed attempts a waiting call sits through
 * (RPC_CANTSEND after them), its timeout bounds it anyway.
 *
 * The host tests compile this file unchanged over the emulated sys/rpc and struct mbuf
 * (../ofed-testkit/emu/kpi_emu_rpc.h, kpi_emu_mbuf.h), reached through the FreeBSD header names of
 * ../ofed-testkit/emu/include.
 */
#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/lock.h>
#include <sys/malloc.h>
#include <sys/mbuf.h>
#include <sys/mutex.h>
#include <sys/sx.h>
#include <sys/time.h>
#include <sys/endian.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <machine/atomic.h>
#include <rpc/types.h>
#include <rpc/xdr.h>
#include <rpc/auth.h>
#include <rpc/clnt.h>
#include <rpc/rpc_msg.h>
#include <rpc/rpc.h>

#include "krpc_rdma_clnt.h"
#include "krpc_rdma_svc.h"

static MALLOC_DEFINE(M_KRPC_CLNT, "krpc_rdma_clnt", "krpc-rdma RPC client transport");

/* What clnt_vc.c's struct ct_data is for a socket. */
struct ct_rdma {
	/*
	 * The Rust state (every krpc_clnt_* call) and the fields below. An sx: what the core does
	 * under it may sleep in the verbs (rdma_disconnect at close, ib_dereg_mr / ib_alloc_mr
	 * when a registration is reset, a release polling for its LOCAL_INV).
	 */
	struct sx	cr_lock;
	/* The completion upcall's (it may not sleep, so it never takes cr_lock) and the
	 * sleepers' interlock: cr_kick. */
	struct mtx	cr_wlock;
	uint64_t	cr_kick;	/* wakeups so far (upcalls, calls of others ended, exits) */
	struct krpc_clnt *cr_h;		/* Rust: connection + Requester */
	uint32_t	cr_xid;		/* the last XID used */
	uint32_t	cr_prog;
	uint32_t	cr_vers;
	struct timeval	cr_wait;	/* CLSET_TIMEOUT; tv_usec == -1: the caller's */
	const char	*cr_waitchan;
	int		cr_interruptible;
	int		cr_threads;	/* callers inside cl_call */
	int		cr_closing;
	int		cr_closed;
	int		cr_dialed;	/* made by krpc_clnt_dial with reconnection */
	int		cr_retries;	/* CLSET_RETRIES; 0: no bound */
	int		cr_last_ticks;	/* clnt_rdma_now_ms's clock */
	uint64_t	cr_ticks;
	struct rpc_err	cr_error;	/* the last call's (cl_geterr) */
	/* The backchannel SVCXPRT (CLSET_BACKCHANNEL): set and cleared under cr_lock and
	 * cr_wlock (the upcall reads it under cr_wlock only). */
	SVCXPRT		*cr_bc;
};

static enum clnt_stat clnt_rdma_call(CLIENT *, struct rpc_callextra *, rpcproc_t,
    struct mbuf *, struct mbuf **, struct timeval);
static void clnt_rdma_abort(CLIENT *);
static void clnt_rdma_geterr(CLIENT *, struct rpc_err *);
static bool_t clnt_rdma_freeres(CLIENT *, xdrproc_t, void *);
static void clnt_rdma_close(CLIENT *);
static void clnt_rdma_destroy(CLIENT *);
static bool_t clnt_rdma_control(CLIENT *, u_int, void *);
static bool_t clnt_rdma_set_backchannel(CLIENT *, void *);

static const struct clnt_ops clnt_rdma_ops = {
	.cl_call =	clnt_rdma_call,
	.cl_abort =	clnt_rdma_abort,
	.cl_geterr =	clnt_rdma_geterr,
	.cl_freeres =	clnt_rdma_freeres,
	.cl_close =	clnt_rdma_close,
	.cl_destroy =	clnt_rdma_destroy,
	.cl_control =	clnt_rdma_control,
};

/* CLIENTs alive (created, not yet destroyed): krpc_rdma_busy(), MOD_UNLOAD. */
static u_int clnt_rdma_live;

u_int
krpc_clnt_live(void)
{
	return (atomic_load_int(&clnt_rdma_live));
}

/*
 * The XID seed, as clnt_vc_create (clnt_vc.c:142-149, 229-230): a counter common to every
 * CLIENT, seeded once from an address and incremented per CLIENT, xor the time of day, so
 * that two CLIENTs made in the same tick (or microsecond) start at different XIDs.
 */
static uint32_t clnt_rdma_disrupt;

static uint32_t
clnt_rdma_first_xid(const void *seed)
{
	struct timeval now;
	uint32_t d;

	if (atomic_load_int(&clnt_rdma_disrupt) == 0)
		atomic_cmpset_int(&clnt_rdma_disrupt, 0, (uint32_t)(uintptr_t)seed);
	d = atomic_fetchadd_int(&clnt_rdma_disrupt, 1) + 1;
	getmicrotime(&now);
	return (d ^ (uint32_t)now.tv_sec ^ (uint32_t)now.tv_usec);
}

/*
 * The callers' wait channel. Not cr itself: its first member is cr_lock, and an sx sleeps on
 * its own address, so a wakeup(cr) while a thread waited for cr_lock would meet the sx's
 * sleepqueue (sleepq_broadcast: "mismatch between sleep/wakeup and cv_*", a panic under
 * INVARIANTS; FreeBSD's kernel found it, the emulation now refuses such a channel).
 */
#define CR_CHAN(cr)	((void *)&(cr)->cr_kick)

/* Count a wakeup and wake chan's sleepers; any context (never sleeps). */
static void
clnt_rdma_kick(struct ct_rdma *cr, void *chan)
{
	mtx_lock(&cr->cr_wlock);
	cr->cr_kick++;
	wakeup(chan);
	mtx_unlock(&cr->cr_wlock);
}

/* The wakeups so far: sampled before a poll, so a later one cancels the sleep after it. */
static uint64_t
clnt_rdma_gen(struct ct_rdma *cr)
{
	uint64_t k;

	mtx_lock(&cr->cr_wlock);
	k = cr->cr_kick;
	mtx_unlock(&cr->cr_wlock);
	return (k);
}

/*
 * Sleep on chan (cr_lock held, dropped while asleep, held again on return) unless a wakeup
 * came since gen was sampled; msleep's error (0 when it did not sleep).
 */
static int
clnt_rdma_sleep(struct ct_rdma *cr, void *chan, uint64_t gen, int pri, const char *wmesg,
    int timo)
{
	int error = 0;

	mtx_lock(&cr->cr_wlock);
	if (cr->cr_kick == gen) {
		sx_xunlock(&cr->cr_lock);
		error = msleep(chan, &cr->cr_wlock, pri, wmesg, timo);
		mtx_unlock(&cr->cr_wlock);
		sx_xlock(&cr->cr_lock);
	} else
		mtx_unlock(&cr->cr_wlock);
	return (error);
}

/* Ticks left of timo since start (<= 0: expired). */
static int
clnt_rdma_left(int start, int timo)
{
	return (timo - (int)((u_int)ticks - (u_int)start));
}

/* The CQ completion upcall: never sleeps, only wakes the callers (they poll). */
static void
clnt_rdma_upcall(void *arg)
{
	struct ct_rdma *cr = arg;

	mtx_lock(&cr->cr_wlock);
	cr->cr_kick++;
	wakeup(CR_CHAN(cr));
	/*
	 * A reverse call may have arrived and no caller may be inside cl_call to reap it: the
	 * backchannel xprt's xp_recv (a pool thread) reaps (as clnt_vc's soupcall queues a
	 * CALL and calls xprt_active).
	 */
	if (cr->cr_bc != NULL)
		xprt_active(cr->cr_bc);
	mtx_unlock(&cr->cr_wlock);
}

/* Reverse calls queued by a reap (cr_lock held): activate the backchannel xprt. */
static void
clnt_rdma_bc_kick(struct ct_rdma *cr)
{
	if (cr->cr_bc != NULL && krpc_clnt_bc_pending(cr->cr_h) > 0)
		xprt_active(cr->cr_bc);
}

/* Milliseconds on a monotonic clock of the CLIENT's (cr_lock held): ticks, widened. */
static uint64_t
clnt_rdma_now_ms(struct ct_rdma *cr)
{
	int t = ticks;

	cr->cr_ticks += (u_int)t - (u_int)cr->cr_last_ticks;
	cr->cr_last_ticks = t;
	return (cr->cr_ticks * 1000 / hz);
}

uint32_t
krpc_sockaddr_len(const struct sockaddr *sa)
{
	switch (sa->sa_family) {
	case AF_INET:
		return (sizeof(struct sockaddr_in));
	case AF_INET6:
		return (sizeof(struct sockaddr_in6));
	default:
		return (0);
	}
}

CLIENT *
clnt_rdma_create(struct krpc_clnt *h, uint32_t prog, uint32_t vers)
{
	CLIENT *cl;
	struct ct_rdma *cr;

	cl = malloc(sizeof(*cl), M_KRPC_CLNT, M_WAITOK | M_ZERO);
	cr = malloc(sizeof(*cr), M_KRPC_CLNT, M_WAITOK | M_ZERO);
	if (cl == NULL || cr == NULL) {
		if (cl != NULL)
			free(cl, M_KRPC_CLNT);
		if (cr != NULL)
			free(cr, M_KRPC_CLNT);
		return (NULL);
	}
	sx_init(&cr->cr_lock, "krpc_rdma_clnt");
	mtx_init(&cr->cr_wlock, "krpc_rdma_clnt wake", NULL, MTX_DEF);
	cr->cr_h = h;
	/* As clnt_vc_create: the first XID from a shared counter and the clock, then +1 per
	 * call (cl_call increments first). */
	cr->cr_xid = clnt_rdma_first_xid(cl);
	cr->cr_prog = prog;
	cr->cr_vers = vers;
	cr->cr_wait.tv_sec = -1;
	cr->cr_wait.tv_usec = -1;
	cr->cr_waitchan = "rpcrecv";
	cr->cr_last_ticks = ticks;
	cl->cl_refs = 1;
	cl->cl_ops = &clnt_rdma_ops;
	cl->cl_private = cr;
	cl->cl_auth = authnone_create();
	cl->cl_netid = NULL;
	cl->cl_tp = NULL;
	krpc_clnt_set_upcall(h, clnt_rdma_upcall, cr);
	atomic_add_int(&clnt_rdma_live, 1);
	return (cl);
}

CLIENT *
krpc_clnt_create(struct krpc_clnt *h, uint32_t prog, uint32_t vers)
{
	return (clnt_rdma_create(h, prog, vers));
}

CLIENT *
clnt_rdma_dialed(struct krpc_clnt *h, uint32_t prog, uint32_t vers, int reconnect,
    struct timeval *wait, int *errorp)
{
	struct ct_rdma *cr;
	CLIENT *cl;
	uint32_t wait_ms, failed, handed;
	uint64_t gen;
	int32_t lerr;
	int error, link, start, timo, left;

	cl = clnt_rdma_create(h, prog, vers);
	if (cl == NULL) {
		krpc_clnt_free(h);
		*errorp = ENOMEM;
		return (NULL);
	}
	cr = cl->cl_private;
	cr->cr_dialed = reconnect != 0;
	*errorp = 0;
	if (wait == NULL)
		return (cl);
	timo = tvtohz(wait);
	start = ticks;
	sx_xlock(&cr->cr_lock);
	for (;;) {
		gen = clnt_rdma_gen(cr);
		link = krpc_clnt_link(cr->cr_h, clnt_rdma_now_ms(cr), &wait_ms, &failed, &lerr,
		    &handed);
		if (link == KRPC_CLNT_UP) {
			error = 0;
			break;
		}
		if (link == KRPC_CLNT_DOWN && !cr->cr_dialed) {
			error = lerr != 0 ? lerr : ENOTCONN;
			break;
		}
		left = clnt_rdma_left(start, timo);
		if (left <= 0) {
			error = ETIMEDOUT;
			break;
		}
		/* Reconnecting and down: until the next attempt is due (or an upcall). */
		if (link == KRPC_CLNT_DOWN && wait_ms > 0 &&
		    (int)(((uint64_t)wait_ms * hz + 999) / 1000) < left)
			left = (int)(((uint64_t)wait_ms * hz + 999) / 1000);
		(void)clnt_rdma_sleep(cr, CR_CHAN(cr), gen, 0, "rdmacon", left);
	}
	sx_xunlock(&cr->cr_lock);
	if (error != 0) {
		clnt_rdma_destroy(cl);
		*errorp = error;
		return (NULL);
	}
	return (cl);
}

/* A handle dialing addr (krpc_clnt_dial_cb); NULL and *errorp on failure. */
static struct krpc_clnt *
clnt_rdma_dial(struct vnet *vnet, const struct sockaddr *addr, size_t recvsz, int reconnect,
    uint32_t cbslots, int *errorp)
{
	struct krpc_clnt *h;
	uint32_t len;

	len = krpc_sockaddr_len(addr);
	if (len == 0) {
		*errorp = EAFNOSUPPORT;
		return (NULL);
	}
	if (recvsz > UINT32_MAX)
		recvsz = UINT32_MAX;
	*errorp = krpc_clnt_dial_cb(vnet, addr, len, (uint32_t)recvsz, reconnect, cbslots, &h);
	return (*errorp == 0 ? h : NULL);
}

CLIENT *
clnt_rdma_connect_cb(struct vnet *vnet, const struct sockaddr *addr, uint32_t prog,
    uint32_t vers, size_t recvsz, uint32_t cbslots, struct timeval *wait, int *errorp)
{
	struct krpc_clnt *h;

	h = clnt_rdma_dial(vnet, addr, recvsz, 0, cbslots, errorp);
	if (h == NULL)
		return (NULL);
	return (clnt_rdma_dialed(h, prog, vers, 0, wait, errorp));
}

CLIENT *
clnt_rdma_connect(struct vnet *vnet, const struct sockaddr *addr, uint32_t prog,
    uint32_t vers, size_t recvsz, struct timeval *wait, int *errorp)
{
	return (clnt_rdma_connect_cb(vnet, addr, prog, vers, recvsz, 0, wait, errorp));
}

CLIENT *
clnt_rdma_reconnect_create_cb(struct vnet *vnet, const struct sockaddr *addr, uint32_t prog,
    uint32_t vers, size_t sendsz, size_t recvsz, uint32_t cbslots)
{
	struct krpc_clnt *h;
	int error;

	(void)sendsz;	/* calls go as the connection's limits allow (Long Call beyond) */
	h = clnt_rdma_dial(vnet, addr, recvsz, 1, cbslots, &error);
	if (h == NULL)
		return (NULL);
	return (clnt_rdma_dialed(h, prog, vers, 1, NULL, &error));
}

CLIENT *
clnt_rdma_reconnect_create(struct vnet *vnet, const struct sockaddr *addr, uint32_t prog,
    uint32_t vers, size_t sendsz, size_t recvsz)
{
	return (clnt_rdma_reconnect_create_cb(vnet, addr, prog, vers, sendsz, recvsz, 0));
}

/* Big-endian word at p (unaligned). */
static char *
clnt_rdma_put32(char *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, sizeof(v));
	return (p + sizeof(v));
}

static char *
clnt_rdma_put_auth(char *p, const struct opaque_auth *oa)
{
	u_int pad;

	p = clnt_rdma_put32(p, (uint32_t)oa->oa_flavor);
	p = clnt_rdma_put32(p, oa->oa_length);
	if (oa->oa_length > 0)
		memcpy(p, oa->oa_base, oa->oa_length);
	pad = roundup2(oa->oa_length, 4) - oa->oa_length;
	if (pad > 0)
		memset(p + oa->oa_length, 0, pad);
	return (p + oa->oa_length + pad);
}

/*
 * The call header: xid, CALL, RPC_MSG_VERSION, prog, vers, proc, credential, verifier, in
 * one mbuf or cluster (what clnt_vc_call's ct_mcallc + proc + AUTH_MARSHALL put in front of
 * the args for AUTH_NONE / AUTH_SYS). The args are not appended: the Rust side walks them
 * directly (m_copym would drop the DDP marker's M_PROTO1). May sleep (M_WAITOK).
 */
struct mbuf *
clnt_rdma_call_header(uint32_t xid, uint32_t prog, uint32_t vers, uint32_t proc,
    struct __auth *auth, int *errorp)
{
	const struct opaque_auth *cred = &auth->ah_cred, *verf = &auth->ah_verf;
	struct mbuf *m;
	char *p;
	u_int len;

	if (cred->oa_flavor != AUTH_NONE && cred->oa_flavor != AUTH_SYS) {
		*errorp = EOPNOTSUPP;
		return (NULL);
	}
	if (cred->oa_length > MAX_AUTH_BYTES || verf->oa_length > MAX_AUTH_BYTES) {
		*errorp = EINVAL;
		return (NULL);
	}
	len = 6 * 4 + 2 * 4 + roundup2(cred->oa_length, 4) + 2 * 4 +
	    roundup2(verf->oa_length, 4);
	m = len > (u_int)MLEN ? m_getcl(M_WAITOK, MT_DATA, 0) : m_get(M_WAITOK, MT_DATA);
	if (m == NULL) {
		*errorp = ENOMEM;
		return (NULL);
	}
	p = mtod(m, char *);
	p = clnt_rdma_put32(p, xid);
	p = clnt_rdma_put32(p, CALL);
	p = clnt_rdma_put32(p, RPC_MSG_VERSION);
	p = clnt_rdma_put32(p, prog);
	p = clnt_rdma_put32(p, vers);
	p = clnt_rdma_put32(p, proc);
	p = clnt_rdma_put_auth(p, cred);
	p = clnt_rdma_put_auth(p, verf);
	m->m_len = (int)(p - mtod(m, char *));
	*errorp = 0;
	return (m);
}

static enum clnt_stat
clnt_rdma_call(CLIENT *cl, struct rpc_callextra *ext, rpcproc_t proc, struct mbuf *args,
    struct mbuf **resultsp, struct timeval utimeout)
{
	struct ct_rdma *cr = cl->cl_private;
	AUTH *auth = (ext != NULL && ext->rc_auth != NULL) ? ext->rc_auth : cl->cl_auth;
	struct rpc_err *errp = ext != NULL ? &ext->rc_err : &cr->cr_error;
	struct krpc_clnt_res res;
	struct mbuf *hdr, *rep = NULL;
	struct timeval tv;
	uint32_t xid, prog, vers, handed, wait_ms, failed;
	uint64_t gen;
	enum clnt_stat stat;
	int error, rc, start, timo, pri, left, link, w;
	int32_t lerr;

	*resultsp = NULL;
	memset(&res, 0, sizeof(res));
	sx_xlock(&cr->cr_lock);
	if (cr->cr_closing) {
		sx_xunlock(&cr->cr_lock);
		errp->re_status = RPC_CANTSEND;
		errp->re_errno = ESHUTDOWN;
		return (RPC_CANTSEND);
	}
	cr->cr_threads++;
	xid = ++cr->cr_xid;
	prog = cr->cr_prog;
	vers = cr->cr_vers;
	tv = cr->cr_wait.tv_usec == -1 ? utimeout : cr->cr_wait;
	pri = cr->cr_interruptible ? PCATCH : 0;
	sx_xunlock(&cr->cr_lock);

	hdr = clnt_rdma_call_header(xid, prog, vers, proc, auth, &error);
	sx_xlock(&cr->cr_lock);
	if (hdr == NULL) {
		stat = RPC_CANTENCODEARGS;
		res.err = error;
		goto out;
	}
	timo = tvtohz(&tv);
	start = ticks;

	/* Send; without credit (or a send buffer) now, reap and wait: back-pressure. */
	for (;;) {
		gen = clnt_rdma_gen(cr);
		rc = krpc_clnt_send(cr->cr_h, hdr, args, &res);
		if (rc == KRPC_CLNT_AGAIN) {
			krpc_clnt_reap(cr->cr_h, &handed);
			if (handed > 0)
				clnt_rdma_kick(cr, CR_CHAN(cr));
			clnt_rdma_bc_kick(cr);
			rc = krpc_clnt_send(cr->cr_h, hdr, args, &res);
		}
		if (rc != KRPC_CLNT_AGAIN)
			break;
		left = clnt_rdma_left(start, timo);
		if (left <= 0) {
			stat = RPC_TIMEDOUT;
			res.err = ETIMEDOUT;
			goto out;
		}
		error = clnt_rdma_sleep(cr, CR_CHAN(cr), gen, pri, cr->cr_waitchan, left);
		if (error == EINTR || error == ERESTART) {
			/*
			 * Interrupted before the call went out: what clnt_vc_call makes of an
			 * interrupted sosend (clnt_vc.c:442-469): RPC_CANTSEND, the error in
			 * re_errno (with PCATCH; clnt_vc retries ERESTART only without it, and
			 * a sleep without PCATCH is never interrupted).
			 */
			stat = RPC_CANTSEND;
			res.err = error;
			goto out;
		}
	}
	if (rc != KRPC_CLNT_SENT) {
		stat = (enum clnt_stat)res.stat;
		goto out;
	}

	/* Sleep until the reply; every waiter reaps, for all. */
	for (;;) {
		gen = clnt_rdma_gen(cr);
		rc = krpc_clnt_poll(cr->cr_h, xid, &rep, &res, &handed);
		if (handed > 0)
			clnt_rdma_kick(cr, CR_CHAN(cr));
		clnt_rdma_bc_kick(cr);
		if (rc == KRPC_CLNT_DONE) {
			stat = (enum clnt_stat)res.stat;
			break;
		}
		/*
		 * A zero timeout: the call is sent, no reply awaited (clnt_vc.c:488-494, "rpc-
		 * based message passing", NLM's asynchronous calls): RPC_TIMEDOUT at once, re_errno
		 * untouched (0 here); a late reply is dropped.
		 */
		if (tv.tv_sec == 0 && tv.tv_usec == 0) {
			krpc_clnt_abandon(cr->cr_h, xid);
			stat = RPC_TIMEDOUT;
			break;
		}
		left = clnt_rdma_left(start, timo);
		if (left <= 0) {
			krpc_clnt_abandon(cr->cr_h, xid);
			stat = RPC_TIMEDOUT;
			res.err = ETIMEDOUT;
			break;
		}
		if (cr->cr_dialed) {
			/* Reconnecting: make the connection again when it is due. */
			link = krpc_clnt_link(cr->cr_h, clnt_rdma_now_ms(cr), &wait_ms, &failed,
			    &lerr, &handed);
			if (handed > 0)
				clnt_rdma_kick(cr, CR_CHAN(cr));
			if (link == KRPC_CLNT_DOWN && cr->cr_retries > 0 &&
			    failed >= (uint32_t)cr->cr_retries) {
				krpc_clnt_abandon(cr->cr_h, xid);
				stat = RPC_CANTSEND;
				res.err = lerr;
				break;
			}
			/* Down: sleep until the next attempt is due (an upcall may come sooner). */
			if (link == KRPC_CLNT_DOWN) {
				w = wait_ms == 0 ? 1 : (int)(((uint64_t)wait_ms * hz + 999) / 1000);
				if (w < left)
					left = w;
			}
		}
		error = clnt_rdma_sleep(cr, CR_CHAN(cr), gen, pri, cr->cr_waitchan, left);
		if (error != 0 && error != EWOULDBLOCK) {
			/*
			 * As clnt_vc_call (clnt_vc.c:497-520): EINTR is RPC_INTR; any other error
			 * of the sleep, ERESTART among them, is RPC_CANTRECV (clnt_rc then
			 * reconnects and retries), the error in re_errno either way.
			 */
			krpc_clnt_abandon(cr->cr_h, xid);
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
	if (errp != &cr->cr_error)
		cr->cr_error = *errp;
	cr->cr_threads--;
	if (cr->cr_closing && cr->cr_threads == 0)
		clnt_rdma_kick(cr, &cr->cr_threads);
	sx_xunlock(&cr->cr_lock);
	if (hdr != NULL)
		m_freem(hdr);
	/*
	 * RPC_SUCCESS always with a chain, even for a procedure without results (NULL): as
	 * clnt_vc, and newnfs_request mtod()s it.
	 */
	if (stat == RPC_SUCCESS && rep == NULL)
		rep = m_get(M_WAITOK, MT_DATA);
	if (stat == RPC_SUCCESS)
		*resultsp = rep;
	else if (rep != NULL)
		m_freem(rep);
	return (stat);
}

/* As clnt_vc_abort: nothing (a caller gives up by its timeout or a signal). */
static void
clnt_rdma_abort(CLIENT *cl)
{
}

static void
clnt_rdma_geterr(CLIENT *cl, struct rpc_err *errp)
{
	struct ct_rdma *cr = cl->cl_private;

	sx_xlock(&cr->cr_lock);
	*errp = cr->cr_error;
	sx_xunlock(&cr->cr_lock);
}

/* As clnt_vc_freeres: the results are an mbuf chain the caller frees. */
static bool_t
clnt_rdma_freeres(CLIENT *cl, xdrproc_t xdr_res, void *res_ptr)
{
	return (TRUE);
}

/* Every pending call ends (RPC_CANTRECV / ESHUTDOWN), later calls are refused; returns
 * once no caller is inside cl_call, as clnt_vc_close. */
static void
clnt_rdma_close(CLIENT *cl)
{
	struct ct_rdma *cr = cl->cl_private;
	uint32_t handed;
	uint64_t gen;

	sx_xlock(&cr->cr_lock);
	if (cr->cr_closed) {
		sx_xunlock(&cr->cr_lock);
		return;
	}
	if (cr->cr_closing) {
		/* Another close is waiting for the callers: until it is done (it wakes us). */
		for (;;) {
			gen = clnt_rdma_gen(cr);
			if (cr->cr_closed)
				break;
			clnt_rdma_sleep(cr, &cr->cr_threads, gen, 0, "rpcclose", 0);
		}
		sx_xunlock(&cr->cr_lock);
		return;
	}
	cr->cr_closing = 1;
	/* rdma_disconnect may sleep (it sends a DREQ): allowed under cr_lock, an sx. */
	krpc_clnt_close(cr->cr_h);
	krpc_clnt_reap(cr->cr_h, &handed);
	clnt_rdma_kick(cr, CR_CHAN(cr));
	for (;;) {
		gen = clnt_rdma_gen(cr);
		if (cr->cr_threads == 0)
			break;
		clnt_rdma_sleep(cr, &cr->cr_threads, gen, 0, "rpcclose", 0);
	}
	cr->cr_closed = 1;
	clnt_rdma_kick(cr, &cr->cr_threads);
	sx_xunlock(&cr->cr_lock);
}

static void
clnt_rdma_destroy(CLIENT *cl)
{
	struct ct_rdma *cr = cl->cl_private;
	SVCXPRT *bc;

	clnt_rdma_close(cl);
	/*
	 * The backchannel xprt lets go of the CLIENT, as clnt_vc_destroy: its reverse calls
	 * not answered are answered SYSTEM_ERR (or died with the connection), then xp_p2 is
	 * cleared under xp_lock (an xp_recv / xp_reply inside holds it: waited for) and our
	 * reference dropped. cr_lock is not held across xp_lock (their order is xp_lock, then
	 * cr_lock).
	 */
	sx_xlock(&cr->cr_lock);
	mtx_lock(&cr->cr_wlock);
	bc = cr->cr_bc;
	cr->cr_bc = NULL;
	mtx_unlock(&cr->cr_wlock);
	if (bc != NULL)
		krpc_clnt_set_bc(cr->cr_h, 0);
	sx_xunlock(&cr->cr_lock);
	if (bc != NULL) {
		sx_xlock(&bc->xp_lock);
		bc->xp_p2 = NULL;
		bc->xp_p1 = bc;		/* detached for good: XPRT_DIED */
		sx_xunlock(&bc->xp_lock);
		/* Its xp_stat says XPRT_DIED from now on: a pool thread unregisters it. */
		xprt_active(bc);
		SVC_RELEASE(bc);
	}
	krpc_clnt_free(cr->cr_h);
	mtx_destroy(&cr->cr_wlock);
	sx_destroy(&cr->cr_lock);
	/*
	 * cl_auth is not ours to destroy: as clnt_vc_destroy (clnt_vc.c:862-929, no
	 * AUTH_DESTROY), the consumer that set it owns it and destroys it (NLM shares one
	 * nlm_auth among its CLIENTs, nlm_prot_impl.c:521/1673; the authnone_create handle
	 * is static).
	 */
	free(cr, M_KRPC_CLNT);
	free(cl, M_KRPC_CLNT);
	atomic_subtract_int(&clnt_rdma_live, 1);
}

void
clnt_rdma_set_stock(CLIENT *cl, int on)
{
	struct ct_rdma *cr = cl->cl_private;

	sx_xlock(&cr->cr_lock);
	krpc_clnt_set_stock(cr->cr_h, on);
	sx_xunlock(&cr->cr_lock);
}

void
clnt_rdma_get_stats(CLIENT *cl, struct krpc_clnt_stats *out)
{
	struct ct_rdma *cr = cl->cl_private;

	sx_xlock(&cr->cr_lock);
	krpc_clnt_get_stats(cr->cr_h, out);
	sx_xunlock(&cr->cr_lock);
}

static bool_t
clnt_rdma_control(CLIENT *cl, u_int request, void *info)
{
	struct ct_rdma *cr = cl->cl_private;
	struct timeval *tv;
	bool_t ok = TRUE;

	if (request == CLSET_BACKCHANNEL)
		return (clnt_rdma_set_backchannel(cl, info));
	sx_xlock(&cr->cr_lock);
	switch (request) {
	case CLSET_TIMEOUT:
		tv = info;
		if (tv->tv_sec < 0 || tv->tv_usec < 0 || tv->tv_usec >= 1000000)
			ok = FALSE;
		else
			cr->cr_wait = *tv;
		break;
	case CLGET_TIMEOUT:
		*(struct timeval *)info = cr->cr_wait;
		break;
	case CLGET_XID:
		*(uint32_t *)info = cr->cr_xid;
		break;
	case CLSET_XID:
		/* The XID of the next call (cl_call increments first). */
		cr->cr_xid = *(uint32_t *)info - 1;
		break;
	case CLGET_VERS:
		*(uint32_t *)info = cr->cr_vers;
		break;
	case CLSET_VERS:
		cr->cr_vers = *(uint32_t *)info;
		break;
	case CLGET_PROG:
		*(uint32_t *)info = cr->cr_prog;
		break;
	case CLSET_PROG:
		cr->cr_prog = *(uint32_t *)info;
		break;
	case CLSET_WAITCHAN:
		cr->cr_waitchan = (const char *)info;
		break;
	case CLGET_WAITCHAN:
		*(const char **)info = cr->cr_waitchan;
		break;
	case CLSET_INTERRUPTIBLE:
		cr->cr_interruptible = *(int *)info != 0;
		break;
	case CLGET_INTERRUPTIBLE:
		*(int *)info = cr->cr_interruptible;
		break;
	case CLSET_RETRIES:
		/* Reconnecting: failed connection attempts a waiting call sits through. */
		if (*(int *)info < 0)
			ok = FALSE;
		else
			cr->cr_retries = *(int *)info;
		break;
	case CLGET_RETRIES:
		*(int *)info = cr->cr_retries;
		break;
	case CLSET_RDMA_STOCK:
		krpc_clnt_set_stock(cr->cr_h, *(int *)info);
		break;
	case CLGET_RDMA_STOCK:
		*(int *)info = krpc_clnt_get_stock(cr->cr_h);
		break;
	case CLSET_RDMA_CBSLOTS:
		ok = krpc_clnt_set_cbslots(cr->cr_h, *(uint32_t *)info) == 0;
		break;
	case CLGET_RDMA_CBSLOTS:
		*(uint32_t *)info = krpc_clnt_get_cbslots(cr->cr_h);
		break;
	default:
		/* CLSET_TLS among them: RPC-over-RDMA has no TLS (RFC 9289 is TCP only). */
		ok = FALSE;
		break;
	}
	sx_xunlock(&cr->cr_lock);
	return (ok);
}

/* ---- the backchannel SVCXPRT (CLSET_BACKCHANNEL) ----------------------------------------- */

static bool_t clnt_rdma_bc_recv(SVCXPRT *, struct rpc_msg *, struct sockaddr **,
    struct mbuf **);
static enum xprt_stat clnt_rdma_bc_stat(SVCXPRT *);
static bool_t clnt_rdma_bc_reply(SVCXPRT *, struct rpc_msg *, struct sockaddr *,
    struct mbuf *, uint32_t *);
static void clnt_rdma_bc_destroy(SVCXPRT *);
static bool_t clnt_rdma_bc_control(SVCXPRT *, const u_int, void *);

/* What svc_vc_backchannel_ops are for clnt_vc. */
static const struct xp_ops clnt_rdma_bc_ops = {
	.xp_recv =	clnt_rdma_bc_recv,
	.xp_stat =	clnt_rdma_bc_stat,
	.xp_ack =	NULL,
	.xp_reply =	clnt_rdma_bc_reply,
	.xp_destroy =	clnt_rdma_bc_destroy,
	.xp_control =	clnt_rdma_bc_control,
};

SVCXPRT *
svc_rdma_create_backchannel(SVCPOOL *pool)
{
	SVCXPRT *xprt;

	xprt = svc_xprt_alloc();
	if (xprt == NULL)
		return (NULL);
	sx_init(&xprt->xp_lock, "xprt->xp_lock");
	xprt->xp_pool = pool;
	xprt->xp_p1 = NULL;
	xprt->xp_p2 = NULL;	/* the CLIENT, once CLSET_BACKCHANNEL */
	xprt->xp_netid = NULL;
	xprt->xp_ops = &clnt_rdma_bc_ops;
	xprt_register(xprt);
	/* Its ops are the module's: counted with the CLIENTs (krpc_rdma_busy). */
	atomic_add_int(&clnt_rdma_live, 1);
	return (xprt);
}

/* CLSET_BACKCHANNEL: xp_lock before cr_lock (the xprt's ops take them in that order). */
static bool_t
clnt_rdma_set_backchannel(CLIENT *cl, void *info)
{
	struct ct_rdma *cr = cl->cl_private;
	SVCXPRT *xprt = info;

	if (xprt == NULL || xprt->xp_ops != &clnt_rdma_bc_ops)
		return (FALSE);
	sx_xlock(&xprt->xp_lock);
	sx_xlock(&cr->cr_lock);
	if (cr->cr_bc != NULL || xprt->xp_p2 != NULL || xprt->xp_p1 != NULL ||
	    cr->cr_closing) {
		/* As clnt_vc: one backchannel per CLIENT, set once. */
		sx_xunlock(&cr->cr_lock);
		sx_xunlock(&xprt->xp_lock);
		return (cr->cr_bc == xprt);
	}
	SVC_ACQUIRE(xprt);
	xprt->xp_p2 = cl;
	mtx_lock(&cr->cr_wlock);
	cr->cr_bc = xprt;
	mtx_unlock(&cr->cr_wlock);
	krpc_clnt_set_bc(cr->cr_h, 1);
	sx_xunlock(&cr->cr_lock);
	sx_xunlock(&xprt->xp_lock);
	/* Reverse calls may be waiting already (or an upcall went unseen). */
	xprt_active(xprt);
	return (TRUE);
}

static bool_t
clnt_rdma_bc_recv(SVCXPRT *xprt, struct rpc_msg *msg, struct sockaddr **addrp,
    struct mbuf **mp)
{
	struct krpc_svc_call c;
	struct ct_rdma *cr;
	struct mbuf *args = NULL;
	CLIENT *cl;
	uint32_t handed;
	uint64_t gen;
	int rc;

	*addrp = NULL;
	*mp = NULL;
	memset(&c, 0, sizeof(c));
	sx_xlock(&xprt->xp_lock);
	cl = xprt->xp_p2;
	if (cl == NULL) {
		xprt_inactive_self(xprt);
		sx_xunlock(&xprt->xp_lock);
		return (FALSE);
	}
	cr = cl->cl_private;
	sx_xlock(&cr->cr_lock);
	gen = clnt_rdma_gen(cr);
	rc = krpc_clnt_bc_recv(cr->cr_h, &c, msg->rm_call.cb_cred.oa_base,
	    msg->rm_call.cb_verf.oa_base, &args, &handed);
	if (handed > 0)
		clnt_rdma_kick(cr, CR_CHAN(cr));
	if (rc != KRPC_SVC_CALL) {
		/* Inactive unless an upcall came since the reap began (then poll again). */
		mtx_lock(&cr->cr_wlock);
		if (cr->cr_kick == gen || rc == KRPC_SVC_DIED)
			xprt_inactive_self(xprt);
		mtx_unlock(&cr->cr_wlock);
		sx_xunlock(&cr->cr_lock);
		sx_xunlock(&xprt->xp_lock);
		return (FALSE);
	}
	sx_xunlock(&cr->cr_lock);
	sx_xunlock(&xprt->xp_lock);
	/* Never a NULL chain (svc_getreq's consumers mtod() it), as svc_rdma_recv. */
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
clnt_rdma_bc_stat(SVCXPRT *xprt)
{
	struct ct_rdma *cr;
	CLIENT *cl;
	uint32_t n;

	sx_xlock(&xprt->xp_lock);
	cl = xprt->xp_p2;
	if (cl == NULL) {
		/* Not attached yet (idle), or its CLIENT is gone (xp_p1 set): svc.c unregisters
		 * it. */
		cl = xprt->xp_p1;
		sx_xunlock(&xprt->xp_lock);
		return (cl != NULL ? XPRT_DIED : XPRT_IDLE);
	}
	cr = cl->cl_private;
	sx_xlock(&cr->cr_lock);
	n = krpc_clnt_bc_pending(cr->cr_h);
	sx_xunlock(&cr->cr_lock);
	sx_xunlock(&xprt->xp_lock);
	return (n > 0 ? XPRT_MOREREQS : XPRT_IDLE);
}

/*
 * As svc_vc_backchannel_reply: the reply header, then (MSG_ACCEPTED / SUCCESS only) the
 * results m, sent on the CLIENT's connection (an inline reverse reply); m is consumed.
 */
static bool_t
clnt_rdma_bc_reply(SVCXPRT *xprt, struct rpc_msg *msg, struct sockaddr *addr, struct mbuf *m,
    uint32_t *seq)
{
	struct ct_rdma *cr;
	struct mbuf *hdr;
	CLIENT *cl;
	uint32_t handed;
	uint64_t gen;
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
	sx_xlock(&xprt->xp_lock);
	cl = xprt->xp_p2;
	if (cl == NULL) {
		/* As svc_vc_backchannel_reply without its ct_data: EPIPE, nothing sent. */
		sx_xunlock(&xprt->xp_lock);
		m_freem(hdr);
		if (m != NULL)
			m_freem(m);
		return (FALSE);
	}
	cr = cl->cl_private;
	sx_xlock(&cr->cr_lock);
	for (;;) {
		gen = clnt_rdma_gen(cr);
		rc = krpc_clnt_bc_reply(cr->cr_h, msg->rm_xid, hdr, m);
		if (rc != KRPC_SVC_AGAIN)
			break;
		krpc_clnt_reap(cr->cr_h, &handed);
		if (handed > 0)
			clnt_rdma_kick(cr, CR_CHAN(cr));
		rc = krpc_clnt_bc_reply(cr->cr_h, msg->rm_xid, hdr, m);
		if (rc != KRPC_SVC_AGAIN)
			break;
		/* Until a Send completion's upcall (or a tick); the pool thread may sleep. */
		(void)clnt_rdma_sleep(cr, CR_CHAN(cr), gen, 0, "rdmabcr", hz / 100 + 1);
	}
	sx_xunlock(&cr->cr_lock);
	sx_xunlock(&xprt->xp_lock);
	if (rc == KRPC_SVC_SENT && seq != NULL)
		*seq = 0;
	return (rc == KRPC_SVC_SENT);
}

static void
clnt_rdma_bc_destroy(SVCXPRT *xprt)
{
	/* The last reference: the CLIENT let go of it (xp_p2 NULL), nothing queued here. */
	sx_destroy(&xprt->xp_lock);
	svc_xprt_free(xprt);
	atomic_subtract_int(&clnt_rdma_live, 1);
}

static bool_t
clnt_rdma_bc_control(SVCXPRT *xprt, const u_int rq, void *in)
{
	struct ct_rdma *cr;
	CLIENT *cl;
	int rc = KRPC_SVC_FAILED;

	if (rq != SVCRDMA_DROP_CALL || in == NULL)
		return (FALSE);
	sx_xlock(&xprt->xp_lock);
	cl = xprt->xp_p2;
	if (cl != NULL) {
		cr = cl->cl_private;
		sx_xlock(&cr->cr_lock);
		rc = krpc_clnt_bc_drop(cr->cr_h, *(uint32_t *)in);
		sx_xunlock(&cr->cr_lock);
	}
	sx_xunlock(&xprt->xp_lock);
	return (rc == KRPC_SVC_DROPPED);
}
