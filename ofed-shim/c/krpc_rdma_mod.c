/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc_rdma.ko: module glue. The module carries the Rust staticlib (krpc-rdma core +
 * ofed-shim, linked as an archive by kmod/Makefile) and the C wrappers of krpc_rdma_ofed.c.
 * MOD_UNLOAD is refused (EBUSY) while krpc_rdma_busy() counts a live CLIENT, SVCXPRT or
 * bridge M_EXTPG mbuf: they point into the module.
 *
 * Against a FreeBSD tree with freebsd/patches/0001-krpc-nfs-rdma.patch (its
 * <rpc/rpc_rdma.h>), MOD_LOAD registers the transport with the krpc (rpc_rdma_register:
 * clnt_rdma_reconnect_create and svc_rdma_listen, what `mount -o rdma` and
 * vfs.nfsd.rdma_listen call) and MOD_UNLOAD withdraws it, refused (EBUSY) while a mount or
 * the nfsd listener holds it. Against a stock tree there is nothing to register with.
 */
#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/module.h>

#include "krpc_rdma_ofed.h"
#include "krpc_rdma_clnt.h"
#include "krpc_rdma_svc.h"

#if __has_include(<rpc/rpc_rdma.h>)
#include <rpc/rpc.h>
#include <rpc/rpc_rdma.h>
#define KRPC_RDMA_REGISTER	1

static struct rpc_rdma_ops krpc_rdma_ops = {
	.rro_version =		RPC_RDMA_OPS_VERSION,
	.rro_reconnect_create =	clnt_rdma_reconnect_create,
	.rro_listen =		svc_rdma_listen,
};
/* The ops registered (krpc_rdma_ops, or the test build's software fabric's). */
static struct rpc_rdma_ops *krpc_rdma_registered;
#ifdef KRPC_RDMA_SELFTEST
/* krpc_rdma_bsd_facetest.c: the software fabric's ops when the loader tunable
 * krpc_rdma.soft_fabric is 1 (FreeBSD has no RDMA device: the NFS boot of `cargo xtask
 * freebsd-vm` mounts over it), else NULL. */
struct rpc_rdma_ops *krpc_rdma_soft_ops(void);
#endif
#endif

/* Exported by the Rust staticlib (ofed-shim/src/lib.rs). */
uint32_t krpc_rdma_shim_abi_version(void);

/* svc_rdma's idle timeout of new transports, in seconds (0: none; default 360, as svc_vc). */
TUNABLE_INT("krpc_rdma.svc_idle_timeout", &svc_rdma_idle_timeout);

static int
krpc_rdma_modevent(module_t mod, int type, void *data)
{
	uint64_t clients, xprts, extpg;
#ifdef KRPC_RDMA_REGISTER
	int error;
#endif

	switch (type) {
	case MOD_LOAD:
		if (krpc_rdma_shim_abi_version() != KRPC_OFED_ABI_VERSION) {
			printf("krpc_rdma: Rust shim ABI %u, C wrappers ABI %u: refusing to load\n",
			    krpc_rdma_shim_abi_version(), KRPC_OFED_ABI_VERSION);
			return (EINVAL);
		}
#ifdef KRPC_RDMA_REGISTER
		krpc_rdma_registered = &krpc_rdma_ops;
#ifdef KRPC_RDMA_SELFTEST
		if (krpc_rdma_soft_ops() != NULL)
			krpc_rdma_registered = krpc_rdma_soft_ops();
#endif
		error = rpc_rdma_register(krpc_rdma_registered);
		if (error != 0) {
			printf("krpc_rdma: rpc_rdma_register: error %d: refusing to load\n", error);
			return (error);
		}
#endif
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
#ifdef KRPC_RDMA_REGISTER
		/* EBUSY while an NFS mount or the nfsd listener holds the transport. */
		error = rpc_rdma_unregister(krpc_rdma_registered);
		if (error != 0) {
			printf("krpc_rdma: the krpc still uses the transport: not unloading\n");
			return (error);
		}
#endif
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
