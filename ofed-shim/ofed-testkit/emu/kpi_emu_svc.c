/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: the emulated svc.c pieces of kpi_emu_svc.h (transport allocation,
 * registration and activation over a stand-in pool) and the test helpers that call an
 * SVCXPRT through its xp_ops table as svc_getreq / svc_sendreply_mbuf do.
 */
#include <time.h>

#include "kpi_emu.h"
#include "kpi_emu_rpc.h"
#include "kpi_emu_svc.h"

static MALLOC_DEFINE(M_EMU_SVC, "emu_svc", "emulated svc.c");

SVCXPRT *
svc_xprt_alloc(void)
{
	SVCXPRT *xprt = malloc(sizeof(*xprt), M_EMU_SVC, M_WAITOK | M_ZERO);

	if (xprt != NULL)
		xprt->xp_refs = 1;	/* as refcount_init(&xp_refs, 1) */
	return (xprt);
}

static uint64_t freed_locked;	/* transports freed with xp_lock still initialised */

uint64_t
krpc_emu_svc_freed_locked(void)
{
	return (__atomic_load_n(&freed_locked, __ATOMIC_RELAXED));
}

void
svc_xprt_free(SVCXPRT *xprt)
{
	/*
	 * FreeBSD's svc_xprt_free does not look at xp_lock, and svc_vc_destroy_common
	 * (svc_vc.c:508-537) frees a transport without sx_destroy; svc_vc's create failure
	 * paths pair sx_init with sx_destroy before svc_xprt_free (svc_vc.c:260, 348). Counted,
	 * not refused: the tests check svc_rdma destroys what it initialised.
	 */
	if (krpc_emu_sx_initialised(&xprt->xp_lock)) {
		__atomic_fetch_add(&freed_locked, 1, __ATOMIC_RELAXED);
		sx_destroy(&xprt->xp_lock);
	}
	free(xprt, M_EMU_SVC);
}

void
svc_release(SVCXPRT *xprt)
{
	if (__atomic_sub_fetch(&xprt->xp_refs, 1, __ATOMIC_ACQ_REL) == 0)
		SVC_DESTROY(xprt);
}

/* As svc.c: the pool's list holds a reference. */
void
xprt_register(SVCXPRT *xprt)
{
	SVCPOOL *pool = xprt->xp_pool;

	/*
	 * Not a check of svc.c's: every transport's create has sx_init'ed xp_lock by now
	 * (svc_vc.c:307 before xprt_register at svc_vc.c:331), and the krpc takes it without
	 * asking (clnt_bck.c:320, the NFSv4.1 backchannel's send).
	 */
	if (!krpc_emu_sx_initialised(&xprt->xp_lock))
		krpc_emu_panic("xprt_register of a transport whose xp_lock was never sx_init'ed");
	__atomic_add_fetch(&xprt->xp_refs, 1, __ATOMIC_ACQ_REL);
	pthread_mutex_lock(&pool->sp_lock);
	xprt->xp_registered = TRUE;
	xprt->xp_active = FALSE;
	/* A test that tracks the pool's new transports (a rendezvous makes them) gets each
	 * with a reference of its own. */
	if (pool->sp_track && pool->sp_new_count < KRPC_EMU_POOL_NEW) {
		__atomic_add_fetch(&xprt->xp_refs, 1, __ATOMIC_ACQ_REL);
		pool->sp_new[(pool->sp_new_head + pool->sp_new_count) % KRPC_EMU_POOL_NEW] = xprt;
		pool->sp_new_count++;
	}
	pthread_mutex_unlock(&pool->sp_lock);
}

void
xprt_unregister(SVCXPRT *xprt)
{
	SVCPOOL *pool = xprt->xp_pool;
	int was;

	pthread_mutex_lock(&pool->sp_lock);
	was = xprt->xp_registered;
	xprt->xp_registered = FALSE;
	xprt->xp_active = FALSE;
	pthread_mutex_unlock(&pool->sp_lock);
	if (was)
		svc_release(xprt);
}

