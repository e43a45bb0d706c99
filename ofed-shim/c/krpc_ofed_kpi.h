/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * The KPI krpc_rdma_ofed.c is written against: FreeBSD's kernel headers, or (with
 * KRPC_OFED_EMU, host tests only) the userspace emulation in ../emu/kpi_emu.h, which declares
 * the same subset with the same signatures on top of libibverbs/librdmacm.
 */
#ifndef KRPC_OFED_KPI_H
#define KRPC_OFED_KPI_H

#ifdef KRPC_OFED_EMU
#include "kpi_emu.h"
#else
#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/malloc.h>
#include <sys/lock.h>
#include <sys/mutex.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <net/vnet.h>
#include <vm/vm.h>
#include <vm/vm_param.h>
#include <vm/vm_page.h>
#include <vm/pmap.h>
#include <linux/scatterlist.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>
#endif

#endif /* KRPC_OFED_KPI_H */
