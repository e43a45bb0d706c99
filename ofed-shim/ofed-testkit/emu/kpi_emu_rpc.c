/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: sleep(9), ticks, tvtohz and the AUTH_NONE handle of the emulated
 * sys/rpc (kpi_emu_rpc.h), and the test helpers that call a CLIENT through its ops table.
 */
#include <string.h>
#include <time.h>

#include "kpi_emu.h"
#include "kpi_emu_rpc.h"

/* One sleep queue: a generation bumped by every wakeup. */
static pthread_mutex_t sq_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sq_cond = PTHREAD_COND_INITIALIZER;
static uint64_t sq_gen;
static uint64_t sq_calls;
static int sq_interrupt;	/* the next PCATCH sleep's error (0: none) */

static uint64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000);
}

static uint64_t uptime_base;

long
krpc_emu_uptime(void)
{
	uint64_t now = now_ms(), base;

	base = __atomic_load_n(&uptime_base, __ATOMIC_ACQUIRE);
	if (base == 0) {
		uint64_t zero = 0;

		__atomic_compare_exchange_n(&uptime_base, &zero, now, 0, __ATOMIC_ACQ_REL,
		    __ATOMIC_ACQUIRE);
		base = __atomic_load_n(&uptime_base, __ATOMIC_ACQUIRE);
	}
	/* FreeBSD's time_uptime starts at 1 at boot. */
	return ((long)((now - base) / 1000) + 1);
}

/* ---- callout(9) ---------------------------------------------------------------------- */

static void *
callout_thread(void *arg)
{
	struct callout *c = arg;
	struct timespec abs;
	void (*fn)(void *);
	void *fa;
	uint64_t now;

	pthread_mutex_lock(&c->c_lock);
	for (;;) {
		if (c->c_stop)
			break;
		now = now_ms();
		if (c->c_due_ms == 0) {
			pthread_cond_wait(&c->c_cv, &c->c_lock);
			continue;
		}
		if (now < c->c_due_ms) {
			krpc_emu_deadline(&abs, (uint32_t)(c->c_due_ms - now));
			pthread_cond_timedwait(&c->c_cv, &c->c_lock, &abs);
			continue;
		}
		pthread_mutex_unlock(&c->c_lock);
		/* As softclock for a callout_init_mtx callout: the call with the mutex held, and
		 * only if it was not stopped or re-armed for later meanwhile. */
		mtx_lock(c->c_mtx);
		pthread_mutex_lock(&c->c_lock);
		fn = NULL;
		fa = NULL;
		if (!c->c_stop && c->c_due_ms != 0 && now_ms() >= c->c_due_ms) {
			c->c_due_ms = 0;
			fn = c->c_fn;
			fa = c->c_arg;
		}
		pthread_mutex_unlock(&c->c_lock);
		if (fn != NULL)
			fn(fa);
		mtx_unlock(c->c_mtx);
		pthread_mutex_lock(&c->c_lock);
	}
	pthread_mutex_unlock(&c->c_lock);
	return (NULL);
}

void
callout_init_mtx(struct callout *c, struct mtx *mtx, int flags)
{
	(void)flags;
	memset(c, 0, sizeof(*c));
	pthread_mutex_init(&c->c_lock, NULL);
	pthread_cond_init(&c->c_cv, NULL);
	c->c_mtx = mtx;
}

int
callout_reset(struct callout *c, int ticks_, void (*fn)(void *), void *arg)
{
	int pending;

	pthread_mutex_lock(&c->c_lock);
	pending = c->c_due_ms != 0;
	c->c_fn = fn;
	c->c_arg = arg;
	c->c_due_ms = now_ms() + (uint64_t)(ticks_ > 0 ? ticks_ : 1) * 1000 / hz;
	if (!c->c_started) {
		c->c_started = 1;
		pthread_create(&c->c_thread, NULL, callout_thread, c);
	}
	pthread_cond_broadcast(&c->c_cv);
	pthread_mutex_unlock(&c->c_lock);
	return (pending);
}

int
callout_stop(struct callout *c)
{
	int pending;

	pthread_mutex_lock(&c->c_lock);
	pending = c->c_due_ms != 0;
	c->c_due_ms = 0;
	pthread_mutex_unlock(&c->c_lock);
	return (pending);
}