void
xprt_active(SVCXPRT *xprt)
{
	SVCPOOL *pool = xprt->xp_pool;

	pthread_mutex_lock(&pool->sp_lock);
	pool->sp_active_calls++;
	/* As FreeBSD: an unregistered transport (a race with xprt_unregister) stays off. */
	if (xprt->xp_registered && !xprt->xp_active) {
		xprt->xp_active = TRUE;
		pool->sp_activations++;
		pthread_cond_broadcast(&pool->sp_cond);
	}
	pthread_mutex_unlock(&pool->sp_lock);
}

void
xprt_inactive(SVCXPRT *xprt)
{
	SVCPOOL *pool = xprt->xp_pool;

	pthread_mutex_lock(&pool->sp_lock);
	xprt->xp_active = FALSE;
	pthread_mutex_unlock(&pool->sp_lock);
}

/* FreeBSD's is a plain store by the thread the transport is assigned to; here the pool lock
 * keeps the emulation's data-race free. */
void
xprt_inactive_self(SVCXPRT *xprt)
{
	xprt_inactive(xprt);
}

SVCPOOL *
krpc_emu_svcpool_create(void)
{
	SVCPOOL *pool = malloc(sizeof(*pool), M_EMU_SVC, M_WAITOK | M_ZERO);

	if (pool == NULL)
		return (NULL);
	pthread_mutex_init(&pool->sp_lock, NULL);
	pthread_cond_init(&pool->sp_cond, NULL);
	return (pool);
}

void
krpc_emu_svcpool_track(SVCPOOL *pool, int on)
{
	pthread_mutex_lock(&pool->sp_lock);
	pool->sp_track = on;
	pthread_mutex_unlock(&pool->sp_lock);
}

SVCXPRT *
krpc_emu_svcpool_take_new(SVCPOOL *pool)
{
	SVCXPRT *xprt = NULL;

	pthread_mutex_lock(&pool->sp_lock);
	if (pool->sp_new_count > 0) {
		xprt = pool->sp_new[pool->sp_new_head];
		pool->sp_new_head = (pool->sp_new_head + 1) % KRPC_EMU_POOL_NEW;
		pool->sp_new_count--;
	}
	pthread_mutex_unlock(&pool->sp_lock);
	return (xprt);
}

void
krpc_emu_svcpool_destroy(SVCPOOL *pool)
{
	SVCXPRT *xprt;

	while ((xprt = krpc_emu_svcpool_take_new(pool)) != NULL)
		svc_release(xprt);
	pthread_cond_destroy(&pool->sp_cond);
	pthread_mutex_destroy(&pool->sp_lock);
	free(pool, M_EMU_SVC);
}

int
krpc_emu_svc_wait_active(SVCXPRT *xprt, uint32_t timeout_ms)
{
	SVCPOOL *pool = xprt->xp_pool;
	struct timespec abs;
	int active;

	krpc_emu_deadline(&abs, timeout_ms);
	pthread_mutex_lock(&pool->sp_lock);
	while (!xprt->xp_active) {
		if (pthread_cond_timedwait(&pool->sp_cond, &pool->sp_lock, &abs) == ETIMEDOUT)
			break;
	}
	active = xprt->xp_active;
	pthread_mutex_unlock(&pool->sp_lock);
	return (active);
}

void
krpc_emu_svc_activations(SVCPOOL *pool, uint64_t *calls, uint64_t *activations)
{
	pthread_mutex_lock(&pool->sp_lock);
	*calls = pool->sp_active_calls;
	*activations = pool->sp_activations;
	pthread_mutex_unlock(&pool->sp_lock);
}

