/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * The KPI krpc_rdma_ofed.c is written against, and the few per-kernel differences it goes
 * through by name:
 *
 *   krpc_lock_t, krpc_lock_init/destroy, krpc_lock/krpc_unlock
 *       a lock the CQ completion handler may take (FreeBSD: mtx(9), MTX_DEF; Linux: a
 *       spinlock with interrupts saved, the handler runs in softirq or hardirq context)
 *   KRPC_PA_TO_PAGE(pa)            the page of a physical address (vm_page / struct page)
 *   krpc_cpu_relax()               one step of a short busy wait (FreeBSD: cpu_spinwait;
 *                                  Linux: cpu_relax)
 *   krpc_rdma_create_id(net, handler, context)
 *       rdma_create_id(struct vnet * | struct net *, ..., RDMA_PS_TCP, IB_QPT_RC); a NULL net
 *       is the thread's vnet on FreeBSD (curvnet, else TD_TO_VNET(curthread)), &init_net
 *       on Linux
 *   krpc_rdma_accept(id, param)    rdma_accept (Linux: under rdma_lock_handler, as required
 *                                  outside the id's event handler since 5.10)
 *   krpc_rdma_reject(id)           rdma_reject without private data (Linux: 4 arguments)
 *   krpc_rdma_connect_in_handler(id, param)
 *                                  rdma_connect from the id's own event handler (Linux:
 *                                  rdma_connect_locked; rdma_connect takes the handler lock
 *                                  the running handler holds)
 *
 * Kernels: FreeBSD's headers (default); Linux's with KRPC_OFED_LINUX (the Linux module,
 * ../linux/krpc_ofed_kpi_linux.h). The host tests compile the FreeBSD path unchanged with
 * ../ofed-testkit/emu/include first on the include path: headers of FreeBSD's names there bring in the
 * userspace emulation (../ofed-testkit/emu/kpi_emu*.h), which declares FreeBSD's subset with the same
 * signatures on top of libibverbs/librdmacm.
 */
#ifndef KRPC_OFED_KPI_H
#define KRPC_OFED_KPI_H

#if defined(KRPC_OFED_LINUX)
#include "krpc_ofed_kpi_linux.h"
#else
#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/malloc.h>
#include <sys/lock.h>
#include <sys/mutex.h>
#include <sys/socket.h>
#include <sys/proc.h>
#include <sys/ucred.h>
#include <sys/jail.h>
#include <machine/cpu.h>
#include <net/vnet.h>
#include <vm/vm.h>
#include <vm/vm_param.h>
#include <vm/vm_page.h>
#include <vm/pmap.h>
#include <linux/scatterlist.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>

/* FreeBSD (and its emulation). */
typedef struct mtx krpc_lock_t;
#define	krpc_lock_init(l, name)	mtx_init((l), (name), NULL, MTX_DEF)
#define	krpc_lock_destroy(l)	mtx_destroy(l)
#define	krpc_lock(l)		mtx_lock(l)
#define	krpc_unlock(l)		mtx_unlock(l)
#define	krpc_cpu_relax()	cpu_spinwait()
#define	KRPC_PA_TO_PAGE(pa)	PHYS_TO_VM_PAGE(pa)
/*
 * A NULL net is the calling thread's vnet: rdma_create_id fails with -EINVAL for a NULL one
 * on a VIMAGE kernel (ib_cma.c:766; GENERIC has VIMAGE). curvnet inside CURVNET_SET, else the
 * vnet of the thread's prison (TD_TO_VNET(curthread), as ib_ucma.c:486). Without VIMAGE
 * both are NULL, which rdma_create_id then accepts.
 */
static inline struct vnet *
krpc_vnet(void *net)
{
	struct vnet *v = net;

	if (v == NULL)
		v = curvnet;
	if (v == NULL)
		v = TD_TO_VNET(curthread);
	return (v);
}
#define	krpc_rdma_create_id(net, handler, context)				\
	rdma_create_id(krpc_vnet(net), (handler), (context), RDMA_PS_TCP, IB_QPT_RC)
#define	krpc_rdma_accept(id, param)	rdma_accept((id), (param))
#define	krpc_rdma_reject(id)		rdma_reject((id), NULL, 0)
#define	krpc_rdma_connect_in_handler(id, param)	rdma_connect((id), (param))
#endif

#endif /* KRPC_OFED_KPI_H */
