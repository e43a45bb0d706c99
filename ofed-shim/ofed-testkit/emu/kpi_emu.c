/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: the FreeBSD kernel KPI subset of kpi_emu.h implemented in userspace
 * on libibverbs (and librdmacm through cm_glue.c). See kpi_emu.h for the model.
 */
/* System and libibverbs headers first: kpi_emu.h turns malloc/free into the kernel's
 * function-like macros. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "kpi_emu.h"
#include "cm_glue.h"

/* libibverbs mirrors the kernel's enums: the status and receive-opcode values are the same. */
_Static_assert((int)IBV_WC_SUCCESS == (int)IB_WC_SUCCESS, "wc status");
_Static_assert((int)IBV_WC_WR_FLUSH_ERR == (int)IB_WC_WR_FLUSH_ERR, "wc status");
_Static_assert((int)IBV_WC_REM_ACCESS_ERR == (int)IB_WC_REM_ACCESS_ERR, "wc status");
_Static_assert((int)IBV_WC_RNR_RETRY_EXC_ERR == (int)IB_WC_RNR_RETRY_EXC_ERR, "wc status");
_Static_assert((int)IBV_WC_GENERAL_ERR == (int)IB_WC_GENERAL_ERR, "wc status");
_Static_assert((int)IBV_WC_RECV == (int)IB_WC_RECV, "wc opcode");

static pthread_mutex_t emu_lock = PTHREAD_MUTEX_INITIALIZER;	/* devices, MRs, stats */
static pthread_mutex_t cq_lock = PTHREAD_MUTEX_INITIALIZER;	/* CQ registry + dispatch */
static struct krpc_emu_stats emu_stats;

/* ---- panic, malloc, mtx ----------------------------------------------------------------- */

void
krpc_emu_panic(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "panic: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	abort();
}

void *
krpc_emu_malloc(size_t size, struct malloc_type *type, int flags)
{
	(void)type;
	if (flags & M_ZERO)
		return (calloc(1, size == 0 ? 1 : size));
	return ((malloc)(size == 0 ? 1 : size));
}

void
krpc_emu_free(void *addr, struct malloc_type *type)
{
	(void)type;
	(free)(addr);
}

void
mtx_init(struct mtx *m, const char *name, const char *type, int opts)
{
	(void)name;
	(void)type;
	(void)opts;
	pthread_mutex_init(&m->m, NULL);
}

void
mtx_destroy(struct mtx *m)
{
	pthread_mutex_destroy(&m->m);
}

static __thread int mtx_held;

void
mtx_lock(struct mtx *m)
{
	pthread_mutex_lock(&m->m);
	mtx_held++;
}

void
mtx_unlock(struct mtx *m)
{
	mtx_held--;
	pthread_mutex_unlock(&m->m);
}

int
krpc_emu_mtx_held(void)
{
	return (mtx_held);
}

/* ---- sx(9) --------------------------------------------------------------------------------- */

/*
 * The addresses of the initialised sx locks, for krpc_emu_sx_at: FreeBSD's sx sleeps on its
 * own address (sleepq, SLEEPQ_SX), so a msleep / wakeup on that address meets the sx's
 * sleepqueue and sleepq_broadcast panics on the type mismatch ("mismatch between
 * sleep/wakeup and cv_*"). The first SX_SEEN only (a full table checks nothing more).
 */
#define SX_SEEN	4096
static pthread_mutex_t sx_seen_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct sx *sx_seen[SX_SEEN];

static void
sx_seen_set(const struct sx *old, const struct sx *new)
{
	int i;

	pthread_mutex_lock(&sx_seen_lock);
	for (i = 0; i < SX_SEEN; i++)
		if (sx_seen[i] == old) {
			sx_seen[i] = new;
			break;
		}
	pthread_mutex_unlock(&sx_seen_lock);
}

int
krpc_emu_sx_at(const void *p)
{
	int i, found = 0;

	pthread_mutex_lock(&sx_seen_lock);
	for (i = 0; i < SX_SEEN && !found; i++)
		found = sx_seen[i] != NULL && (const void *)sx_seen[i] == p;
	pthread_mutex_unlock(&sx_seen_lock);
	return (found);
}

void
sx_init(struct sx *sx, const char *name)
{
	(void)name;
	if (sx->initialised)
		krpc_emu_panic("sx_init of an initialised sx (%s)", name);
	pthread_mutex_init(&sx->m, NULL);
	sx->initialised = 1;
	sx_seen_set(NULL, sx);
}

void
sx_destroy(struct sx *sx)
{
	if (!sx->initialised)
		krpc_emu_panic("sx_destroy of an sx never initialised");
	pthread_mutex_destroy(&sx->m);
	sx->initialised = 0;
	sx_seen_set(sx, NULL);
}

void
sx_xlock(struct sx *sx)
{
	if (!sx->initialised)
		krpc_emu_panic("sx_xlock of an sx never initialised");
	pthread_mutex_lock(&sx->m);
}

void
sx_xunlock(struct sx *sx)
{
	pthread_mutex_unlock(&sx->m);
}

int
krpc_emu_sx_initialised(const struct sx *sx)
{
	return (sx->initialised);
}

