/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma: exported C wrappers between the Rust shim (ofed-shim) and the OFED verbs KPI:
 * FreeBSD's (sys/ofed, through LinuxKPI) and Linux's in-kernel verbs, which are the same
 * ib_* / rdma_* calls; the few differences go through krpc_ofed_kpi.h.
 *
 * Rust passes only our plain structs (krpc_rdma_ofed.h); this file translates them into
 * ib_send_wr / ib_recv_wr / ib_reg_wr chains, ib_wc into krpc_wc, rdma_cm events into
 * krpc_cm_event, and wraps the static-inline verbs of ib_verbs.h. The same file builds
 * against the userspace emulation of the KPI (../ofed-testkit/emu, whose include/ directory supplies the
 * FreeBSD header names) for the host tests.
 * Memory comes from the kernel's krpc_ofed_malloc hook (krpc_rdma_bsd.c on FreeBSD,
 * ../linux/krpc_rdma_linux.c on Linux).
 *
 * DMA: every SGE address is ib_dma_map_page() of the page fragment on the connection's
 * device, at post time; the mapping is recorded with its work request in a FIFO per queue
 * (struct krpc_ring) and unmapped when that work request's completion, or a later one of
 * the same queue (completions of a queue come in order), is polled, or at teardown.
 * FRWR page lists go through ib_dma_map_sg() and are unmapped at invalidation.
 *
 * Locking: the data-path calls (post, poll, reg) are made by the single thread that drives a
 * connection; the rdma_cm handler runs in the CM's context and only touches the event queue
 * (under c->lock), the QP set-up before the connection is handed to Rust, and the listener's
 * pending list (under l->lock).
 */
#include "krpc_ofed_kpi.h"
#include "krpc_rdma_ofed.h"

#define KRPC_EVQ 8
#define KRPC_POLL_MAX 16

static void *
krpc_zalloc(size_t size)
{
	return (krpc_ofed_malloc(size, KRPC_M_NOWAIT | KRPC_M_ZERO));
}

/* Objects live now and work done since load (krpc_ofed_get_counts). */
static struct krpc_ofed_counts krpc_counts;
#define	KRPC_COUNT(field, n)	__atomic_fetch_add(&krpc_counts.field, (n), __ATOMIC_RELAXED)

