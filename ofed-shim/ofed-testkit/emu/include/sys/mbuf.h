/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <sys/mbuf.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. The emulated struct
 * mbuf (M_EXTPG included) of kpi_emu_mbuf.h.
 */
#ifndef KRPC_EMU_INCLUDE_SYS_MBUF_H
#define KRPC_EMU_INCLUDE_SYS_MBUF_H

#include "../../kpi_emu_mbuf.h"

#endif /* KRPC_EMU_INCLUDE_SYS_MBUF_H */