/* ---- net/vnet.h: one network stack, as vnet0 ------------------------------------------------ */

struct vnet {
	int unused;
};
static struct vnet emu_vnet0;
struct vnet *vnet0 = &emu_vnet0;
__thread struct vnet *krpc_emu_td_vnet;

/* ---- "kernel memory": the page arena ----------------------------------------------------- */

static pthread_once_t arena_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *arena_base;
static size_t arena_pages;
static size_t arena_cursor;
static struct vm_page *arena_vm;

static void
arena_init(void)
{
	const char *env = getenv("KRPC_OFED_EMU_PAGES");
	size_t n = 32768, i;
	void *p;

	if (env != NULL && strtoul(env, NULL, 0) > 0)
		n = strtoul(env, NULL, 0);
	p = mmap(NULL, n * PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		krpc_emu_panic("emu: mmap of the %zu-page arena failed", n);
	arena_vm = calloc(n, sizeof(*arena_vm));
	if (arena_vm == NULL)
		krpc_emu_panic("emu: no memory for the vm_page array");
	for (i = 0; i < n; i++)
		arena_vm[i].phys_addr = (vm_paddr_t)(uintptr_t)p + (vm_paddr_t)i * PAGE_SIZE;
	arena_base = p;
	arena_pages = n;
}

vm_page_t
krpc_emu_phys_to_vm_page(vm_paddr_t pa)
{
	uintptr_t base;

	pthread_once(&arena_once, arena_init);
	base = (uintptr_t)arena_base;
	if (pa < base || pa >= base + (vm_paddr_t)arena_pages * PAGE_SIZE)
		return (NULL);
	return (&arena_vm[(pa - base) / PAGE_SIZE]);
}

vm_page_t
vm_page_alloc_noobj(int req)
{
	size_t k, i;
	vm_page_t m = NULL;

	pthread_once(&arena_once, arena_init);
	pthread_mutex_lock(&arena_lock);
	for (k = 0; k < arena_pages; k++) {
		i = (arena_cursor + k) % arena_pages;
		if (arena_vm[i].ref_count == 0) {
			m = &arena_vm[i];
			m->ref_count = 1;
			arena_cursor = (i + 1) % arena_pages;
			emu_stats.pages_in_use++;
			break;
		}
	}
	pthread_mutex_unlock(&arena_lock);
	if (m != NULL && (req & VM_ALLOC_ZERO))
		memset((void *)(uintptr_t)m->phys_addr, 0, PAGE_SIZE);
	return (m);
}

void
vm_page_wire(vm_page_t m)
{
	pthread_mutex_lock(&arena_lock);
	if (m->ref_count == 0)
		krpc_emu_panic("vm_page_wire: free page %#jx", (uintmax_t)m->phys_addr);
	m->ref_count++;
	pthread_mutex_unlock(&arena_lock);
}

bool
vm_page_unwire_noq(vm_page_t m)
{
	bool last;

	pthread_mutex_lock(&arena_lock);
	if (m->ref_count == 0)
		krpc_emu_panic("vm_page_unwire_noq: page %#jx not wired",
		    (uintmax_t)m->phys_addr);
	m->ref_count--;
	last = m->ref_count == 0;
	pthread_mutex_unlock(&arena_lock);
	return (last);
}

void
vm_page_free(vm_page_t m)
{
	pthread_mutex_lock(&arena_lock);
	if (m->ref_count != 0)
		krpc_emu_panic("vm_page_free: page %#jx still wired", (uintmax_t)m->phys_addr);
	emu_stats.pages_in_use--;
	pthread_mutex_unlock(&arena_lock);
}

/* ---- devices and protection domains ------------------------------------------------------- */

static struct ib_device *devices;

static struct ib_device *
emu_device(struct ibv_context *verbs)
{
	struct ib_device *d;

	if (verbs == NULL)
		return (NULL);
	pthread_mutex_lock(&emu_lock);
	for (d = devices; d != NULL; d = d->next)
		if (d->verbs == verbs)
			break;
	if (d == NULL) {
		d = calloc(1, sizeof(*d));
		if (d != NULL) {
			d->verbs = verbs;
			d->next = devices;
			devices = d;
		}
	}
	pthread_mutex_unlock(&emu_lock);
	return (d);
}

struct ib_pd *
__ib_alloc_pd(struct ib_device *device, unsigned int flags, const char *caller)
{
	struct ib_pd *pd;
	int access;

	(void)flags;
	(void)caller;
	pthread_once(&arena_once, arena_init);
	pthread_mutex_lock(&emu_lock);
	pd = device->pd;
	if (pd == NULL) {
		pd = calloc(1, sizeof(*pd));
		if (pd == NULL)
			goto nomem;
		pd->device = device;
		pd->pd = ibv_alloc_pd(device->verbs);
		if (pd->pd == NULL) {
			(free)(pd);
			goto nomem;
		}
		access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
		    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND;
		pd->arena_mr = ibv_reg_mr(pd->pd, arena_base, arena_pages * PAGE_SIZE, access);
		if (pd->arena_mr == NULL) {
			fprintf(stderr, "emu: ibv_reg_mr of the arena (%zu pages): %s\n",
			    arena_pages, strerror(errno));
			ibv_dealloc_pd(pd->pd);
			(free)(pd);
			goto nomem;
		}
		pd->local_dma_lkey = pd->arena_mr->lkey;
		device->pd = pd;
	}
	pd->refs++;
	pthread_mutex_unlock(&emu_lock);
	return (pd);
nomem:
	pthread_mutex_unlock(&emu_lock);
	return (ERR_PTR(-ENOMEM));
}

void
ib_dealloc_pd_user(struct ib_pd *pd, struct ib_udata *udata)
{
	(void)udata;
	/* The device's one PD (and the arena registration) stays for the process. */
	pthread_mutex_lock(&emu_lock);
	pd->refs--;
	pthread_mutex_unlock(&emu_lock);
}

/* ---- CQs and the CM/interrupt thread -------------------------------------------------------- */

static pthread_once_t thread_once = PTHREAD_ONCE_INIT;
static int thread_err;
static int epfd = -1;
static struct ib_cq *cqs;

static void
cm_dispatch(struct ucm_event *ue)
{
	struct rdma_cm_id *id, *lid;
	struct rdma_cm_event ev;
	int rc;

	memset(&ev, 0, sizeof(ev));
	ev.event = (enum rdma_cm_event_type)ue->event;
	ev.status = ue->status;
	if (ue->pdlen > 0) {
		ev.param.conn.private_data = ue->pdata;
		ev.param.conn.private_data_len = ue->pdlen;
	}
	if (ue->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		/* The kernel CM creates the new id with the listener's handler and context. */
		lid = ue->uid_ctx;
		id = calloc(1, sizeof(*id));
		if (lid == NULL || id == NULL) {
			(free)(id);
			ucm_ack_event(ue);
			ucm_reject(ue->uid, NULL, 0);
			ucm_destroy_id(ue->uid);
			return;
		}
		id->uid = ue->uid;
		id->event_handler = lid->event_handler;
		id->context = lid->context;
		id->ps = lid->ps;
		id->qp_type = lid->qp_type;
		id->device = emu_device(ucm_verbs(ue->uid));
		ucm_set_context(ue->uid, id);
	} else {
		id = ue->uid_ctx;
		if (id == NULL) {
			ucm_ack_event(ue);
			return;
		}
		if (id->device == NULL)
			id->device = emu_device(ucm_verbs(id->uid));
	}
	/* route.addr as the kernel CM keeps it (cma_save_net_info for a new id). */
	ucm_addrs(id->uid, &id->route.addr.src_addr, &id->route.addr.dst_addr);
	__atomic_fetch_add(&emu_stats.cm_events, 1, __ATOMIC_RELAXED);
	rc = id->event_handler(id, &ev);
	ucm_ack_event(ue);
	if (rc != 0) {
		/* Non-zero: the CM destroys the id (rejecting a request). */
		if (ue->event == RDMA_CM_EVENT_CONNECT_REQUEST)
			ucm_reject(id->uid, NULL, 0);
		ucm_destroy_id(id->uid);
		(free)(id);
	}
}

static void
cq_dispatch(struct ib_cq *want)
{
	struct ib_cq *cq;
	struct ibv_cq *vcq;
	void *vctx;

	pthread_mutex_lock(&cq_lock);
	for (cq = cqs; cq != NULL && cq != want; cq = cq->next)
		;
	if (cq != NULL) {
		while (ibv_get_cq_event(cq->channel, &vcq, &vctx) == 0) {
			ibv_ack_cq_events(vcq, 1);
			__atomic_fetch_add(&emu_stats.cq_upcalls, 1, __ATOMIC_RELAXED);
			if (cq->comp_handler != NULL)
				cq->comp_handler(cq, cq->cq_context);
		}
	}
	pthread_mutex_unlock(&cq_lock);
}

static void *
emu_thread(void *arg)
{
	struct epoll_event evs[16];
	struct ucm_event ue;
	int n, i;

	(void)arg;
	for (;;) {
		n = epoll_wait(epfd, evs, 16, -1);
		for (i = 0; i < n; i++) {
			if (evs[i].data.ptr == NULL) {
				while (ucm_get_event(&ue) == 1)
					cm_dispatch(&ue);
			} else {
				cq_dispatch(evs[i].data.ptr);
			}
		}
	}
	return (NULL);
}

static void
thread_init(void)
{
	struct epoll_event e;
	pthread_t t;
	int rc;

	rc = ucm_init();
	if (rc != 0) {
		thread_err = -rc;
		return;
	}
	epfd = epoll_create1(EPOLL_CLOEXEC);
	if (epfd < 0) {
		thread_err = errno;
		return;
	}
	memset(&e, 0, sizeof(e));
	e.events = EPOLLIN;
	e.data.ptr = NULL;
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, ucm_channel_fd(), &e) != 0) {
		thread_err = errno;
		return;
	}
	rc = pthread_create(&t, NULL, emu_thread, NULL);
	if (rc != 0) {
		thread_err = rc;
		return;
	}
	pthread_detach(t);
}