void
krpc_ofed_get_counts(struct krpc_ofed_counts *out)
{
	uint64_t *dst = (uint64_t *)out;
	uint64_t *src = (uint64_t *)&krpc_counts;
	size_t i;

	for (i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}

/*
 * Offset bits of a page address. Not PAGE_MASK: linux/page.h (included by linux/scatterlist.h)
 * #undefs FreeBSD's PAGE_MASK (the offset bits) and redefines it with Linux's meaning (the
 * page-number bits), so in this file PAGE_MASK means the opposite of what it means in the
 * rest of the FreeBSD kernel. kpi_emu.h mirrors LinuxKPI's definition.
 */
#define KRPC_PAGE_OFF_MASK ((uint64_t)PAGE_SIZE - 1)

struct krpc_mr {
	struct ib_mr *mr;
	struct scatterlist *sg;	/* max_pages_per_mr entries */
	int sg_mapped;		/* entries DMA-mapped (0: none) */
};

/* One DMA mapping of an SGE. */
struct krpc_dmap {
	uint64_t dma;
	uint32_t len;
};

/* One posted work request: its id and how many mappings (in the map FIFO) it holds. */
struct krpc_wrrec {
	uint64_t wr_id;
	uint32_t nmaps;
};

/*
 * The work requests posted on one queue whose completions were not polled yet, oldest
 * first, with their SGE mappings (two FIFOs). Completions of one queue come in posting
 * order (unsignaled send requests complete with the next signaled one), so polling the
 * completion of wr_id retires it and every request before it.
 */
struct krpc_ring {
	struct krpc_wrrec *wr;
	uint32_t wr_cap, wr_head, wr_count;
	struct krpc_dmap *map;
	uint32_t map_cap, map_head, map_count;
};

/*
 * The first member of both CM contexts: the CM handler is shared (a connection id that a
 * listener's CONNECT_REQUEST created starts with the listener's handler and context), so it
 * tells a listener's own events (DEVICE_REMOVAL of a listener bound to an address) from a
 * connection's by this tag.
 */
#define	KRPC_CTX_CONN		1
#define	KRPC_CTX_LISTENER	2
struct krpc_cm_ctx {
	int kind;
};

/* An owner's upcall (fn(arg), any context) and the calls of it in progress, under the
 * owner's lock: krpc_upcall_unlock calls it, krpc_upcall_set replaces it and waits for the
 * old one's calls to return. */
struct krpc_upcall {
	void (*fn)(void *);
	void *arg;
	uint32_t running;
};

struct krpc_ofed_conn {
	struct krpc_cm_ctx ctx;	/* first: KRPC_CTX_CONN */
	krpc_lock_t lock;
	struct rdma_cm_id *id;
	struct ib_device *dev;	/* id->device, kept for the teardown after the id is gone */
	struct ib_pd *pd;
	struct ib_cq *cq;
	struct ib_qp *qp;
	struct krpc_ofed_params params;
	struct krpc_mr *mrs;
	struct krpc_ring sring;	/* send queue: max_send_wr requests, max_sge maps each */
	struct krpc_ring rring;	/* receive queue: max_recv_wr requests, one map each */
	struct ib_rdma_wr *swr;	/* max_send_wr */
	struct ib_sge *ssge;	/* max_send_wr * max_sge */
	uint32_t nssge;
	struct ib_recv_wr *rwr;	/* max_recv_wr */
	struct ib_sge *rsge;
	struct ib_wc wc[KRPC_POLL_MAX];	/* krpc_ofed_poll_cq's (not on the kernel stack) */
	struct krpc_cm_event evq[KRPC_EVQ];
	uint32_t ev_head, ev_count;
	uint8_t pdata[KRPC_CM_PRIVATE_MAX];	/* ours, for rdma_connect */
	uint32_t pdlen;
	uint8_t peer_pdata[KRPC_CM_PRIVATE_MAX]; /* the client's, from its request */
	uint32_t peer_pdlen;
	int passive;
	int accepted;
	int dead;
	struct krpc_upcall up;		/* completions and CM events (under lock) */
	struct krpc_ofed_conn *next;	/* listener's pending list */
};

struct krpc_ofed_listener {
	struct krpc_cm_ctx ctx;	/* first: KRPC_CTX_LISTENER */
	krpc_lock_t lock;
	struct rdma_cm_id *id;
	struct krpc_ofed_params params;
	struct krpc_ofed_conn *pending;	/* oldest first */
	struct krpc_ofed_conn **pending_tail;
	int gone;		/* the device went away (DEVICE_REMOVAL on the listener's id) */
	struct krpc_upcall up;	/* a request queued, the device gone (under lock) */
};

/* ---- events --------------------------------------------------------------------------- */

static void krpc_upcall_unlock(krpc_lock_t *lock, struct krpc_upcall *u);

static void
krpc_push_event(struct krpc_ofed_conn *c, uint32_t kind, int status, const void *pd,
    uint32_t pdlen)
{
	struct krpc_cm_event *e;

	krpc_lock(&c->lock);
	if (c->ev_count == KRPC_EVQ) {
		/* Full: the newest (terminal) event replaces the last one. */
		e = &c->evq[(c->ev_head + KRPC_EVQ - 1) % KRPC_EVQ];
	} else {
		e = &c->evq[(c->ev_head + c->ev_count) % KRPC_EVQ];
		c->ev_count++;
	}
	memset(e, 0, sizeof(*e));
	e->kind = kind;
	e->status = status;
	if (pd != NULL && pdlen > 0) {
		if (pdlen > KRPC_CM_PRIVATE_MAX)
			pdlen = KRPC_CM_PRIVATE_MAX;
		memcpy(e->private_data, pd, pdlen);
		e->private_data_len = pdlen;
	}
	krpc_upcall_unlock(&c->lock, &c->up);
}

int
krpc_ofed_poll_event(struct krpc_ofed_conn *c, struct krpc_cm_event *ev)
{
	int got = 0;

	krpc_lock(&c->lock);
	if (c->ev_count > 0) {
		*ev = c->evq[c->ev_head];
		c->ev_head = (c->ev_head + 1) % KRPC_EVQ;
		c->ev_count--;
		got = 1;
	}
	krpc_unlock(&c->lock);
	return (got);
}

/*
 * Called with *lock held: drop it and call the upcall, if one is set, counted in u->running
 * so that krpc_upcall_set can wait for it to return.
 */
static void
krpc_upcall_unlock(krpc_lock_t *lock, struct krpc_upcall *u)
{
	void (*fn)(void *) = u->fn;
	void *arg = u->arg;

	if (fn == NULL) {
		krpc_unlock(lock);
		return;
	}
	u->running++;
	krpc_unlock(lock);
	fn(arg);
	krpc_lock(lock);
	u->running--;
	krpc_unlock(lock);
}

/*
 * Called with *lock held: replace the upcall, then wait (briefly: an upcall only takes its
 * owner's lock and wakes) until no call of the old one is still running on another CPU, so
 * that its owner may free what the old argument points to. Returns with the lock held. The
 * caller must not hold a lock the upcall takes, nor be the upcall.
 */
static void
krpc_upcall_set(krpc_lock_t *lock, struct krpc_upcall *u, void (*fn)(void *), void *arg)
{
	u->fn = fn;
	u->arg = arg;
	while (u->running > 0) {
		krpc_unlock(lock);
		krpc_cpu_relax();
		krpc_lock(lock);
	}
}

void
krpc_ofed_set_upcall(struct krpc_ofed_conn *c, void (*fn)(void *), void *arg)
{
	krpc_lock(&c->lock);
	krpc_upcall_set(&c->lock, &c->up, fn, arg);
	krpc_unlock(&c->lock);
}

void
krpc_ofed_listener_set_upcall(struct krpc_ofed_listener *l, void (*fn)(void *), void *arg)
{
	krpc_lock(&l->lock);
	krpc_upcall_set(&l->lock, &l->up, fn, arg);
	krpc_unlock(&l->lock);
}

static void
krpc_cq_comp(struct ib_cq *cq, void *ctx)
{
	struct krpc_ofed_conn *c = ctx;

	(void)cq;
	krpc_lock(&c->lock);
	krpc_upcall_unlock(&c->lock, &c->up);
}

static void
krpc_cq_event(struct ib_event *ev, void *ctx)
{
	(void)ev;
	(void)ctx;
}

static void
krpc_qp_event(struct ib_event *ev, void *ctx)
{
	(void)ev;
	(void)ctx;
}

/* ---- DMA mappings of posted work requests ---------------------------------------- */

static int
krpc_ring_alloc(struct krpc_ring *r, uint32_t nwr, uint32_t nmap)
{
	r->wr_cap = nwr;
	r->map_cap = nmap;
	r->wr = krpc_zalloc(sizeof(*r->wr) * nwr);
	r->map = krpc_zalloc(sizeof(*r->map) * nmap);
	return (r->wr != NULL && r->map != NULL ? 0 : ENOMEM);
}

static void
krpc_ring_free(struct krpc_ring *r)
{
	krpc_ofed_free(r->wr);
	krpc_ofed_free(r->map);
	r->wr = NULL;
	r->map = NULL;
}

/* Map one page fragment on the connection's device into the ring; its DMA address. */
static int
krpc_ring_map(struct krpc_ofed_conn *c, struct krpc_ring *r, uint64_t pa, uint32_t len,
    uint64_t *dma)
{
	struct krpc_dmap *m;
	uint64_t a;

	if (r->map_count == r->map_cap || c->dev == NULL)
		return (ENOSPC);
	a = ib_dma_map_page(c->dev, KRPC_PA_TO_PAGE(pa & ~KRPC_PAGE_OFF_MASK),
	    (unsigned long)(pa & KRPC_PAGE_OFF_MASK), len, DMA_BIDIRECTIONAL);
	if (ib_dma_mapping_error(c->dev, a))
		return (EIO);
	m = &r->map[(r->map_head + r->map_count) % r->map_cap];
	m->dma = a;
	m->len = len;
	r->map_count++;
	KRPC_COUNT(dma_maps_live, 1);
	*dma = a;
	return (0);
}

static void
krpc_ring_unmap(struct krpc_ofed_conn *c, struct krpc_dmap *m)
{
	ib_dma_unmap_page(c->dev, m->dma, m->len, DMA_BIDIRECTIONAL);
	KRPC_COUNT(dma_maps_live, -1);
}

/* Record a work request holding the last `nmaps` mappings. */
static int
krpc_ring_push(struct krpc_ring *r, uint64_t wr_id, uint32_t nmaps)
{
	struct krpc_wrrec *w;

	if (r->wr_count == r->wr_cap)
		return (ENOSPC);
	w = &r->wr[(r->wr_head + r->wr_count) % r->wr_cap];
	w->wr_id = wr_id;
	w->nmaps = nmaps;
	r->wr_count++;
	return (0);
}

/* Undo the newest `nwr` requests and `nmaps` mappings (not posted after all). */
static void
krpc_ring_drop_newest(struct krpc_ofed_conn *c, struct krpc_ring *r, uint32_t nwr,
    uint32_t nmaps)
{
	while (nmaps > 0 && r->map_count > 0) {
		r->map_count--;
		krpc_ring_unmap(c, &r->map[(r->map_head + r->map_count) % r->map_cap]);
		nmaps--;
	}
	r->wr_count -= nwr < r->wr_count ? nwr : r->wr_count;
}

/* Retire the oldest request and its mappings. */
static void
krpc_ring_pop(struct krpc_ofed_conn *c, struct krpc_ring *r)
{
	struct krpc_wrrec *w = &r->wr[r->wr_head];
	uint32_t i;

	for (i = 0; i < w->nmaps && r->map_count > 0; i++) {
		krpc_ring_unmap(c, &r->map[r->map_head]);
		r->map_head = (r->map_head + 1) % r->map_cap;
		r->map_count--;
	}
	r->wr_head = (r->wr_head + 1) % r->wr_cap;
	r->wr_count--;
}

/* The completion of wr_id was polled: retire it and every older request; 0 if unknown. */
static int
krpc_ring_retire(struct krpc_ofed_conn *c, struct krpc_ring *r, uint64_t wr_id)
{
	uint32_t i, n;

	for (i = 0; i < r->wr_count; i++)
		if (r->wr[(r->wr_head + i) % r->wr_cap].wr_id == wr_id)
			break;
	if (i == r->wr_count)
		return (0);
	for (n = i + 1; n > 0; n--)
		krpc_ring_pop(c, r);
	return (1);
}

static void
krpc_ring_retire_all(struct krpc_ofed_conn *c, struct krpc_ring *r)
{
	if (r->wr == NULL)
		return;
	while (r->wr_count > 0)
		krpc_ring_pop(c, r);
}

/* ---- connection objects --------------------------------------------------------------- */

static void
krpc_conn_free(struct krpc_ofed_conn *c)
{
	krpc_ofed_free(c->swr);
	krpc_ofed_free(c->ssge);
	krpc_ofed_free(c->rwr);
	krpc_ofed_free(c->rsge);
	krpc_ofed_free(c->mrs);
	krpc_ring_free(&c->sring);
	krpc_ring_free(&c->rring);
	krpc_lock_destroy(&c->lock);
	krpc_ofed_free(c);
}

static struct krpc_ofed_conn *
krpc_conn_alloc(const struct krpc_ofed_params *p)
{
	struct krpc_ofed_conn *c;

	if (p->max_send_wr == 0 || p->max_recv_wr == 0 || p->max_sge == 0 ||
	    p->num_mrs == 0 || p->max_pages_per_mr == 0 ||
	    (uint64_t)p->max_send_wr * p->max_sge > 0xffffffffU)
		return (NULL);
	c = krpc_zalloc(sizeof(*c));
	if (c == NULL)
		return (NULL);
	c->ctx.kind = KRPC_CTX_CONN;
	krpc_lock_init(&c->lock, "krpc_rdma_conn");
	c->params = *p;
	c->nssge = p->max_send_wr * p->max_sge;
	c->swr = krpc_zalloc(sizeof(*c->swr) * p->max_send_wr);
	c->ssge = krpc_zalloc(sizeof(*c->ssge) * c->nssge);
	c->rwr = krpc_zalloc(sizeof(*c->rwr) * p->max_recv_wr);
	c->rsge = krpc_zalloc(sizeof(*c->rsge) * p->max_recv_wr);
	c->mrs = krpc_zalloc(sizeof(*c->mrs) * p->num_mrs);
	if (c->swr == NULL || c->ssge == NULL || c->rwr == NULL || c->rsge == NULL ||
	    c->mrs == NULL || krpc_ring_alloc(&c->sring, p->max_send_wr, c->nssge) != 0 ||
	    krpc_ring_alloc(&c->rring, p->max_recv_wr, p->max_recv_wr) != 0) {
		krpc_conn_free(c);
		return (NULL);
	}
	return (c);
}

/* Destroy what krpc_setup_qp created (QP first: it must go before its cm id). */
static void
krpc_teardown_qp(struct krpc_ofed_conn *c)
{
	uint32_t i;
	struct krpc_mr *m;

	if (c->qp != NULL) {
		if (c->id != NULL)
			rdma_destroy_qp(c->id);
		else
			ib_destroy_qp(c->qp);	/* the cm id is gone already (conn_destroy) */
		c->qp = NULL;
		KRPC_COUNT(qps_live, -1);
	}
	/* No DMA after the QP is gone: unmap what was posted and never polled. */
	krpc_ring_retire_all(c, &c->sring);
	krpc_ring_retire_all(c, &c->rring);
	for (i = 0; i < c->params.num_mrs; i++) {
		m = &c->mrs[i];
		if (m->sg_mapped > 0 && c->dev != NULL)
			ib_dma_unmap_sg(c->dev, m->sg, m->sg_mapped, DMA_BIDIRECTIONAL);
		m->sg_mapped = 0;
		if (m->mr != NULL) {
			ib_dereg_mr(m->mr);
			KRPC_COUNT(mrs_live, -1);
		}
		m->mr = NULL;
		krpc_ofed_free(m->sg);
		m->sg = NULL;
	}
	if (c->cq != NULL) {
		ib_destroy_cq(c->cq);
		c->cq = NULL;
		KRPC_COUNT(cqs_live, -1);
	}
	if (c->pd != NULL) {
		ib_dealloc_pd(c->pd);
		c->pd = NULL;
		KRPC_COUNT(pds_live, -1);
	}
}

/* PD, CQ, QP and the FRWR MR pool on a resolved id (CM handler context). */
static int
krpc_setup_qp(struct krpc_ofed_conn *c, struct rdma_cm_id *id)
{
	struct ib_cq_init_attr ca;
	struct ib_qp_init_attr qa;
	struct krpc_mr *m;
	uint32_t i;
	int err;

	c->dev = id->device;
	c->pd = ib_alloc_pd(id->device, 0);
	if (IS_ERR(c->pd)) {
		err = -PTR_ERR(c->pd);
		c->pd = NULL;
		return (err);
	}
	KRPC_COUNT(pds_live, 1);
	memset(&ca, 0, sizeof(ca));
	ca.cqe = c->params.max_send_wr + c->params.max_recv_wr;
	ca.comp_vector = 0;
	c->cq = ib_create_cq(id->device, krpc_cq_comp, krpc_cq_event, c, &ca);
	if (IS_ERR(c->cq)) {
		err = -PTR_ERR(c->cq);
		c->cq = NULL;
		goto fail;
	}
	KRPC_COUNT(cqs_live, 1);
	memset(&qa, 0, sizeof(qa));
	qa.event_handler = krpc_qp_event;
	qa.qp_context = c;
	qa.send_cq = c->cq;
	qa.recv_cq = c->cq;
	qa.cap.max_send_wr = c->params.max_send_wr;
	qa.cap.max_recv_wr = c->params.max_recv_wr;
	qa.cap.max_send_sge = c->params.max_sge;
	qa.cap.max_recv_sge = 1;
	qa.sq_sig_type = IB_SIGNAL_REQ_WR;
	qa.qp_type = IB_QPT_RC;
	err = rdma_create_qp(id, c->pd, &qa);
	if (err != 0) {
		err = err < 0 ? -err : err;
		goto fail;
	}
	c->qp = id->qp;
	KRPC_COUNT(qps_live, 1);
	for (i = 0; i < c->params.num_mrs; i++) {
		m = &c->mrs[i];
		m->sg = krpc_zalloc(sizeof(*m->sg) * c->params.max_pages_per_mr);
		if (m->sg == NULL) {
			err = ENOMEM;
			goto fail;
		}
		m->mr = ib_alloc_mr(c->pd, IB_MR_TYPE_MEM_REG, c->params.max_pages_per_mr);
		if (IS_ERR(m->mr)) {
			err = -PTR_ERR(m->mr);
			m->mr = NULL;
			goto fail;
		}
		KRPC_COUNT(mrs_live, 1);
	}
	ib_req_notify_cq(c->cq, IB_CQ_NEXT_COMP);
	return (0);
fail:
	krpc_teardown_qp(c);
	return (err);
}

static void
krpc_conn_param(struct krpc_ofed_conn *c, struct rdma_conn_param *p, const void *pd,
    uint32_t pdlen)
{
	uint32_t rd = c->params.rd_atomic > 255 ? 255 : c->params.rd_atomic;

	memset(p, 0, sizeof(*p));
	p->private_data = pd;
	p->private_data_len = (u8)pdlen;
	p->responder_resources = (u8)rd;
	p->initiator_depth = (u8)rd;
	p->flow_control = 1;
	p->retry_count = 7;
	p->rnr_retry_count = 6; /* finite: a Send that finds no Receive fails */
}

static int krpc_cm_handler(struct rdma_cm_id *id, struct rdma_cm_event *ev);

static int
krpc_cm_request(struct krpc_ofed_listener *l, struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
	struct krpc_ofed_conn *c;
	uint32_t n;

	c = krpc_conn_alloc(&l->params);
	if (c == NULL)
		return (-ENOMEM);	/* non-zero: the CM destroys (rejects) the id */
	c->id = id;
	c->passive = 1;
	n = ev->param.conn.private_data_len;
	if (n > KRPC_CM_PRIVATE_MAX)
		n = KRPC_CM_PRIVATE_MAX;
	if (ev->param.conn.private_data != NULL && n > 0)
		memcpy(c->peer_pdata, ev->param.conn.private_data, n);
	else
		n = 0;
	c->peer_pdlen = n;
	if (krpc_setup_qp(c, id) != 0) {
		c->id = NULL;
		krpc_conn_free(c);
		return (-ENOMEM);
	}
	id->context = c;
	KRPC_COUNT(cm_ids_live, 1);	/* ours from here on (a non-zero return: the CM's) */
	krpc_lock(&l->lock);
	*l->pending_tail = c;
	l->pending_tail = &c->next;
	krpc_upcall_unlock(&l->lock, &l->up);
	return (0);
}

/*
 * An event on a listener's own id. A listener bound to a specific address is told of its
 * device's removal (cma_remove_id_dev): the owner learns it from krpc_ofed_listener_next
 * (ENODEV) and destroys the listener; returning 0 leaves the id to it.
 */
static int
krpc_listener_event(struct krpc_ofed_listener *l, struct rdma_cm_event *ev)
{
	if (ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL) {
		krpc_lock(&l->lock);
		l->gone = 1;
		krpc_upcall_unlock(&l->lock, &l->up);
	}
	return (0);
}

static int
krpc_cm_handler(struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
	struct krpc_ofed_conn *c;
	struct rdma_conn_param p;
	int err, dead;

	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
		return (krpc_cm_request(id->context, id, ev));
	if (((struct krpc_cm_ctx *)id->context)->kind == KRPC_CTX_LISTENER)
		return (krpc_listener_event(id->context, ev));
	c = id->context;
	krpc_lock(&c->lock);
	dead = c->dead;
	krpc_unlock(&c->lock);
	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (dead)
			break;
		err = rdma_resolve_route(id, (int)c->params.timeout_ms);
		if (err != 0)
			krpc_push_event(c, KRPC_CM_ERROR, err, NULL, 0);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		if (dead)
			break;
		err = krpc_setup_qp(c, id);
		if (err == 0) {
			krpc_conn_param(c, &p, c->pdata, c->pdlen);
			err = krpc_rdma_connect_in_handler(id, &p);
		}
		if (err != 0)
			krpc_push_event(c, KRPC_CM_ERROR, err, NULL, 0);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		if (c->passive)
			krpc_push_event(c, KRPC_CM_ESTABLISHED, 0, c->peer_pdata, c->peer_pdlen);
		else
			krpc_push_event(c, KRPC_CM_ESTABLISHED, 0, ev->param.conn.private_data,
			    ev->param.conn.private_data_len);
		break;
	case RDMA_CM_EVENT_REJECTED:
		krpc_push_event(c, KRPC_CM_REJECTED, ev->status, NULL, 0);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		krpc_push_event(c, KRPC_CM_DISCONNECTED, ev->status, NULL, 0);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		krpc_push_event(c, KRPC_CM_ERROR, ev->status, NULL, 0);
		break;
	default:
		break;
	}
	return (0);
}

