/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc_rdma_kldtest.ko: loads and unloads krpc_rdma.ko (a SELFTEST=1 build) N times in
 * FreeBSD's kernel and checks that each unload leaves nothing behind. A test module of its own
 * (a module cannot unload itself), preloaded by the test VM's loader (`cargo xtask
 * freebsd-vm`, its second boot), which also gives the kernel a root file system holding
 * /boot/kernel/krpc_rdma.ko and an /sbin/init that only sleeps.
 *
 * Once root is mounted, a kernel thread runs the cycles. Each: kern_kldload(krpc_rdma.ko);
 * run the module's face test (krpc_facetest_run, looked up in the loaded file: clnt_rdma and
 * svc_rdma against svc.c's pool threads, 1 MiB + 3 both ways in M_EXTPG mbufs, ...); check
 * the module's own accounting before it goes (krpc_rdma_busy() 0: no CLIENT, SVCXPRT or
 * bridge M_EXTPG mbuf alive; its malloc(9) types with nothing in use); kern_kldunload; then,
 * with UMA's caches drained, the mbuf and cluster zones back to their counts before the load
 * (14.2's M_EXTPG mbufs come from the mbuf zone; their pages are wired pages). Wired pages are printed per cycle, and must not grow over the cycles (the last
 * cycle's count at most 16 pages above the first's: a page lost per cycle would show 19).
 *
 *   loader tunables: krpc_rdma_kldtest.cycles (default 20), krpc_rdma_kldtest.path
 *   (default /boot/kernel/krpc_rdma.ko); at the end the VM is powered off.
 *
 * One console line per cycle, then "krpc_rdma kldtest: PASS: ..." or "... FAIL: ...", and
 * "krpc_rdma kldtest: done, rc N, T s".
 */
#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/kthread.h>
#include <sys/linker.h>
#include <sys/lock.h>
#include <sys/malloc.h>
#include <sys/mbuf.h>
#include <sys/module.h>
#include <sys/mutex.h>
#include <sys/proc.h>
#include <sys/reboot.h>
#include <sys/smp.h>
#include <sys/syscallsubr.h>
#include <sys/vmmeter.h>
#include <sys/vnode.h>
#include <sys/mount.h>
#include <vm/vm.h>
#include <vm/uma.h>

static int kldtest_cycles = 20;
static char kldtest_path[128] = "/boot/kernel/krpc_rdma.ko";
TUNABLE_INT("krpc_rdma_kldtest.cycles", &kldtest_cycles);
TUNABLE_STR("krpc_rdma_kldtest.path", kldtest_path, sizeof(kldtest_path));

/* krpc_rdma.ko's malloc(9) types (krpc_rdma_bsd.c, _svc.c, _clnt.c, _bsd_selftest.c,
 * _bsd_facetest.c): nothing of theirs in use when it is unloaded. */
static const char *const kldtest_types[] = {
	"krpc_rdma", "krpc_rdma_svc", "krpc_rdma_clnt", "krpc_rdma_selftest",
	"krpc_rdma_facetest",
};

/* Bytes and allocations of type desc in use now (over every CPU); -1: no such type. */
static int64_t
kldtest_inuse(const char *desc, int64_t *allocs)
{
	struct malloc_type *mtp;
	struct malloc_type_stats *mts;
	int64_t bytes = 0, n = 0;
	int cpu;

	/* kmemstatistics, which malloc_desc2type walks, is malloc_mtx's. */
	mtx_lock(&malloc_mtx);
	mtp = malloc_desc2type(desc);
	if (mtp == NULL) {
		mtx_unlock(&malloc_mtx);
		return (-1);
	}
	CPU_FOREACH(cpu) {
		mts = zpcpu_get_cpu(mtp->ks_mti.mti_stats, cpu);
		bytes += (int64_t)mts->mts_memalloced - (int64_t)mts->mts_memfreed;
		n += (int64_t)mts->mts_numallocs - (int64_t)mts->mts_numfrees;
	}
	mtx_unlock(&malloc_mtx);
	*allocs = n;
	return (bytes);
}

struct kldtest_counts {
	int	mbufs;
	int	clusters;
	u_int	wired;
};

static void
kldtest_counts(struct kldtest_counts *c)
{
	uma_reclaim(UMA_RECLAIM_DRAIN_CPU);
	c->mbufs = uma_zone_get_cur(zone_mbuf);
	c->clusters = uma_zone_get_cur(zone_clust);
	c->wired = vm_wire_count();
}

/* The loaded file's global symbol name (it stays loaded while we call it). */
static void *
kldtest_symbol(const char *name)
{
	linker_file_t lf;
	void *p;

	if (linker_reference_module("krpc_rdma", NULL, &lf) != 0)
		return (NULL);
	p = linker_file_lookup_symbol(lf, name, 0);
	linker_release_module(NULL, NULL, lf);
	return (p);
}

static int
kldtest_cycle(int i, struct kldtest_counts *first, char *why, size_t len)
{
	struct kldtest_counts before, after;
	int (*facetest)(void);
	uint64_t (*busy)(uint64_t *, uint64_t *, uint64_t *);
	uint64_t live[3];
	int64_t bytes, allocs;
	int error, fileid, t0, rc;
	u_int k;

	kldtest_counts(&before);
	t0 = ticks;
	error = kern_kldload(curthread, kldtest_path, &fileid);
	if (error != 0) {
		snprintf(why, len, "cycle %d: kern_kldload(%s): error %d", i, kldtest_path, error);
		return (EIO);
	}
	facetest = kldtest_symbol("krpc_facetest_run");
	busy = kldtest_symbol("krpc_rdma_busy");
	rc = 0;
	if (facetest == NULL || busy == NULL) {
		snprintf(why, len, "cycle %d: krpc_facetest_run or krpc_rdma_busy not found "
		    "(not a SELFTEST=1 build?)", i);
		rc = EIO;
	} else if ((error = facetest()) != 0) {
		snprintf(why, len, "cycle %d: the face test failed (rc %d)", i, error);
		rc = EIO;
	} else if (busy(&live[0], &live[1], &live[2]) != 0) {
		snprintf(why, len, "cycle %d: still live before unload: %ju CLIENTs, %ju SVCXPRTs, "
		    "%ju M_EXTPG mbufs", i, (uintmax_t)live[0], (uintmax_t)live[1],
		    (uintmax_t)live[2]);
		rc = EIO;
	}
	for (k = 0; rc == 0 && k < nitems(kldtest_types); k++) {
		bytes = kldtest_inuse(kldtest_types[k], &allocs);
		if (bytes == -1) {
			snprintf(why, len, "cycle %d: no malloc type %s while krpc_rdma.ko is loaded",
			    i, kldtest_types[k]);
			rc = EIO;
		} else if (bytes != 0 || allocs != 0) {
			snprintf(why, len, "cycle %d: malloc type %s: %jd bytes in %jd allocations "
			    "in use before unload", i, kldtest_types[k], (intmax_t)bytes,
			    (intmax_t)allocs);
			rc = EIO;
		}
	}
	error = kern_kldunload(curthread, fileid, LINKER_UNLOAD_NORMAL);
	if (error != 0) {
		if (rc == 0)
			snprintf(why, len, "cycle %d: kern_kldunload: error %d", i, error);
		return (EIO);
	}
	if (rc != 0)
		return (rc);
	kldtest_counts(&after);
	/* The baseline of the page trend: after cycle 2 (cycle 1 warms UMA's and the VM's caches:
	 * its count is below the next ones'). */
	if (i == 2)
		*first = after;
	printf("krpc_rdma kldtest: cycle %d: loaded, face test passed, unloaded in %d ticks; "
	    "mbufs %d -> %d, clusters %d -> %d, wired pages %u -> %u\n", i, ticks - t0,
	    before.mbufs, after.mbufs, before.clusters, after.clusters, before.wired,
	    after.wired);
	if (after.mbufs != before.mbufs || after.clusters != before.clusters) {
		snprintf(why, len, "cycle %d: mbuf zones not back to their counts before the load",
		    i);
		return (EIO);
	}
	return (0);
}

static void
kldtest_thread(void *arg __unused)
{
	struct kldtest_counts first, last;
	char *why;
	time_t start;
	int i, rc = 0;

	why = malloc(256, M_TEMP, M_WAITOK | M_ZERO);
	/* The module file is on the root file system (devfs stands in while it is mounted). */
	while (rootvnode == NULL || rootvnode->v_mount == NULL ||
	    strcmp(rootvnode->v_mount->mnt_stat.f_fstypename, "devfs") == 0)
		pause("kldroot", hz / 10);
	printf("krpc_rdma kldtest: starting: %d load/unload cycles of %s\n", kldtest_cycles,
	    kldtest_path);
	start = time_uptime;
	memset(&first, 0, sizeof(first));
	memset(&last, 0, sizeof(last));
	for (i = 1; i <= kldtest_cycles && rc == 0; i++)
		rc = kldtest_cycle(i, &first, why, 256);
	if (rc == 0 && kldtest_cycles > 2) {
		kldtest_counts(&last);
		if (last.wired > first.wired + 16) {
			snprintf(why, 256, "wired pages grew from %u after cycle 2 to %u after "
			    "cycle %d", first.wired, last.wired, kldtest_cycles);
			rc = EIO;
		}
	}
	if (rc == 0)
		printf("krpc_rdma kldtest: PASS: %d load/unload cycles, each with the face test; "
		    "malloc types empty, mbuf zones back to their counts, wired pages %u after "
		    "cycle 2, %u at the end\n", kldtest_cycles, first.wired, last.wired);
	else
		printf("krpc_rdma kldtest: FAIL: %s\n", why);
	printf("krpc_rdma kldtest: done, rc %d, %jd s\n", rc, (intmax_t)(time_uptime - start));
	free(why, M_TEMP);
	kern_reboot(RB_POWEROFF | RB_NOSYNC);
	kthread_exit();
}

static void
kldtest_start(void *arg __unused)
{
	int error;

	error = kthread_add(kldtest_thread, NULL, NULL, NULL, 0, 0, "krpc_kldtest");
	if (error != 0)
		printf("krpc_rdma kldtest: FAIL: kthread_add: error %d\n", error);
}
SYSINIT(krpc_rdma_kldtest, SI_SUB_LAST, SI_ORDER_ANY, kldtest_start, NULL);

static int
kldtest_modevent(module_t mod __unused, int type, void *data __unused)
{
	return (type == MOD_LOAD || type == MOD_UNLOAD ? 0 : EOPNOTSUPP);
}

static moduledata_t kldtest_mod = {
	"krpc_rdma_kldtest",
	kldtest_modevent,
	NULL,
};
DECLARE_MODULE(krpc_rdma_kldtest, kldtest_mod, SI_SUB_VFS, SI_ORDER_ANY);
MODULE_VERSION(krpc_rdma_kldtest, 1);
