/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma: FreeBSD's side of the in-kernel self-test (ofed-shim/ofed-testkit/src/selftest.rs,
 * the scenario suite the Linux module runs with selftest=1). Only in a krpc_rdma.ko built with
 * SELFTEST=1 (`cargo xtask freebsd-kmod`, whose Rust object carries krpc_rdma_selftest).
 *
 *   loader tunable krpc_rdma.selftest=1
 *       at load, a kernel thread runs the self-test over the soft provider with pages from
 *       vm_page_alloc_noobj (krpc_rdma_bsd.c) and prints its report lines on the console
 *       ("krpc_rdma selftest: PASS: ..." or "... FAIL: ...", then the summary);
 *   krpc_rdma.selftest_poweroff=1
 *       then powers the machine off (the test VM has no userland to do it);
 *   krpc_rdma.selftest_verbose=1
 *       logs every scenario of a fixture as it starts;
 *   krpc_rdma.facetest=0
 *       skips the face test that follows the self-test (krpc_rdma_bsd_facetest.c: clnt_rdma
 *       and svc_rdma against FreeBSD's own svc.c, CLIENT calls and mbufs).
 *
 * The kernel-verbs fixture is not run here: FreeBSD has no software RDMA device (the Linux
 * module runs it over rxe0).
 *
 * Also the self-test's sleeping wait (krpc_ofed_wake/wake_gen/wait_gen): completion and CM
 * upcalls bump a generation and wake its sleepers; a waiter sleeps until the generation moves
 * or a timeout.
 */
#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/kthread.h>
#include <sys/lock.h>
#include <sys/malloc.h>
#include <sys/mutex.h>
#include <sys/proc.h>
#include <sys/reboot.h>
#include <sys/time.h>

/* Exported by the Rust object (ofed-shim/ofed-testkit/src/selftest.rs). */
int krpc_rdma_selftest(char *report, size_t len, uint32_t rdma_addr_be);
/* The krpc face against FreeBSD's own krpc (krpc_rdma_bsd_facetest.c). */
int krpc_facetest_run(void);

/* Called by the Rust object (ofed-shim/ofed-testkit/src/selftest/kverbs.rs). */
void krpc_ofed_wake(void *arg);
uint64_t krpc_ofed_wake_gen(void);
int krpc_ofed_wait_gen(uint64_t gen, uint32_t ms);
void krpc_selftest_log(int verbose, const uint8_t *msg, size_t len);

static MALLOC_DEFINE(M_KRPC_SELFTEST, "krpc_rdma_selftest", "krpc-rdma self-test report");

static int krpc_selftest_on;
static int krpc_selftest_poweroff;
static int krpc_selftest_verbose;
TUNABLE_INT("krpc_rdma.selftest", &krpc_selftest_on);
TUNABLE_INT("krpc_rdma.selftest_poweroff", &krpc_selftest_poweroff);
TUNABLE_INT("krpc_rdma.selftest_verbose", &krpc_selftest_verbose);

/* Report lines of at most ~900 bytes each, as on Linux. */
#define KRPC_REPORT_LEN 4096

static struct mtx krpc_wake_mtx;
MTX_SYSINIT(krpc_wake_mtx, &krpc_wake_mtx, "krpc_rdma selftest wake", MTX_DEF);
static uint64_t krpc_wake_generation;

void
krpc_ofed_wake(void *arg __unused)
{
	mtx_lock(&krpc_wake_mtx);
	krpc_wake_generation++;
	wakeup(&krpc_wake_generation);
	mtx_unlock(&krpc_wake_mtx);
}

uint64_t
krpc_ofed_wake_gen(void)
{
	uint64_t gen;

	mtx_lock(&krpc_wake_mtx);
	gen = krpc_wake_generation;
	mtx_unlock(&krpc_wake_mtx);
	return (gen);
}

/* Thread context: sleep until the generation is not `gen` or `ms` passed; 1 if it moved. */
int
krpc_ofed_wait_gen(uint64_t gen, uint32_t ms)
{
	int moved, timo;

	timo = (int)MAX(1, (uint64_t)ms * (uint64_t)hz / 1000);
	mtx_lock(&krpc_wake_mtx);
	if (krpc_wake_generation == gen)
		(void)msleep(&krpc_wake_generation, &krpc_wake_mtx, 0, "krpcst", timo);
	moved = krpc_wake_generation != gen;
	mtx_unlock(&krpc_wake_mtx);
	return (moved);
}

/* A line of the self-test's log (a failed scenario; with verbose, progress). */
void
krpc_selftest_log(int verbose, const uint8_t *msg, size_t len)
{
	if (verbose && !krpc_selftest_verbose)
		return;
	printf("krpc_rdma selftest: %.*s\n", (int)MIN(len, 900), (const char *)msg);
}

static void
krpc_selftest_thread(void *arg __unused)
{
	char *report, *line, *next;
	time_t start;
	int rc;

	report = malloc(KRPC_REPORT_LEN, M_KRPC_SELFTEST, M_WAITOK | M_ZERO);
	printf("krpc_rdma selftest: starting (soft provider, kernel pages)\n");
	start = time_uptime;
	rc = krpc_rdma_selftest(report, KRPC_REPORT_LEN, 0);
	/* One printf per line: the console's line buffer is PRINTF_BUFR_SIZE-sized pieces. */
	for (line = report; line != NULL && *line != '\0'; line = next) {
		next = strchr(line, '\n');
		if (next != NULL)
			*next++ = '\0';
		printf("%s\n", line);
	}
	printf("krpc_rdma selftest: done, rc %d, %jd s\n", rc, (intmax_t)(time_uptime - start));
	free(report, M_KRPC_SELFTEST);
	start = time_uptime;
	rc = krpc_facetest_run();
	printf("krpc_rdma facetest: done, rc %d, %jd s\n", rc, (intmax_t)(time_uptime - start));
	/* Nothing to sync: the test VM has no file system. */
	if (krpc_selftest_poweroff)
		kern_reboot(RB_POWEROFF | RB_NOSYNC);
	kthread_exit();
}

static void
krpc_selftest_start(void *arg __unused)
{
	int error;

	if (!krpc_selftest_on)
		return;
	error = kthread_add(krpc_selftest_thread, NULL, NULL, NULL, 0, 0, "krpc_selftest");
	if (error != 0)
		printf("krpc_rdma selftest: FAIL: kthread_add: error %d\n", error);
}
/* After the module's MOD_LOAD (SI_SUB_VFS), once kernel threads run. */
SYSINIT(krpc_rdma_selftest, SI_SUB_LAST, SI_ORDER_ANY, krpc_selftest_start, NULL);
