/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The Linux side of ../c/krpc_ofed_kpi.h: Linux 6.1's in-kernel verbs and rdma_cm (the KPI
 * FreeBSD's OFED copies through LinuxKPI, so the wrapper's ib_* / rdma_* calls are the same)
 * and the per-kernel names that header documents. Compiled with -DKRPC_OFED_LINUX (Kbuild).
 */
#ifndef KRPC_OFED_KPI_LINUX_H
#define KRPC_OFED_KPI_LINUX_H

#include <linux/errno.h>
#include <linux/kernel.h>
#include <linux/mm.h>
#include <linux/scatterlist.h>
#include <linux/spinlock.h>
#include <linux/string.h>
#include <net/net_namespace.h>
#include <rdma/ib_cm.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>

#ifndef __DECONST
#define __DECONST(type, var)	((type)(uintptr_t)(const void *)(var))
#endif

/* The CQ completion handler runs in softirq (rxe) or hardirq (hardware) context. */
typedef struct {
	spinlock_t s;
	unsigned long flags;	/* written by the holder only */
} krpc_lock_t;
#define krpc_lock_init(l, name)	spin_lock_init(&(l)->s)
#define krpc_lock_destroy(l)	do { } while (0)
#define krpc_lock(l)		spin_lock_irqsave(&(l)->s, (l)->flags)
#define krpc_unlock(l)		spin_unlock_irqrestore(&(l)->s, (l)->flags)
#define krpc_cpu_relax()	cpu_relax()

/* Page addresses are physical (page_to_phys), as ../linux/krpc_rdma_linux.c hands them out. */
#define KRPC_PA_TO_PAGE(pa)	pfn_to_page(PHYS_PFN(pa))

static inline struct rdma_cm_id *
krpc_rdma_create_id(void *net, rdma_cm_event_handler handler, void *context)
{
	return rdma_create_id(net != NULL ? (struct net *)net : &init_net, handler, context,
	    RDMA_PS_TCP, IB_QPT_RC);
}

static inline int
krpc_rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	int err;

	rdma_lock_handler(id);
	err = rdma_accept(id, param);
	rdma_unlock_handler(id);
	return err;
}

#define krpc_rdma_reject(id)	rdma_reject((id), NULL, 0, IB_CM_REJ_CONSUMER_DEFINED)

/* The handler runs with the id's handler mutex held, which rdma_connect takes (5.10+). */
#define krpc_rdma_connect_in_handler(id, param)	rdma_connect_locked((id), (param))

#endif /* KRPC_OFED_KPI_LINUX_H */