static int
emu_start(void)
{
	pthread_once(&thread_once, thread_init);
	return (thread_err);
}

struct ib_cq *
__ib_create_cq(struct ib_device *device, ib_comp_handler comp_handler,
    void (*event_handler)(struct ib_event *, void *), void *cq_context,
    const struct ib_cq_init_attr *cq_attr, const char *caller)
{
	struct epoll_event e;
	struct ib_cq *cq;
	int err, fl;

	(void)caller;
	if ((err = emu_start()) != 0)
		return (ERR_PTR(-err));
	cq = calloc(1, sizeof(*cq));
	if (cq == NULL)
		return (ERR_PTR(-ENOMEM));
	cq->device = device;
	cq->comp_handler = comp_handler;
	cq->event_handler = event_handler;
	cq->cq_context = cq_context;
	cq->cqe = (int)cq_attr->cqe;
	cq->channel = ibv_create_comp_channel(device->verbs);
	if (cq->channel == NULL)
		goto fail;
	fl = fcntl(cq->channel->fd, F_GETFL);
	if (fl < 0 || fcntl(cq->channel->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		goto fail;
	cq->cq = ibv_create_cq(device->verbs, (int)cq_attr->cqe, cq, cq->channel,
	    (int)cq_attr->comp_vector);
	if (cq->cq == NULL)
		goto fail;
	pthread_mutex_lock(&cq_lock);
	cq->next = cqs;
	cqs = cq;
	memset(&e, 0, sizeof(e));
	e.events = EPOLLIN;
	e.data.ptr = cq;
	err = epoll_ctl(epfd, EPOLL_CTL_ADD, cq->channel->fd, &e) != 0 ? errno : 0;
	pthread_mutex_unlock(&cq_lock);
	if (err != 0) {
		ib_destroy_cq(cq);
		return (ERR_PTR(-err));
	}
	return (cq);
fail:
	err = errno != 0 ? errno : ENOMEM;
	if (cq->cq != NULL)
		ibv_destroy_cq(cq->cq);
	if (cq->channel != NULL)
		ibv_destroy_comp_channel(cq->channel);
	(free)(cq);
	return (ERR_PTR(-err));
}

int
ib_destroy_cq_user(struct ib_cq *cq, struct ib_udata *udata)
{
	struct ib_cq **pp;

	(void)udata;
	pthread_mutex_lock(&cq_lock);
	for (pp = &cqs; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == cq) {
			*pp = cq->next;
			break;
		}
	}
	epoll_ctl(epfd, EPOLL_CTL_DEL, cq->channel->fd, NULL);
	pthread_mutex_unlock(&cq_lock);
	/* Every event was acknowledged by cq_dispatch (under cq_lock). */
	ibv_destroy_cq(cq->cq);
	ibv_destroy_comp_channel(cq->channel);
	(free)(cq);
	return (0);
}

int
ib_req_notify_cq(struct ib_cq *cq, enum ib_cq_notify_flags flags)
{
	return (-ibv_req_notify_cq(cq->cq, (flags & IB_CQ_SOLICITED_MASK) == IB_CQ_SOLICITED));
}

/* ---- FRWR MRs as type-2 memory windows ---------------------------------------------------- */

static struct ib_mr *mrs;	/* under emu_lock */

/* The bound MR whose window has `rkey` on the device (emu_lock held). */
static struct ib_mr *
mr_by_rkey(u32 rkey)
{
	struct ib_mr *mr;

	for (mr = mrs; mr != NULL; mr = mr->next)
		if (mr->hw_rkey == rkey)
			return (mr);
	return (NULL);
}

struct ib_mr *
ib_alloc_mr_user(struct ib_pd *pd, enum ib_mr_type mr_type, u32 max_num_sg,
    struct ib_udata *udata)
{
	struct ib_mr *mr;

	(void)udata;
	if (mr_type != IB_MR_TYPE_MEM_REG || max_num_sg == 0)
		return (ERR_PTR(-EINVAL));
	mr = calloc(1, sizeof(*mr));
	if (mr == NULL)
		return (ERR_PTR(-ENOMEM));
	mr->mw = ibv_alloc_mw(pd->pd, IBV_MW_TYPE_2);
	if (mr->mw == NULL) {
		int err = errno != 0 ? errno : ENOMEM;

		(free)(mr);
		return (ERR_PTR(-err));
	}
	mr->device = pd->device;
	mr->pd = pd;
	mr->type = mr_type;
	mr->max_num_sg = max_num_sg;
	mr->hw_rkey = mr->mw->rkey;
	mr->rkey = mr->lkey = mr->mw->rkey;
	pthread_mutex_lock(&emu_lock);
	mr->next = mrs;
	mrs = mr;
	pthread_mutex_unlock(&emu_lock);
	return (mr);
}

int
ib_dereg_mr_user(struct ib_mr *mr, struct ib_udata *udata)
{
	struct ib_mr **pp;

	(void)udata;
	pthread_mutex_lock(&emu_lock);
	for (pp = &mrs; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == mr) {
			*pp = mr->next;
			break;
		}
	}
	pthread_mutex_unlock(&emu_lock);
	ibv_dealloc_mw(mr->mw);	/* a bound window's rkey dies with it */
	(free)(mr);
	return (0);
}