int
krpc_ofed_connect(void *vnet, const struct sockaddr *dst, const struct krpc_ofed_params *params,
    const uint8_t *pdata, uint32_t pdlen, struct krpc_ofed_conn **out)
{
	struct krpc_ofed_conn *c;
	struct rdma_cm_id *id;
	int err;

	if (pdlen > KRPC_CM_PRIVATE_MAX)
		return (EINVAL);
	c = krpc_conn_alloc(params);
	if (c == NULL)
		return (ENOMEM);
	if (pdlen > 0)
		memcpy(c->pdata, pdata, pdlen);
	c->pdlen = pdlen;
	id = krpc_rdma_create_id(vnet, krpc_cm_handler, c);
	if (IS_ERR(id)) {
		err = -PTR_ERR(id);
		krpc_conn_free(c);
		return (err);
	}
	KRPC_COUNT(cm_ids_live, 1);
	c->id = id;
	err = rdma_resolve_addr(id, NULL, __DECONST(struct sockaddr *, dst),
	    (int)params->timeout_ms);
	if (err != 0) {
		rdma_destroy_id(id);
		KRPC_COUNT(cm_ids_live, -1);
		krpc_conn_free(c);
		return (err < 0 ? -err : err);
	}
	*out = c;
	return (0);
}

int
krpc_ofed_accept(struct krpc_ofed_conn *c, const uint8_t *pdata, uint32_t pdlen)
{
	struct rdma_conn_param p;
	int err;

	if (!c->passive || c->accepted || pdlen > KRPC_CM_PRIVATE_MAX)
		return (EINVAL);
	memcpy(c->pdata, pdata, pdlen);
	c->pdlen = pdlen;
	krpc_conn_param(c, &p, c->pdata, c->pdlen);
	err = krpc_rdma_accept(c->id, &p);
	if (err == 0)
		c->accepted = 1;
	return (err < 0 ? -err : err);
}

