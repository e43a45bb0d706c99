/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: a userspace emulation of the subset of FreeBSD's kernel KPI that
 * ../c/krpc_rdma_ofed.c uses — malloc(9), mtx(9), panic(9), vm_page, the linuxkpi
 * scatterlist, the OFED verbs (sys/ofed/include/rdma/ib_verbs.h) and rdma_cm
 * (sys/ofed/include/rdma/rdma_cm.h) — with the same names, types and signatures, implemented
 * on libibverbs/librdmacm in kpi_emu.c (+ cm_glue.c). The wrapper file compiles unchanged
 * against it: build.rs puts include/ (headers with FreeBSD's names that include this one)
 * first on the include path of the files in ../c.
 *
 * What is emulated how (see ../README.md, "Check 4"):
 *
 *  * "Kernel memory": one mmap'd arena of pages (KRPC_OFED_EMU_PAGES, default 32768 = 128
 *    MiB). A page's "physical address" is its virtual address, PHYS_TO_DMAP is the identity,
 *    and struct vm_page is a per-page record with a wiring count.
 *  * Protection domain: one per device (refcounted, never freed), with the whole arena
 *    registered as one MR (LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE | MW_BIND);
 *    pd->local_dma_lkey is that MR's lkey, so SGEs over arena pages work as in the kernel.
 *  * FRWR: ib_alloc_mr(IB_MR_TYPE_MEM_REG) allocates a type-2 memory window; ib_map_mr_sg
 *    maps the virtually contiguous prefix of the scatterlist (at most max_num_sg pages);
 *    IB_WR_REG_MR is posted as IBV_WR_BIND_MW over the arena MR with the key the caller set
 *    (ib_update_fast_reg_key); IB_WR_LOCAL_INV and IB_WR_SEND_WITH_INV are posted as they are
 *    and run for real on the device (rxe).
 *  * rdma_cm: every kernel-style id is a librdmacm id on one process-wide event channel; one
 *    "CM/interrupt" thread waits (epoll) on that channel and on every CQ's completion channel
 *    and calls the kernel-style event handler (rdma_cm) or completion handler (CQ) from
 *    there, as the kernel's CM work queue and the CQ interrupt would. rdma_destroy_id waits
 *    for a running handler of that id (librdmacm waits for the event's ack).
 */
#ifndef KRPC_KPI_EMU_H
#define KRPC_KPI_EMU_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <sys/queue.h>
#include <sys/socket.h>

/* ---- sys/types.h, sys/param.h, sys/systm.h ------------------------------------------- */

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef uint64_t vm_paddr_t;
typedef uint64_t vm_offset_t;

#define PAGE_SHIFT	12
#define PAGE_SIZE	(1 << PAGE_SHIFT)
/*
 * LinuxKPI's meaning, not FreeBSD's: linux/page.h (reached through linux/scatterlist.h, which
 * the wrapper includes) #undefs FreeBSD's PAGE_MASK (the offset bits) and redefines it as the
 * page-number bits. Mirrored so a wrapper that relied on FreeBSD's meaning fails here too.
 */
#define PAGE_MASK	(~(PAGE_SIZE - 1))

#ifndef __DECONST
#define __DECONST(type, var)	((type)(uintptr_t)(const void *)(var))
#endif

void krpc_emu_panic(const char *fmt, ...) __attribute__((__noreturn__, __format__(printf, 1, 2)));
#define panic(...)	krpc_emu_panic(__VA_ARGS__)

/* ---- malloc(9) ------------------------------------------------------------------------ */

struct malloc_type {
	const char *ks_shortdesc;
};

#define MALLOC_DEFINE(type, shortdesc, longdesc) \
	struct malloc_type type[1] = { { (shortdesc) } }

#define M_NOWAIT	0x0001
#define M_WAITOK	0x0002
#define M_ZERO		0x0100

void *krpc_emu_malloc(size_t size, struct malloc_type *type, int flags);
void krpc_emu_free(void *addr, struct malloc_type *type);
/* The kernel's three-argument malloc and two-argument free (function-like macros: the libc
 * functions stay reachable as (malloc)(n) and are what everything else uses). */
#define malloc(size, type, flags)	krpc_emu_malloc((size), (type), (flags))
#define free(addr, type)		krpc_emu_free((addr), (type))

/* ---- mutex(9) ------------------------------------------------------------------------- */

struct mtx {
	pthread_mutex_t m;
};

#define MTX_DEF	0x0

void mtx_init(struct mtx *m, const char *name, const char *type, int opts);
void mtx_destroy(struct mtx *m);
/* cpu_spinwait(9): a busy-wait step; here the thread yields. */
#define cpu_spinwait()	sched_yield()
void mtx_lock(struct mtx *m);
void mtx_unlock(struct mtx *m);
/* Not FreeBSD's: how many mtx(9) locks the calling thread holds now (what WITNESS knows when a
 * function that may sleep is entered; the emulated rdma_disconnect counts calls made with one
 * held, see krpc_emu_stats.disconnects_locked). */
int krpc_emu_mtx_held(void);

/* ---- sx(9) ---------------------------------------------------------------------------- */

/*
 * An sx lock with what the emulation checks: sx_init'ed before use (sx_xlock of one never
 * initialised panics, as would FreeBSD's on a zeroed lock object under INVARIANTS), not
 * initialised twice (lock_init's "already initialized"). FreeBSD's svc_vc.c initialises
 * the SVCXPRT's xp_lock in every create (svc_vc.c:231, 307, 368), its create failure paths
 * sx_destroy it before svc_xprt_free (svc_vc.c:260, 348); clnt_bck.c:320 takes it to send on
 * the transport. The emulated svc_xprt_free counts transports freed with it initialised.
 */
struct sx {
	pthread_mutex_t m;
	int initialised;
};

void sx_init(struct sx *sx, const char *name);
void sx_destroy(struct sx *sx);
void sx_xlock(struct sx *sx);
void sx_xunlock(struct sx *sx);
/* Not FreeBSD's: 1 between sx_init and sx_destroy. */
int krpc_emu_sx_initialised(const struct sx *sx);
/* Whether p is the address of an initialised sx (msleep / wakeup refuse it as a channel). */
int krpc_emu_sx_at(const void *p);

/* ---- machine/atomic.h ----------------------------------------------------------------- */

#define atomic_add_int(p, v)		((void)__atomic_add_fetch((p), (v), __ATOMIC_SEQ_CST))
#define atomic_subtract_int(p, v)	((void)__atomic_sub_fetch((p), (v), __ATOMIC_SEQ_CST))
#define atomic_load_int(p)		__atomic_load_n((p), __ATOMIC_SEQ_CST)
#define atomic_cmpset_int(p, o, n) __extension__ ({			\
	__typeof(*(p)) _krpc_o = (o);						\
	(int)__atomic_compare_exchange_n((p), &_krpc_o, (n), 0, __ATOMIC_SEQ_CST,	\
	    __ATOMIC_SEQ_CST);							\
})
#define atomic_fetchadd_int(p, v)	__atomic_fetch_add((p), (v), __ATOMIC_SEQ_CST)
#define atomic_fetchadd_32(p, v)	__atomic_fetch_add((p), (v), __ATOMIC_SEQ_CST)
#define atomic_fetchadd_64(p, v)	__atomic_fetch_add((p), (v), __ATOMIC_SEQ_CST)

