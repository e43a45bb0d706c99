/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <machine/cpu.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. cpu_spinwait, emulated
 * in kpi_emu.h.
 */
#ifndef KRPC_EMU_INCLUDE_MACHINE_CPU_H
#define KRPC_EMU_INCLUDE_MACHINE_CPU_H

#include "../../kpi_emu.h"

#endif /* KRPC_EMU_INCLUDE_MACHINE_CPU_H */
