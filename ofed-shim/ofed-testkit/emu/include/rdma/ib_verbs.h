/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <rdma/ib_verbs.h> for the production C (ofed-shim/c),
 * which build.rs compiles with -I emu/include ahead of the host's headers. The OFED verbs,
 * emulated on libibverbs (kpi_emu.h, kpi_emu.c).
 */
#ifndef KRPC_EMU_INCLUDE_RDMA_IB_VERBS_H
#define KRPC_EMU_INCLUDE_RDMA_IB_VERBS_H

#include "../../kpi_emu.h"

#endif /* KRPC_EMU_INCLUDE_RDMA_IB_VERBS_H */
