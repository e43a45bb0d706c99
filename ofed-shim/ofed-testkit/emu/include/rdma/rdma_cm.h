/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <rdma/rdma_cm.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. The kernel's rdma_cm,
 * emulated on librdmacm (kpi_emu.h, cm_glue.c).
 */
#ifndef KRPC_EMU_INCLUDE_RDMA_RDMA_CM_H
#define KRPC_EMU_INCLUDE_RDMA_RDMA_CM_H

#include "../../kpi_emu.h"

#endif /* KRPC_EMU_INCLUDE_RDMA_RDMA_CM_H */
