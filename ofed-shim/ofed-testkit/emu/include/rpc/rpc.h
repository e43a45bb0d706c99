/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <rpc/rpc.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. The kernel sys/rpc
 * subset: kpi_emu_rpc.h (clnt.h, auth.h, types.h) and kpi_emu_svc.h (svc.h, rpc_msg.h).
 */
#ifndef KRPC_EMU_INCLUDE_RPC_RPC_H
#define KRPC_EMU_INCLUDE_RPC_RPC_H

#include "../../kpi_emu_rpc.h"
#include "../../kpi_emu_svc.h"

#endif /* KRPC_EMU_INCLUDE_RPC_RPC_H */
