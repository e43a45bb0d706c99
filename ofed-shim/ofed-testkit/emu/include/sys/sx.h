/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <sys/sx.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. sx(9) (sx_init,
 * sx_destroy, sx_xlock, sx_xunlock) is emulated in kpi_emu.h, with the checks the SVCXPRT's
 * xp_lock gets (initialised by the transport's create, destroyed by its xp_destroy).
 */
#ifndef KRPC_EMU_INCLUDE_SYS_SX_H
#define KRPC_EMU_INCLUDE_SYS_SX_H

#include "../../kpi_emu.h"

#endif /* KRPC_EMU_INCLUDE_SYS_SX_H */
