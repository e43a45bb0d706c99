/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <sys/ucred.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. struct ucred: nothing used here (TD_TO_VNET is emulated in kpi_emu.h).
 */
#ifndef KRPC_EMU_INCLUDE_SYS_UCRED_H
#define KRPC_EMU_INCLUDE_SYS_UCRED_H

#include "../../kpi_emu.h"

#endif /* KRPC_EMU_INCLUDE_SYS_UCRED_H */