int
ib_dma_map_sg(struct ib_device *dev, struct scatterlist *sg, int nents,
    enum dma_data_direction direction)
{
	int i;

	(void)dev;
	(void)direction;
	for (i = 0; i < nents; i++) {
		if (sg[i].page == NULL)
			return (0);
		sg[i].dma_address = sg[i].page->phys_addr + sg[i].offset;
		sg[i].dma_length = sg[i].length;
	}
	return (nents);
}

void
ib_dma_unmap_sg(struct ib_device *dev, struct scatterlist *sg, int nents,
    enum dma_data_direction direction)
{
	(void)dev;
	(void)sg;
	(void)nents;
	(void)direction;
}

/* The mapping-error address (what ib_dma_mapping_error recognises). */
#define KRPC_EMU_DMA_ERROR	(~(u64)0)

u64
ib_dma_map_page(struct ib_device *dev, struct vm_page *page, unsigned long offset,
    size_t size, enum dma_data_direction direction)
{
	(void)dev;
	(void)direction;
	if (page == NULL || page != krpc_emu_phys_to_vm_page(page->phys_addr) ||
	    offset + size > PAGE_SIZE)
		return (KRPC_EMU_DMA_ERROR);
	return (page->phys_addr + offset);
}

void
ib_dma_unmap_page(struct ib_device *dev, u64 addr, size_t size,
    enum dma_data_direction direction)
{
	(void)dev;
	(void)addr;
	(void)size;
	(void)direction;
}