int
callout_drain(struct callout *c)
{
	int pending, started;

	pthread_mutex_lock(&c->c_lock);
	pending = c->c_due_ms != 0;
	c->c_due_ms = 0;
	c->c_stop = 1;
	started = c->c_started;
	pthread_cond_broadcast(&c->c_cv);
	pthread_mutex_unlock(&c->c_lock);
	if (started)
		pthread_join(c->c_thread, NULL);
	pthread_mutex_destroy(&c->c_lock);
	pthread_cond_destroy(&c->c_cv);
	return (pending);
}

int
krpc_emu_ticks(void)
{
	return ((int)(uint32_t)now_ms());
}

int
tvtohz(struct timeval *tv)
{
	int64_t ms = (int64_t)tv->tv_sec * 1000 + tv->tv_usec / 1000;

	if (ms < 1)
		ms = 1;
	if (ms > INT32_MAX - 1)
		ms = INT32_MAX - 1;
	return ((int)ms + 1);	/* as FreeBSD: round up, plus one tick */
}

void
krpc_emu_deadline(struct timespec *abs, uint32_t ms)
{
	clock_gettime(CLOCK_REALTIME, abs);
	abs->tv_sec += ms / 1000;
	abs->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (abs->tv_nsec >= 1000000000L) {
		abs->tv_sec++;
		abs->tv_nsec -= 1000000000L;
	}
}

int
msleep(const void *chan, struct mtx *mtx, int pri, const char *wmesg, int timo)
{
	struct timespec abs;
	uint64_t gen;
	int rc = 0;

	(void)wmesg;
	if (krpc_emu_sx_at(chan))
		krpc_emu_panic("msleep on the address of an sx: FreeBSD's sx sleeps there (sleepq "
		    "type mismatch)");
	pthread_mutex_lock(&sq_lock);
	sq_calls++;
	if ((pri & PCATCH) != 0 && sq_interrupt != 0) {
		/* A signal pending: sleepq_catch_signals returns before sleeping (EINTR, or
		 * ERESTART for an SA_RESTART handler); the mutex is dropped and retaken. */
		rc = sq_interrupt;
		sq_interrupt = 0;
		pthread_mutex_unlock(&sq_lock);
		mtx_unlock(mtx);
		mtx_lock(mtx);
		return (rc);
	}
	gen = sq_gen;
	mtx_unlock(mtx);	/* a wakeup from here on bumps the generation we read */
	if (timo > 0)
		krpc_emu_deadline(&abs, (uint32_t)timo);
	while (sq_gen == gen) {
		if (timo > 0) {
			if (pthread_cond_timedwait(&sq_cond, &sq_lock, &abs) == ETIMEDOUT) {
				if (sq_gen == gen)
					rc = EWOULDBLOCK;
				break;
			}
		} else {
			pthread_cond_wait(&sq_cond, &sq_lock);
		}
	}
	pthread_mutex_unlock(&sq_lock);
	mtx_lock(mtx);
	return (rc);
}

void
krpc_emu_msleep_interrupt_next(int error)
{
	pthread_mutex_lock(&sq_lock);
	sq_interrupt = error;
	pthread_mutex_unlock(&sq_lock);
}

int
krpc_emu_erestart(void)
{
	return (ERESTART);
}

uint64_t
krpc_emu_msleep_calls(void)
{
	uint64_t n;

	pthread_mutex_lock(&sq_lock);
	n = sq_calls;
	pthread_mutex_unlock(&sq_lock);
	return (n);
}

void
getmicrotime(struct timeval *tv)
{
	gettimeofday(tv, NULL);
}

void
wakeup(const void *chan)
{
	if (krpc_emu_sx_at(chan))
		krpc_emu_panic("wakeup of the address of an sx: FreeBSD's sx sleeps there "
		    "(sleepq_broadcast: mismatch between sleep/wakeup and cv_*)");
	pthread_mutex_lock(&sq_lock);
	sq_gen++;
	pthread_cond_broadcast(&sq_cond);
	pthread_mutex_unlock(&sq_lock);
}

static void
authnone_destroy(AUTH *a)
{
	(void)a;
}

static const struct auth_ops authnone_ops = { .ah_destroy = authnone_destroy };
static AUTH authnone = {
	.ah_cred = { .oa_flavor = AUTH_NONE, .oa_base = NULL, .oa_length = 0 },
	.ah_verf = { .oa_flavor = AUTH_NONE, .oa_base = NULL, .oa_length = 0 },
	.ah_ops = &authnone_ops,
};

