/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <net/vnet.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. struct vnet, emulated
 * in kpi_emu.h.
 */
#ifndef KRPC_EMU_INCLUDE_NET_VNET_H
#define KRPC_EMU_INCLUDE_NET_VNET_H

#include "../../kpi_emu.h"

#endif /* KRPC_EMU_INCLUDE_NET_VNET_H */