int
krpc_ofed_disconnect(struct krpc_ofed_conn *c)
{
	if (c->id == NULL || c->qp == NULL)
		return (ENOTCONN);
	return (rdma_disconnect(c->id));
}

int
krpc_ofed_conn_addrs(struct krpc_ofed_conn *c, struct sockaddr_storage *local,
    struct sockaddr_storage *remote)
{
	memset(local, 0, sizeof(*local));
	memset(remote, 0, sizeof(*remote));
	if (c->id == NULL)
		return (ENOTCONN);
	/* rdma_cm's route.addr: the CM fills both for an accepted id (ib_cma.c,
	 * cma_save_net_info) and for a connected one (address resolution). */
	memcpy(local, &c->id->route.addr.src_addr, sizeof(*local));
	memcpy(remote, &c->id->route.addr.dst_addr, sizeof(*remote));
	return (0);
}

void
krpc_ofed_conn_destroy(struct krpc_ofed_conn *c)
{
	krpc_lock(&c->lock);
	c->dead = 1;
	krpc_upcall_set(&c->lock, &c->up, NULL, NULL);
	krpc_unlock(&c->lock);
	if (c->passive && !c->accepted && c->id != NULL)
		krpc_rdma_reject(c->id);
	/*
	 * The id first: rdma_destroy_id waits for a CM handler that is running (one may be
	 * inside krpc_setup_qp, creating what the teardown destroys) and no handler runs after
	 * it. Then the QP (ib_destroy_qp: no rdma_cm call once the id is gone, as Linux's
	 * nvme-rdma does), MRs, CQ and PD.
	 */
	if (c->id != NULL) {
		rdma_destroy_id(c->id);
		KRPC_COUNT(cm_ids_live, -1);
	}
	c->id = NULL;
	krpc_teardown_qp(c);
	krpc_conn_free(c);
}

