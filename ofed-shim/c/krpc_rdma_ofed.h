/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma: the C boundary between the Rust shim (ofed-shim) and FreeBSD's OFED KPI.
 *
 * The same boundary serves FreeBSD's OFED KPI and Linux's in-kernel verbs (the Linux module,
 * ../linux/): krpc_rdma_ofed.c is shared, the memory/page/panic hooks are per kernel.
 *
 * Everything that crosses this boundary is plain data of our own: integers, pointers to our
 * own repr(C) structs below (their layouts are asserted here with _Static_assert and on the
 * Rust side with offset_of!/static_assertions), and opaque handles. No kernel structure
 * (ib_send_wr, ib_wc, rdma_cm_event, ...) is seen by Rust: krpc_rdma_ofed.c translates.
 *
 * Why C at all: ib_post_send, ib_post_recv, ib_poll_cq and ib_req_notify_cq are static inline
 * in sys/ofed/include/rdma/ib_verbs.h, and rdma_cm reports events through a C callback.
 */
#ifndef KRPC_RDMA_OFED_H
#define KRPC_RDMA_OFED_H

#ifdef _KERNEL
#include <sys/types.h>
#else
#include <stddef.h>
#include <stdint.h>
#endif

/* Bumped whenever a struct or a function below changes. Rust checks it at module load. */
#define KRPC_OFED_ABI_VERSION 2

struct sockaddr;
struct krpc_ofed_conn;     /* one RC connection: cm id, PD, CQ, QP, FRWR MR pool */
struct krpc_ofed_listener; /* one listening cm id */

/* One local scatter/gather element: a kernel page address (physical) plus offset, and a
 * length. The C side supplies the lkey (the PD's local_dma_lkey). */
struct krpc_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t reserved;
};

/* Send-queue opcodes of struct krpc_wr. */
#define KRPC_OP_SEND		0 /* IB_WR_SEND */
#define KRPC_OP_SEND_INV	1 /* IB_WR_SEND_WITH_INV, invalidate rkey */
#define KRPC_OP_RDMA_WRITE	2 /* IB_WR_RDMA_WRITE to rkey/remote_addr */
#define KRPC_OP_RDMA_READ	3 /* IB_WR_RDMA_READ from rkey/remote_addr */
#define KRPC_OP_LOCAL_INV	4 /* IB_WR_LOCAL_INV of rkey (one of our MRs) */

#define KRPC_WR_SIGNALED	0x1 /* IB_SEND_SIGNALED */

/* One send-queue work request; its SGEs are sges[sge_first .. sge_first + num_sge) of the
 * array passed beside it. */
struct krpc_wr {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint32_t opcode;
	uint32_t flags;
	uint32_t rkey;
	uint32_t sge_first;
	uint32_t num_sge;
	uint32_t reserved;
};

/* Completion status (the subset of ib_wc_status the core distinguishes). */
#define KRPC_WC_SUCCESS		0
#define KRPC_WC_FLUSHED		1
#define KRPC_WC_REM_ACCESS	2
#define KRPC_WC_RNR_RETRY	3
#define KRPC_WC_LOCAL		4
#define KRPC_WC_RETRY		5
#define KRPC_WC_OTHER		6

#define KRPC_WC_F_RECV		0x1 /* receive-queue completion */
#define KRPC_WC_F_INV		0x2 /* IB_WC_WITH_INVALIDATE: invalidated_rkey is valid */

struct krpc_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t flags;
	uint32_t byte_len;
	uint32_t invalidated_rkey;
};

/* Queue pair and MR pool sizes, chosen by the Rust side. */
struct krpc_ofed_params {
	uint32_t max_send_wr;	/* hardware send queue depth */
	uint32_t max_recv_wr;
	uint32_t max_sge;
	uint32_t num_mrs;	/* FRWR MRs allocated with the QP */
	uint32_t max_pages_per_mr; /* ib_alloc_mr(pd, IB_MR_TYPE_MEM_REG, this) */
	uint32_t rd_atomic;	/* responder_resources and initiator_depth */
	uint32_t timeout_ms;	/* address and route resolution */
	uint32_t reserved;
};

/* Connection-manager events reported to Rust. */
#define KRPC_CM_ESTABLISHED	1 /* private_data: the peer's (RFC 8797) */
#define KRPC_CM_DISCONNECTED	2
#define KRPC_CM_REJECTED	3
#define KRPC_CM_ERROR		4 /* address/route/connect error, device removal */

#define KRPC_CM_PRIVATE_MAX	56

struct krpc_cm_event {
	uint32_t kind;
	int32_t status;
	uint32_t private_data_len;
	uint8_t private_data[KRPC_CM_PRIVATE_MAX];
};

