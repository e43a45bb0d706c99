/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma: exported C wrappers between the Rust shim (ofed-shim) and FreeBSD's OFED KPI.
 *
 * Rust passes only our plain structs (krpc_rdma_ofed.h); this file translates them into
 * ib_send_wr / ib_recv_wr / ib_reg_wr chains, ib_wc into krpc_wc, rdma_cm events into
 * krpc_cm_event, and wraps the static-inline verbs of ib_verbs.h. The same file builds
 * against the userspace emulation of the KPI (KRPC_OFED_EMU, ../emu) for the host tests.
 *
 * Locking: the data-path calls (post, poll, reg) are made by the single thread that drives a
 * connection; the rdma_cm handler runs in the CM's context and only touches the event queue
 * (under c->lock), the QP set-up before the connection is handed to Rust, and the listener's
 * pending list (under l->lock).
 */
#include "krpc_ofed_kpi.h"
#include "krpc_rdma_ofed.h"

MALLOC_DEFINE(M_KRPC_RDMA, "krpc_rdma", "krpc RPC-over-RDMA transport");

#define KRPC_EVQ 8

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

struct krpc_ofed_conn {
	struct krpc_cm_ctx ctx;	/* first: KRPC_CTX_CONN */
	struct mtx lock;
	struct rdma_cm_id *id;
	struct ib_device *dev;	/* id->device, kept for the teardown after the id is gone */
	struct ib_pd *pd;
	struct ib_cq *cq;
	struct ib_qp *qp;
	struct krpc_ofed_params params;
	struct krpc_mr *mrs;
	struct ib_rdma_wr *swr;	/* max_send_wr */
	struct ib_sge *ssge;	/* max_send_wr * max_sge */
	uint32_t nssge;
	struct ib_recv_wr *rwr;	/* max_recv_wr */
	struct ib_sge *rsge;
	struct krpc_cm_event evq[KRPC_EVQ];
	uint32_t ev_head, ev_count;
	uint8_t pdata[KRPC_CM_PRIVATE_MAX];	/* ours, for rdma_connect */
	uint32_t pdlen;
	uint8_t peer_pdata[KRPC_CM_PRIVATE_MAX]; /* the client's, from its request */
	uint32_t peer_pdlen;
	int passive;
	int accepted;
	int dead;
	void (*upcall)(void *);
	void *upcall_arg;
	TAILQ_ENTRY(krpc_ofed_conn) link;
};

struct krpc_ofed_listener {
	struct krpc_cm_ctx ctx;	/* first: KRPC_CTX_LISTENER */
	struct mtx lock;
	struct rdma_cm_id *id;
	struct krpc_ofed_params params;
	TAILQ_HEAD(, krpc_ofed_conn) pending;
	int gone;		/* the device went away (DEVICE_REMOVAL on the listener's id) */
};

/* ---- memory, panic, pages ------------------------------------------------------------ */

void *
krpc_ofed_malloc(size_t size, int flags)
{
	int mflags;

	mflags = (flags & KRPC_M_NOWAIT) ? M_NOWAIT : M_WAITOK;
	if (flags & KRPC_M_ZERO)
		mflags |= M_ZERO;
	return (malloc(size, M_KRPC_RDMA, mflags));
}

void
krpc_ofed_free(void *p)
{
	free(p, M_KRPC_RDMA);
}

void
krpc_ofed_panic(const uint8_t *msg, size_t len)
{
	panic("%.*s", (int)len, (const char *)msg);
}

int
krpc_ofed_page_alloc(uint64_t *pa)
{
	vm_page_t m;

	m = vm_page_alloc_noobj(VM_ALLOC_WIRED | VM_ALLOC_ZERO | VM_ALLOC_NOWAIT);
	if (m == NULL)
		return (ENOMEM);
	*pa = VM_PAGE_TO_PHYS(m);
	return (0);
}

int
krpc_ofed_page_ref(uint64_t pa)
{
	vm_page_t m;

	m = PHYS_TO_VM_PAGE(pa);
	if (m == NULL)
		return (EINVAL);
	vm_page_wire(m);
	return (0);
}

void
krpc_ofed_page_unref(uint64_t pa)
{
	vm_page_t m;

	m = PHYS_TO_VM_PAGE(pa);
	if (m != NULL && vm_page_unwire_noq(m))
		vm_page_free(m);
}

uint8_t *
krpc_ofed_page_kva(uint64_t pa)
{
	if (PHYS_TO_VM_PAGE(pa) == NULL)
		return (NULL);
	return ((uint8_t *)PHYS_TO_DMAP(pa));
}