int
ib_dma_mapping_error(struct ib_device *dev, u64 dma_addr)
{
	(void)dev;
	return (dma_addr == KRPC_EMU_DMA_ERROR);
}

/*
 * A window covers one virtually contiguous range of the arena: map the longest prefix of
 * `sg` that continues the previous entry, within max_num_sg pages. (The kernel's FRWR maps
 * any page list obeying the gap rules; the shim registers what is left with another MR.)
 */
int
ib_map_mr_sg(struct ib_mr *mr, struct scatterlist *sg, int sg_nents, unsigned int *sg_offset,
    unsigned int page_size)
{
	u64 start, end, pages;
	int i;

	if (sg_nents <= 0 || page_size != PAGE_SIZE)
		return (-EINVAL);
	start = sg_dma_address(&sg[0]) + (sg_offset != NULL ? *sg_offset : 0);
	end = sg_dma_address(&sg[0]) + sg_dma_len(&sg[0]);
	if (((end + PAGE_SIZE - 1) / PAGE_SIZE) - start / PAGE_SIZE > mr->max_num_sg)
		return (0);
	for (i = 1; i < sg_nents; i++) {
		if (sg_dma_address(&sg[i]) != end)
			break;
		pages = ((end + sg_dma_len(&sg[i]) + PAGE_SIZE - 1) / PAGE_SIZE) -
		    start / PAGE_SIZE;
		if (pages > mr->max_num_sg)
			break;
		end += sg_dma_len(&sg[i]);
	}
	if (i < sg_nents)
		__atomic_fetch_add(&emu_stats.partial_maps, 1, __ATOMIC_RELAXED);
	mr->iova = start;
	mr->length = end - start;
	mr->page_size = page_size;
	return (i);
}

/* ---- posting and polling -------------------------------------------------------------------- */

static int
emu_sges(const struct ib_sge *in, int n, struct ibv_sge **out)
{
	int i;

	*out = NULL;
	if (n <= 0)
		return (0);
	*out = calloc((size_t)n, sizeof(**out));
	if (*out == NULL)
		return (-ENOMEM);
	for (i = 0; i < n; i++) {
		(*out)[i].addr = in[i].addr;
		(*out)[i].length = in[i].length;
		(*out)[i].lkey = in[i].lkey;
	}
	return (0);
}