/* ---- net/vnet.h, sys/proc.h ---------------------------------------------------------- */

/*
 * As a VIMAGE kernel (GENERIC has options VIMAGE): curvnet is the thread's td_vnet, NULL
 * outside CURVNET_SET (what a kernel thread of the krpc has); TD_TO_VNET(td) is the vnet of
 * the thread's prison (prison0's: vnet0 here, the one network stack). The emulated
 * rdma_create_id refuses a NULL vnet as ib_cma.c:766 does under VIMAGE.
 */
struct vnet;
struct thread;
extern struct vnet *vnet0;
extern __thread struct vnet *krpc_emu_td_vnet;
#define curthread		((struct thread *)&krpc_emu_td_vnet)
#define curvnet			krpc_emu_td_vnet
#define TD_TO_VNET(td)		((void)(td), vnet0)

/* ---- vm_page -------------------------------------------------------------------------- */

struct vm_page {
	vm_paddr_t phys_addr;
	u32 ref_count;		/* wirings; 0 = free */
};
typedef struct vm_page *vm_page_t;

/* sys/vm/vm_page.h values. */
#define VM_ALLOC_NORMAL		0
#define VM_ALLOC_WAITOK		0x0008
#define VM_ALLOC_WIRED		0x0020
#define VM_ALLOC_ZERO		0x0040
#define VM_ALLOC_NOWAIT		0x8000

