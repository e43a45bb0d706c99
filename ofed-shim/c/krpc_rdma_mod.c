/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc_rdma.ko: module glue. The module carries the Rust staticlib (krpc-rdma core +
 * ofed-shim, linked as an archive by kmod/Makefile) and the C wrappers of krpc_rdma_ofed.c.
 * MOD_UNLOAD is refused (EBUSY) while krpc_rdma_busy() counts a live CLIENT, SVCXPRT or
 * bridge M_EXTPG mbuf: they point into the module.
 */
#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/module.h>

#include "krpc_rdma_ofed.h"
#include "krpc_rdma_svc.h"

/* Exported by the Rust staticlib (ofed-shim/src/lib.rs). */
uint32_t krpc_rdma_shim_abi_version(void);

/* svc_rdma's idle timeout of new transports, in seconds (0: none; default 360, as svc_vc). */
TUNABLE_INT("krpc_rdma.svc_idle_timeout", &svc_rdma_idle_timeout);

static int
krpc_rdma_modevent(module_t mod, int type, void *data)
{
	uint64_t clients, xprts, extpg;

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
		/*
		 * Not while anything points into the module: a CLIENT's or SVCXPRT's ops table
		 * (clnt_rdma_ops, svc_rdma_ops), or an M_EXTPG mbuf of the bridge whose ext_free
		 * routine (krpc_mbuf_free_pages) is the module's.
		 */
		if (krpc_rdma_busy(&clients, &xprts, &extpg) != 0) {
			printf("krpc_rdma: busy: %ju CLIENTs, %ju SVCXPRTs, %ju M_EXTPG mbufs "
			    "still live: not unloading\n", (uintmax_t)clients, (uintmax_t)xprts,
			    (uintmax_t)extpg);
			return (EBUSY);
		}
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