AUTH *
authnone_create(void)
{
	return (&authnone);
}

/* AUTH_SYS: the credential body is kept right behind the AUTH (one libc allocation). */
static uint64_t authsys_destroyed;

static void
authsys_destroy(AUTH *a)
{
	__atomic_fetch_add(&authsys_destroyed, 1, __ATOMIC_RELAXED);
	(free)(a);
}

uint64_t
krpc_emu_auth_destroyed(void)
{
	return (__atomic_load_n(&authsys_destroyed, __ATOMIC_RELAXED));
}

AUTH *
krpc_emu_clnt_auth(CLIENT *cl)
{
	return (cl->cl_auth);
}

void
krpc_emu_auth_destroy(AUTH *a)
{
	AUTH_DESTROY(a);
}

static const struct auth_ops authsys_ops = { .ah_destroy = authsys_destroy };

int
krpc_emu_clnt_set_authsys(CLIENT *cl, const uint8_t *body, uint32_t len)
{
	AUTH *a;

	if (len > MAX_AUTH_BYTES)
		return (0);
	a = (calloc)(1, sizeof(*a) + len);
	if (a == NULL)
		return (0);
	memcpy(a + 1, body, len);
	a->ah_cred.oa_flavor = AUTH_SYS;
	a->ah_cred.oa_base = (caddr_t)(a + 1);
	a->ah_cred.oa_length = len;
	a->ah_verf.oa_flavor = AUTH_NONE;
	a->ah_verf.oa_base = NULL;
	a->ah_verf.oa_length = 0;
	a->ah_ops = &authsys_ops;
	if (cl->cl_auth != NULL)
		AUTH_DESTROY(cl->cl_auth);
	cl->cl_auth = a;
	return (1);
}

static void
flat_err(const struct rpc_err *e, struct krpc_emu_rpc_err *out)
{
	out->status = e->re_status;
	out->low = out->high = 0;
	out->err = 0;
	switch (e->re_status) {
	case RPC_VERSMISMATCH:
	case RPC_PROGVERSMISMATCH:
		out->low = e->re_vers.low;
		out->high = e->re_vers.high;
		break;
	case RPC_AUTHERROR:
		out->err = e->re_why;
		break;
	default:
		out->err = e->re_errno;
		break;
	}
}

int
krpc_emu_clnt_call(CLIENT *cl, uint32_t proc, struct mbuf *args, struct mbuf **rep,
    uint32_t timeout_ms, struct krpc_emu_rpc_err *ext_err, struct krpc_emu_rpc_err *cl_err)
{
	struct rpc_callextra ext;
	struct rpc_err e;
	struct timeval tv;
	enum clnt_stat st;

	memset(&ext, 0, sizeof(ext));
	tv.tv_sec = timeout_ms / 1000;
	tv.tv_usec = (timeout_ms % 1000) * 1000;
	st = CLNT_CALL_MBUF(cl, &ext, proc, args, rep, tv);
	/* clnt_vc never returns RPC_SUCCESS without a results chain (FreeBSD 14.2's clnt_vc.c);
	 * NFS's newnfs_request mtod()s it. */
	if (st == RPC_SUCCESS && *rep == NULL)
		krpc_emu_panic("cl_call returned RPC_SUCCESS with a NULL results chain");
	flat_err(&ext.rc_err, ext_err);
	CLNT_GETERR(cl, &e);
	flat_err(&e, cl_err);
	return ((int)st);
}

int
krpc_emu_clnt_control_u32(CLIENT *cl, uint32_t req, uint32_t *val)
{
	return (CLNT_CONTROL(cl, req, val));
}

int
krpc_emu_clnt_control_timeout(CLIENT *cl, uint32_t req, int64_t *ms)
{
	struct timeval tv;
	bool_t ok;

	tv.tv_sec = *ms / 1000;
	tv.tv_usec = (*ms % 1000) * 1000;
	ok = CLNT_CONTROL(cl, req, &tv);
	*ms = (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
	return (ok);
}

void
krpc_emu_clnt_close(CLIENT *cl)
{
	CLNT_CLOSE(cl);
}

void
krpc_emu_clnt_destroy(CLIENT *cl)
{
	CLNT_DESTROY(cl);
}
