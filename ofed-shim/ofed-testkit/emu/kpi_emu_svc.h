/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: the subset of FreeBSD 14's kernel sys/rpc/svc.h and rpc_msg.h that
 * ../c/krpc_rdma_svc.c uses, with FreeBSD's names and values: struct rpc_msg (call_body,
 * reply_body, accepted_reply, rejected_reply and their macros), enum xprt_stat, struct
 * xp_ops (the kernel's: xp_recv with the args mbuf chain, xp_stat, xp_ack, xp_reply taking
 * the results chain, xp_destroy, xp_control), SVCXPRT with the fields the transport and the
 * pool use (xp_refs, xp_lock, xp_pool, xp_registered, xp_active, xp_ops, xp_netid,
 * xp_ltaddr, xp_rtaddr, xp_p1..p3, xp_sockref), the
 * SVC_* macros, svc_xprt_alloc / svc_xprt_free, xprt_register / xprt_unregister /
 * xprt_active / xprt_inactive / xprt_inactive_self.
 *
 * The pool is a stand-in for svc.c's: SVCPOOL has a mutex and a condition; xprt_active
 * sets xp_active (only for a registered transport, as FreeBSD) and wakes the pool's
 * threads, which the tests are: krpc_emu_svc_wait_active sleeps until a transport is
 * active, as svc_run_internal's threads do, and only then calls SVC_RECV.
 */
#ifndef KRPC_KPI_EMU_SVC_H
#define KRPC_KPI_EMU_SVC_H

#include "kpi_emu.h"
#include "kpi_emu_rpc.h"

/* ---- rpc/rpc_msg.h ------------------------------------------------------------------ */

enum reply_stat { MSG_ACCEPTED = 0, MSG_DENIED = 1 };
enum accept_stat {
	SUCCESS = 0,
	PROG_UNAVAIL = 1,
	PROG_MISMATCH = 2,
	PROC_UNAVAIL = 3,
	GARBAGE_ARGS = 4,
	SYSTEM_ERR = 5
};
enum reject_stat { RPC_MISMATCH = 0, AUTH_ERROR = 1 };

struct accepted_reply {
	struct opaque_auth ar_verf;
	enum accept_stat ar_stat;
	union {
		struct {
			rpcvers_t low;
			rpcvers_t high;
		} AR_versions;
		struct {
			caddr_t where;
			xdrproc_t proc;
		} AR_results;
	} ru;
#define ar_results	ru.AR_results
#define ar_vers		ru.AR_versions
};

struct rejected_reply {
	enum reject_stat rj_stat;
	union {
		struct {
			rpcvers_t low;
			rpcvers_t high;
		} RJ_versions;
		enum auth_stat RJ_why;
	} ru;
#define rj_vers	ru.RJ_versions
#define rj_why	ru.RJ_why
};

struct reply_body {
	enum reply_stat rp_stat;
	union {
		struct accepted_reply RP_ar;
		struct rejected_reply RP_dr;
	} ru;
#define rp_acpt	ru.RP_ar
#define rp_rjct	ru.RP_dr
};

struct call_body {
	rpcvers_t cb_rpcvers;
	rpcprog_t cb_prog;
	rpcvers_t cb_vers;
	rpcproc_t cb_proc;
	struct opaque_auth cb_cred;
	struct opaque_auth cb_verf;
};

struct rpc_msg {
	uint32_t rm_xid;
	enum msg_type rm_direction;
	union {
		struct call_body RM_cmb;
		struct reply_body RM_rmb;
	} ru;
#define rm_call		ru.RM_cmb
#define rm_reply	ru.RM_rmb
};
#define acpted_rply	ru.RM_rmb.ru.RP_ar
#define rjcted_rply	ru.RM_rmb.ru.RP_dr

/* ---- rpc/svc.h ---------------------------------------------------------------------- */

enum xprt_stat { XPRT_DIED, XPRT_MOREREQS, XPRT_IDLE };

#define KRPC_EMU_POOL_NEW	64

typedef struct __rpc_svcpool {
	pthread_mutex_t sp_lock;
	pthread_cond_t sp_cond;		/* the pool's threads sleep here */
	uint64_t sp_active_calls;	/* xprt_active calls */
	uint64_t sp_activations;	/* ... of them that activated a transport */
	/* Tests only (krpc_emu_svcpool_track): transports registered since, each with a
	 * reference, for the test to take (krpc_emu_svcpool_take_new). */
	int sp_track;
	struct __rpc_svcxprt *sp_new[KRPC_EMU_POOL_NEW];
	u_int sp_new_head, sp_new_count;
} SVCPOOL;

struct sockaddr;
struct mbuf;

typedef struct __rpc_svcxprt {
	volatile u_int xp_refs;
	struct sx xp_lock;	/* every transport's create sx_inits it (svc_vc.c:307) */
	struct __rpc_svcpool *xp_pool;
	bool_t xp_registered;
	bool_t xp_active;
	const struct xp_ops {
		bool_t (*xp_recv)(struct __rpc_svcxprt *, struct rpc_msg *, struct sockaddr **,
		    struct mbuf **);
		enum xprt_stat (*xp_stat)(struct __rpc_svcxprt *);
		bool_t (*xp_ack)(struct __rpc_svcxprt *, uint32_t *);
		bool_t (*xp_reply)(struct __rpc_svcxprt *, struct rpc_msg *, struct sockaddr *,
		    struct mbuf *, uint32_t *);
		void (*xp_destroy)(struct __rpc_svcxprt *);
		bool_t (*xp_control)(struct __rpc_svcxprt *, const u_int, void *);
	} *xp_ops;
	char *xp_netid;
	struct sockaddr_storage xp_ltaddr;	/* local transport address */
	struct sockaddr_storage xp_rtaddr;	/* remote transport address */
	void *xp_p1;
	void *xp_p2;
	void *xp_p3;
	int xp_type;
	int xp_idletimeout;
	uint64_t xp_sockref;	/* the reply cache's connection identity (nfs_nfsdcache.c) */
} SVCXPRT;