int
krpc_emu_svc_recv(SVCXPRT *xprt, struct krpc_emu_svc_msg *out, struct mbuf **args)
{
	/* svc_getreq's credential area: cred, verf (MAX_AUTH_BYTES each). */
	uint8_t area[2 * MAX_AUTH_BYTES];
	struct sockaddr *addr = (struct sockaddr *)1;	/* must come back NULL */
	struct rpc_msg msg;
	bool_t ok;

	memset(&msg, 0, sizeof(msg));
	memset(out, 0, sizeof(*out));
	msg.rm_call.cb_cred.oa_base = (caddr_t)area;
	msg.rm_call.cb_verf.oa_base = (caddr_t)&area[MAX_AUTH_BYTES];
	*args = NULL;
	ok = SVC_RECV(xprt, &msg, &addr, args);
	if (!ok)
		return (0);
	if (addr != NULL)
		krpc_emu_panic("xp_recv left *addrp set");
	/* svc_vc always hands up a chain; svc_getreq's consumers mtod() it (FreeBSD 14.2's
	 * nfs_nfsdkrpc.c), so an empty call must still come as an (empty) mbuf. */
	if (*args == NULL)
		krpc_emu_panic("xp_recv returned TRUE with a NULL argument chain");
	out->xid = msg.rm_xid;
	out->direction = (uint32_t)msg.rm_direction;
	out->rpcvers = msg.rm_call.cb_rpcvers;
	out->prog = msg.rm_call.cb_prog;
	out->vers = msg.rm_call.cb_vers;
	out->proc = msg.rm_call.cb_proc;
	out->cred_flavor = (uint32_t)msg.rm_call.cb_cred.oa_flavor;
	out->cred_len = msg.rm_call.cb_cred.oa_length;
	out->verf_flavor = (uint32_t)msg.rm_call.cb_verf.oa_flavor;
	out->verf_len = msg.rm_call.cb_verf.oa_length;
	if (out->cred_len <= MAX_AUTH_BYTES)
		memcpy(out->cred, area, out->cred_len);
	return (1);
}

int
krpc_emu_svc_reply(SVCXPRT *xprt, uint32_t xid, uint32_t stat, struct mbuf *m, uint32_t *seq)
{
	struct rpc_msg rply;

	memset(&rply, 0, sizeof(rply));
	rply.rm_xid = xid;
	rply.rm_direction = REPLY;
	rply.rm_reply.rp_stat = MSG_ACCEPTED;
	rply.acpted_rply.ar_verf.oa_flavor = AUTH_NONE;
	rply.acpted_rply.ar_verf.oa_base = NULL;
	rply.acpted_rply.ar_verf.oa_length = 0;
	rply.acpted_rply.ar_stat = (enum accept_stat)stat;
	if (stat == PROG_MISMATCH) {
		rply.acpted_rply.ar_vers.low = 3;
		rply.acpted_rply.ar_vers.high = 3;
	}
	return (SVC_REPLY(xprt, &rply, NULL, m, seq));
}

int
krpc_emu_svc_stat(SVCXPRT *xprt)
{
	return ((int)SVC_STAT(xprt));
}

int
krpc_emu_svc_ack(SVCXPRT *xprt, uint32_t *ack)
{
	return (SVC_ACK(xprt, ack));
}

int
krpc_emu_svc_control(SVCXPRT *xprt, uint32_t rq)
{
	return (SVC_CONTROL(xprt, rq, NULL));
}

int
krpc_emu_svc_control_arg(SVCXPRT *xprt, uint32_t rq, void *in)
{
	return (SVC_CONTROL(xprt, rq, in));
}

void
krpc_emu_svc_release(SVCXPRT *xprt)
{
	xprt_unregister(xprt);
	svc_release(xprt);
}

uint64_t
krpc_emu_svc_addrs(SVCXPRT *xprt, struct sockaddr_storage *l, struct sockaddr_storage *r)
{
	/* As svc_getreq's consumers: under xp_lock, which the transport initialised. */
	sx_xlock(&xprt->xp_lock);
	*l = xprt->xp_ltaddr;
	*r = xprt->xp_rtaddr;
	sx_xunlock(&xprt->xp_lock);
	return (xprt->xp_sockref);
}
