/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <sys/sx.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. FreeBSD's SVCXPRT has
 * an sx(9) lock; the emulated one has none and krpc_rdma_svc.c takes no sx lock, so nothing
 * of sx(9) is emulated.
 */
#ifndef KRPC_EMU_INCLUDE_SYS_SX_H
#define KRPC_EMU_INCLUDE_SYS_SX_H

#include "../../kpi_emu.h"

#endif /* KRPC_EMU_INCLUDE_SYS_SX_H */
