/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <sys/time.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. struct timeval comes
 * from the host; tvtohz, hz and ticks are emulated in kpi_emu_rpc.h.
 */
#ifndef KRPC_EMU_INCLUDE_SYS_TIME_H
#define KRPC_EMU_INCLUDE_SYS_TIME_H

/* The host's header of this name first (the emulation's headers use it). */
#include_next <sys/time.h>
#include "../../kpi_emu_rpc.h"

#endif /* KRPC_EMU_INCLUDE_SYS_TIME_H */