int
ib_post_send(struct ib_qp *qp, const struct ib_send_wr *send_wr,
    const struct ib_send_wr **bad_send_wr)
{
	const struct ib_send_wr *w;
	const struct ib_send_wr **kw = NULL;
	const struct ib_rdma_wr *rw;
	const struct ib_reg_wr *gw;
	struct ibv_send_wr *vw = NULL, *vbad = NULL;
	struct ib_mr *mr;
	int n = 0, i, err = 0, posted;

	for (w = send_wr; w != NULL; w = w->next)
		n++;
	if (n == 0)
		return (0);
	kw = calloc((size_t)n, sizeof(*kw));
	vw = calloc((size_t)n, sizeof(*vw));
	if (kw == NULL || vw == NULL) {
		err = -ENOMEM;
		goto out_bad0;
	}
	pthread_mutex_lock(&emu_lock);
	for (i = 0, w = send_wr; w != NULL; w = w->next, i++) {
		kw[i] = w;
		vw[i].wr_id = w->wr_id;
		vw[i].next = i + 1 < n ? &vw[i + 1] : NULL;
		vw[i].send_flags = ((w->send_flags & IB_SEND_SIGNALED) ? IBV_SEND_SIGNALED : 0) |
		    ((w->send_flags & IB_SEND_FENCE) ? IBV_SEND_FENCE : 0) |
		    ((w->send_flags & IB_SEND_SOLICITED) ? IBV_SEND_SOLICITED : 0);
		switch (w->opcode) {
		case IB_WR_SEND:
		case IB_WR_SEND_WITH_INV:
		case IB_WR_RDMA_WRITE:
		case IB_WR_RDMA_READ:
			err = emu_sges(w->sg_list, w->num_sge, &vw[i].sg_list);
			vw[i].num_sge = w->num_sge;
			if (w->opcode == IB_WR_SEND) {
				vw[i].opcode = IBV_WR_SEND;
			} else if (w->opcode == IB_WR_SEND_WITH_INV) {
				vw[i].opcode = IBV_WR_SEND_WITH_INV;
				vw[i].invalidate_rkey = w->ex.invalidate_rkey;
			} else {
				rw = (const struct ib_rdma_wr *)(const void *)w;
				vw[i].opcode = w->opcode == IB_WR_RDMA_WRITE ? IBV_WR_RDMA_WRITE :
				    IBV_WR_RDMA_READ;
				vw[i].wr.rdma.remote_addr = rw->remote_addr;
				vw[i].wr.rdma.rkey = rw->rkey;
			}
			break;
		case IB_WR_LOCAL_INV:
			mr = mr_by_rkey(w->ex.invalidate_rkey);
			if (mr != NULL && !mr->bound) {
				/*
				 * Invalidating a window that is not bound (never, or already
				 * invalidated, e.g. by the peer's Send With Invalidate) crashes
				 * the rxe of Linux 6.1 (NULL mw->qp in rxe_do_invalidate_mw):
				 * refuse, loudly. A real HCA would accept it; the shim should
				 * not do it anyway.
				 */
				fprintf(stderr, "emu: LOCAL_INV of rkey %#x, which is not bound: "
				    "refused\n", w->ex.invalidate_rkey);
				emu_stats.refused_double_inv++;
				err = -EINVAL;
			}
			vw[i].opcode = IBV_WR_LOCAL_INV;
			vw[i].invalidate_rkey = w->ex.invalidate_rkey;
			break;
		case IB_WR_REG_MR:
			gw = (const struct ib_reg_wr *)(const void *)w;
			mr = gw->mr;
			vw[i].opcode = IBV_WR_BIND_MW;
			/* libibverbs hands mw->rkey to the device as the window's current key and
			 * rxe checks it; nothing updates it for type 2, so we do. */
			mr->mw->rkey = mr->hw_rkey;
			vw[i].bind_mw.mw = mr->mw;
			vw[i].bind_mw.rkey = gw->key;
			vw[i].bind_mw.bind_info.mr = mr->pd->arena_mr;
			vw[i].bind_mw.bind_info.addr = mr->iova;
			vw[i].bind_mw.bind_info.length = mr->length;
			vw[i].bind_mw.bind_info.mw_access_flags =
			    ((gw->access & IB_ACCESS_REMOTE_READ) ? IBV_ACCESS_REMOTE_READ : 0) |
			    ((gw->access & IB_ACCESS_REMOTE_WRITE) ? IBV_ACCESS_REMOTE_WRITE : 0);
			break;
		default:
			err = -EINVAL;
			break;
		}
		if (err != 0)
			break;
	}
	if (err != 0) {
		pthread_mutex_unlock(&emu_lock);
		goto out_bad0;
	}
	err = ibv_post_send(qp->qp, vw, &vbad);
	posted = err == 0 ? n : (vbad != NULL ? (int)(vbad - vw) : 0);
	for (i = 0; i < posted; i++) {
		switch (kw[i]->opcode) {
		case IB_WR_REG_MR:
			gw = (const struct ib_reg_wr *)(const void *)kw[i];
			gw->mr->hw_rkey = gw->key;
			gw->mr->bound = 1;
			emu_stats.reg_mr_binds++;
			break;
		case IB_WR_LOCAL_INV:
			mr = mr_by_rkey(kw[i]->ex.invalidate_rkey);
			if (mr != NULL)
				mr->bound = 0;
			emu_stats.local_invs++;
			break;
		case IB_WR_SEND_WITH_INV:
			emu_stats.send_invs++;
			break;
		default:
			break;
		}
	}
	pthread_mutex_unlock(&emu_lock);
	if (err != 0) {
		*bad_send_wr = kw[posted < n ? posted : n - 1];
		err = -err;
	}
	goto out;
out_bad0:
	*bad_send_wr = send_wr;
out:
	if (vw != NULL)
		for (i = 0; i < n; i++)
			(free)(vw[i].sg_list);
	(free)(vw);
	(free)(kw);
	return (err);
}