vm_page_t vm_page_alloc_noobj(int req);
void vm_page_wire(vm_page_t m);
bool vm_page_unwire_noq(vm_page_t m);
void vm_page_free(vm_page_t m);
vm_page_t krpc_emu_phys_to_vm_page(vm_paddr_t pa);

#define VM_PAGE_TO_PHYS(m)	((m)->phys_addr)
#define PHYS_TO_VM_PAGE(pa)	krpc_emu_phys_to_vm_page(pa)
#define PHYS_TO_DMAP(pa)	((vm_offset_t)(pa))	/* physical = virtual here */

/* ---- linux/err.h, linux/scatterlist.h, linux/dma-direction.h --------------------------- */

#define MAX_ERRNO	4095
#define IS_ERR_VALUE(x)	((unsigned long)(x) >= (unsigned long)-MAX_ERRNO)

static inline void *
ERR_PTR(long error)
{
	return ((void *)error);
}

static inline long
PTR_ERR(const void *ptr)
{
	return ((long)ptr);
}

static inline bool
IS_ERR(const void *ptr)
{
	return (IS_ERR_VALUE((unsigned long)ptr));
}

enum dma_data_direction {
	DMA_BIDIRECTIONAL = 0,
	DMA_TO_DEVICE = 1,
	DMA_FROM_DEVICE = 2,
	DMA_NONE = 3,
};

struct scatterlist {
	struct vm_page *page;
	unsigned int offset;
	unsigned int length;
	u64 dma_address;
	unsigned int dma_length;
	unsigned int end;	/* sg_mark_end */
};

#define sg_dma_address(sg)	((sg)->dma_address)
#define sg_dma_len(sg)		((sg)->dma_length)

static inline void
sg_init_table(struct scatterlist *sg, unsigned int nents)
{
	memset(sg, 0, sizeof(*sg) * nents);
	if (nents > 0)
		sg[nents - 1].end = 1;
}

static inline void
sg_set_page(struct scatterlist *sg, struct vm_page *page, unsigned int len, unsigned int offset)
{
	sg->page = page;
	sg->offset = offset;
	sg->length = len;
}

/* ---- rdma/ib_verbs.h ------------------------------------------------------------------ */

struct ibv_context;
struct ibv_pd;
struct ibv_cq;
struct ibv_comp_channel;
struct ibv_qp;
struct ibv_mw;

struct ib_device {
	struct ibv_context *verbs;	/* emulation: the libibverbs context */
	struct ib_pd *pd;		/* emulation: the device's one PD */
	struct ib_device *next;
};

struct ib_pd {
	struct ib_device *device;
	u32 local_dma_lkey;
	u32 unsafe_global_rkey;
	struct ibv_pd *pd;		/* emulation */
	struct ibv_mr *arena_mr;	/* emulation: the arena, lkey = local_dma_lkey */
	int refs;
};

struct ib_event {
	struct ib_device *device;
	int event;
};

struct ib_cq;
typedef void (*ib_comp_handler)(struct ib_cq *cq, void *cq_context);

struct ib_cq {
	struct ib_device *device;
	ib_comp_handler comp_handler;
	void (*event_handler)(struct ib_event *, void *);
	void *cq_context;
	int cqe;
	struct ibv_cq *cq;		/* emulation */
	struct ibv_comp_channel *channel; /* emulation */
	struct ib_cq *next;		/* emulation: the CQ registry */
};

struct ib_cq_init_attr {
	unsigned int cqe;
	u32 comp_vector;
	u32 flags;
};

enum ib_cq_notify_flags {
	IB_CQ_SOLICITED = 1 << 0,
	IB_CQ_NEXT_COMP = 1 << 1,
	IB_CQ_SOLICITED_MASK = IB_CQ_SOLICITED | IB_CQ_NEXT_COMP,
	IB_CQ_REPORT_MISSED_EVENTS = 1 << 2,
};

enum ib_sig_type {
	IB_SIGNAL_ALL_WR,
	IB_SIGNAL_REQ_WR
};

enum ib_qp_type {
	IB_QPT_SMI,
	IB_QPT_GSI,
	IB_QPT_RC,
	IB_QPT_UC,
	IB_QPT_UD,
};

struct ib_qp_cap {
	u32 max_send_wr;
	u32 max_recv_wr;
	u32 max_send_sge;
	u32 max_recv_sge;
	u32 max_inline_data;
	u32 max_rdma_ctxs;
};