int
krpc_ofed_listen(void *vnet, const struct sockaddr *addr, const struct krpc_ofed_params *params,
    int backlog, struct krpc_ofed_listener **out)
{
	struct krpc_ofed_listener *l;
	int err;

	l = krpc_zalloc(sizeof(*l));
	if (l == NULL)
		return (ENOMEM);
	l->ctx.kind = KRPC_CTX_LISTENER;
	krpc_lock_init(&l->lock, "krpc_rdma_listen");
	l->pending = NULL;
	l->pending_tail = &l->pending;
	l->params = *params;
	l->id = krpc_rdma_create_id(vnet, krpc_cm_handler, l);
	if (IS_ERR(l->id)) {
		err = -PTR_ERR(l->id);
		goto fail;
	}
	KRPC_COUNT(cm_ids_live, 1);
	err = rdma_bind_addr(l->id, __DECONST(struct sockaddr *, addr));
	if (err == 0)
		err = rdma_listen(l->id, backlog);
	if (err != 0) {
		rdma_destroy_id(l->id);
		KRPC_COUNT(cm_ids_live, -1);
		err = err < 0 ? -err : err;
		goto fail;
	}
	*out = l;
	return (0);
fail:
	krpc_lock_destroy(&l->lock);
	krpc_ofed_free(l);
	return (err);
}

