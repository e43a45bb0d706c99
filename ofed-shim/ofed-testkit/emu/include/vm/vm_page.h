/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <vm/vm_page.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. vm_page_alloc_noobj,
 * vm_page_wire / vm_page_unwire_noq, PHYS_TO_VM_PAGE: emulated in kpi_emu.h.
 */
#ifndef KRPC_EMU_INCLUDE_VM_VM_PAGE_H
#define KRPC_EMU_INCLUDE_VM_VM_PAGE_H

#include "../../kpi_emu.h"

#endif /* KRPC_EMU_INCLUDE_VM_VM_PAGE_H */