#define SVC_RECV(xprt, msg, addr, args) \
	(*(xprt)->xp_ops->xp_recv)((xprt), (msg), (addr), (args))
#define SVC_STAT(xprt)	(*(xprt)->xp_ops->xp_stat)(xprt)
#define SVC_ACK(xprt, ack) \
	((xprt)->xp_ops->xp_ack == NULL ? FALSE : \
	    ((ack) == NULL ? TRUE : (*(xprt)->xp_ops->xp_ack)((xprt), (ack))))
#define SVC_REPLY(xprt, msg, addr, m, seq) \
	(*(xprt)->xp_ops->xp_reply)((xprt), (msg), (addr), (m), (seq))
#define SVC_DESTROY(xprt)	(*(xprt)->xp_ops->xp_destroy)(xprt)
#define SVC_RELEASE(xprt)	svc_release(xprt)
/* As svc.h: refcount_acquire(&xp_refs). */
#define SVC_ACQUIRE(xprt) \
	((void)__atomic_add_fetch(&(xprt)->xp_refs, 1, __ATOMIC_ACQ_REL))
#define SVC_CONTROL(xprt, rq, in) \
	(*(xprt)->xp_ops->xp_control)((xprt), (rq), (in))

SVCXPRT *svc_xprt_alloc(void);
void svc_xprt_free(SVCXPRT *xprt);
void svc_release(SVCXPRT *xprt);
void xprt_register(SVCXPRT *xprt);
void xprt_unregister(SVCXPRT *xprt);
void xprt_active(SVCXPRT *xprt);
void xprt_inactive(SVCXPRT *xprt);
void xprt_inactive_self(SVCXPRT *xprt);

/* ---- tests only ---------------------------------------------------------------------- */

SVCPOOL *krpc_emu_svcpool_create(void);
void krpc_emu_svcpool_destroy(SVCPOOL *pool);
/* Record the transports registered with pool from now on (on != 0), each with a reference
 * the test takes with krpc_emu_svcpool_take_new (NULL: none new) and drops with
 * krpc_emu_svc_release (which also unregisters it) or svc_release. */
void krpc_emu_svcpool_track(SVCPOOL *pool, int on);
SVCXPRT *krpc_emu_svcpool_take_new(SVCPOOL *pool);
/* Sleep until xprt is active (1) or timeout_ms passed (0): a pool thread's wait. */
int krpc_emu_svc_wait_active(SVCXPRT *xprt, uint32_t timeout_ms);
/* xprt_active calls (every one, and those that activated an inactive transport). */
void krpc_emu_svc_activations(SVCPOOL *pool, uint64_t *calls, uint64_t *activations);

/* A received call, flat (struct rpc_msg's call_body and the credential bytes). */
struct krpc_emu_svc_msg {
	uint32_t xid;
	uint32_t direction;
	uint32_t rpcvers;
	uint32_t prog;
	uint32_t vers;
	uint32_t proc;
	uint32_t cred_flavor;
	uint32_t cred_len;
	uint32_t verf_flavor;
	uint32_t verf_len;
	uint8_t cred[MAX_AUTH_BYTES];
};

/* SVC_RECV as svc_getreq calls it (cb_cred / cb_verf over a credential area); the bool_t. */
int krpc_emu_svc_recv(SVCXPRT *xprt, struct krpc_emu_svc_msg *out, struct mbuf **args);
/* SVC_REPLY of MSG_ACCEPTED with an AUTH_NONE verifier and accept_stat stat (results m for
 * SUCCESS, consumed), as svc_sendreply_mbuf / svcerr_*; the bool_t and *seq. */
int krpc_emu_svc_reply(SVCXPRT *xprt, uint32_t xid, uint32_t stat, struct mbuf *m,
    uint32_t *seq);
/* SVC_STAT, SVC_ACK (with a non-NULL ack), SVC_CONTROL(rq, NULL), SVC_CONTROL(rq, in). */
int krpc_emu_svc_stat(SVCXPRT *xprt);
int krpc_emu_svc_ack(SVCXPRT *xprt, uint32_t *ack);
int krpc_emu_svc_control(SVCXPRT *xprt, uint32_t rq);
int krpc_emu_svc_control_arg(SVCXPRT *xprt, uint32_t rq, void *in);
/* What svc_getreq does for XPRT_DIED and the last SVC_RELEASE: xprt_unregister, then the
 * reference drop that calls SVC_DESTROY. */
void krpc_emu_svc_release(SVCXPRT *xprt);
/* Transports svc_xprt_free'd with xp_lock still sx_init'ed (not sx_destroy'ed). */
uint64_t krpc_emu_svc_freed_locked(void);
/* xp_sockref, and xp_ltaddr / xp_rtaddr copied out (the host's struct sockaddr_storage). */
uint64_t krpc_emu_svc_addrs(SVCXPRT *xprt, struct sockaddr_storage *l,
    struct sockaddr_storage *r);

#endif /* KRPC_KPI_EMU_SVC_H */