struct ib_qp_init_attr {
	void (*event_handler)(struct ib_event *, void *);
	void *qp_context;
	struct ib_cq *send_cq;
	struct ib_cq *recv_cq;
	void *srq;
	void *xrcd;
	struct ib_qp_cap cap;
	enum ib_sig_type sq_sig_type;
	enum ib_qp_type qp_type;
	u32 create_flags;
	u8 port_num;
};

struct ib_qp {
	struct ib_device *device;
	struct ib_pd *pd;
	struct ib_cq *send_cq;
	struct ib_cq *recv_cq;
	void (*event_handler)(struct ib_event *, void *);
	void *qp_context;
	u32 qp_num;
	enum ib_qp_type qp_type;
	struct ibv_qp *qp;		/* emulation */
};

enum ib_mr_type {
	IB_MR_TYPE_MEM_REG,
	IB_MR_TYPE_SG_GAPS,
	IB_MR_TYPE_DM,
	IB_MR_TYPE_USER,
	IB_MR_TYPE_DMA,
	IB_MR_TYPE_INTEGRITY,
};

struct ib_mr {
	struct ib_device *device;
	struct ib_pd *pd;
	u32 lkey;
	u32 rkey;
	u64 iova;
	u64 length;
	unsigned int page_size;
	enum ib_mr_type type;
	/* emulation: the type-2 memory window standing in for the FRWR MR */
	struct ibv_mw *mw;
	u32 hw_rkey;		/* the key the window has on the device now */
	u32 max_num_sg;
	int bound;		/* REG_MR posted, not invalidated (locally or by the peer) */
	struct ib_mr *next;	/* the MR registry (rkey lookups for the rxe WITH_INV quirk) */
};

enum ib_access_flags {
	IB_ACCESS_LOCAL_WRITE = 1,
	IB_ACCESS_REMOTE_WRITE = (1 << 1),
	IB_ACCESS_REMOTE_READ = (1 << 2),
	IB_ACCESS_REMOTE_ATOMIC = (1 << 3),
	IB_ACCESS_MW_BIND = (1 << 4),
};

struct ib_sge {
	u64 addr;
	u32 length;
	u32 lkey;
};

enum ib_wr_opcode {
	IB_WR_RDMA_WRITE,
	IB_WR_RDMA_WRITE_WITH_IMM,
	IB_WR_SEND,
	IB_WR_SEND_WITH_IMM,
	IB_WR_RDMA_READ,
	IB_WR_ATOMIC_CMP_AND_SWP,
	IB_WR_ATOMIC_FETCH_AND_ADD,
	IB_WR_LSO,
	IB_WR_SEND_WITH_INV,
	IB_WR_RDMA_READ_WITH_INV,
	IB_WR_LOCAL_INV,
	IB_WR_REG_MR,
};

enum ib_send_flags {
	IB_SEND_FENCE = 1,
	IB_SEND_SIGNALED = (1 << 1),
	IB_SEND_SOLICITED = (1 << 2),
	IB_SEND_INLINE = (1 << 3),
	IB_SEND_IP_CSUM = (1 << 4),
};

struct ib_cqe;

struct ib_send_wr {
	struct ib_send_wr *next;
	union {
		u64 wr_id;
		struct ib_cqe *wr_cqe;
	};
	struct ib_sge *sg_list;
	int num_sge;
	enum ib_wr_opcode opcode;
	int send_flags;
	union {
		u32 imm_data;	/* __be32 in the kernel */
		u32 invalidate_rkey;
	} ex;
};

struct ib_rdma_wr {
	struct ib_send_wr wr;
	u64 remote_addr;
	u32 rkey;
};

struct ib_reg_wr {
	struct ib_send_wr wr;
	struct ib_mr *mr;
	u32 key;
	int access;
};

struct ib_recv_wr {
	struct ib_recv_wr *next;
	union {
		u64 wr_id;
		struct ib_cqe *wr_cqe;
	};
	struct ib_sge *sg_list;
	int num_sge;
};