int
krpc_ofed_listener_next(struct krpc_ofed_listener *l, struct krpc_ofed_conn **out)
{
	struct krpc_ofed_conn *c;
	int gone;

	krpc_lock(&l->lock);
	c = l->pending;
	if (c != NULL) {
		l->pending = c->next;
		if (l->pending == NULL)
			l->pending_tail = &l->pending;
		c->next = NULL;
	}
	gone = l->gone;
	krpc_unlock(&l->lock);
	if (c == NULL)
		return (gone ? ENODEV : EAGAIN);
	*out = c;
	return (0);
}

void
krpc_ofed_listener_destroy(struct krpc_ofed_listener *l)
{
	struct krpc_ofed_conn *c;

	rdma_destroy_id(l->id);	/* no more requests after this */
	KRPC_COUNT(cm_ids_live, -1);
	krpc_lock(&l->lock);
	krpc_upcall_set(&l->lock, &l->up, NULL, NULL);
	krpc_unlock(&l->lock);
	while ((c = l->pending) != NULL) {
		l->pending = c->next;
		krpc_ofed_conn_destroy(c);
	}
	krpc_lock_destroy(&l->lock);
	krpc_ofed_free(l);
}

/* ---- data path ------------------------------------------------------------------------ */

/* The ib_send_wr opcode of one of ours; -1 for an unknown one. */
static int
krpc_send_opcode(uint32_t op)
{
	switch (op) {
	case KRPC_OP_SEND:
		return (IB_WR_SEND);
	case KRPC_OP_SEND_INV:
		return (IB_WR_SEND_WITH_INV);
	case KRPC_OP_RDMA_WRITE:
		return (IB_WR_RDMA_WRITE);
	case KRPC_OP_RDMA_READ:
		return (IB_WR_RDMA_READ);
	case KRPC_OP_LOCAL_INV:
		return (IB_WR_LOCAL_INV);
	default:
		return (-1);
	}
}

static void
krpc_count_send(struct krpc_ofed_conn *c, const struct krpc_wr *w)
{
	if (w->opcode == KRPC_OP_SEND_INV)
		KRPC_COUNT(send_invs, 1);
	if (w->opcode == KRPC_OP_SEND_INV || w->opcode == KRPC_OP_SEND) {
		if (c->passive)
			KRPC_COUNT(sends_passive, 1);
		else
			KRPC_COUNT(sends_active, 1);
	}
	if (w->opcode == KRPC_OP_LOCAL_INV)
		KRPC_COUNT(local_invs, 1);
}

