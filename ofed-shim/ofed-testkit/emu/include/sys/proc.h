/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <sys/proc.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. struct thread and curthread, emulated in kpi_emu.h (only as TD_TO_VNET's argument).
 */
#ifndef KRPC_EMU_INCLUDE_SYS_PROC_H
#define KRPC_EMU_INCLUDE_SYS_PROC_H

#include "../../kpi_emu.h"

#endif /* KRPC_EMU_INCLUDE_SYS_PROC_H */
