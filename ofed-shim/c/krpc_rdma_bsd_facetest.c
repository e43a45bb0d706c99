/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma: the krpc face against FreeBSD's own krpc, in FreeBSD's kernel. Only in a
 * krpc_rdma.ko built with SELFTEST=1 (`cargo xtask freebsd-kmod`); run by the self-test's
 * thread after the scenario suite (loader tunable krpc_rdma.facetest, default 1).
 *
 * clnt_rdma (krpc_rdma_clnt.c) and svc_rdma (krpc_rdma_svc.c) over one software-provider
 * connection (the Rust side's krpc_rdma_face_pair: FreeBSD has no software RDMA device), and
 * around them only FreeBSD's code: svcpool_create / svc_reg / svc_run's pool threads,
 * svc_getreq / svc_sendreply_mbuf / svcerr_* / svc_freereq (sys/rpc/svc.c), CLNT_CALL_MBUF,
 * UMA mbufs and clusters, M_EXTPG mbufs from mb_alloc_ext_plus_pages (kern_mbuf.c, the
 * allocator NFS uses) filled through the direct map, m_copym, msleep/wakeup with PCATCH,
 * taskqueue(9), WITNESS and INVARIANTS watching. The steps, each checked:
 *
 *   NULL; an NFSv3 WRITE of 1 MiB + 3 bytes as NFS builds it (XDR mbuf, the zero-length
 *   M_PROTO1 marker, M_EXTPG pages, the pad), whose data must reach the dispatch routine
 *   byte for byte (and as M_EXTPG mbufs); the same WRITE from an m_copym(9) copy (which
 *   loses the marker); a READ whose 1 MiB + 3 bytes the dispatch routine replies in M_EXTPG
 *   mbufs behind a marker, which must come back byte for byte through the write chunk;
 *   the stock-NFS mode both ways (the WRITE's data up in plain mbufs, a READ reply built
 *   without a marker in plain clusters sent by the write chunk, results in plain mbufs);
 *   PROC_UNAVAIL (svcerr_noproc), PROG_UNAVAIL and PROG_MISMATCH (svc.c's own answers);
 *   a timeout (the server answers after 2 s, the call gives up after 300 ms, later calls
 *   work); an abandon (the dispatch routine drops the call with svc_rdma_drop, the call
 *   times out, the context comes back: svc_rdma_get_stats' dropped); CLNT_CLOSE while a
 *   caller sleeps in CLNT_CALL_MBUF (it must return within 5 s, not RPC_SUCCESS and not a
 *   timeout); xp_destroy with a call outstanding (a request the dispatch routine held
 *   across the close, freed unanswered, holding the last reference); malformed call headers
 *   from the core's Requester to a second svc_rdma in the same pool (Rust:
 *   krpc_rdma_face_malformed); the idle timeout (a third connection with 1 s falls silent:
 *   closed, its SVCXPRT destroyed, the client's next call fails); the backchannel (RFC
 *   8167: a fourth connection with reverse slots reserved, krpc_rdma_face_pair_cb; the
 *   client's backchannel SVCXPRT, svc_rdma_create_backchannel + CLSET_BACKCHANNEL, served by
 *   the pool's threads with a callback program of its own; on the server's svc_rdma a
 *   clnt_rdma_bck_create CLIENT: CB_NULL, echo callbacks answered byte for byte, a 64 KiB
 *   callback refused RPC_CANTSEND; both transports gone after); listen / dial / reconnect
 *   over the software fabric (krpc_rdma_soft_listen / _dial: svc_rdma_listen_create's
 *   rendezvous transport, a reconnecting clnt_rdma_dialed client, a server restart with a
 *   call in progress answered once on the new connection with its XID). Then svc_exit,
 *   svcpool_destroy, CLNT_DESTROY, and the leak
 *   checks: no page reference left (krpc_rdma_face_close), no M_EXTPG mbuf of the bridge
 *   alive, every page wiring it took given back, no CLIENT or SVCXPRT of ours alive
 *   (krpc_rdma_busy, what MOD_UNLOAD checks). Along the way: xp_sockref set and xp_lock
 *   usable on the SVCXPRT.
 *
 * One console line per result: "krpc_rdma facetest: PASS: ..." or "... FAIL: <step>: ...",
 * then "krpc_rdma facetest: done, rc N, T s".
 *
 * Also the software provider's completion notifiers (krpc_soft_cq_*, called by the Rust
 * side's SoftFaceQp): a taskqueue task per side, so that the face's upcalls run in a context
 * of their own, as a CQ's completion handler does, never in the thread that posts.
 */
#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/kthread.h>
#include <sys/lock.h>
#include <sys/malloc.h>
#include <sys/module.h>
#include <sys/mbuf.h>
#include <sys/mutex.h>
#include <sys/proc.h>
#include <sys/sx.h>
#include <sys/taskqueue.h>
#include <sys/time.h>
#include <sys/endian.h>
#include <vm/vm.h>
#include <vm/pmap.h>
#include <vm/vm_page.h>
#include <rpc/rpc.h>

#include "krpc_rdma_clnt.h"
#include "krpc_rdma_mbuf.h"
#include "krpc_rdma_svc.h"

int krpc_facetest_run(void);

/* Exported by the Rust object (ofed-shim/ofed-testkit/src/selftest/face.rs). */
struct krpc_face_test;
struct krpc_face_test *krpc_rdma_face_open(void);
int krpc_rdma_face_pair(struct krpc_face_test *ft, struct krpc_clnt **clnt,
    struct krpc_svc **svc);
/* The same with cbslots reverse slots reserved at both ends (none enabled). */
int krpc_rdma_face_pair_cb(struct krpc_face_test *ft, uint32_t cbslots,
    struct krpc_clnt **clnt, struct krpc_svc **svc);
void krpc_rdma_face_close(struct krpc_face_test *ft, uint64_t *pages_left,
    uint64_t *pages_allocated);
int krpc_rdma_face_malformed(struct krpc_face_test *ft, SVCPOOL *pool, SVCXPRT **xprt,
    char *line, size_t len);
int krpc_rdma_soft_listen(struct krpc_face_test *ft, uint16_t port, struct krpc_listen **out);
int krpc_rdma_soft_dial(struct krpc_face_test *ft, uint16_t port, int reconnect,
    uint32_t max_reply, struct krpc_clnt **out);

/* Called by the Rust object (SoftFaceQp). */
struct krpc_soft_cq;
struct krpc_soft_cq *krpc_soft_cq_create(void);
void krpc_soft_cq_set_upcall(struct krpc_soft_cq *cq, void (*f)(void *), void *arg);
void krpc_soft_cq_kick(struct krpc_soft_cq *cq);
void krpc_soft_cq_destroy(struct krpc_soft_cq *cq);

static MALLOC_DEFINE(M_KRPC_FACETEST, "krpc_rdma_facetest", "krpc-rdma face test");
/* M_RPC (the callout freed below) is xdr.ko's: a kld resolves symbols in its direct deps. */
MODULE_DEPEND(krpc_rdma, xdr, 1, 1, 1);

static int krpc_facetest_on = 1;
TUNABLE_INT("krpc_rdma.facetest", &krpc_facetest_on);

/* ---- the software provider's notifiers ------------------------------------------------ */

struct krpc_soft_cq {
	struct task	sc_task;
	struct mtx	sc_lock;	/* sc_f, sc_arg */
	void		(*sc_f)(void *);
	void		*sc_arg;
};

static void
krpc_soft_cq_run(void *ctx, int pending __unused)
{
	struct krpc_soft_cq *cq = ctx;
	void (*f)(void *);
	void *arg;

	mtx_lock(&cq->sc_lock);
	f = cq->sc_f;
	arg = cq->sc_arg;
	mtx_unlock(&cq->sc_lock);
	if (f != NULL)
		f(arg);
}

struct krpc_soft_cq *
krpc_soft_cq_create(void)
{
	struct krpc_soft_cq *cq;

	cq = malloc(sizeof(*cq), M_KRPC_FACETEST, M_WAITOK | M_ZERO);
	mtx_init(&cq->sc_lock, "krpc_soft_cq", NULL, MTX_DEF);
	TASK_INIT(&cq->sc_task, 0, krpc_soft_cq_run, cq);
	return (cq);
}

/* Returns once no call of the previous upcall is running (the task drained). */
void
krpc_soft_cq_set_upcall(struct krpc_soft_cq *cq, void (*f)(void *), void *arg)
{
	mtx_lock(&cq->sc_lock);
	cq->sc_f = f;
	cq->sc_arg = arg;
	mtx_unlock(&cq->sc_lock);
	taskqueue_drain(taskqueue_thread, &cq->sc_task);
}

/*
 * A waiter for a software-fabric lock (a Rust spin lock, krpc_rdma::soft::lock), between
 * attempts: sleep a tick. A kernel thread is not time-sliced in kernel mode, so a waiter
 * that only spun could keep the holder, preempted on the same CPU, from ever running (an
 * nfsiod spun so, the nfsd thread holding the lock runnable behind it, every NFS call
 * stopped). The waiters hold no mutex (only the transports' sx locks). Boot-time (cold):
 * pause(9) DELAYs instead.
 */
void krpc_soft_relax(void);

void
krpc_soft_relax(void)
{
	pause("krpcsf", 1);
}

/* Any context, any lock held: taskqueue_enqueue coalesces a pending task. */
void
krpc_soft_cq_kick(struct krpc_soft_cq *cq)
{
	taskqueue_enqueue(taskqueue_thread, &cq->sc_task);
}

void
krpc_soft_cq_destroy(struct krpc_soft_cq *cq)
{
	krpc_soft_cq_set_upcall(cq, NULL, NULL);
	mtx_destroy(&cq->sc_lock);
	free(cq, M_KRPC_FACETEST);
}

/* ---- the test ------------------------------------------------------------------------- */

#define FT_PROG		100003	/* NFS_PROG */
#define FT_VERS		3
#define FT_READ		6
#define FT_WRITE	7
#define FT_BAD_PROC	99
#define FT_SLOW		100	/* answered after 2 s */
#define FT_DROP		101	/* dropped: svc_rdma_drop, never answered */
#define FT_HOLD		102	/* held across CLNT_CLOSE, then freed unanswered */
#define FT_RESTART	103	/* first: its connection ended unanswered; again (same XID): answered */
#define FT_PORT		20049	/* the software fabric's port of the listen / dial step */
/* The backchannel step: the NFSv4 callback program, served on the client's backchannel. */
#define FT_CB_PROG	0x40000000
#define FT_CB_VERS	1
#define FT_CB_ECHO	1	/* CB_COMPOUND's number: its arguments back, each byte + 1 */
#define FT_CB_SLOTS	2	/* reverse slots reserved and enabled at both ends */
#define FT_CB_LEN	200	/* an echo callback's argument bytes */
#define FT_CB_MAX	256	/* the most the callback service echoes */
#define FT_CB_BIG	(64 * 1024)	/* a callback beyond the inline size */
#define FT_N		((1 << 20) + 3)
#define FT_PAD		(roundup2(FT_N, 4) - FT_N)
#define FT_WSEED	41
#define FT_RSEED	42
/* WRITE3args before the data: fh<28>, offset, count, stable, data length. */
#define FT_WHEAD	(4 + 28 + 8 + 4 + 4 + 4)
/* READ3res before the data: status, no attributes, count, eof, data length. */
#define FT_RHEAD	(5 * 4)
#define FT_CHUNK	4096
/*
 * Whether a WRITE's data reaches the dispatch routine as M_EXTPG mbufs: in a kernel with
 * freebsd/patches/ (its <rpc/rpc_rdma.h>), svc_getreq maps them first (mb_unmapped_to_ext:
 * the same pages, mapped mbufs), so NFS's parsing never meets an unmapped mbuf.
 */
#if __has_include(<rpc/rpc_rdma.h>)
#define FT_EXTPG_UP	0
#else
#define FT_EXTPG_UP	1
#endif

static struct {
	struct mtx	lock;
	/* What the dispatch routine saw (under lock). */
	int		writes_ok;
	int		write_extpg;	/* M_EXTPG mbufs in the last WRITE's arguments */
	int		write_marker;	/* bytes in front of its marker, -1: none */
	int		reads;
	int		plain_reads;	/* 1: READ replies as ft_plain_chain (the stock step) */
	int		drop_rc;	/* svc_rdma_drop's answer, -1 before */
	int		hold;		/* 1: holding, 2: release, 3: freed */
	char		err[160];	/* the dispatch routine's first failure */
	/* The sleeper (CLNT_CLOSE test). */
	int		sleeper;	/* 1: in CLNT_CALL_MBUF, 2: returned */
	enum clnt_stat	sleeper_stat;
	int		sleeper_ticks;
	/* svc_run's thread: 1 running, 2 returned. */
	int		svc;
	/* The reconnect step: FT_RESTART calls seen, the first's XID, 1 when the dispatch
	 * routine may end the first one's connection; the caller's thread and result. */
	int		restart_seen;
	uint32_t	restart_xid;
	int		restart_go;
	int		restarter;	/* 1: in CLNT_CALL_MBUF, 2: returned */
	enum clnt_stat	restarter_stat;
	/* The backchannel step: the callbacks the callback service answered. */
	int		cb_null;
	int		cb_echo;
} ft;

static uint8_t
ft_byte(size_t i, uint8_t seed)
{
	return ((uint8_t)((uint8_t)i * 31 + seed) ^ (uint8_t)(i >> 11));
}

static void
ft_fail_server(const char *what)
{
	mtx_lock(&ft.lock);
	if (ft.err[0] == '\0')
		strlcpy(ft.err, what, sizeof(ft.err));
	mtx_unlock(&ft.lock);
}

/* An mbuf holding len bytes of p (len <= MCLBYTES). */
static struct mbuf *
ft_bytes(const void *p, int len)
{
	struct mbuf *m;

	m = len > MLEN ? m_getcl(M_WAITOK, MT_DATA, 0) : m_get(M_WAITOK, MT_DATA);
	if (len > 0)
		memcpy(mtod(m, void *), p, len);
	m->m_len = len;
	return (m);
}

/* Macklem's marker: a zero-length M_PROTO1 mbuf in front of the DDP data. */
static struct mbuf *
ft_marker(void)
{
	struct mbuf *m;

	m = m_get(M_WAITOK, MT_DATA);
	m->m_flags |= M_PROTO1;
	m->m_len = 0;
	return (m);
}

/*
 * len bytes of test data (seed) in M_EXTPG mbufs from mb_alloc_ext_plus_pages (anonymous
 * pages, freed by mb_free_mext_pgs), MBUF_PEXT_MAX_PGS pages each, filled through the
 * direct map; *lastp the last mbuf.
 */
static struct mbuf *
ft_extpg(int len, uint8_t seed, struct mbuf **lastp)
{
	struct mbuf *top = NULL, *last = NULL, *m;
	int off = 0, n, i, plen;
	uint8_t *p;

	while (off < len) {
		n = MIN(len - off, (int)(MBUF_PEXT_MAX_PGS * PAGE_SIZE));
		m = mb_alloc_ext_plus_pages(n, M_WAITOK);
		for (i = 0; i < m->m_epg_npgs; i++) {
			plen = MIN(PAGE_SIZE, n - i * PAGE_SIZE);
			p = (uint8_t *)PHYS_TO_DMAP(m->m_epg_pa[i]);
			for (int j = 0; j < plen; j++)
				p[j] = ft_byte(off + i * PAGE_SIZE + j, seed);
		}
		m->m_epg_1st_off = 0;
		m->m_epg_last_len = n - (m->m_epg_npgs - 1) * PAGE_SIZE;
		m->m_len = n;
		if (top == NULL)
			top = m;
		else
			last->m_next = m;
		last = m;
		off += n;
	}
	*lastp = last;
	return (top);
}

/* head (hlen bytes), the marker, len bytes of data (seed) as M_EXTPG, the XDR pad. */
static struct mbuf *
ft_ddp_chain(const void *head, int hlen, int len, uint8_t seed)
{
	static const char zero[4];
	struct mbuf *top, *m, *last;

	top = ft_bytes(head, hlen);
	top->m_next = m = ft_marker();
	m->m_next = ft_extpg(len, seed, &last);
	if (roundup2(len, 4) != len)
		last->m_next = ft_bytes(zero, roundup2(len, 4) - len);
	return (top);
}

/* hlen bytes of head, then len bytes of test data (seed) in ordinary clusters and the XDR
 * pad, no marker: a READ reply as FreeBSD 14.2's NFS server builds it (nfsrvd_read). */
static struct mbuf *
ft_plain_chain(const void *head, int hlen, int len, uint8_t seed)
{
	static const char zero[4];
	struct mbuf *top, *m, **mp;
	int at, n, j;

	top = ft_bytes(head, hlen);
	mp = &top->m_next;
	m = top;
	for (at = 0; at < len; at += n) {
		m = m_getcl(M_WAITOK, MT_DATA, 0);
		n = MIN(MCLBYTES, len - at);
		for (j = 0; j < n; j++)
			mtod(m, uint8_t *)[j] = ft_byte(at + j, seed);
		m->m_len = n;
		*mp = m;
		mp = &m->m_next;
	}
	if (roundup2(len, 4) != len)
		m->m_next = ft_bytes(zero, roundup2(len, 4) - len);
	return (top);
}

/* 0 if the chain's bytes [off, off + len) are the test data of seed; else the first bad. */
static int
ft_check_data(struct mbuf *m, int off, int len, uint8_t seed, uint8_t *buf)
{
	int at, n, j;

	for (at = 0; at < len; at += n) {
		n = MIN(FT_CHUNK, len - at);
		m_copydata(m, off + at, n, buf);
		for (j = 0; j < n; j++)
			if (buf[j] != ft_byte(at + j, seed))
				return (at + j + 1);
	}
	return (0);
}

static void
ft_count(struct mbuf *m, int *extpg, int *marker_at)
{
	int at = 0;

	*extpg = 0;
	*marker_at = -1;
	for (; m != NULL; m = m->m_next) {
		if ((m->m_flags & M_EXTPG) != 0)
			(*extpg)++;
		if (m->m_len == 0 && (m->m_flags & M_PROTO1) != 0 && *marker_at < 0)
			*marker_at = at;
		at += m->m_len;
	}
}

static uint32_t
ft_word(struct mbuf *m, int off)
{
	uint32_t v = 0;

	if (m_length(m, NULL) >= (u_int)(off + 4))
		m_copydata(m, off, 4, (caddr_t)&v);
	return (be32toh(v));
}

static void
ft_put(uint8_t *p, int at, uint32_t v)
{
	v = htobe32(v);
	memcpy(p + at, &v, 4);
}

/* The dispatch routine svc_executereq calls (a pool thread of svc_run). */
static void
ft_dispatch(struct svc_req *rq, SVCXPRT *xprt)
{
	struct mbuf *args, *m;
	uint8_t head[FT_RHEAD], *buf;
	rpcproc_t proc = rq->rq_proc;
	int extpg, marker, bad, len, i;

	switch (proc) {
	case NULLPROC:
		/* As svcerr_*: no results chain. */
		svc_sendreply_mbuf(rq, NULL);
		break;
	case FT_WRITE:
		args = rq->rq_args;
		rq->rq_args = NULL;
		len = m_length(args, NULL);
		ft_count(args, &extpg, &marker);
		buf = malloc(FT_CHUNK, M_KRPC_FACETEST, M_WAITOK);
		if (len != FT_WHEAD + FT_N + FT_PAD)
			ft_fail_server("WRITE: arguments of the wrong length");
		else if (ft_word(args, 40) != FT_N || ft_word(args, 48) != FT_N)
			ft_fail_server("WRITE: count or data length");
		else if ((bad = ft_check_data(args, FT_WHEAD, FT_N, FT_WSEED, buf)) != 0)
			ft_fail_server("WRITE: data differs");
		else {
			mtx_lock(&ft.lock);
			ft.writes_ok++;
			ft.write_extpg = extpg;
			ft.write_marker = marker;
			mtx_unlock(&ft.lock);
		}
		free(buf, M_KRPC_FACETEST);
		m_freem(args);
		memset(head, 0, sizeof(head));
		svc_sendreply_mbuf(rq, ft_bytes(head, 4));
		break;
	case FT_READ:
		if (ft_word(rq->rq_args, 40) != FT_N) {
			ft_fail_server("READ: count");
			svcerr_decode(rq);
			break;
		}
		ft_put(head, 0, 0);		/* NFS3_OK */
		ft_put(head, 4, 0);		/* no attributes */
		ft_put(head, 8, FT_N);		/* count */
		ft_put(head, 12, 1);		/* eof */
		ft_put(head, 16, FT_N);		/* data length */
		mtx_lock(&ft.lock);
		ft.reads++;
		i = ft.plain_reads;
		mtx_unlock(&ft.lock);
		m = i ? ft_plain_chain(head, FT_RHEAD, FT_N, FT_RSEED) :
		    ft_ddp_chain(head, FT_RHEAD, FT_N, FT_RSEED);
		svc_sendreply_mbuf(rq, m);
		break;
	case FT_SLOW:
		pause("ftslow", 2 * hz);
		svc_sendreply_mbuf(rq, NULL);
		break;
	case FT_DROP:
		bad = svc_rdma_drop(xprt, rq->rq_xid);
		mtx_lock(&ft.lock);
		ft.drop_rc = bad;
		wakeup(&ft.drop_rc);
		mtx_unlock(&ft.lock);
		break;
	case FT_RESTART:
		mtx_lock(&ft.lock);
		if (++ft.restart_seen == 1) {
			/* A server that dies with the call in progress: when the test says so
			 * (its listener is gone), the connection ends, the call unanswered. */
			ft.restart_xid = rq->rq_xid;
			wakeup(&ft.restart_seen);
			for (i = 0; ft.restart_go == 0 && i < 300; i++)
				msleep(&ft.restart_go, &ft.lock, 0, "ftrestart", hz / 10);
			mtx_unlock(&ft.lock);
			xprt_unregister(xprt);
			break;
		}
		bad = rq->rq_xid != ft.restart_xid;
		wakeup(&ft.restart_seen);
		mtx_unlock(&ft.lock);
		if (bad)
			ft_fail_server("RESTART: the call came again with a new XID");
		svc_sendreply_mbuf(rq, NULL);
		break;
	case FT_HOLD:
		mtx_lock(&ft.lock);
		ft.hold = 1;
		wakeup(&ft.hold);
		while (ft.hold != 2)
			msleep(&ft.hold, &ft.lock, 0, "fthold", hz);
		mtx_unlock(&ft.lock);
		/* Unanswered and not dropped: the Responder's context stays until xp_destroy. */
		break;
	default:
		svcerr_noproc(rq);
		break;
	}
	svc_freereq(rq);
	if (proc == FT_HOLD) {
		mtx_lock(&ft.lock);
		ft.hold = 3;
		wakeup(&ft.hold);
		mtx_unlock(&ft.lock);
	}
}

/*
 * The callback service of the backchannel step (a pool thread of svc_run, on the client's
 * backchannel SVCXPRT), as the Rust emu_rxe backchannel test's: CB_NULL answered with no
 * results, FT_CB_ECHO with its arguments back, each byte + 1 (so the results are the
 * service's, not the arguments come back), anything else PROC_UNAVAIL.
 */
static void
ft_cb_dispatch(struct svc_req *rq, SVCXPRT *xprt __unused)
{
	uint8_t b[FT_CB_MAX];
	int len, j;

	switch (rq->rq_proc) {
	case NULLPROC:
		mtx_lock(&ft.lock);
		ft.cb_null++;
		mtx_unlock(&ft.lock);
		svc_sendreply_mbuf(rq, NULL);
		break;
	case FT_CB_ECHO:
		len = (int)m_length(rq->rq_args, NULL);
		if (len > FT_CB_MAX) {
			ft_fail_server("callback: echo arguments too long");
			svcerr_decode(rq);
			break;
		}
		m_copydata(rq->rq_args, 0, len, (caddr_t)b);
		for (j = 0; j < len; j++)
			b[j]++;
		mtx_lock(&ft.lock);
		ft.cb_echo++;
		mtx_unlock(&ft.lock);
		svc_sendreply_mbuf(rq, ft_bytes(b, len));
		break;
	default:
		svcerr_noproc(rq);
		break;
	}
	svc_freereq(rq);
}

static void
ft_svc_thread(void *arg)
{
	SVCPOOL *pool = arg;

	svc_run(pool);
	mtx_lock(&ft.lock);
	ft.svc = 2;
	wakeup(&ft.svc);
	mtx_unlock(&ft.lock);
	kthread_exit();
}

static struct timeval
ft_tv(int ms)
{
	struct timeval tv;

	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	return (tv);
}

/* CLNT_CALL_MBUF; the caller keeps args (as newnfs_request frees nd_mreq itself). */
static enum clnt_stat
ft_call(CLIENT *cl, rpcproc_t proc, struct mbuf *args, struct mbuf **rep, int ms)
{
	*rep = NULL;
	return (CLNT_CALL_MBUF(cl, NULL, proc, args, rep, ft_tv(ms)));
}

static void
ft_sleeper(void *arg)
{
	CLIENT *cl = arg;
	struct mbuf *args, *rep;
	enum clnt_stat st;
	int start;

	args = m_get(M_WAITOK, MT_DATA);
	mtx_lock(&ft.lock);
	ft.sleeper = 1;
	mtx_unlock(&ft.lock);
	start = ticks;
	st = ft_call(cl, FT_HOLD, args, &rep, 30000);
	m_freem(args);
	m_freem(rep);
	mtx_lock(&ft.lock);
	ft.sleeper_stat = st;
	ft.sleeper_ticks = ticks - start;
	ft.sleeper = 2;
	wakeup(&ft.sleeper);
	mtx_unlock(&ft.lock);
	kthread_exit();
}

/* The reconnect step's caller: an FT_RESTART call that outlives its first connection. */
static void
ft_restarter(void *arg)
{
	CLIENT *cl = arg;
	struct mbuf *args, *rep;
	enum clnt_stat st;

	args = m_get(M_WAITOK, MT_DATA);
	st = ft_call(cl, FT_RESTART, args, &rep, 30000);
	m_freem(args);
	m_freem(rep);
	mtx_lock(&ft.lock);
	ft.restarter_stat = st;
	ft.restarter = 2;
	wakeup(&ft.restarter);
	mtx_unlock(&ft.lock);
	kthread_exit();
}

/*
 * The rendezvous transport over listener lh (taken: freed here on failure), given a
 * krpc_rdma_soft_listen result in *error: NULL and *error unless both succeeded.
 */
static SVCXPRT *
ft_listen_xprt(SVCPOOL *pool, struct krpc_listen *lh, int *error)
{
	SVCXPRT *lx;

	if (*error != 0)
		return (NULL);
	lx = svc_rdma_listen_create(pool, lh);
	if (lx == NULL) {
		krpc_listen_free(lh);
		*error = ENOMEM;
	}
	return (lx);
}

/* A listener on the software fabric's FT_PORT, registered with pool; NULL and *error. The
 * previous listener's port may still be closing (a pool thread's reference): retried 5 s. */
static SVCXPRT *
ft_listen(struct krpc_face_test *t, SVCPOOL *pool, int *error)
{
	struct krpc_listen *lh;
	int n;

	for (n = 0; (*error = krpc_rdma_soft_listen(t, FT_PORT, &lh)) == EADDRINUSE &&
	    n < 500; n++)
		pause("ftport", hz / 100 + 1);
	return (ft_listen_xprt(pool, lh, error));
}

#if __has_include(<rpc/rpc_rdma.h>)
/*
 * The software fabric as the krpc's RDMA transport (a FreeBSD tree with
 * freebsd/patches/): with the loader tunable krpc_rdma.soft_fabric=1, MOD_LOAD registers these
 * ops instead of rdma_cm's, so that FreeBSD's own NFS client (mount -o rdma) and nfsd
 * (vfs.nfsd.rdma_listen) connect through the fabric by port: the NFS boot of cargo xtask
 * freebsd-vm (xtask/freebsd/nfstest.c). Connections made here count their pages in one face
 * test state, made at the first call and kept while the module is loaded.
 */
#include <netinet/in.h>
#include <rpc/rpc_rdma.h>

static int krpc_soft_fabric;
TUNABLE_INT("krpc_rdma.soft_fabric", &krpc_soft_fabric);
static struct krpc_face_test *krpc_soft_ft;

static uint16_t
ft_sa_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohs(((const struct sockaddr_in *)sa)->sin_port));
	if (sa->sa_family == AF_INET6)
		return (ntohs(((const struct sockaddr_in6 *)sa)->sin6_port));
	return (0);
}

