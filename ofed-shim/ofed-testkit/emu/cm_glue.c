/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: librdmacm behind plain C types for the OFED KPI emulation (see
 * cm_glue.h for why this is a separate file).
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>

#include <rdma/rdma_cma.h>

#include "cm_glue.h"

/* kpi_emu.h declares the kernel's rdma_cm_event_type with explicit values; they must be
 * librdmacm's (both are Linux's list). */
_Static_assert(RDMA_CM_EVENT_ADDR_RESOLVED == 0, "event values");
_Static_assert(RDMA_CM_EVENT_CONNECT_REQUEST == 4, "event values");
_Static_assert(RDMA_CM_EVENT_ESTABLISHED == 9, "event values");
_Static_assert(RDMA_CM_EVENT_DISCONNECTED == 10, "event values");
_Static_assert(RDMA_CM_EVENT_TIMEWAIT_EXIT == 15, "event values");

static struct rdma_event_channel *ucm_ch;

static int
neg_errno(int rc)
{
	if (rc == 0)
		return (0);
	return (errno != 0 ? -errno : -EIO);
}

int
ucm_init(void)
{
	int fl;

	if (ucm_ch != NULL)
		return (0);
	ucm_ch = rdma_create_event_channel();
	if (ucm_ch == NULL)
		return (errno != 0 ? -errno : -ENODEV);
	fl = fcntl(ucm_ch->fd, F_GETFL);
	if (fl < 0 || fcntl(ucm_ch->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return (-errno);
	return (0);
}

int
ucm_channel_fd(void)
{
	return (ucm_ch != NULL ? ucm_ch->fd : -1);
}

int
ucm_create_id(void *ctx, void **uid)
{
	struct rdma_cm_id *id = NULL;
	int rc;

	rc = rdma_create_id(ucm_ch, &id, ctx, RDMA_PS_TCP);
	if (rc != 0)
		return (neg_errno(rc));
	*uid = id;
	return (0);
}

void
ucm_set_context(void *uid, void *ctx)
{
	((struct rdma_cm_id *)uid)->context = ctx;
}

struct ibv_context *
ucm_verbs(void *uid)
{
	return (((struct rdma_cm_id *)uid)->verbs);
}

int
ucm_resolve_addr(void *uid, struct sockaddr *src, struct sockaddr *dst, int timeout_ms)
{
	return (neg_errno(rdma_resolve_addr(uid, src, dst, timeout_ms)));
}

int
ucm_resolve_route(void *uid, int timeout_ms)
{
	return (neg_errno(rdma_resolve_route(uid, timeout_ms)));
}

int
ucm_bind_addr(void *uid, struct sockaddr *addr)
{
	return (neg_errno(rdma_bind_addr(uid, addr)));
}

int
ucm_listen(void *uid, int backlog)
{
	return (neg_errno(rdma_listen(uid, backlog)));
}

int
ucm_create_qp(void *uid, struct ibv_pd *pd, struct ibv_qp_init_attr *attr, struct ibv_qp **qp)
{
	struct rdma_cm_id *id = uid;
	int rc;

	rc = rdma_create_qp(id, pd, attr);
	if (rc != 0)
		return (neg_errno(rc));
	*qp = id->qp;
	return (0);
}

void
ucm_destroy_qp(void *uid)
{
	rdma_destroy_qp(uid);
}

int
ucm_destroy_verbs_qp(struct ibv_qp *qp)
{
	return (-ibv_destroy_qp(qp));
}

int
ucm_connect(void *uid, const struct ucm_conn_param *p)
{
	struct rdma_conn_param o;

	UCM_CONN_PARAM_COPY(&o, p);
	return (neg_errno(rdma_connect(uid, &o)));
}

int
ucm_accept(void *uid, const struct ucm_conn_param *p)
{
	struct rdma_conn_param o;

	UCM_CONN_PARAM_COPY(&o, p);
	return (neg_errno(rdma_accept(uid, &o)));
}

int
ucm_reject(void *uid, const void *pdata, uint8_t pdlen)
{
	return (neg_errno(rdma_reject(uid, pdata, pdlen)));
}

int
ucm_disconnect(void *uid)
{
	return (neg_errno(rdma_disconnect(uid)));
}

static void
ucm_copy_addr(struct sockaddr_storage *out, const struct sockaddr *sa)
{
	size_t n = 0;

	memset(out, 0, sizeof(*out));
	if (sa == NULL)
		return;
	if (sa->sa_family == AF_INET)
		n = sizeof(struct sockaddr_in);
	else if (sa->sa_family == AF_INET6)
		n = sizeof(struct sockaddr_in6);
	if (n > 0)
		memcpy(out, sa, n);
}

void
ucm_addrs(void *uid, struct sockaddr_storage *src, struct sockaddr_storage *dst)
{
	ucm_copy_addr(src, rdma_get_local_addr(uid));
	ucm_copy_addr(dst, rdma_get_peer_addr(uid));
}

int
ucm_destroy_id(void *uid)
{
	return (neg_errno(rdma_destroy_id(uid)));
}

int
ucm_get_event(struct ucm_event *ev)
{
	struct rdma_cm_event *e = NULL;

	if (rdma_get_cm_event(ucm_ch, &e) != 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return (0);
		return (-errno);
	}
	memset(ev, 0, sizeof(*ev));
	ev->event = (int)e->event;
	ev->status = e->status;
	ev->uid = e->id;
	ev->listen_uid = e->listen_id;
	ev->uid_ctx = e->id->context;
	if (e->param.conn.private_data != NULL && e->param.conn.private_data_len > 0) {
		ev->pdlen = e->param.conn.private_data_len;
		memcpy(ev->pdata, e->param.conn.private_data, ev->pdlen);
	}
	ev->raw = e;
	return (1);
}

void
ucm_ack_event(struct ucm_event *ev)
{
	if (ev->raw != NULL)
		rdma_ack_cm_event(ev->raw);
	ev->raw = NULL;
}