enum ib_wc_status {
	IB_WC_SUCCESS,
	IB_WC_LOC_LEN_ERR,
	IB_WC_LOC_QP_OP_ERR,
	IB_WC_LOC_EEC_OP_ERR,
	IB_WC_LOC_PROT_ERR,
	IB_WC_WR_FLUSH_ERR,
	IB_WC_MW_BIND_ERR,
	IB_WC_BAD_RESP_ERR,
	IB_WC_LOC_ACCESS_ERR,
	IB_WC_REM_INV_REQ_ERR,
	IB_WC_REM_ACCESS_ERR,
	IB_WC_REM_OP_ERR,
	IB_WC_RETRY_EXC_ERR,
	IB_WC_RNR_RETRY_EXC_ERR,
	IB_WC_LOC_RDD_VIOL_ERR,
	IB_WC_REM_INV_RD_REQ_ERR,
	IB_WC_REM_ABORT_ERR,
	IB_WC_INV_EECN_ERR,
	IB_WC_INV_EEC_STATE_ERR,
	IB_WC_FATAL_ERR,
	IB_WC_RESP_TIMEOUT_ERR,
	IB_WC_GENERAL_ERR
};

enum ib_wc_opcode {
	IB_WC_SEND,
	IB_WC_RDMA_WRITE,
	IB_WC_RDMA_READ,
	IB_WC_COMP_SWAP,
	IB_WC_FETCH_ADD,
	IB_WC_LSO,
	IB_WC_LOCAL_INV,
	IB_WC_REG_MR,
	IB_WC_MASKED_COMP_SWAP,
	IB_WC_MASKED_FETCH_ADD,
	IB_WC_RECV = 1 << 7,
	IB_WC_RECV_RDMA_WITH_IMM
};

enum ib_wc_flags {
	IB_WC_GRH = 1,
	IB_WC_WITH_IMM = (1 << 1),
	IB_WC_WITH_INVALIDATE = (1 << 2),
	IB_WC_IP_CSUM_OK = (1 << 3),
};

struct ib_wc {
	union {
		u64 wr_id;
		struct ib_cqe *wr_cqe;
	};
	enum ib_wc_status status;
	enum ib_wc_opcode opcode;
	u32 vendor_err;
	u32 byte_len;
	struct ib_qp *qp;
	union {
		u32 imm_data;
		u32 invalidate_rkey;
	} ex;
	u32 src_qp;
	int wc_flags;
	u16 pkey_index;
	u16 slid;
	u8 sl;
	u8 dlid_path_bits;
	u8 port_num;
};

/*
 * The forms below follow sys/ofed/include/rdma/ib_verbs.h: ib_alloc_pd and ib_create_cq are
 * macros over __ib_alloc_pd / __ib_create_cq (a caller-name argument); ib_dealloc_pd,
 * ib_destroy_cq (void), ib_dereg_mr and ib_alloc_mr are static inline over their *_user
 * functions with a NULL udata. (ib_post_send, ib_post_recv, ib_poll_cq and ib_req_notify_cq are
 * static inline over device methods there; plain functions here, same parameters.)
 */
struct ib_udata;

struct ib_pd *__ib_alloc_pd(struct ib_device *device, unsigned int flags, const char *caller);
#define ib_alloc_pd(device, flags) \
	__ib_alloc_pd((device), (flags), __func__)
void ib_dealloc_pd_user(struct ib_pd *pd, struct ib_udata *udata);

static inline void
ib_dealloc_pd(struct ib_pd *pd)
{
	ib_dealloc_pd_user(pd, NULL);
}

struct ib_cq *__ib_create_cq(struct ib_device *device, ib_comp_handler comp_handler,
    void (*event_handler)(struct ib_event *, void *), void *cq_context,
    const struct ib_cq_init_attr *cq_attr, const char *caller);
#define ib_create_cq(device, cmp_hndlr, evt_hndlr, cq_ctxt, cq_attr) \
	__ib_create_cq((device), (cmp_hndlr), (evt_hndlr), (cq_ctxt), (cq_attr), "ibcore")
int ib_destroy_cq_user(struct ib_cq *cq, struct ib_udata *udata);

static inline void
ib_destroy_cq(struct ib_cq *cq)
{
	ib_destroy_cq_user(cq, NULL);
}

int ib_req_notify_cq(struct ib_cq *cq, enum ib_cq_notify_flags flags);
int ib_poll_cq(struct ib_cq *cq, int num_entries, struct ib_wc *wc);
int ib_post_send(struct ib_qp *qp, const struct ib_send_wr *send_wr,
    const struct ib_send_wr **bad_send_wr);
