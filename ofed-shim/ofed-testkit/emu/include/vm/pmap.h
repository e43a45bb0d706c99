/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <vm/pmap.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. PHYS_TO_DMAP (the
 * identity here), emulated in kpi_emu.h.
 */
#ifndef KRPC_EMU_INCLUDE_VM_PMAP_H
#define KRPC_EMU_INCLUDE_VM_PMAP_H

#include "../../kpi_emu.h"

#endif /* KRPC_EMU_INCLUDE_VM_PMAP_H */