static CLIENT *
ft_soft_reconnect_create(struct vnet *vnet, const struct sockaddr *addr, rpcprog_t prog,
    rpcvers_t vers, size_t sendsz, size_t recvsz)
{
	struct krpc_clnt *h;
	int error;

	error = krpc_rdma_soft_dial(krpc_soft_ft, ft_sa_port(addr), 1,
	    recvsz > UINT32_MAX ? UINT32_MAX : (uint32_t)recvsz, &h);
	if (error != 0) {
		printf("krpc_rdma: soft fabric: dial port %u: error %d\n", ft_sa_port(addr),
		    error);
		return (NULL);
	}
	return (clnt_rdma_dialed(h, prog, vers, 1, NULL, &error));
}

static SVCXPRT *
ft_soft_listen(SVCPOOL *pool, struct vnet *vnet, const struct sockaddr *addr, int *error)
{
	struct krpc_listen *lh;

	*error = krpc_rdma_soft_listen(krpc_soft_ft, ft_sa_port(addr), &lh);
	return (ft_listen_xprt(pool, lh, error));
}

static struct rpc_rdma_ops ft_soft_ops = {
	.rro_version =		RPC_RDMA_OPS_VERSION,
	.rro_reconnect_create =	ft_soft_reconnect_create,
	.rro_listen =		ft_soft_listen,
};

