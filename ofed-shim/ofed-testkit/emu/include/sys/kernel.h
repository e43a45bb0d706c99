/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <sys/kernel.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. Emulated in kpi_emu.h.
 */
#ifndef KRPC_EMU_INCLUDE_SYS_KERNEL_H
#define KRPC_EMU_INCLUDE_SYS_KERNEL_H

#include "../../kpi_emu.h"

#endif /* KRPC_EMU_INCLUDE_SYS_KERNEL_H */