int
krpc_ofed_post_send(struct krpc_ofed_conn *c, const struct krpc_wr *wrs, uint32_t n,
    const struct krpc_sge *sges, uint32_t nsge, uint32_t *posted)
{
	const struct ib_send_wr *bad = NULL;
	struct ib_rdma_wr *w;
	struct ib_sge *sl;
	uint32_t i, j, nmaps, unposted;
	int err;

	*posted = 0;
	if (c->qp == NULL)
		return (ENOTCONN);
	if (n == 0)
		return (0);
	if (n > c->params.max_send_wr || nsge > c->nssge)
		return (EINVAL);
	for (i = 0; i < n; i++) {
		if (wrs[i].num_sge > c->params.max_sge ||
		    (uint64_t)wrs[i].sge_first + wrs[i].num_sge > nsge ||
		    krpc_send_opcode(wrs[i].opcode) < 0)
			return (EINVAL);
	}
	/* Work request i gets the SGE slots [i * max_sge, i * max_sge + num_sge). */
	nmaps = 0;	/* mappings made by this call, all in the ring */
	for (i = 0; i < n; i++) {
		w = &c->swr[i];
		memset(w, 0, sizeof(*w));
		sl = &c->ssge[i * c->params.max_sge];
		for (j = 0; j < wrs[i].num_sge && wrs[i].opcode != KRPC_OP_LOCAL_INV; j++) {
			err = krpc_ring_map(c, &c->sring, sges[wrs[i].sge_first + j].addr,
			    sges[wrs[i].sge_first + j].length, &sl[j].addr);
			if (err != 0)
				goto unwind;
			nmaps++;
			sl[j].length = sges[wrs[i].sge_first + j].length;
			sl[j].lkey = c->pd->local_dma_lkey;
		}
		err = krpc_ring_push(&c->sring, wrs[i].wr_id, j);
		if (err != 0)
			goto unwind;
		w->wr.wr_id = wrs[i].wr_id;
		w->wr.sg_list = j > 0 ? sl : NULL;
		w->wr.num_sge = (int)j;
		w->wr.send_flags = (wrs[i].flags & KRPC_WR_SIGNALED) ? IB_SEND_SIGNALED : 0;
		w->wr.opcode = krpc_send_opcode(wrs[i].opcode);
		if (wrs[i].opcode == KRPC_OP_SEND_INV || wrs[i].opcode == KRPC_OP_LOCAL_INV)
			w->wr.ex.invalidate_rkey = wrs[i].rkey;
		if (wrs[i].opcode == KRPC_OP_RDMA_WRITE || wrs[i].opcode == KRPC_OP_RDMA_READ) {
			w->remote_addr = wrs[i].remote_addr;
			w->rkey = wrs[i].rkey;
		}
		if (i > 0)
			c->swr[i - 1].wr.next = &w->wr;
	}
	err = ib_post_send(c->qp, &c->swr[0].wr, &bad);
	if (err == 0)
		*posted = n;
	else if (bad != NULL)
		*posted = (uint32_t)((const struct ib_rdma_wr *)(const void *)bad - c->swr);
	for (i = 0; i < *posted; i++)
		krpc_count_send(c, &wrs[i]);
	/* The requests from *posted on were not posted: their records and mappings go. */
	for (unposted = 0, i = *posted; i < n; i++)
		unposted += (uint32_t)c->swr[i].wr.num_sge;
	krpc_ring_drop_newest(c, &c->sring, n - *posted, unposted);
	return (err < 0 ? -err : err);
unwind:
	/* Requests [0, i) have records; nmaps mappings were made. Nothing was posted. */
	krpc_ring_drop_newest(c, &c->sring, i, nmaps);
	return (err);
}

int
krpc_ofed_post_recv(struct krpc_ofed_conn *c, const uint64_t *wr_ids,
    const struct krpc_sge *sges, uint32_t n, uint32_t *posted)
{
	const struct ib_recv_wr *bad = NULL;
	uint32_t i;
	int err;

	*posted = 0;
	if (c->qp == NULL)
		return (ENOTCONN);
	if (n == 0)
		return (0);
	if (n > c->params.max_recv_wr)
		return (EINVAL);
	for (i = 0; i < n; i++) {
		err = krpc_ring_map(c, &c->rring, sges[i].addr, sges[i].length,
		    &c->rsge[i].addr);
		if (err == 0 && (err = krpc_ring_push(&c->rring, wr_ids[i], 1)) != 0)
			krpc_ring_drop_newest(c, &c->rring, 0, 1);
		if (err != 0) {
			krpc_ring_drop_newest(c, &c->rring, i, i);
			return (err);
		}
		c->rsge[i].length = sges[i].length;
		c->rsge[i].lkey = c->pd->local_dma_lkey;
		memset(&c->rwr[i], 0, sizeof(c->rwr[i]));
		c->rwr[i].wr_id = wr_ids[i];
		c->rwr[i].sg_list = &c->rsge[i];
		c->rwr[i].num_sge = 1;
		if (i > 0)
			c->rwr[i - 1].next = &c->rwr[i];
	}
	err = ib_post_recv(c->qp, &c->rwr[0], &bad);
	if (err == 0)
		*posted = n;
	else if (bad != NULL)
		*posted = (uint32_t)(bad - c->rwr);
	krpc_ring_drop_newest(c, &c->rring, n - *posted, n - *posted);
	return (err < 0 ? -err : err);
}

static uint32_t
krpc_wc_status(enum ib_wc_status s)
{
	switch (s) {
	case IB_WC_SUCCESS:
		return (KRPC_WC_SUCCESS);
	case IB_WC_WR_FLUSH_ERR:
		return (KRPC_WC_FLUSHED);
	case IB_WC_REM_ACCESS_ERR:
		return (KRPC_WC_REM_ACCESS);
	case IB_WC_RNR_RETRY_EXC_ERR:
		return (KRPC_WC_RNR_RETRY);
	case IB_WC_LOC_LEN_ERR:
	case IB_WC_LOC_QP_OP_ERR:
	case IB_WC_LOC_PROT_ERR:
	case IB_WC_MW_BIND_ERR:
	case IB_WC_LOC_ACCESS_ERR:
		return (KRPC_WC_LOCAL);
	case IB_WC_RETRY_EXC_ERR:
		return (KRPC_WC_RETRY);
	default:
		return (KRPC_WC_OTHER);
	}
}

int
krpc_ofed_poll_cq(struct krpc_ofed_conn *c, struct krpc_wc *out, uint32_t n)
{
	struct ib_wc *wc = c->wc;
	int i, got, recv;

	if (c->cq == NULL)
		return (0);
	if (n > KRPC_POLL_MAX)
		n = KRPC_POLL_MAX;
	got = ib_poll_cq(c->cq, (int)n, wc);
	if (got < 0)
		return (got);
	KRPC_COUNT(completions, (uint64_t)got);
	for (i = 0; i < got; i++) {
		/* Unmap what the completed request (and every older one of its queue) used. */
		recv = wc[i].status == IB_WC_SUCCESS && (wc[i].opcode & IB_WC_RECV);
		if (recv || !krpc_ring_retire(c, &c->sring, wc[i].wr_id))
			krpc_ring_retire(c, &c->rring, wc[i].wr_id);
		memset(&out[i], 0, sizeof(out[i]));
		out[i].wr_id = wc[i].wr_id;
		out[i].status = krpc_wc_status(wc[i].status);
		/* The opcode is only valid on success; Rust tells receives by wr_id anyway. */
		if (wc[i].status == IB_WC_SUCCESS && (wc[i].opcode & IB_WC_RECV))
			out[i].flags |= KRPC_WC_F_RECV;
		out[i].byte_len = wc[i].byte_len;
		if (wc[i].status == IB_WC_SUCCESS && (wc[i].wc_flags & IB_WC_WITH_INVALIDATE)) {
			out[i].flags |= KRPC_WC_F_INV;
			out[i].invalidated_rkey = wc[i].ex.invalidate_rkey;
			KRPC_COUNT(recv_invs, 1);
		}
	}
	return (got);
}

