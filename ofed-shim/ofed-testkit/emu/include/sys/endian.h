/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <sys/endian.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. htobe32 & co: the
 * host's <endian.h> has FreeBSD's names.
 */
#ifndef KRPC_EMU_INCLUDE_SYS_ENDIAN_H
#define KRPC_EMU_INCLUDE_SYS_ENDIAN_H

#include <endian.h>

#endif /* KRPC_EMU_INCLUDE_SYS_ENDIAN_H */
