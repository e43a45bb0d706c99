/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <sys/malloc.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. malloc(9) and
 * MALLOC_DEFINE, emulated in kpi_emu.h.
 */
#ifndef KRPC_EMU_INCLUDE_SYS_MALLOC_H
#define KRPC_EMU_INCLUDE_SYS_MALLOC_H

#include "../../kpi_emu.h"

#endif /* KRPC_EMU_INCLUDE_SYS_MALLOC_H */
