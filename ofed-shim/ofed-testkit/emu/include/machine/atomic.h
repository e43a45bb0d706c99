/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <machine/atomic.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. atomic_add_int, atomic_subtract_int, atomic_load_int, atomic_fetchadd_* (GCC builtins), emulated in kpi_emu.h.
 */
#ifndef KRPC_EMU_INCLUDE_MACHINE_ATOMIC_H
#define KRPC_EMU_INCLUDE_MACHINE_ATOMIC_H

#include "../../kpi_emu.h"

#endif /* KRPC_EMU_INCLUDE_MACHINE_ATOMIC_H */
