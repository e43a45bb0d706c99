/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <sys/jail.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. struct prison: nothing used here (TD_TO_VNET is emulated in kpi_emu.h).
 */
#ifndef KRPC_EMU_INCLUDE_SYS_JAIL_H
#define KRPC_EMU_INCLUDE_SYS_JAIL_H

#include "../../kpi_emu.h"

#endif /* KRPC_EMU_INCLUDE_SYS_JAIL_H */
