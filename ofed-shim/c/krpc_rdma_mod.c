/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc_rdma.ko: module glue. The module carries the Rust staticlib (krpc-rdma core +
 * ofed-shim, linked as an archive by kmod/Makefile) and the C wrappers of krpc_rdma_ofed.c.
 */
#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/module.h>

#include "krpc_rdma_ofed.h"

/* Exported by the Rust staticlib (ofed-shim/src/lib.rs). */
uint32_t krpc_rdma_shim_abi_version(void);

static int
krpc_rdma_modevent(module_t mod, int type, void *data)
{
	switch (type) {
	case MOD_LOAD:
		if (krpc_rdma_shim_abi_version() != KRPC_OFED_ABI_VERSION) {
			printf("krpc_rdma: Rust shim ABI %u, C wrappers ABI %u: refusing to load\n",
			    krpc_rdma_shim_abi_version(), KRPC_OFED_ABI_VERSION);
			return (EINVAL);
		}
		if (bootverbose)
			printf("krpc_rdma: loaded (shim ABI %u)\n", KRPC_OFED_ABI_VERSION);
		return (0);
	case MOD_UNLOAD:
		return (0);
	default:
		return (EOPNOTSUPP);
	}
}

static moduledata_t krpc_rdma_mod = {
	"krpc_rdma",
	krpc_rdma_modevent,
	NULL,
};

DECLARE_MODULE(krpc_rdma, krpc_rdma_mod, SI_SUB_VFS, SI_ORDER_ANY);
MODULE_VERSION(krpc_rdma, 1);
MODULE_DEPEND(krpc_rdma, ibcore, 1, 1, 1);
MODULE_DEPEND(krpc_rdma, linuxkpi, 1, 1, 1);
MODULE_DEPEND(krpc_rdma, krpc, 1, 1, 1);
