/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Linux kbuild only: ../c/krpc_rdma_ofed.h includes <sys/types.h> under _KERNEL (FreeBSD's
 * kernel header). On Linux the same fixed-width types and size_t come from <linux/types.h>.
 */
#ifndef KRPC_LINUX_COMPAT_SYS_TYPES_H
#define KRPC_LINUX_COMPAT_SYS_TYPES_H
#include <linux/types.h>
#endif