int ib_post_recv(struct ib_qp *qp, const struct ib_recv_wr *recv_wr,
    const struct ib_recv_wr **bad_recv_wr);
int ib_dereg_mr_user(struct ib_mr *mr, struct ib_udata *udata);

static inline int
ib_dereg_mr(struct ib_mr *mr)
{
	return (ib_dereg_mr_user(mr, NULL));
}

struct ib_mr *ib_alloc_mr_user(struct ib_pd *pd, enum ib_mr_type mr_type, u32 max_num_sg,
    struct ib_udata *udata);

static inline struct ib_mr *
ib_alloc_mr(struct ib_pd *pd, enum ib_mr_type mr_type, u32 max_num_sg)
{
	return (ib_alloc_mr_user(pd, mr_type, max_num_sg, NULL));
}

int ib_map_mr_sg(struct ib_mr *mr, struct scatterlist *sg, int sg_nents,
    unsigned int *sg_offset, unsigned int page_size);
int ib_dma_map_sg(struct ib_device *dev, struct scatterlist *sg, int nents,
    enum dma_data_direction direction);
void ib_dma_unmap_sg(struct ib_device *dev, struct scatterlist *sg, int nents,
    enum dma_data_direction direction);

/*
 * ib_dma_map_page / ib_dma_unmap_page / ib_dma_mapping_error (static inlines in ib_verbs.h):
 * a page fragment's DMA address is its "physical" (= virtual) address here. A page that is
 * not the arena's is a mapping error (the wrapper counts its live mappings itself).
 */
u64 ib_dma_map_page(struct ib_device *dev, struct vm_page *page, unsigned long offset,
    size_t size, enum dma_data_direction direction);
void ib_dma_unmap_page(struct ib_device *dev, u64 addr, size_t size,
    enum dma_data_direction direction);
int ib_dma_mapping_error(struct ib_device *dev, u64 dma_addr);

static inline u32
ib_inc_rkey(u32 rkey)
{
	const u32 mask = 0x000000ff;

	return (((rkey + 1) & mask) | (rkey & ~mask));
}

static inline void
ib_update_fast_reg_key(struct ib_mr *mr, u8 newkey)
{
	mr->lkey = (mr->lkey & 0xffffff00) | newkey;
	mr->rkey = (mr->rkey & 0xffffff00) | newkey;
}

/* ---- rdma/rdma_cm.h ------------------------------------------------------------------- */

/* librdmacm's userspace API uses the same names; these are the kernel's, so the symbols are
 * renamed (cm_glue.c is the only file that sees librdmacm's). */
#define rdma_cm_id		krpc_kpi_rdma_cm_id
#define rdma_cm_event		krpc_kpi_rdma_cm_event
#define rdma_conn_param		krpc_kpi_rdma_conn_param
#define rdma_create_id		krpc_kpi_rdma_create_id
#define rdma_destroy_id		krpc_kpi_rdma_destroy_id
#define rdma_resolve_addr	krpc_kpi_rdma_resolve_addr
#define rdma_resolve_route	krpc_kpi_rdma_resolve_route
#define rdma_bind_addr		krpc_kpi_rdma_bind_addr
#define rdma_listen		krpc_kpi_rdma_listen
#define rdma_create_qp		krpc_kpi_rdma_create_qp
#define rdma_destroy_qp		krpc_kpi_rdma_destroy_qp
#define ib_destroy_qp		krpc_kpi_ib_destroy_qp
#define rdma_connect		krpc_kpi_rdma_connect
#define rdma_accept		krpc_kpi_rdma_accept
#define rdma_reject		krpc_kpi_rdma_reject
#define rdma_disconnect		krpc_kpi_rdma_disconnect

enum rdma_cm_event_type {
	RDMA_CM_EVENT_ADDR_RESOLVED = 0,
	RDMA_CM_EVENT_ADDR_ERROR = 1,
	RDMA_CM_EVENT_ROUTE_RESOLVED = 2,
	RDMA_CM_EVENT_ROUTE_ERROR = 3,
	RDMA_CM_EVENT_CONNECT_REQUEST = 4,
	RDMA_CM_EVENT_CONNECT_RESPONSE = 5,
	RDMA_CM_EVENT_CONNECT_ERROR = 6,
	RDMA_CM_EVENT_UNREACHABLE = 7,
	RDMA_CM_EVENT_REJECTED = 8,
	RDMA_CM_EVENT_ESTABLISHED = 9,
	RDMA_CM_EVENT_DISCONNECTED = 10,
	RDMA_CM_EVENT_DEVICE_REMOVAL = 11,
	RDMA_CM_EVENT_MULTICAST_JOIN = 12,
	RDMA_CM_EVENT_MULTICAST_ERROR = 13,
	RDMA_CM_EVENT_ADDR_CHANGE = 14,
	RDMA_CM_EVENT_TIMEWAIT_EXIT = 15,
};