/* Output of krpc_ofed_reg_mr. */
struct krpc_reg_out {
	uint64_t iova;		/* offset the peer uses for the first byte */
	uint32_t rkey;		/* handle to advertise */
	uint32_t length;	/* bytes covered */
	uint32_t nmapped;	/* how many of the fragments the MR took (a prefix) */
	uint32_t reserved;
};

/* Access bits of krpc_ofed_reg_mr. */
#define KRPC_ACC_REMOTE_READ	0x1
#define KRPC_ACC_REMOTE_WRITE	0x2
#define KRPC_ACC_LOCAL_WRITE	0x4

/*
 * The wrappers' objects live now and their work since load (krpc_ofed_get_counts; every
 * field a uint64_t, relaxed atomics). The *_live counts are what the teardown must bring
 * back to zero.
 */
struct krpc_ofed_counts {
	uint64_t cm_ids_live;	/* rdma_cm ids we own (created, or accepted requests) */
	uint64_t pds_live;
	uint64_t cqs_live;
	uint64_t qps_live;
	uint64_t mrs_live;	/* ib_alloc_mr'd FRWR MRs */
	uint64_t dma_maps_live;	/* ib_dma_map_page'd SGEs of posted, not yet polled requests */
	uint64_t reg_mrs;	/* IB_WR_REG_MR posted */
	uint64_t local_invs;	/* IB_WR_LOCAL_INV posted */
	uint64_t send_invs;	/* IB_WR_SEND_WITH_INV posted */
	uint64_t recv_invs;	/* receive completions with IB_WC_WITH_INVALIDATE */
	uint64_t sends_active;	/* Sends (with or without invalidate) of connecting sides */
	uint64_t sends_passive;	/* of accepting sides */
	uint64_t completions;	/* work completions polled */
	uint64_t mr_resets;	/* MRs deregistered and reallocated (krpc_ofed_mr_reset) */
};

/* Allocation flags of krpc_ofed_malloc (malloc(9)). */
#define KRPC_M_NOWAIT	0x1
#define KRPC_M_ZERO	0x2

#ifdef __cplusplus
extern "C" {
#endif

/* --- memory and panic hooks (kernel: malloc(9), vm_page, panic(9)) --- */
void *krpc_ofed_malloc(size_t size, int flags);
void krpc_ofed_free(void *p);
void krpc_ofed_panic(const uint8_t *msg, size_t len) __attribute__((__noreturn__));
int krpc_ofed_page_alloc(uint64_t *pa);
int krpc_ofed_page_ref(uint64_t pa);
void krpc_ofed_page_unref(uint64_t pa);
uint8_t *krpc_ofed_page_kva(uint64_t pa);

/* --- connection set-up (rdma_cm, asynchronous; events through krpc_ofed_poll_event) --- */
/* vnet is the struct vnet * of the stack to use (rdma_create_id's first argument), or NULL:
 * the calling thread's (FreeBSD: curvnet, or outside CURVNET_SET the vnet of the thread's
 * prison, TD_TO_VNET(curthread), as ib_ucma.c:486 and krping do; a VIMAGE kernel such as
 * GENERIC refuses a NULL vnet, ib_cma.c:766; Linux: &init_net). */
int krpc_ofed_connect(void *vnet, const struct sockaddr *dst,
    const struct krpc_ofed_params *params, const uint8_t *pdata, uint32_t pdlen,
    struct krpc_ofed_conn **out);
int krpc_ofed_listen(void *vnet, const struct sockaddr *addr,
    const struct krpc_ofed_params *params, int backlog, struct krpc_ofed_listener **out);
/* The next pending connection request: 0 and *out, EAGAIN when none is pending, ENODEV once
 * the listener's device is gone (DEVICE_REMOVAL on its id: destroy the listener). */
int krpc_ofed_listener_next(struct krpc_ofed_listener *l, struct krpc_ofed_conn **out);
void krpc_ofed_listener_destroy(struct krpc_ofed_listener *l);
/* Call fn(arg) (from the CM's handler: it must not sleep long) when a connection request is
 * queued or the device goes; NULL: none. Returns once no call of the old upcall is still
 * running, as krpc_ofed_set_upcall. */
void krpc_ofed_listener_set_upcall(struct krpc_ofed_listener *l, void (*fn)(void *),
    void *arg);
int krpc_ofed_accept(struct krpc_ofed_conn *c, const uint8_t *pdata, uint32_t pdlen);
int krpc_ofed_poll_event(struct krpc_ofed_conn *c, struct krpc_cm_event *ev);
int krpc_ofed_disconnect(struct krpc_ofed_conn *c);
/* The connection's local and remote addresses (the cm id's route.addr src_addr /
 * dst_addr) into *local / *remote (zeroed first). 0, or ENOTCONN without a cm id. */
struct sockaddr_storage;
int krpc_ofed_conn_addrs(struct krpc_ofed_conn *c, struct sockaddr_storage *local,
    struct sockaddr_storage *remote);
void krpc_ofed_conn_destroy(struct krpc_ofed_conn *c);
/* Replace the completion/CM upcall (NULL: none). Returns once no call of the old upcall is
 * still running (a short busy wait): the caller may then free the old argument. Must not be
 * called from the upcall, nor with a lock held that the upcall takes. conn_destroy does the
 * same for the last upcall. */
void krpc_ofed_set_upcall(struct krpc_ofed_conn *c, void (*fn)(void *), void *arg);

/* --- data path --- */
int krpc_ofed_post_send(struct krpc_ofed_conn *c, const struct krpc_wr *wrs, uint32_t n,
    const struct krpc_sge *sges, uint32_t nsge, uint32_t *posted);
int krpc_ofed_post_recv(struct krpc_ofed_conn *c, const uint64_t *wr_ids,
    const struct krpc_sge *sges, uint32_t n, uint32_t *posted);
int krpc_ofed_poll_cq(struct krpc_ofed_conn *c, struct krpc_wc *out, uint32_t n);
int krpc_ofed_req_notify(struct krpc_ofed_conn *c);

/* --- FRWR --- */
int krpc_ofed_reg_mr(struct krpc_ofed_conn *c, uint32_t mr, const struct krpc_sge *frags,
    uint32_t n, uint32_t access, uint64_t wr_id, struct krpc_reg_out *out);
void krpc_ofed_mr_unmap(struct krpc_ofed_conn *c, uint32_t mr);
int krpc_ofed_mr_reset(struct krpc_ofed_conn *c, uint32_t mr, uint32_t *rkey);

/* --- accounting --- */
void krpc_ofed_get_counts(struct krpc_ofed_counts *out);

#ifdef __cplusplus
}
#endif