/*
 * Bus address of a kernel page fragment for an SGE: its physical address. Right where bus
 * addresses are physical (amd64 without DMAR remapping the HCA). With an IOMMU the fragments
 * of SGEs would need ib_dma_map_page() per work request; FRWR registrations already go
 * through ib_dma_map_sg(). See README.md, "Limitations".
 */
static inline uint64_t
krpc_dma_addr(struct krpc_ofed_conn *c, uint64_t pa)
{
	(void)c;
	return (pa);
}

/* ---- events --------------------------------------------------------------------------- */

static void
krpc_push_event(struct krpc_ofed_conn *c, uint32_t kind, int status, const void *pd,
    uint32_t pdlen)
{
	struct krpc_cm_event *e;
	void (*fn)(void *);
	void *arg;

	mtx_lock(&c->lock);
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
	fn = c->upcall;
	arg = c->upcall_arg;
	mtx_unlock(&c->lock);
	if (fn != NULL)
		fn(arg);
}

int
krpc_ofed_poll_event(struct krpc_ofed_conn *c, struct krpc_cm_event *ev)
{
	int got = 0;

	mtx_lock(&c->lock);
	if (c->ev_count > 0) {
		*ev = c->evq[c->ev_head];
		c->ev_head = (c->ev_head + 1) % KRPC_EVQ;
		c->ev_count--;
		got = 1;
	}
	mtx_unlock(&c->lock);
	return (got);
}

void
krpc_ofed_set_upcall(struct krpc_ofed_conn *c, void (*fn)(void *), void *arg)
{
	mtx_lock(&c->lock);
	c->upcall = fn;
	c->upcall_arg = arg;
	mtx_unlock(&c->lock);
}

