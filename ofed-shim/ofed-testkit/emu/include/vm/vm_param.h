/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <vm/vm_param.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. Emulated in kpi_emu.h.
 */
#ifndef KRPC_EMU_INCLUDE_VM_VM_PARAM_H
#define KRPC_EMU_INCLUDE_VM_VM_PARAM_H

#include "../../kpi_emu.h"

#endif /* KRPC_EMU_INCLUDE_VM_VM_PARAM_H */