int
ib_post_recv(struct ib_qp *qp, const struct ib_recv_wr *recv_wr,
    const struct ib_recv_wr **bad_recv_wr)
{
	const struct ib_recv_wr *w;
	struct ibv_recv_wr *vw, *vbad = NULL;
	struct ibv_sge *sg;
	int n = 0, nsge = 0, i, k, err;

	for (w = recv_wr; w != NULL; w = w->next) {
		n++;
		nsge += w->num_sge;
	}
	if (n == 0)
		return (0);
	vw = calloc((size_t)n, sizeof(*vw));
	sg = calloc((size_t)(nsge > 0 ? nsge : 1), sizeof(*sg));
	if (vw == NULL || sg == NULL) {
		(free)(vw);
		(free)(sg);
		*bad_recv_wr = recv_wr;
		return (-ENOMEM);
	}
	for (i = 0, k = 0, w = recv_wr; w != NULL; w = w->next, i++) {
		vw[i].wr_id = w->wr_id;
		vw[i].next = i + 1 < n ? &vw[i + 1] : NULL;
		vw[i].sg_list = &sg[k];
		vw[i].num_sge = w->num_sge;
		for (int j = 0; j < w->num_sge; j++, k++) {
			sg[k].addr = w->sg_list[j].addr;
			sg[k].length = w->sg_list[j].length;
			sg[k].lkey = w->sg_list[j].lkey;
		}
	}
	err = ibv_post_recv(qp->qp, vw, &vbad);
	if (err != 0) {
		i = vbad != NULL ? (int)(vbad - vw) : 0;
		for (w = recv_wr; i > 0 && w->next != NULL; w = w->next, i--)
			;
		*bad_recv_wr = w;
	}
	(free)(vw);
	(free)(sg);
	return (-err);
}

int
ib_poll_cq(struct ib_cq *cq, int num_entries, struct ib_wc *wc)
{
	struct ibv_wc vwc[16];
	struct ib_mr *mr;
	int n, i, inv;
	u32 raw;

	if (num_entries > 16)
		num_entries = 16;
	n = ibv_poll_cq(cq->cq, num_entries, vwc);
	if (n <= 0)
		return (n < 0 ? -EIO : 0);
	for (i = 0; i < n; i++) {
		memset(&wc[i], 0, sizeof(wc[i]));
		wc[i].wr_id = vwc[i].wr_id;
		wc[i].status = (enum ib_wc_status)vwc[i].status;
		wc[i].vendor_err = vwc[i].vendor_err;
		wc[i].byte_len = vwc[i].byte_len;
		wc[i].src_qp = vwc[i].src_qp;
		switch (vwc[i].opcode) {
		case IBV_WC_SEND: wc[i].opcode = IB_WC_SEND; break;
		case IBV_WC_RDMA_WRITE: wc[i].opcode = IB_WC_RDMA_WRITE; break;
		case IBV_WC_RDMA_READ: wc[i].opcode = IB_WC_RDMA_READ; break;
		case IBV_WC_LOCAL_INV: wc[i].opcode = IB_WC_LOCAL_INV; break;
		case IBV_WC_BIND_MW: wc[i].opcode = IB_WC_REG_MR; break;
		case IBV_WC_RECV: wc[i].opcode = IB_WC_RECV; break;
		case IBV_WC_RECV_RDMA_WITH_IMM: wc[i].opcode = IB_WC_RECV_RDMA_WITH_IMM; break;
		default: wc[i].opcode = IB_WC_SEND; break;
		}
		if (vwc[i].wc_flags & IBV_WC_GRH)
			wc[i].wc_flags |= IB_WC_GRH;
		if (vwc[i].wc_flags & IBV_WC_WITH_IMM) {
			wc[i].wc_flags |= IB_WC_WITH_IMM;
			wc[i].ex.imm_data = vwc[i].imm_data;
		}
		if (vwc[i].status != IBV_WC_SUCCESS || !(vwc[i].opcode & IBV_WC_RECV) ||
		    (vwc[i].wc_flags & IBV_WC_WITH_IMM))
			continue;
		raw = vwc[i].invalidated_rkey;
		pthread_mutex_lock(&emu_lock);
		mr = raw != 0 ? mr_by_rkey(raw) : NULL;
		/*
		 * rxe (Linux 6.1) performs the invalidation and reports the rkey but does not set
		 * IBV_WC_WITH_INV: a receive without immediate data whose rkey names one of our
		 * bound windows was a Send With Invalidate. Report it the kernel's way.
		 */
		inv = (vwc[i].wc_flags & IBV_WC_WITH_INV) || (mr != NULL && mr->bound);
		if (inv) {
			wc[i].wc_flags |= IB_WC_WITH_INVALIDATE;
			wc[i].ex.invalidate_rkey = raw;
			emu_stats.remote_invs_seen++;
			if (!(vwc[i].wc_flags & IBV_WC_WITH_INV))
				emu_stats.remote_invs_quirk++;
			if (mr != NULL)
				mr->bound = 0;
		}
		pthread_mutex_unlock(&emu_lock);
	}
	return (n);
}

/* ---- rdma_cm ---------------------------------------------------------------------------------- */

struct rdma_cm_id *
rdma_create_id(struct vnet *net, rdma_cm_event_handler event_handler, void *context,
    enum rdma_port_space ps, enum ib_qp_type qp_type)
{
	struct rdma_cm_id *id;
	int err;

	/* As ib_cma.c:766 (FreeBSD 14.2) on a VIMAGE kernel such as GENERIC. */
	if (net == NULL)
		return (ERR_PTR(-EINVAL));
	if (ps != RDMA_PS_TCP || qp_type != IB_QPT_RC)
		return (ERR_PTR(-EINVAL));
	if ((err = emu_start()) != 0)
		return (ERR_PTR(-err));
	id = calloc(1, sizeof(*id));
	if (id == NULL)
		return (ERR_PTR(-ENOMEM));
	id->event_handler = event_handler;
	id->context = context;
	id->ps = ps;
	id->qp_type = qp_type;
	err = ucm_create_id(id, &id->uid);
	if (err != 0) {
		(free)(id);
		return (ERR_PTR(err));
	}
	return (id);
}