int
krpc_ofed_req_notify(struct krpc_ofed_conn *c)
{
	if (c->cq == NULL)
		return (ENOTCONN);
	return (ib_req_notify_cq(c->cq, IB_CQ_NEXT_COMP));
}

/* ---- FRWR ----------------------------------------------------------------------------- */

void
krpc_ofed_mr_unmap(struct krpc_ofed_conn *c, uint32_t idx)
{
	struct krpc_mr *m;

	if (idx >= c->params.num_mrs || c->id == NULL)
		return;
	m = &c->mrs[idx];
	if (m->sg_mapped > 0)
		ib_dma_unmap_sg(c->dev, m->sg, m->sg_mapped, DMA_BIDIRECTIONAL);
	m->sg_mapped = 0;
}

int
krpc_ofed_reg_mr(struct krpc_ofed_conn *c, uint32_t idx, const struct krpc_sge *frags,
    uint32_t n, uint32_t access, uint64_t wr_id, struct krpc_reg_out *out)
{
	const struct ib_send_wr *bad = NULL;
	struct ib_reg_wr rw;
	struct krpc_mr *m;
	uint32_t i;
	int nents, mapped, err;

	memset(out, 0, sizeof(*out));
	if (c->qp == NULL)
		return (ENOTCONN);
	if (idx >= c->params.num_mrs || n == 0)
		return (EINVAL);
	m = &c->mrs[idx];
	if (m->mr == NULL)
		return (ENOMEM);
	if (n > c->params.max_pages_per_mr)
		n = c->params.max_pages_per_mr;
	krpc_ofed_mr_unmap(c, idx);
	sg_init_table(m->sg, n);
	for (i = 0; i < n; i++) {
		sg_set_page(&m->sg[i], KRPC_PA_TO_PAGE(frags[i].addr & ~KRPC_PAGE_OFF_MASK),
		    frags[i].length, (unsigned int)(frags[i].addr & KRPC_PAGE_OFF_MASK));
	}
	nents = ib_dma_map_sg(c->dev, m->sg, (int)n, DMA_BIDIRECTIONAL);
	if (nents <= 0)
		return (ENOMEM);
	m->sg_mapped = (int)n;
	ib_update_fast_reg_key(m->mr, ib_inc_rkey(m->mr->rkey));
	mapped = ib_map_mr_sg(m->mr, m->sg, nents, NULL, PAGE_SIZE);
	if (mapped <= 0 || (nents != (int)n && mapped != nents)) {
		/* Nothing usable (or a coalesced list only partly mapped): no fragment taken. */
		krpc_ofed_mr_unmap(c, idx);
		return (0);
	}
	memset(&rw, 0, sizeof(rw));
	rw.wr.opcode = IB_WR_REG_MR;
	rw.wr.wr_id = wr_id;
	rw.wr.send_flags = 0;	/* unsignaled: completes with the next signaled request */
	rw.mr = m->mr;
	rw.key = m->mr->rkey;
	rw.access = 0;
	if (access & KRPC_ACC_REMOTE_READ)
		rw.access |= IB_ACCESS_REMOTE_READ;
	if (access & KRPC_ACC_REMOTE_WRITE)
		rw.access |= IB_ACCESS_REMOTE_WRITE;
	if (access & KRPC_ACC_LOCAL_WRITE)
		rw.access |= IB_ACCESS_LOCAL_WRITE;
	err = krpc_ring_push(&c->sring, wr_id, 0);
	if (err == 0) {
		err = ib_post_send(c->qp, &rw.wr, &bad);
		if (err != 0)
			krpc_ring_drop_newest(c, &c->sring, 1, 0);
	}
	if (err != 0) {
		krpc_ofed_mr_unmap(c, idx);
		return (err < 0 ? -err : err);
	}
	KRPC_COUNT(reg_mrs, 1);
	out->rkey = m->mr->rkey;
	out->iova = m->mr->iova;
	out->length = (uint32_t)m->mr->length;
	out->nmapped = (nents == (int)n) ? (uint32_t)mapped : n;
	return (0);
}

int
krpc_ofed_mr_reset(struct krpc_ofed_conn *c, uint32_t idx, uint32_t *rkey)
{
	struct krpc_mr *m;

	*rkey = 0;
	if (idx >= c->params.num_mrs || c->pd == NULL)
		return (EINVAL);
	m = &c->mrs[idx];
	krpc_ofed_mr_unmap(c, idx);
	if (m->mr != NULL) {
		ib_dereg_mr(m->mr);	/* the old rkey dies with the MR */
		KRPC_COUNT(mrs_live, -1);
	}
	m->mr = ib_alloc_mr(c->pd, IB_MR_TYPE_MEM_REG, c->params.max_pages_per_mr);
	if (IS_ERR(m->mr)) {
		m->mr = NULL;
		return (ENOMEM);
	}
	KRPC_COUNT(mrs_live, 1);
	KRPC_COUNT(mr_resets, 1);
	*rkey = m->mr->rkey;
	return (0);
}
