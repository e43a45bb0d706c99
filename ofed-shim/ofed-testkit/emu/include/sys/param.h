/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <sys/param.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. Emulated in kpi_emu.h
 * (PAGE_SIZE, vm_paddr_t, panic, ...).
 */
#ifndef KRPC_EMU_INCLUDE_SYS_PARAM_H
#define KRPC_EMU_INCLUDE_SYS_PARAM_H

/* The host's header of this name first (the emulation's headers use it). */
#include_next <sys/param.h>
#include "../../kpi_emu.h"

#endif /* KRPC_EMU_INCLUDE_SYS_PARAM_H */
