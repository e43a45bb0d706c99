/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: the few librdmacm calls the OFED KPI emulation (kpi_emu.c) needs,
 * behind plain C types. A separate translation unit because librdmacm's userspace API and the
 * kernel's rdma_cm KPI that kpi_emu.h declares use the same names (rdma_create_id,
 * struct rdma_cm_id, ...): this file includes <rdma/rdma_cma.h> and never kpi_emu.h, and
 * kpi_emu.c includes kpi_emu.h and never <rdma/rdma_cma.h>.
 *
 * Functions return 0 or a negative errno (the kernel convention), pointers NULL on failure.
 */
#ifndef KRPC_CM_GLUE_H
#define KRPC_CM_GLUE_H

#include <stdint.h>

struct sockaddr;
struct ibv_context;
struct ibv_pd;
struct ibv_qp;
struct ibv_qp_init_attr;

/* One librdmacm event, copied out (private data copied, at most 255 bytes). */
struct ucm_event {
	int event;		/* RDMA_CM_EVENT_* (same values as the kernel's) */
	int status;
	void *uid;		/* the librdmacm id the event is for (new id for CONNECT_REQUEST) */
	void *listen_uid;	/* CONNECT_REQUEST: the listening id */
	void *uid_ctx;		/* context of `uid` (for CONNECT_REQUEST: the listener's) */
	uint8_t pdlen;
	uint8_t pdata[255];
	void *raw;		/* to ack */
};

struct ucm_conn_param {
	const void *pdata;
	uint8_t pdlen;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t flow_control;
	uint8_t retry_count;
	uint8_t rnr_retry_count;
};

int ucm_init(void);		/* the process-wide event channel */
int ucm_channel_fd(void);
int ucm_create_id(void *ctx, void **uid);
void ucm_set_context(void *uid, void *ctx);
struct ibv_context *ucm_verbs(void *uid);
int ucm_resolve_addr(void *uid, struct sockaddr *src, struct sockaddr *dst, int timeout_ms);
int ucm_resolve_route(void *uid, int timeout_ms);
int ucm_bind_addr(void *uid, struct sockaddr *addr);
int ucm_listen(void *uid, int backlog);
int ucm_create_qp(void *uid, struct ibv_pd *pd, struct ibv_qp_init_attr *attr,
    struct ibv_qp **qp);
void ucm_destroy_qp(void *uid);
/* ibv_destroy_qp of a QP made by ucm_create_qp whose id may be destroyed already: 0 or -errno. */
int ucm_destroy_verbs_qp(struct ibv_qp *qp);
int ucm_connect(void *uid, const struct ucm_conn_param *p);
int ucm_accept(void *uid, const struct ucm_conn_param *p);
int ucm_reject(void *uid, const void *pdata, uint8_t pdlen);
int ucm_disconnect(void *uid);
int ucm_destroy_id(void *uid);
/* Next event without blocking: 1 (and *ev filled), 0 if none, negative errno. */
int ucm_get_event(struct ucm_event *ev);
void ucm_ack_event(struct ucm_event *ev);

#endif /* KRPC_CM_GLUE_H */
