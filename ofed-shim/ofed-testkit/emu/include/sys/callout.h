/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <sys/callout.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. callout(9), emulated in
 * kpi_emu_rpc.h.
 */
#ifndef KRPC_EMU_INCLUDE_SYS_CALLOUT_H
#define KRPC_EMU_INCLUDE_SYS_CALLOUT_H

#include "../../kpi_emu_rpc.h"

#endif /* KRPC_EMU_INCLUDE_SYS_CALLOUT_H */