/* Layouts Rust relies on (mirrored by static assertions in ofed-shim/src/ffi.rs). */
_Static_assert(sizeof(struct krpc_sge) == 16, "krpc_sge size");
_Static_assert(__builtin_offsetof(struct krpc_sge, length) == 8, "krpc_sge.length");
_Static_assert(sizeof(struct krpc_wr) == 40, "krpc_wr size");
_Static_assert(__builtin_offsetof(struct krpc_wr, remote_addr) == 8, "krpc_wr.remote_addr");
_Static_assert(__builtin_offsetof(struct krpc_wr, opcode) == 16, "krpc_wr.opcode");
_Static_assert(__builtin_offsetof(struct krpc_wr, rkey) == 24, "krpc_wr.rkey");
_Static_assert(__builtin_offsetof(struct krpc_wr, sge_first) == 28, "krpc_wr.sge_first");
_Static_assert(__builtin_offsetof(struct krpc_wr, num_sge) == 32, "krpc_wr.num_sge");
_Static_assert(sizeof(struct krpc_wc) == 24, "krpc_wc size");
_Static_assert(__builtin_offsetof(struct krpc_wc, status) == 8, "krpc_wc.status");
_Static_assert(__builtin_offsetof(struct krpc_wc, byte_len) == 16, "krpc_wc.byte_len");
_Static_assert(__builtin_offsetof(struct krpc_wc, invalidated_rkey) == 20, "krpc_wc.inv");
_Static_assert(sizeof(struct krpc_ofed_params) == 32, "krpc_ofed_params size");
_Static_assert(__builtin_offsetof(struct krpc_ofed_params, timeout_ms) == 24, "params.timeout");
_Static_assert(sizeof(struct krpc_cm_event) == 68, "krpc_cm_event size");
_Static_assert(__builtin_offsetof(struct krpc_cm_event, private_data) == 12, "ev.pdata");
_Static_assert(sizeof(struct krpc_reg_out) == 24, "krpc_reg_out size");
_Static_assert(sizeof(struct krpc_ofed_counts) == 112, "krpc_ofed_counts size");
_Static_assert(__builtin_offsetof(struct krpc_ofed_counts, reg_mrs) == 48, "counts.reg_mrs");
_Static_assert(__builtin_offsetof(struct krpc_reg_out, rkey) == 8, "reg_out.rkey");
_Static_assert(__builtin_offsetof(struct krpc_reg_out, nmapped) == 16, "reg_out.nmapped");

/* This header is the verbs boundary only. The mbuf bridge, clnt_rdma and svc_rdma have their
 * own headers and ABI versions (krpc_rdma_mbuf.h, krpc_rdma_clnt.h, krpc_rdma_svc.h), which
 * the files using them include. */

#endif /* KRPC_RDMA_OFED_H */