struct rpc_rdma_ops *krpc_rdma_soft_ops(void);

struct rpc_rdma_ops *
krpc_rdma_soft_ops(void)
{
	if (!krpc_soft_fabric)
		return (NULL);
	if (krpc_soft_ft == NULL) {
		krpc_soft_ft = krpc_rdma_face_open();
		if (krpc_soft_ft == NULL)
			return (NULL);
		printf("krpc_rdma: the krpc's RDMA transport is the software fabric "
		    "(krpc_rdma.soft_fabric=1)\n");
	}
	return (&ft_soft_ops);
}
#endif

/* Sleep on ft.lock until *v == want or ms pass; 1 if it did. */
static int
ft_wait(int *v, int want, int ms)
{
	int start = ticks, ok;

	mtx_lock(&ft.lock);
	while (*v != want && ticks - start < ms * hz / 1000)
		msleep(v, &ft.lock, 0, "ftwait", hz / 10 + 1);
	ok = *v == want;
	mtx_unlock(&ft.lock);
	return (ok);
}

#define FT_LINE	256

/* One step's result on the console; a failure ends the steps (goto out). */
#define FT_CHECK(cond, ...) do {						\
	if (!(cond)) {								\
		snprintf(line, FT_LINE, __VA_ARGS__);				\
		printf("krpc_rdma facetest: FAIL: %s\n", line);			\
		rc = EIO;							\
		goto out;							\
	}									\
} while (0)

