/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <vm/vm.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. Emulated in kpi_emu.h
 * (the page arena).
 */
#ifndef KRPC_EMU_INCLUDE_VM_VM_H
#define KRPC_EMU_INCLUDE_VM_VM_H

#include "../../kpi_emu.h"

#endif /* KRPC_EMU_INCLUDE_VM_VM_H */
