/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <sys/socket.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. struct sockaddr comes
 * from the host; the rest of what the C uses is in kpi_emu.h.
 */
#ifndef KRPC_EMU_INCLUDE_SYS_SOCKET_H
#define KRPC_EMU_INCLUDE_SYS_SOCKET_H

/* The host's header of this name first (the emulation's headers use it). */
#include_next <sys/socket.h>
#include "../../kpi_emu.h"

#endif /* KRPC_EMU_INCLUDE_SYS_SOCKET_H */