void
rdma_destroy_id(struct rdma_cm_id *id)
{
	/* librdmacm waits until every event reported for the id is acknowledged, i.e. until a
	 * running handler returned (the kernel's rdma_destroy_id waits likewise). */
	ucm_destroy_id(id->uid);
	(free)(id);
}

int
rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr,
    int timeout_ms)
{
	return (ucm_resolve_addr(id->uid, src_addr, dst_addr, timeout_ms));
}

int
rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	return (ucm_resolve_route(id->uid, timeout_ms));
}

int
rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	int err;

	err = ucm_bind_addr(id->uid, addr);
	if (err == 0 && id->device == NULL)
		id->device = emu_device(ucm_verbs(id->uid));
	return (err);
}

int
rdma_listen(struct rdma_cm_id *id, int backlog)
{
	return (ucm_listen(id->uid, backlog));
}

int
rdma_create_qp(struct rdma_cm_id *id, struct ib_pd *pd, struct ib_qp_init_attr *attr)
{
	struct ibv_qp_init_attr ia;
	struct ib_qp *qp;
	struct ibv_qp *vqp = NULL;
	int err;

	if (attr->qp_type != IB_QPT_RC || attr->send_cq == NULL || attr->recv_cq == NULL)
		return (-EINVAL);
	qp = calloc(1, sizeof(*qp));
	if (qp == NULL)
		return (-ENOMEM);
	memset(&ia, 0, sizeof(ia));
	ia.qp_context = qp;
	ia.send_cq = attr->send_cq->cq;
	ia.recv_cq = attr->recv_cq->cq;
	ia.cap.max_send_wr = attr->cap.max_send_wr;
	ia.cap.max_recv_wr = attr->cap.max_recv_wr;
	ia.cap.max_send_sge = attr->cap.max_send_sge;
	ia.cap.max_recv_sge = attr->cap.max_recv_sge;
	ia.cap.max_inline_data = attr->cap.max_inline_data;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = attr->sq_sig_type == IB_SIGNAL_ALL_WR;
	err = ucm_create_qp(id->uid, pd->pd, &ia, &vqp);
	if (err != 0) {
		(free)(qp);
		return (err);
	}
	qp->device = pd->device;
	qp->pd = pd;
	qp->send_cq = attr->send_cq;
	qp->recv_cq = attr->recv_cq;
	qp->event_handler = attr->event_handler;
	qp->qp_context = attr->qp_context;
	qp->qp_num = vqp->qp_num;
	qp->qp_type = attr->qp_type;
	qp->qp = vqp;
	attr->cap.max_send_wr = ia.cap.max_send_wr;
	attr->cap.max_recv_wr = ia.cap.max_recv_wr;
	attr->cap.max_send_sge = ia.cap.max_send_sge;
	attr->cap.max_recv_sge = ia.cap.max_recv_sge;
	id->qp = qp;
	return (0);
}

int
ib_destroy_qp(struct ib_qp *qp)
{
	int rc;

	rc = ucm_destroy_verbs_qp(qp->qp);
	(free)(qp);
	return (rc);
}

void
rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (id->qp == NULL)
		return;
	ucm_destroy_qp(id->uid);
	(free)(id->qp);
	id->qp = NULL;
}

int
rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	struct ucm_conn_param o;

	UCM_CONN_PARAM_COPY(&o, p);
	return (ucm_connect(id->uid, &o));
}

int
rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	struct ucm_conn_param o;

	UCM_CONN_PARAM_COPY(&o, p);
	return (ucm_accept(id->uid, &o));
}

int
rdma_reject(struct rdma_cm_id *id, const void *private_data, u8 private_data_len)
{
	return (ucm_reject(id->uid, private_data, private_data_len));
}

int
rdma_disconnect(struct rdma_cm_id *id)
{
	/* ib_cma.c's rdma_disconnect sends a DREQ (cm_send_dreq: may sleep): no MTX_DEF mutex
	 * may be held across it. */
	if (mtx_held > 0)
		__atomic_fetch_add(&emu_stats.disconnects_locked, 1, __ATOMIC_RELAXED);
	return (ucm_disconnect(id->uid));
}

/* ---- statistics ---------------------------------------------------------------------------- */

void
krpc_emu_get_stats(struct krpc_emu_stats *out)
{
	pthread_mutex_lock(&emu_lock);
	pthread_mutex_lock(&arena_lock);
	*out = emu_stats;
	out->cq_upcalls = __atomic_load_n(&emu_stats.cq_upcalls, __ATOMIC_RELAXED);
	out->cm_events = __atomic_load_n(&emu_stats.cm_events, __ATOMIC_RELAXED);
	out->disconnects_locked = __atomic_load_n(&emu_stats.disconnects_locked,
	    __ATOMIC_RELAXED);
	pthread_mutex_unlock(&arena_lock);
	pthread_mutex_unlock(&emu_lock);
}