static void
krpc_cq_comp(struct ib_cq *cq, void *ctx)
{
	struct krpc_ofed_conn *c = ctx;
	void (*fn)(void *);
	void *arg;

	(void)cq;
	mtx_lock(&c->lock);
	fn = c->upcall;
	arg = c->upcall_arg;
	mtx_unlock(&c->lock);
	if (fn != NULL)
		fn(arg);
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

/* ---- connection objects --------------------------------------------------------------- */

static struct krpc_ofed_conn *
krpc_conn_alloc(const struct krpc_ofed_params *p)
{
	struct krpc_ofed_conn *c;

	if (p->max_send_wr == 0 || p->max_recv_wr == 0 || p->max_sge == 0 ||
	    p->num_mrs == 0 || p->max_pages_per_mr == 0)
		return (NULL);
	c = malloc(sizeof(*c), M_KRPC_RDMA, M_NOWAIT | M_ZERO);
	if (c == NULL)
		return (NULL);
	c->ctx.kind = KRPC_CTX_CONN;
	mtx_init(&c->lock, "krpc_rdma_conn", NULL, MTX_DEF);
	c->params = *p;
	c->nssge = p->max_send_wr * p->max_sge;
	c->swr = malloc(sizeof(*c->swr) * p->max_send_wr, M_KRPC_RDMA, M_NOWAIT | M_ZERO);
	c->ssge = malloc(sizeof(*c->ssge) * c->nssge, M_KRPC_RDMA, M_NOWAIT | M_ZERO);
	c->rwr = malloc(sizeof(*c->rwr) * p->max_recv_wr, M_KRPC_RDMA, M_NOWAIT | M_ZERO);
	c->rsge = malloc(sizeof(*c->rsge) * p->max_recv_wr, M_KRPC_RDMA, M_NOWAIT | M_ZERO);
	c->mrs = malloc(sizeof(*c->mrs) * p->num_mrs, M_KRPC_RDMA, M_NOWAIT | M_ZERO);
	if (c->swr == NULL || c->ssge == NULL || c->rwr == NULL || c->rsge == NULL ||
	    c->mrs == NULL) {
		free(c->swr, M_KRPC_RDMA);
		free(c->ssge, M_KRPC_RDMA);
		free(c->rwr, M_KRPC_RDMA);
		free(c->rsge, M_KRPC_RDMA);
		free(c->mrs, M_KRPC_RDMA);
		mtx_destroy(&c->lock);
		free(c, M_KRPC_RDMA);
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
	}
	for (i = 0; i < c->params.num_mrs; i++) {
		m = &c->mrs[i];
		if (m->sg_mapped > 0 && c->dev != NULL)
			ib_dma_unmap_sg(c->dev, m->sg, m->sg_mapped, DMA_BIDIRECTIONAL);
		m->sg_mapped = 0;
		if (m->mr != NULL)
			ib_dereg_mr(m->mr);
		m->mr = NULL;
		free(m->sg, M_KRPC_RDMA);
		m->sg = NULL;
	}
	if (c->cq != NULL) {
		ib_destroy_cq(c->cq);
		c->cq = NULL;
	}
	if (c->pd != NULL) {
		ib_dealloc_pd(c->pd);
		c->pd = NULL;
	}
}

static void
krpc_conn_free(struct krpc_ofed_conn *c)
{
	free(c->swr, M_KRPC_RDMA);
	free(c->ssge, M_KRPC_RDMA);
	free(c->rwr, M_KRPC_RDMA);
	free(c->rsge, M_KRPC_RDMA);
	free(c->mrs, M_KRPC_RDMA);
	mtx_destroy(&c->lock);
	free(c, M_KRPC_RDMA);
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
	memset(&ca, 0, sizeof(ca));
	ca.cqe = c->params.max_send_wr + c->params.max_recv_wr;
	ca.comp_vector = 0;
	c->cq = ib_create_cq(id->device, krpc_cq_comp, krpc_cq_event, c, &ca);
	if (IS_ERR(c->cq)) {
		err = -PTR_ERR(c->cq);
		c->cq = NULL;
		goto fail;
	}
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
	for (i = 0; i < c->params.num_mrs; i++) {
		m = &c->mrs[i];
		m->sg = malloc(sizeof(*m->sg) * c->params.max_pages_per_mr, M_KRPC_RDMA,
		    M_NOWAIT | M_ZERO);
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
	mtx_lock(&l->lock);
	TAILQ_INSERT_TAIL(&l->pending, c, link);
	mtx_unlock(&l->lock);
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
		mtx_lock(&l->lock);
		l->gone = 1;
		mtx_unlock(&l->lock);
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
	mtx_lock(&c->lock);
	dead = c->dead;
	mtx_unlock(&c->lock);
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
			err = rdma_connect(id, &p);
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
	/* NULL vnet: rdma_create_id fails with -EINVAL on a VIMAGE kernel (ib_cma.c). */
	id = rdma_create_id((struct vnet *)vnet, krpc_cm_handler, c, RDMA_PS_TCP, IB_QPT_RC);
	if (IS_ERR(id)) {
		err = -PTR_ERR(id);
		krpc_conn_free(c);
		return (err);
	}
	c->id = id;
	err = rdma_resolve_addr(id, NULL, __DECONST(struct sockaddr *, dst),
	    (int)params->timeout_ms);
	if (err != 0) {
		rdma_destroy_id(id);
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
	err = rdma_accept(c->id, &p);
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

void
krpc_ofed_conn_destroy(struct krpc_ofed_conn *c)
{
	mtx_lock(&c->lock);
	c->dead = 1;
	c->upcall = NULL;
	mtx_unlock(&c->lock);
	if (c->passive && !c->accepted && c->id != NULL)
		rdma_reject(c->id, NULL, 0);
	/*
	 * The id first: rdma_destroy_id waits for a CM handler that is running (one may be
	 * inside krpc_setup_qp, creating what the teardown destroys) and no handler runs after
	 * it. Then the QP (ib_destroy_qp: no rdma_cm call once the id is gone, as Linux's
	 * nvme-rdma does), MRs, CQ and PD.
	 */
	if (c->id != NULL)
		rdma_destroy_id(c->id);
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

	l = malloc(sizeof(*l), M_KRPC_RDMA, M_NOWAIT | M_ZERO);
	if (l == NULL)
		return (ENOMEM);
	l->ctx.kind = KRPC_CTX_LISTENER;
	mtx_init(&l->lock, "krpc_rdma_listen", NULL, MTX_DEF);
	TAILQ_INIT(&l->pending);
	l->params = *params;
	l->id = rdma_create_id((struct vnet *)vnet, krpc_cm_handler, l, RDMA_PS_TCP, IB_QPT_RC);
	if (IS_ERR(l->id)) {
		err = -PTR_ERR(l->id);
		goto fail;
	}
	err = rdma_bind_addr(l->id, __DECONST(struct sockaddr *, addr));
	if (err == 0)
		err = rdma_listen(l->id, backlog);
	if (err != 0) {
		rdma_destroy_id(l->id);
		err = err < 0 ? -err : err;
		goto fail;
	}
	*out = l;
	return (0);
fail:
	mtx_destroy(&l->lock);
	free(l, M_KRPC_RDMA);
	return (err);
}

int
krpc_ofed_listener_next(struct krpc_ofed_listener *l, struct krpc_ofed_conn **out)
{
	struct krpc_ofed_conn *c;
	int gone;

	mtx_lock(&l->lock);
	c = TAILQ_FIRST(&l->pending);
	if (c != NULL)
		TAILQ_REMOVE(&l->pending, c, link);
	gone = l->gone;
	mtx_unlock(&l->lock);
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
	while ((c = TAILQ_FIRST(&l->pending)) != NULL) {
		TAILQ_REMOVE(&l->pending, c, link);
		krpc_ofed_conn_destroy(c);
	}
	mtx_destroy(&l->lock);
	free(l, M_KRPC_RDMA);
}

/* ---- data path ------------------------------------------------------------------------ */

int
krpc_ofed_post_send(struct krpc_ofed_conn *c, const struct krpc_wr *wrs, uint32_t n,
    const struct krpc_sge *sges, uint32_t nsge, uint32_t *posted)
{
	const struct ib_send_wr *bad = NULL;
	struct ib_rdma_wr *w;
	uint32_t i;
	int err;

	*posted = 0;
	if (c->qp == NULL)
		return (ENOTCONN);
	if (n == 0)
		return (0);
	if (n > c->params.max_send_wr || nsge > c->nssge)
		return (EINVAL);
	for (i = 0; i < nsge; i++) {
		c->ssge[i].addr = krpc_dma_addr(c, sges[i].addr);
		c->ssge[i].length = sges[i].length;
		c->ssge[i].lkey = c->pd->local_dma_lkey;
	}
	for (i = 0; i < n; i++) {
		w = &c->swr[i];
		memset(w, 0, sizeof(*w));
		if (wrs[i].num_sge > c->params.max_sge ||
		    (uint64_t)wrs[i].sge_first + wrs[i].num_sge > nsge)
			return (EINVAL);
		w->wr.wr_id = wrs[i].wr_id;
		w->wr.sg_list = wrs[i].num_sge > 0 ? &c->ssge[wrs[i].sge_first] : NULL;
		w->wr.num_sge = (int)wrs[i].num_sge;
		w->wr.send_flags = (wrs[i].flags & KRPC_WR_SIGNALED) ? IB_SEND_SIGNALED : 0;
		switch (wrs[i].opcode) {
		case KRPC_OP_SEND:
			w->wr.opcode = IB_WR_SEND;
			break;
		case KRPC_OP_SEND_INV:
			w->wr.opcode = IB_WR_SEND_WITH_INV;
			w->wr.ex.invalidate_rkey = wrs[i].rkey;
			break;
		case KRPC_OP_RDMA_WRITE:
			w->wr.opcode = IB_WR_RDMA_WRITE;
			w->remote_addr = wrs[i].remote_addr;
			w->rkey = wrs[i].rkey;
			break;
		case KRPC_OP_RDMA_READ:
			w->wr.opcode = IB_WR_RDMA_READ;
			w->remote_addr = wrs[i].remote_addr;
			w->rkey = wrs[i].rkey;
			break;
		case KRPC_OP_LOCAL_INV:
			w->wr.opcode = IB_WR_LOCAL_INV;
			w->wr.ex.invalidate_rkey = wrs[i].rkey;
			w->wr.sg_list = NULL;
			w->wr.num_sge = 0;
			break;
		default:
			return (EINVAL);
		}
		if (i > 0)
			c->swr[i - 1].wr.next = &w->wr;
	}
	err = ib_post_send(c->qp, &c->swr[0].wr, &bad);
	if (err == 0)
		*posted = n;
	else if (bad != NULL)
		*posted = (uint32_t)((const struct ib_rdma_wr *)(const void *)bad - c->swr);
	return (err < 0 ? -err : err);
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
		c->rsge[i].addr = krpc_dma_addr(c, sges[i].addr);
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
	struct ib_wc wc[16];
	int i, got;

	if (c->cq == NULL)
		return (0);
	if (n > 16)
		n = 16;
	got = ib_poll_cq(c->cq, (int)n, wc);
	if (got < 0)
		return (got);
	for (i = 0; i < got; i++) {
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
		sg_set_page(&m->sg[i], PHYS_TO_VM_PAGE(frags[i].addr & ~KRPC_PAGE_OFF_MASK),
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
	err = ib_post_send(c->qp, &rw.wr, &bad);
	if (err != 0) {
		krpc_ofed_mr_unmap(c, idx);
		return (err < 0 ? -err : err);
	}
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
	if (m->mr != NULL)
		ib_dereg_mr(m->mr);	/* the old rkey dies with the MR */
	m->mr = ib_alloc_mr(c->pd, IB_MR_TYPE_MEM_REG, c->params.max_pages_per_mr);
	if (IS_ERR(m->mr)) {
		m->mr = NULL;
		return (ENOMEM);
	}
	*rkey = m->mr->rkey;
	return (0);
}