enum rdma_port_space {
	RDMA_PS_SDP = 0x0001,
	RDMA_PS_IPOIB = 0x0002,
	RDMA_PS_IB = 0x013F,
	RDMA_PS_TCP = 0x0106,
	RDMA_PS_UDP = 0x0111,
};

struct rdma_conn_param {
	const void *private_data;
	u8 private_data_len;
	u8 responder_resources;
	u8 initiator_depth;
	u8 flow_control;
	u8 retry_count;
	u8 rnr_retry_count;
	u8 srq;
	u32 qp_num;
	u32 qkey;
};

struct rdma_ud_param {
	const void *private_data;
	u8 private_data_len;
	u32 qp_num;
	u32 qkey;
};

struct rdma_cm_event {
	enum rdma_cm_event_type event;
	int status;
	union {
		struct rdma_conn_param conn;
		struct rdma_ud_param ud;
	} param;
};

/* The part of FreeBSD's struct rdma_route (sys/ofed/include/rdma/rdma_cm.h) the C reads. */
struct rdma_addr {
	struct sockaddr_storage src_addr;
	struct sockaddr_storage dst_addr;
};

struct rdma_route {
	struct rdma_addr addr;
};

struct rdma_cm_id;
typedef int (*rdma_cm_event_handler)(struct rdma_cm_id *id, struct rdma_cm_event *event);

struct rdma_cm_id {
	struct ib_device *device;
	void *context;
	struct ib_qp *qp;
	rdma_cm_event_handler event_handler;
	enum rdma_port_space ps;
	enum ib_qp_type qp_type;
	u8 port_num;
	void *uid;		/* emulation: the librdmacm id */
	struct rdma_route route;	/* route.addr: refreshed from librdmacm's at every event */
};

struct rdma_cm_id *rdma_create_id(struct vnet *net, rdma_cm_event_handler event_handler,
    void *context, enum rdma_port_space ps, enum ib_qp_type qp_type);
void rdma_destroy_id(struct rdma_cm_id *id);
int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr,
    struct sockaddr *dst_addr, int timeout_ms);
int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms);
int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr);
int rdma_listen(struct rdma_cm_id *id, int backlog);
int rdma_create_qp(struct rdma_cm_id *id, struct ib_pd *pd, struct ib_qp_init_attr *qp_init_attr);
void rdma_destroy_qp(struct rdma_cm_id *id);
/* Destroy a QP whose cm id may be gone already (the kernel allows it; see conn_destroy). */
int ib_destroy_qp(struct ib_qp *qp);
int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param);
int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param);
int rdma_reject(struct rdma_cm_id *id, const void *private_data, u8 private_data_len);
int rdma_disconnect(struct rdma_cm_id *id);

/* ---- emulation statistics (for the tests; not part of the KPI) ------------------------ */

struct krpc_emu_stats {
	uint64_t reg_mr_binds;		/* IB_WR_REG_MR posted as IBV_WR_BIND_MW */
	uint64_t local_invs;		/* IB_WR_LOCAL_INV posted */
	uint64_t send_invs;		/* IB_WR_SEND_WITH_INV posted */
	uint64_t remote_invs_seen;	/* receive completions that invalidated one of our MRs */
	uint64_t remote_invs_quirk;	/* ... of which rxe did not flag IBV_WC_WITH_INV */
	uint64_t refused_double_inv;	/* LOCAL_INV of an unbound MR refused (rxe would crash) */
	uint64_t partial_maps;		/* ib_map_mr_sg mapped only a prefix */
	uint64_t cq_upcalls;		/* completion handlers called */
	uint64_t cm_events;		/* rdma_cm events dispatched to handlers */
	uint64_t pages_in_use;		/* arena pages wired now */
	uint64_t disconnects_locked;	/* rdma_disconnect called with an mtx(9) held */
};

void krpc_emu_get_stats(struct krpc_emu_stats *out);

#endif /* KRPC_KPI_EMU_H */
