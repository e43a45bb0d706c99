/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <rpc/xdr.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. The kernel sys/rpc
 * subset of kpi_emu_rpc.h.
 */
#ifndef KRPC_EMU_INCLUDE_RPC_XDR_H
#define KRPC_EMU_INCLUDE_RPC_XDR_H

#include "../../kpi_emu_rpc.h"

#endif /* KRPC_EMU_INCLUDE_RPC_XDR_H */
