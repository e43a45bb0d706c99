/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: the subset of FreeBSD 14's kernel sys/rpc (clnt.h, clnt_stat.h,
 * auth.h, rpc_msg.h, types.h) and of sleep(9) / hz / ticks that ../c/krpc_rdma_clnt.c
 * uses, with FreeBSD's names and values: CLIENT with the kernel's struct clnt_ops (cl_call
 * taking the args mbuf chain and returning the results chain), enum clnt_stat, struct
 * rpc_err, struct rpc_callextra, AUTH with ah_cred / ah_verf and authnone_create, the CL*
 * requests and CLNT_* macros; msleep / wakeup (one sleep queue: every wakeup wakes every
 * sleeper, which FreeBSD's callers must tolerate anyway), tvtohz, ticks at hz = 1000.
 * No XDR: xdrproc_t and XDR exist only as the types the ops table names.
 */
#ifndef KRPC_KPI_EMU_RPC_H
#define KRPC_KPI_EMU_RPC_H

#include <endian.h>
#include <sys/time.h>
#include <sys/types.h>

#include "kpi_emu.h"

/* ---- sys/param.h, sys/kernel.h, sleep(9) ------------------------------------------- */

#ifndef roundup2
#define roundup2(x, y)	(((x) + ((y) - 1)) & (~((__typeof(x))(y) - 1)))
#endif
#define PCATCH		0x100
#ifndef ERESTART
#define ERESTART	(-1)
#endif
#ifndef EWOULDBLOCK
#define EWOULDBLOCK	EAGAIN
#endif

#define hz		1000
int krpc_emu_ticks(void);
#define ticks		krpc_emu_ticks()
int tvtohz(struct timeval *tv);
/* Sleep on chan, releasing mtx (re-taken before returning); timo ticks (0: forever).
 * 0 when woken, EWOULDBLOCK on timeout; EINTR or ERESTART only for a PCATCH sleep a test
 * armed with krpc_emu_msleep_interrupt_next (a signal caught: sleepq_catch_signals). */
int msleep(const void *chan, struct mtx *mtx, int pri, const char *wmesg, int timo);
/* Not FreeBSD's (tests): the next msleep with PCATCH returns `error` (EINTR, or ERESTART:
 * krpc_emu_erestart()) without sleeping, as when a signal is pending; 0 disarms. */
void krpc_emu_msleep_interrupt_next(int error);
int krpc_emu_erestart(void);
/* Not FreeBSD's (tests): msleep calls made so far (every thread). */
uint64_t krpc_emu_msleep_calls(void);
/* Not FreeBSD's (tests): microtime as FreeBSD's getmicrotime(9) (CLOCK_REALTIME). */
void getmicrotime(struct timeval *tv);
/* Not FreeBSD's: *abs = the CLOCK_REALTIME time `ms` milliseconds from now, a
 * pthread_cond_timedwait deadline (msleep's, and the svc pool's in kpi_emu_svc.c). */
void krpc_emu_deadline(struct timespec *abs, uint32_t ms);
void wakeup(const void *chan);
/* time_uptime: whole seconds since the emulation started (CLOCK_MONOTONIC). */
long krpc_emu_uptime(void);
#define time_uptime	krpc_emu_uptime()

/* ---- callout(9), the callout_init_mtx flavour -------------------------------------------- */

/*
 * One thread per callout: callout_reset (re)arms it, and at the deadline the thread takes the
 * callout's mutex and calls the function with it held, as FreeBSD's softclock does for a
 * callout_init_mtx callout; callout_stop under that mutex cancels a pending call;
 * callout_drain (without the mutex) cancels, waits for a running call and ends the thread.
 * Not emulated: callout_init without a mutex, return values beyond pending/not.
 */
struct callout {
	pthread_mutex_t	c_lock;		/* the fields below */
	pthread_cond_t	c_cv;
	pthread_t	c_thread;
	struct mtx	*c_mtx;
	void		(*c_fn)(void *);
	void		*c_arg;
	uint64_t	c_due_ms;	/* 0: not pending */
	int		c_started;
	int		c_stop;
};
void callout_init_mtx(struct callout *c, struct mtx *mtx, int flags);
int callout_reset(struct callout *c, int ticks_, void (*fn)(void *), void *arg);
int callout_stop(struct callout *c);
int callout_drain(struct callout *c);

/* ---- rpc/types.h -------------------------------------------------------------------- */

typedef int32_t bool_t;
typedef int32_t enum_t;
typedef uint32_t rpcprog_t;
typedef uint32_t rpcvers_t;
typedef uint32_t rpcproc_t;
#ifndef TRUE
#define TRUE	1
#define FALSE	0
#endif

typedef struct __rpc_xdr XDR;
typedef bool_t (*xdrproc_t)(XDR *, ...);

/* ---- rpc/rpc_msg.h ------------------------------------------------------------------ */

#define RPC_MSG_VERSION	((uint32_t)2)
enum msg_type { CALL = 0, REPLY = 1 };

/* ---- rpc/auth.h --------------------------------------------------------------------- */

#define MAX_AUTH_BYTES	400
#define AUTH_NONE	0
#define AUTH_NULL	0
#define AUTH_SYS	1
#define AUTH_UNIX	AUTH_SYS

enum auth_stat {
	AUTH_OK = 0,
	AUTH_BADCRED = 1,
	AUTH_REJECTEDCRED = 2,
	AUTH_BADVERF = 3,
	AUTH_REJECTEDVERF = 4,
	AUTH_TOOWEAK = 5,
	AUTH_INVALIDRESP = 6,
	AUTH_FAILED = 7,
};

struct opaque_auth {
	enum_t oa_flavor;
	caddr_t oa_base;
	u_int oa_length;
};

typedef struct __auth {
	struct opaque_auth ah_cred;
	struct opaque_auth ah_verf;
	const struct auth_ops {
		void (*ah_destroy)(struct __auth *);
	} *ah_ops;
	void *ah_private;
} AUTH;

#define AUTH_DESTROY(auth)	((*((auth)->ah_ops->ah_destroy))(auth))
/* The one AUTH_NONE handle (as FreeBSD's authnone_create). */
AUTH *authnone_create(void);

/* ---- rpc/clnt_stat.h, rpc/clnt.h ---------------------------------------------------- */

enum clnt_stat {
	RPC_SUCCESS = 0,
	RPC_CANTENCODEARGS = 1,
	RPC_CANTDECODERES = 2,
	RPC_CANTSEND = 3,
	RPC_CANTRECV = 4,
	RPC_TIMEDOUT = 5,
	RPC_VERSMISMATCH = 6,
	RPC_AUTHERROR = 7,
	RPC_PROGUNAVAIL = 8,
	RPC_PROGVERSMISMATCH = 9,
	RPC_PROCUNAVAIL = 10,
	RPC_CANTDECODEARGS = 11,
	RPC_SYSTEMERROR = 12,
	RPC_UNKNOWNHOST = 13,
	RPC_UNKNOWNPROTO = 17,
	RPC_PMAPFAILURE = 14,
	RPC_PROGNOTREGISTERED = 15,
	RPC_FAILED = 16,
	RPC_INTR = 18,
	RPC_UNKNOWNADDR = 19,
	RPC_TLIERROR = 20,
	RPC_NOBROADCAST = 21,
	RPC_N2AXLATEFAILURE = 22,
	RPC_UDERROR = 23,
	RPC_INPROGRESS = 24,
	RPC_STALERACHANDLE = 25,
	RPC_CANTCONNECT = 26,
	RPC_SYSTEMERROR_UNUSED = 27,
};

struct rpc_err {
	enum clnt_stat re_status;
	union {
		int RE_errno;
		enum auth_stat RE_why;
		struct {
			rpcvers_t low;
			rpcvers_t high;
		} RE_vers;
		struct {
			int32_t s1;
			int32_t s2;
		} RE_lb;
	} ru;
#define re_errno	ru.RE_errno
#define re_why		ru.RE_why
#define re_vers		ru.RE_vers
#define re_lb		ru.RE_lb
};

struct rpc_timers;
typedef void rpc_feedback(int cmd, int procnum, void *);

struct rpc_callextra {
	AUTH *rc_auth;
	rpc_feedback *rc_feedback;
	void *rc_feedback_arg;
	struct rpc_timers *rc_timers;
	struct rpc_err rc_err;
};

struct mbuf;

typedef struct __rpc_client {
	volatile u_int cl_refs;
	AUTH *cl_auth;
	const struct clnt_ops {
		enum clnt_stat (*cl_call)(struct __rpc_client *, struct rpc_callextra *,
		    rpcproc_t, struct mbuf *, struct mbuf **, struct timeval);
		void (*cl_abort)(struct __rpc_client *);
		void (*cl_geterr)(struct __rpc_client *, struct rpc_err *);
		bool_t (*cl_freeres)(struct __rpc_client *, xdrproc_t, void *);
		void (*cl_close)(struct __rpc_client *);
		void (*cl_destroy)(struct __rpc_client *);
		bool_t (*cl_control)(struct __rpc_client *, u_int, void *);
	} *cl_ops;
	void *cl_private;
	char *cl_netid;
	char *cl_tp;
} CLIENT;

#define CLNT_CALL_MBUF(rh, ext, proc, mreq, mrepp, secs) \
	((*(rh)->cl_ops->cl_call)(rh, ext, proc, mreq, mrepp, secs))
#define CLNT_ABORT(rh)		((*(rh)->cl_ops->cl_abort)(rh))
#define CLNT_GETERR(rh, errp)	((*(rh)->cl_ops->cl_geterr)(rh, errp))
#define CLNT_FREERES(rh, xres, resp) ((*(rh)->cl_ops->cl_freeres)(rh, xres, resp))
#define CLNT_CLOSE(rh)		((*(rh)->cl_ops->cl_close)(rh))
#define CLNT_DESTROY(rh)	((*(rh)->cl_ops->cl_destroy)(rh))
#define CLNT_CONTROL(cl, rq, in) ((*(cl)->cl_ops->cl_control)(cl, rq, in))

#define CLSET_TIMEOUT		1
#define CLGET_TIMEOUT		2
#define CLGET_XID		10
#define CLSET_XID		11
#define CLGET_VERS		12
#define CLSET_VERS		13
#define CLGET_PROG		14
#define CLSET_PROG		15
#define CLSET_WAITCHAN		21
#define CLGET_WAITCHAN		22
#define CLSET_INTERRUPTIBLE	23
#define CLGET_INTERRUPTIBLE	24
#define CLSET_RETRIES		25
#define CLGET_RETRIES		26
#define CLSET_BACKCHANNEL	29
#define CLSET_TLS		30

/* ---- tests only ---------------------------------------------------------------------- */

/* struct rpc_err flattened (Rust reads no FreeBSD layout). */
struct krpc_emu_rpc_err {
	int32_t status;		/* re_status */
	int32_t err;		/* re_errno / re_why */
	uint32_t low;
	uint32_t high;
};

/* CLNT_CALL_MBUF(cl, &ext, proc, args, rep, timeout) with ext.rc_auth = NULL, then
 * CLNT_GETERR; both errors flattened (ext's and the CLIENT's). Returns re_status. */
int krpc_emu_clnt_call(CLIENT *cl, uint32_t proc, struct mbuf *args, struct mbuf **rep,
    uint32_t timeout_ms, struct krpc_emu_rpc_err *ext_err, struct krpc_emu_rpc_err *cl_err);
/* CLNT_CONTROL with a uint32_t / struct timeval (ms) argument; the bool_t. */
int krpc_emu_clnt_control_u32(CLIENT *cl, uint32_t req, uint32_t *val);
int krpc_emu_clnt_control_timeout(CLIENT *cl, uint32_t req, int64_t *ms);
void krpc_emu_clnt_close(CLIENT *cl);
void krpc_emu_clnt_destroy(CLIENT *cl);
/* An AUTH_SYS handle whose credential body (the XDR of authsys_parms, as authunix_create
 * writes it) is a copy of `body` (at most MAX_AUTH_BYTES), verifier AUTH_NONE; it replaces
 * cl->cl_auth (the old one AUTH_DESTROYed), as a krpc consumer sets cl_auth. 1, or 0 when
 * `len` is too large or without memory (cl_auth unchanged). */
int krpc_emu_clnt_set_authsys(CLIENT *cl, const uint8_t *body, uint32_t len);
/* AUTH_DESTROY calls of the AUTH_SYS handles above so far; cl->cl_auth; AUTH_DESTROY(a), as
 * the consumer that set cl_auth does after CLNT_DESTROY (clnt_vc_destroy leaves it). */
uint64_t krpc_emu_auth_destroyed(void);
AUTH *krpc_emu_clnt_auth(CLIENT *cl);
void krpc_emu_auth_destroy(AUTH *a);

#endif /* KRPC_KPI_EMU_RPC_H */
