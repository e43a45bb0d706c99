/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: FreeBSD's <sys/queue.h> for the production C (ofed-shim/c), which
 * build.rs compiles with -I emu/include ahead of the host's headers. The host's sys/queue.h
 * has the queue(3) macros; nothing else to emulate.
 */
#ifndef KRPC_EMU_INCLUDE_SYS_QUEUE_H
#define KRPC_EMU_INCLUDE_SYS_QUEUE_H

/* The host's header of this name first (the emulation's headers use it). */
#include_next <sys/queue.h>

#endif /* KRPC_EMU_INCLUDE_SYS_QUEUE_H */
