/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <linux/scatterlist.h> for the production C (ofed-shim/c),
 * which build.rs compiles with -I emu/include ahead of the host's headers. LinuxKPI's
 * scatterlist, emulated in kpi_emu.h.
 */
#ifndef KRPC_EMU_INCLUDE_LINUX_SCATTERLIST_H
#define KRPC_EMU_INCLUDE_LINUX_SCATTERLIST_H

#include "../../kpi_emu.h"

#endif /* KRPC_EMU_INCLUDE_LINUX_SCATTERLIST_H */