int
krpc_facetest_run(void)
{
	struct krpc_face_test *t;
	struct krpc_clnt *ch = NULL;
	struct krpc_svc *sh = NULL;
	struct krpc_svc_stats ss, ss0;
	struct krpc_clnt_stats cs;
	struct krpc_mbuf_counts mc0, mc1;
	struct rpc_err err;
	SVCPOOL *pool = NULL;
	SVCXPRT *xprt = NULL, *xprt2 = NULL, *xprt3, *xprt4, *lx = NULL, *bc = NULL;
	CLIENT *cl3 = NULL, *cl4 = NULL, *clb = NULL, *cbc = NULL;
	struct krpc_listen_stats ls;
	int restart_ticks = 0;
	u_int idle0, live0, cblive0, cllive0;
	struct svc_callout *sc;
	CLIENT *cl = NULL;
	struct mbuf *args = NULL, *copy = NULL, *rep = NULL, *cbargs = NULL;
	enum clnt_stat st;
	uint8_t whead[FT_WHEAD], rargs[FT_WHEAD - 8], *buf;
	char *line;
	uint64_t pages_left = 0, pages_alloc = 0, live[3];
	uint32_t u;
	int rc = 0, bad, extpg, marker, one = 1, start, i, j, len, svc_started = 0;

	if (!krpc_facetest_on)
		return (0);
	printf("krpc_rdma facetest: starting (clnt_rdma <-> svc_rdma over the soft provider, "
	    "FreeBSD's svc.c pool threads)\n");
	line = malloc(FT_LINE, M_KRPC_FACETEST, M_WAITOK | M_ZERO);
	buf = malloc(FT_CHUNK, M_KRPC_FACETEST, M_WAITOK);
	memset(&ft, 0, sizeof(ft));
	mtx_init(&ft.lock, "krpc_facetest", NULL, MTX_DEF);
	ft.drop_rc = -1;
	krpc_mbuf_get_counts(&mc0);

	t = krpc_rdma_face_open();
	FT_CHECK(t != NULL, "set-up: no memory");
	i = krpc_rdma_face_pair(t, &ch, &sh);
	FT_CHECK(i == 0, "set-up: krpc_rdma_face_pair: error %d", i);
	pool = svcpool_create("krpcrdma_ft", NULL);
	pool->sp_minthreads = 2;
	pool->sp_maxthreads = 4;
	xprt = svc_rdma_create(pool, sh);
	FT_CHECK(xprt != NULL, "set-up: svc_rdma_create");
	sh = NULL;
	i = svc_reg(xprt, FT_PROG, FT_VERS, ft_dispatch, NULL);
	/* The creator's reference, as nfsrvd_addsock after svc_vc_create; the registration's
	 * keeps the transport (until it dies, or svcpool_destroy). */
	SVC_RELEASE(xprt);
	FT_CHECK(i, "set-up: svc_reg");
	/* What svc_vc gives every connection: a reply-cache identity, a working xp_lock
	 * (clnt_bck takes it); sx_xlock on a never-initialised sx trips INVARIANTS. */
	FT_CHECK(xprt->xp_sockref != 0, "set-up: xp_sockref 0");
	sx_xlock(&xprt->xp_lock);
	sx_xunlock(&xprt->xp_lock);
	ft.svc = 1;
	i = kthread_add(ft_svc_thread, pool, NULL, NULL, 0, 0, "krpc_ft_svc");
	FT_CHECK(i == 0, "set-up: kthread_add(svc_run): error %d", i);
	svc_started = 1;
	cl = clnt_rdma_create(ch, FT_PROG, FT_VERS);
	FT_CHECK(cl != NULL, "set-up: clnt_rdma_create");
	ch = NULL;
	/* Sleeps with PCATCH, as an intr mount's. */
	CLNT_CONTROL(cl, CLSET_INTERRUPTIBLE, &one);

	/* NULL: RPC_SUCCESS with an (empty) results chain, never NULL. */
	args = m_get(M_WAITOK, MT_DATA);
	st = ft_call(cl, NULLPROC, args, &rep, 10000);
	FT_CHECK(st == RPC_SUCCESS, "NULL: stat %d", st);
	FT_CHECK(rep != NULL && m_length(rep, NULL) == 0, "NULL: results %p", rep);
	m_freem(rep);
	m_freem(args);
	args = NULL;

	/* WRITE 1 MiB + 3 as NFS builds it; again from an m_copym copy. */
	memset(whead, 0, sizeof(whead));
	ft_put(whead, 0, 28);
	memset(whead + 4, 5, 28);
	ft_put(whead, 40, FT_N);
	ft_put(whead, 44, 2);		/* FILE_SYNC */
	ft_put(whead, 48, FT_N);
	args = ft_ddp_chain(whead, FT_WHEAD, FT_N, FT_WSEED);
	start = ticks;
	st = ft_call(cl, FT_WRITE, args, &rep, 30000);
	FT_CHECK(st == RPC_SUCCESS, "WRITE: stat %d", st);
	FT_CHECK(m_length(rep, NULL) == 4 && ft_word(rep, 0) == 0, "WRITE: results");
	m_freem(rep);
	FT_CHECK(ft.err[0] == '\0' && ft.writes_ok == 1, "WRITE: server: %s", ft.err);
	FT_CHECK((FT_EXTPG_UP ? ft.write_extpg > 0 : ft.write_extpg == 0) &&
	    ft.write_marker == FT_WHEAD,
	    "WRITE: arguments up with %d M_EXTPG mbufs, marker at %d", ft.write_extpg,
	    ft.write_marker);
	printf("krpc_rdma facetest: WRITE %d: up as %d M_EXTPG mbufs behind the marker%s, "
	    "%d ticks\n", FT_N, ft.write_extpg, FT_EXTPG_UP ? "" :
	    " (svc_getreq mapped them: freebsd/patches)", ticks - start);
	copy = m_copym(args, 0, M_COPYALL, M_WAITOK);
	ft_count(copy, &extpg, &marker);
	st = ft_call(cl, FT_WRITE, copy, &rep, 30000);
	FT_CHECK(st == RPC_SUCCESS, "WRITE of an m_copym copy: stat %d", st);
	m_freem(rep);
	FT_CHECK(ft.err[0] == '\0' && ft.writes_ok == 2, "WRITE of an m_copym copy: server: %s",
	    ft.err);
	printf("krpc_rdma facetest: WRITE of an m_copym copy (%d M_EXTPG, marker %s): "
	    "up as %d M_EXTPG mbufs\n", extpg, marker >= 0 ? "kept" : "lost", ft.write_extpg);
	m_freem(copy);
	copy = NULL;
	m_freem(args);
	args = NULL;

	/* READ 1 MiB + 3: M_EXTPG results out through the client's write chunk. */
	memset(rargs, 0, sizeof(rargs));
	ft_put(rargs, 0, 28);
	memset(rargs + 4, 6, 28);
	ft_put(rargs, 40, FT_N);
	args = ft_bytes(rargs, sizeof(rargs));
	start = ticks;
	st = ft_call(cl, FT_READ, args, &rep, 30000);
	FT_CHECK(st == RPC_SUCCESS, "READ: stat %d (server: %s)", st, ft.err);
	FT_CHECK(m_length(rep, NULL) == FT_RHEAD + FT_N + FT_PAD,
	    "READ: results of %u bytes", m_length(rep, NULL));
	FT_CHECK(ft_word(rep, 8) == FT_N && ft_word(rep, 16) == FT_N, "READ: count");
	bad = ft_check_data(rep, FT_RHEAD, FT_N, FT_RSEED, buf);
	FT_CHECK(bad == 0, "READ: data differs at byte %d", bad - 1);
	ft_count(rep, &extpg, &marker);
	printf("krpc_rdma facetest: READ %d: back as %d M_EXTPG mbufs, %d ticks\n", FT_N,
	    extpg, ticks - start);
	FT_CHECK(extpg > 0, "READ: results without M_EXTPG mbufs");
	m_freem(rep);
	m_freem(args);
	args = NULL;

	/*
	 * The stock-NFS mode, both ways (what FreeBSD 14.2's own NFS needs: it only mtod()s
	 * and never inserts the marker): svc_rdma hands the WRITE's data up in plain mbufs,
	 * and finds the data of a READ reply built without a marker in plain clusters (as
	 * nfsrvd_read builds it) for the client's write chunk; clnt_rdma hands the READ's
	 * results back in plain mbufs. Then both off again.
	 */
	svc_rdma_set_stock(xprt, 1);
	CLNT_CONTROL(cl, CLSET_RDMA_STOCK, &one);
	svc_rdma_get_stats(xprt, &ss0);
	args = ft_ddp_chain(whead, FT_WHEAD, FT_N, FT_WSEED);
	st = ft_call(cl, FT_WRITE, args, &rep, 30000);
	FT_CHECK(st == RPC_SUCCESS, "stock WRITE: stat %d", st);
	m_freem(rep);
	m_freem(args);
	args = NULL;
	FT_CHECK(ft.err[0] == '\0' && ft.writes_ok == 3, "stock WRITE: server: %s", ft.err);
	FT_CHECK(ft.write_extpg == 0 && ft.write_marker == -1,
	    "stock WRITE: up with %d M_EXTPG mbufs, marker at %d", ft.write_extpg,
	    ft.write_marker);
	mtx_lock(&ft.lock);
	ft.plain_reads = 1;
	mtx_unlock(&ft.lock);
	args = ft_bytes(rargs, sizeof(rargs));
	st = ft_call(cl, FT_READ, args, &rep, 30000);
	FT_CHECK(st == RPC_SUCCESS, "stock READ: stat %d (server: %s)", st, ft.err);
	FT_CHECK(m_length(rep, NULL) == FT_RHEAD + FT_N + FT_PAD,
	    "stock READ: results of %u bytes", m_length(rep, NULL));
	bad = ft_check_data(rep, FT_RHEAD, FT_N, FT_RSEED, buf);
	FT_CHECK(bad == 0, "stock READ: data differs at byte %d", bad - 1);
	ft_count(rep, &extpg, &marker);
	FT_CHECK(extpg == 0 && marker == -1, "stock READ: results with %d M_EXTPG mbufs, "
	    "marker at %d", extpg, marker);
	m_freem(rep);
	m_freem(args);
	args = NULL;
	svc_rdma_get_stats(xprt, &ss);
	clnt_rdma_get_stats(cl, &cs);
	FT_CHECK(ss.stock_arg_bytes - ss0.stock_arg_bytes == FT_N &&
	    ss.stock_marked - ss0.stock_marked == 1 &&
	    ss.write_chunks - ss0.write_chunks == 1 && ss.long_replies == ss0.long_replies &&
	    cs.stock_bytes == FT_N,
	    "stock: %ju argument bytes copied, %ju replies marked, %ju write chunks, %ju Long "
	    "Replies, %ju result bytes copied", (uintmax_t)(ss.stock_arg_bytes -
	    ss0.stock_arg_bytes), (uintmax_t)(ss.stock_marked - ss0.stock_marked),
	    (uintmax_t)(ss.write_chunks - ss0.write_chunks),
	    (uintmax_t)(ss.long_replies - ss0.long_replies), (uintmax_t)cs.stock_bytes);
	printf("krpc_rdma facetest: stock-NFS mode: WRITE %d up in plain mbufs (%ju bytes "
	    "copied); a READ reply of %d in plain clusters without a marker went by the write "
	    "chunk (located by the NFS reply hook) and came back in plain mbufs (%ju bytes "
	    "copied)\n", FT_N, (uintmax_t)(ss.stock_arg_bytes - ss0.stock_arg_bytes), FT_N,
	    (uintmax_t)cs.stock_bytes);
	svc_rdma_set_stock(xprt, 0);
	u = 0;
	CLNT_CONTROL(cl, CLSET_RDMA_STOCK, &u);
	mtx_lock(&ft.lock);
	ft.plain_reads = 0;
	mtx_unlock(&ft.lock);

	/* PROC_UNAVAIL (svcerr_noproc); PROG_UNAVAIL, PROG_MISMATCH (svc.c's own). */
	args = m_get(M_WAITOK, MT_DATA);
	st = ft_call(cl, FT_BAD_PROC, args, &rep, 10000);
	FT_CHECK(st == RPC_PROCUNAVAIL, "PROC_UNAVAIL: stat %d", st);
	u = FT_PROG + 1;
	CLNT_CONTROL(cl, CLSET_PROG, &u);
	st = ft_call(cl, NULLPROC, args, &rep, 10000);
	FT_CHECK(st == RPC_PROGUNAVAIL, "PROG_UNAVAIL: stat %d", st);
	u = FT_PROG;
	CLNT_CONTROL(cl, CLSET_PROG, &u);
	u = FT_VERS + 1;
	CLNT_CONTROL(cl, CLSET_VERS, &u);
	st = ft_call(cl, NULLPROC, args, &rep, 10000);
	CLNT_GETERR(cl, &err);
	FT_CHECK(st == RPC_PROGVERSMISMATCH && err.re_vers.low == FT_VERS &&
	    err.re_vers.high == FT_VERS, "PROG_MISMATCH: stat %d, %u-%u", st,
	    err.re_vers.low, err.re_vers.high);
	u = FT_VERS;
	CLNT_CONTROL(cl, CLSET_VERS, &u);

	/* Timeout: the reply comes after 2 s, the call gives up after 300 ms. */
	start = ticks;
	st = ft_call(cl, FT_SLOW, args, &rep, 300);
	FT_CHECK(st == RPC_TIMEDOUT, "timeout: stat %d", st);
	FT_CHECK(ticks - start < 2 * hz, "timeout: returned after %d ticks", ticks - start);
	st = ft_call(cl, NULLPROC, args, &rep, 10000);
	FT_CHECK(st == RPC_SUCCESS, "NULL after the timeout: stat %d", st);
	m_freem(rep);

	/* Abandon: the dispatch routine drops the call; the client gives up; the context
	 * comes back (dropped), and the late reply never comes. */
	st = ft_call(cl, FT_DROP, args, &rep, 500);
	FT_CHECK(st == RPC_TIMEDOUT, "abandon: stat %d", st);
	FT_CHECK(ft_wait(&ft.drop_rc, 1, 2000), "abandon: svc_rdma_drop said %d", ft.drop_rc);
	svc_rdma_get_stats(xprt, &ss);
	FT_CHECK(ss.dropped == 1, "abandon: %ju contexts given back",
	    (uintmax_t)ss.dropped);
	/* The slow call's late reply has gone out meanwhile (2 s). */
	pause("ftlate", 2 * hz);
	st = ft_call(cl, NULLPROC, args, &rep, 10000);
	FT_CHECK(st == RPC_SUCCESS, "NULL after the late reply: stat %d", st);
	m_freem(rep);
	m_freem(args);
	args = NULL;

	/* Malformed call headers to a second svc_rdma of the same pool. */
	i = krpc_rdma_face_malformed(t, pool, &xprt2, line, FT_LINE);
	if (xprt2 != NULL)
		SVC_RELEASE(xprt2);
	FT_CHECK(i == 0, "malformed calls: %s", line);
	printf("krpc_rdma facetest: %s\n", line);

	/*
	 * The idle timeout (svc_vc's xp_idletimeout, which svc_checkidle cannot apply without
	 * a socket): a third connection, 1 s, one NULL call, then silence: svc.c's threads see
	 * it die and release it, and the client's next call fails instead of hanging.
	 */
	i = krpc_rdma_face_pair(t, &ch, &sh);
	FT_CHECK(i == 0, "idle: krpc_rdma_face_pair: error %d", i);
	/* The malformed calls' transport goes asynchronously (its client disconnected, svc.c
	 * unregisters it): only the first one is left before this step counts. */
	start = ticks;
	while (krpc_svc_live() != 1 && ticks - start < 10 * hz)
		pause("ftlive", hz / 10);
	FT_CHECK(krpc_svc_live() == 1, "idle: %u SVCXPRTs alive before the step, not 1",
	    krpc_svc_live());
	idle0 = svc_rdma_idle_closes();
	live0 = krpc_svc_live();
	xprt3 = svc_rdma_create(pool, sh);
	FT_CHECK(xprt3 != NULL, "idle: svc_rdma_create");
	sh = NULL;
	svc_rdma_set_idle_timeout(xprt3, 1);
	SVC_RELEASE(xprt3);
	cl3 = clnt_rdma_create(ch, FT_PROG, FT_VERS);
	FT_CHECK(cl3 != NULL, "idle: clnt_rdma_create");
	ch = NULL;
	args = m_get(M_WAITOK, MT_DATA);
	st = ft_call(cl3, NULLPROC, args, &rep, 10000);
	FT_CHECK(st == RPC_SUCCESS, "idle: NULL: stat %d", st);
	m_freem(rep);
	start = ticks;
	while ((svc_rdma_idle_closes() == idle0 || krpc_svc_live() != live0) &&
	    ticks - start < 10 * hz)
		pause("ftidle", hz / 10);
	FT_CHECK(svc_rdma_idle_closes() == idle0 + 1 && krpc_svc_live() == live0,
	    "idle: not closed after %d ticks (%u closes, %u transports)", ticks - start,
	    svc_rdma_idle_closes() - idle0, krpc_svc_live() - live0);
	printf("krpc_rdma facetest: idle timeout 1 s: the silent connection closed and its "
	    "SVCXPRT destroyed after %d ticks\n", ticks - start);
	st = ft_call(cl3, NULLPROC, args, &rep, 5000);
	FT_CHECK(st != RPC_SUCCESS && st != RPC_TIMEDOUT,
	    "idle: a call after the close got stat %d", st);
	m_freem(args);
	args = NULL;
	CLNT_DESTROY(cl3);
	cl3 = NULL;

	/*
	 * The backchannel (RFC 8167 through the krpc face): callbacks on the client's own
	 * connection, as the NFSv4.1 server sends them on a session's. A fourth connection with
	 * FT_CB_SLOTS reverse slots reserved at both ends (krpc_rdma_face_pair_cb). The client: a
	 * clnt_rdma with its slots enabled (CLSET_RDMA_CBSLOTS, refused beyond the reserve) and
	 * a backchannel SVCXPRT (svc_rdma_create_backchannel: registered with the pool, whose
	 * threads answer the callbacks through the callback program svc_reg'd on it, as
	 * nfscbd's) given to it with CLSET_BACKCHANNEL. The server: its svc_rdma transport with
	 * its slots (svc_rdma_set_cbslots) and a clnt_rdma_bck_create CLIENT on it (what nfsd
	 * does with clnt_bck_create). A forward NULL first (the server learns the client's
	 * grant); CB_NULL; four echo callbacks with a two-mbuf argument chain, the results byte
	 * for byte, forward NULL calls in between; a 64 KiB callback refused at once (reverse
	 * calls are inline only: RPC_CANTSEND / EMSGSIZE, never sent). Then the bck CLIENT goes,
	 * then the client: its connection closes, svc.c's threads unregister both transports
	 * (the backchannel SVCXPRT's xp_stat says XPRT_DIED) and they are destroyed.
	 */
	cblive0 = krpc_svc_live();
	cllive0 = krpc_clnt_live();
	i = krpc_rdma_face_pair_cb(t, FT_CB_SLOTS, &ch, &sh);
	FT_CHECK(i == 0, "backchannel: krpc_rdma_face_pair_cb: error %d", i);
	xprt4 = svc_rdma_create(pool, sh);
	FT_CHECK(xprt4 != NULL, "backchannel: svc_rdma_create");
	sh = NULL;
	i = svc_rdma_set_cbslots(xprt4, FT_CB_SLOTS);
	cbc = i == 0 ? clnt_rdma_bck_create(xprt4, FT_CB_PROG, FT_CB_VERS) : NULL;
	/* The creator's reference: the registration's keeps the transport, cbc holds one. */
	SVC_RELEASE(xprt4);
	FT_CHECK(i == 0, "backchannel: svc_rdma_set_cbslots(%d): error %d", FT_CB_SLOTS, i);
	FT_CHECK(cbc != NULL, "backchannel: clnt_rdma_bck_create");
	clb = clnt_rdma_create(ch, FT_PROG, FT_VERS);
	FT_CHECK(clb != NULL, "backchannel: clnt_rdma_create");
	ch = NULL;
	u = FT_CB_SLOTS + 1;
	FT_CHECK(!CLNT_CONTROL(clb, CLSET_RDMA_CBSLOTS, &u),
	    "backchannel: CLSET_RDMA_CBSLOTS %u beyond the reserve of %d accepted", u,
	    FT_CB_SLOTS);
	u = FT_CB_SLOTS;
	FT_CHECK(CLNT_CONTROL(clb, CLSET_RDMA_CBSLOTS, &u),
	    "backchannel: CLSET_RDMA_CBSLOTS %u refused", u);
	u = 0;
	FT_CHECK(CLNT_CONTROL(clb, CLGET_RDMA_CBSLOTS, &u) && u == FT_CB_SLOTS,
	    "backchannel: CLGET_RDMA_CBSLOTS said %u", u);
	args = m_get(M_WAITOK, MT_DATA);
	st = ft_call(clb, NULLPROC, args, &rep, 10000);
	m_freem(rep);
	FT_CHECK(st == RPC_SUCCESS, "backchannel: forward NULL: stat %d", st);
	bc = svc_rdma_create_backchannel(pool);
	FT_CHECK(bc != NULL, "backchannel: svc_rdma_create_backchannel");
	FT_CHECK(svc_reg(bc, FT_CB_PROG, FT_CB_VERS, ft_cb_dispatch, NULL),
	    "backchannel: svc_reg of the callback program");
	i = CLNT_CONTROL(clb, CLSET_BACKCHANNEL, bc);
	/* The creator's reference: the CLIENT holds one; not attached, nothing would end its
	 * registration (svc.c unregisters it once its CLIENT is gone). */
	if (!i)
		xprt_unregister(bc);
	SVC_RELEASE(bc);
	bc = NULL;
	FT_CHECK(i, "backchannel: CLSET_BACKCHANNEL refused");

	/* CB_NULL: RPC_SUCCESS with an (empty) results chain. */
	st = ft_call(cbc, NULLPROC, args, &rep, 10000);
	len = rep != NULL ? (int)m_length(rep, NULL) : -1;
	m_freem(rep);
	FT_CHECK(st == RPC_SUCCESS, "backchannel: CB_NULL: stat %d", st);
	FT_CHECK(len == 0, "backchannel: CB_NULL: results of %d bytes", len);
	/* Echo: the arguments in two mbufs; the results are each byte + 1. */
	for (i = 0; i < 4; i++) {
		for (j = 0; j < FT_CB_LEN; j++)
			buf[j] = (uint8_t)(j * (i + 3));
		cbargs = ft_bytes(buf, FT_CB_LEN / 2 + 20);
		cbargs->m_next = ft_bytes(buf + FT_CB_LEN / 2 + 20, FT_CB_LEN / 2 - 20);
		st = ft_call(cbc, FT_CB_ECHO, cbargs, &rep, 10000);
		m_freem(cbargs);
		cbargs = NULL;
		len = rep != NULL ? (int)m_length(rep, NULL) : -1;
		bad = 0;
		if (st == RPC_SUCCESS && len == FT_CB_LEN) {
			m_copydata(rep, 0, FT_CB_LEN, (caddr_t)buf + FT_CB_MAX);
			for (j = 0; j < FT_CB_LEN && bad == 0; j++)
				if (buf[FT_CB_MAX + j] != (uint8_t)(buf[j] + 1))
					bad = j + 1;
		}
		m_freem(rep);
		FT_CHECK(st == RPC_SUCCESS, "backchannel: echo %d: stat %d (server: %s)", i, st,
		    ft.err);
		FT_CHECK(len == FT_CB_LEN, "backchannel: echo %d: results of %d bytes", i, len);
		FT_CHECK(bad == 0, "backchannel: echo %d: results differ at byte %d", i, bad - 1);
		st = ft_call(clb, NULLPROC, args, &rep, 10000);
		m_freem(rep);
		FT_CHECK(st == RPC_SUCCESS, "backchannel: forward NULL after echo %d: stat %d", i,
		    st);
	}
	/* Beyond the inline size: refused before anything is sent, not by the timeout. */
	cbargs = ft_plain_chain(NULL, 0, FT_CB_BIG, FT_WSEED);
	start = ticks;
	st = ft_call(cbc, FT_CB_ECHO, cbargs, &rep, 10000);
	m_freem(rep);
	m_freem(cbargs);
	cbargs = NULL;
	CLNT_GETERR(cbc, &err);
	FT_CHECK(st == RPC_CANTSEND && err.re_errno == EMSGSIZE,
	    "backchannel: a %d-byte callback: stat %d, errno %d (not RPC_CANTSEND, EMSGSIZE)",
	    FT_CB_BIG, st, err.re_errno);
	FT_CHECK(ticks - start < 2 * hz, "backchannel: the %d-byte callback refused after %d "
	    "ticks", FT_CB_BIG, ticks - start);
	FT_CHECK(ft.err[0] == '\0' && ft.cb_null == 1 && ft.cb_echo == 4,
	    "backchannel: the callback service answered %d CB_NULL and %d echoes, not 1 and 4 "
	    "(server: %s)", ft.cb_null, ft.cb_echo, ft.err);
	m_freem(args);
	args = NULL;
	/* The bck CLIENT, then the client (its connection closes): both transports go. */
	CLNT_DESTROY(cbc);
	cbc = NULL;
	CLNT_DESTROY(clb);
	clb = NULL;
	start = ticks;
	while ((krpc_svc_live() != cblive0 || krpc_clnt_live() != cllive0) &&
	    ticks - start < 10 * hz)
		pause("ftbc", hz / 10);
	FT_CHECK(krpc_svc_live() == cblive0 && krpc_clnt_live() == cllive0,
	    "backchannel: not gone after %d ticks: %d SVCXPRTs / bck CLIENTs, %d CLIENTs / "
	    "backchannel SVCXPRTs", ticks - start, (int)(krpc_svc_live() - cblive0),
	    (int)(krpc_clnt_live() - cllive0));
	printf("krpc_rdma facetest: backchannel: CB_NULL and 4 echo callbacks of %d bytes "
	    "(forward calls in between) answered by svc.c's threads on the client's backchannel "
	    "SVCXPRT, a %d-byte callback refused RPC_CANTSEND; both transports gone %d ticks "
	    "after the CLIENTs\n", FT_CB_LEN, FT_CB_BIG, ticks - start);

	/*
	 * Listen, dial, reconnect, over the software fabric (connection set-up by port: what
	 * rdma_cm gives on a device). A dial to a port nobody listens on is refused. A listener
	 * (svc_rdma_listen_create: the rendezvous transport, served by svc.c's threads) and a
	 * reconnecting client that dials it (clnt_rdma_dialed): NULL calls. Then a server
	 * restart with a call in progress: the dispatch routine holds an FT_RESTART call, the
	 * listener goes, the call's connection ends unanswered; the client, refused meanwhile,
	 * retries; a new listener on the port: the client makes its connection again and sends
	 * the owed call again with its XID, which the dispatch routine checks and answers.
	 */
	i = krpc_rdma_soft_dial(t, FT_PORT, 0, 1024, &ch);
	FT_CHECK(i == ECONNREFUSED && ch == NULL, "dial: to nobody: error %d", i);
	lx = ft_listen(t, pool, &i);
	FT_CHECK(lx != NULL, "listen: error %d", i);
	i = krpc_rdma_soft_dial(t, FT_PORT, 1, 1024, &ch);
	FT_CHECK(i == 0, "dial: error %d", i);
	cl4 = clnt_rdma_dialed(ch, FT_PROG, FT_VERS, 1, NULL, &i);
	ch = NULL;
	FT_CHECK(cl4 != NULL, "dial: clnt_rdma_dialed: error %d", i);
	args = m_get(M_WAITOK, MT_DATA);
	for (i = 0; i < 4; i++) {
		st = ft_call(cl4, NULLPROC, args, &rep, 10000);
		FT_CHECK(st == RPC_SUCCESS, "dial: NULL %d: stat %d", i, st);
		m_freem(rep);
	}
	svc_rdma_listen_stats(lx, &ls);
	FT_CHECK(ls.accepted == 1 && ls.refused == 0, "listen: %ju accepted, %ju refused",
	    (uintmax_t)ls.accepted, (uintmax_t)ls.refused);
	ft.restarter = 1;
	i = kthread_add(ft_restarter, cl4, NULL, NULL, 0, 0, "krpc_ft_restart");
	FT_CHECK(i == 0, "reconnect: kthread_add: error %d", i);
	FT_CHECK(ft_wait(&ft.restart_seen, 1, 10000), "reconnect: the call never arrived");
	start = ticks;
	xprt_unregister(lx);
	SVC_RELEASE(lx);
	lx = NULL;
	pause("ftdown", hz / 10 + 1);
	mtx_lock(&ft.lock);
	ft.restart_go = 1;
	wakeup(&ft.restart_go);
	mtx_unlock(&ft.lock);
	/* Nobody listens for 500 ms: the client's attempts are refused, with backoff. */
	pause("ftdown", hz / 2);
	lx = ft_listen(t, pool, &i);
	FT_CHECK(lx != NULL, "reconnect: listen again: error %d", i);
	FT_CHECK(ft_wait(&ft.restarter, 2, 30000), "reconnect: the caller did not return");
	restart_ticks = ticks - start;
	FT_CHECK(ft.restarter_stat == RPC_SUCCESS && ft.restart_seen == 2,
	    "reconnect: stat %d, the call arrived %d times", ft.restarter_stat,
	    ft.restart_seen);
	FT_CHECK(ft.err[0] == '\0', "reconnect: %s", ft.err);
	st = ft_call(cl4, NULLPROC, args, &rep, 10000);
	FT_CHECK(st == RPC_SUCCESS, "reconnect: NULL after: stat %d", st);
	m_freem(rep);
	svc_rdma_listen_stats(lx, &ls);
	FT_CHECK(ls.accepted == 1, "reconnect: the new listener accepted %ju",
	    (uintmax_t)ls.accepted);
	m_freem(args);
	args = NULL;
	CLNT_DESTROY(cl4);
	cl4 = NULL;
	xprt_unregister(lx);
	SVC_RELEASE(lx);
	lx = NULL;
	printf("krpc_rdma facetest: listen / dial / reconnect: a dial to nobody refused; 4 NULL "
	    "calls over a dialed connection; a server restart with a call in progress: the call "
	    "answered once, on the new connection, with its XID, %d ticks after the restart\n",
	    restart_ticks);

	/* CLNT_CLOSE with a caller asleep in CLNT_CALL_MBUF (its call held by the server). */
	i = kthread_add(ft_sleeper, cl, NULL, NULL, 0, 0, "krpc_ft_sleeper");
	FT_CHECK(i == 0, "close: kthread_add: error %d", i);
	FT_CHECK(ft_wait(&ft.hold, 1, 10000), "close: the held call never arrived");
	svc_rdma_get_stats(xprt, &ss);
	CLNT_CLOSE(cl);
	FT_CHECK(ft_wait(&ft.sleeper, 2, 5000), "close: the sleeping caller did not return");
	FT_CHECK(ft.sleeper_stat != RPC_SUCCESS && ft.sleeper_stat != RPC_TIMEDOUT,
	    "close: the sleeping caller got stat %d", ft.sleeper_stat);
	printf("krpc_rdma facetest: CLNT_CLOSE: the sleeping caller returned stat %d after "
	    "%d ticks\n", ft.sleeper_stat, ft.sleeper_ticks);
	args = m_get(M_WAITOK, MT_DATA);
	st = ft_call(cl, NULLPROC, args, &rep, 1000);
	FT_CHECK(st != RPC_SUCCESS, "close: a call after CLNT_CLOSE succeeded");
	m_freem(args);
	args = NULL;

	/* xp_destroy with a call outstanding: release the held request (freed unanswered). */
	mtx_lock(&ft.lock);
	ft.hold = 2;
	wakeup(&ft.hold);
	mtx_unlock(&ft.lock);
	FT_CHECK(ft_wait(&ft.hold, 3, 5000), "destroy: the held request was not freed");
	FT_CHECK(ss.calls >= 9, "stats: %ju calls handed up", (uintmax_t)ss.calls);

out:
	/* The backchannel step's (before svc_exit: the pool's threads end their transports). */
	if (cbc != NULL)
		CLNT_DESTROY(cbc);
	if (clb != NULL)
		CLNT_DESTROY(clb);
	if (bc != NULL) {
		xprt_unregister(bc);
		SVC_RELEASE(bc);
	}
	m_freem(cbargs);
	if (ft.hold == 1) {
		mtx_lock(&ft.lock);
		ft.hold = 2;
		wakeup(&ft.hold);
		mtx_unlock(&ft.lock);
		ft_wait(&ft.hold, 3, 5000);
	}
	if (cl3 != NULL)
		CLNT_DESTROY(cl3);
	if (ft.restart_seen == 1) {
		mtx_lock(&ft.lock);
		ft.restart_go = 1;
		wakeup(&ft.restart_go);
		mtx_unlock(&ft.lock);
	}
	if (cl4 != NULL) {
		CLNT_CLOSE(cl4);
		if (ft.restarter == 1)
			ft_wait(&ft.restarter, 2, 35000);
		CLNT_DESTROY(cl4);
	}
	if (lx != NULL) {
		xprt_unregister(lx);
		SVC_RELEASE(lx);
	}
	if (cl != NULL) {
		CLNT_CLOSE(cl);
		if (ft.sleeper == 1)
			ft_wait(&ft.sleeper, 2, 5000);
		CLNT_DESTROY(cl);
	}
	if (svc_started) {
		svc_exit(pool);
		if (!ft_wait(&ft.svc, 2, 30000)) {
			/* Never free what running threads use. */
			printf("krpc_rdma facetest: FAIL: svc_run did not return\n");
			return (EIO);
		}
	}
	if (pool != NULL) {
		/*
		 * svcpool_destroy would svc_unreg the program, which asks rpcbind over its
		 * local socket (rpcb_unset: clnt_vc_create, unp_connectat, namei): the test VM
		 * has no root file system, and namei without one faults. The test registered
		 * nothing with rpcbind (svc_reg without a netconfig): take the callout off
		 * the pool as svc_unreg does, without the rpcbind part.
		 */
		mtx_lock(&pool->sp_lock);
		while ((sc = TAILQ_FIRST(&pool->sp_callouts)) != NULL) {
			TAILQ_REMOVE(&pool->sp_callouts, sc, sc_link);
			free(sc->sc_netid, M_RPC);
			free(sc, M_RPC);
		}
		mtx_unlock(&pool->sp_lock);
		svcpool_destroy(pool);
	}
	if (ch != NULL) {
		krpc_clnt_close(ch);
		krpc_clnt_free(ch);
	}
	if (sh != NULL)
		krpc_svc_free(sh);
	m_freem(args);
	m_freem(copy);
	if (t != NULL)
		krpc_rdma_face_close(t, &pages_left, &pages_alloc);
	krpc_mbuf_get_counts(&mc1);
	/* What MOD_UNLOAD checks: no CLIENT, SVCXPRT or bridge M_EXTPG mbuf of ours alive. */
	if (rc == 0 && krpc_rdma_busy(&live[0], &live[1], &live[2]) != 0) {
		printf("krpc_rdma facetest: FAIL: live after the test: %ju CLIENTs, %ju SVCXPRTs, "
		    "%ju M_EXTPG mbufs\n", (uintmax_t)live[0], (uintmax_t)live[1],
		    (uintmax_t)live[2]);
		rc = EIO;
	}
	if (rc == 0 && (pages_left != 0 || mc1.extpg_live != mc0.extpg_live ||
	    mc1.page_refs - mc0.page_refs != mc1.page_unrefs - mc0.page_unrefs)) {
		printf("krpc_rdma facetest: FAIL: leak: %ju page references left, %ju bridge "
		    "M_EXTPG mbufs alive, %ju page wirings not given back\n",
		    (uintmax_t)pages_left, (uintmax_t)(mc1.extpg_live - mc0.extpg_live),
		    (uintmax_t)((mc1.page_refs - mc0.page_refs) -
		    (mc1.page_unrefs - mc0.page_unrefs)));
		rc = EIO;
	}
	if (rc == 0)
		printf("krpc_rdma facetest: PASS: NULL, WRITE %d x2 (M_EXTPG, m_copym), READ %d "
		    "(M_EXTPG), PROC_UNAVAIL, PROG_UNAVAIL, PROG_MISMATCH, timeout, abandon, "
		    "stock-NFS mode both ways, malformed headers, idle timeout, backchannel (CB_NULL, "
		    "echo, too large), listen / dial / reconnect, CLNT_CLOSE with a sleeper, xp_destroy with a call outstanding; %ju bridge M_EXTPG mbufs built, %ju pages allocated, 0 left\n",
		    FT_N, FT_N, (uintmax_t)(mc1.extpg_built - mc0.extpg_built),
		    (uintmax_t)pages_alloc);
	mtx_destroy(&ft.lock);
	free(buf, M_KRPC_FACETEST);
	free(line, M_KRPC_FACETEST);
	return (rc);
}
