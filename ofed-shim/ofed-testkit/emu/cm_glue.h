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
struct sockaddr_storage;
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

/* The connection parameters the emulation passes on: the fields of struct rdma_conn_param
 * that the kernel's (kpi_emu.h) and librdmacm's share, by the same names. */
struct ucm_conn_param {
	const void *private_data;
	uint8_t private_data_len;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t flow_control;
	uint8_t retry_count;
	uint8_t rnr_retry_count;
};

/* *o = the fields of struct ucm_conn_param in *p, the rest of *o zero: from the kernel's
 * struct rdma_conn_param to ucm_conn_param (kpi_emu.c), and from that to librdmacm's
 * (cm_glue.c). Needs <string.h>. */
#define UCM_CONN_PARAM_COPY(o, p) do {					\
	memset((o), 0, sizeof(*(o)));					\
	(o)->private_data = (p)->private_data;				\
	(o)->private_data_len = (p)->private_data_len;			\
	(o)->responder_resources = (p)->responder_resources;		\
	(o)->initiator_depth = (p)->initiator_depth;			\
	(o)->flow_control = (p)->flow_control;				\
	(o)->retry_count = (p)->retry_count;				\
	(o)->rnr_retry_count = (p)->rnr_retry_count;			\
} while (0)

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
/* librdmacm's local and peer addresses of uid (rdma_get_local_addr / rdma_get_peer_addr),
 * copied into *src / *dst (zeroed first). */
void ucm_addrs(void *uid, struct sockaddr_storage *src, struct sockaddr_storage *dst);
int ucm_destroy_id(void *uid);
/* Next event without blocking: 1 (and *ev filled), 0 if none, negative errno. */
int ucm_get_event(struct ucm_event *ev);
void ucm_ack_event(struct ucm_event *ev);

#endif /* KRPC_CM_GLUE_H */
