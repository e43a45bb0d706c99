// SPDX-License-Identifier: BSD-2-Clause
/*
 * krpc_rdma.ko, Linux glue: module init/exit, the hooks the Rust staticlib (ofed-shim, made
 * relocation-clean by `cargo xtask kobj`) and the shared verbs wrapper (../c/krpc_rdma_ofed.c,
 * compiled here against Linux's in-kernel verbs through krpc_ofed_kpi_linux.h) call, and the
 * in-kernel self-test's triggers.
 *
 * Hooks (declared in ../c/krpc_rdma_ofed.h, the same boundary as FreeBSD's
 * krpc_rdma_ofed.c):
 *   krpc_ofed_malloc/free   kvmalloc/kvfree. The Rust global allocator always asks
 *                           KRPC_M_NOWAIT ("must not sleep"): in atomic context (preempt
 *                           count raised or interrupts off) that is GFP_ATOMIC; in process
 *                           context the allocation may sleep (GFP_KERNEL, and vmalloc for
 *                           large blocks), as no caller holds a spinlock there.
 *   krpc_ofed_panic         panic("%.*s"): a Rust panic (the staticlib's #[panic_handler]).
 *   krpc_ofed_page_*        page mbufs' pages over struct page: a page's address on the Rust
 *                           side is its physical address (page_to_phys), as FreeBSD's
 *                           VM_PAGE_TO_PHYS, and what the verbs wrappers put into SGEs;
 *                           references are get_page/put_page; the bytes are reached through
 *                           the direct map (page_address; every page is lowmem on x86_64).
 *   krpc_ofed_wake/wake_gen/wait_gen
 *                           the self-test's sleeping wait (Linux module only): the CQ
 *                           completion and CM upcalls bump a generation and wake a wait
 *                           queue; the waiter sleeps until the generation moves or a timeout.
 *
 * Every allocation and page reference is counted, and so are the verbs objects the wrapper
 * owns (cm ids, PDs, CQs, QPs, MRs, DMA mappings); unload reports what is left (pr_err).
 *
 * Self-test (ofed-shim/ofed-testkit/src/selftest.rs, built by `cargo xtask kmod`):
 *   insmod krpc_rdma.ko selftest=1 rdma_addr=10.0.2.15
 *                                       run it at load; the report lines go to the kernel
 *                                       log; a failure fails the load (-EIO). rdma_addr: the
 *                                       IPv4 address of an RDMA device's netdev (rxe0's):
 *                                       the suite also runs over the kernel's verbs there
 *                                       (loopback through rdma_cm); empty: soft provider only
 *   cat /sys/kernel/debug/krpc_rdma/selftest
 *                                       run it again; the report lines are the file's content
 *
 * The stack: the self-test and the peer runs run on the calling task's own kernel stack
 * (THREAD_SIZE, 16 KiB on x86-64): every frame of the Rust object is at most 1 KiB
 * (krpc-rdma/benches/stack.sh). The run reports the deepest byte of that stack it touched:
 * the free part below the current stack pointer (from just above the STACK_END_MAGIC word
 * to 1 KiB below RSP) is filled with a pattern before the run and scanned after it, the
 * kernel's stack_not_used() method without CONFIG_DEBUG_STACK_USAGE. selftest_stack_kib=N
 * (N >= 4) runs it on a private vmalloc'd stack of N KiB instead, switched to as the kernel
 * switches to its IRQ stacks (call_on_stack in asm/irq_stack.h), measured the same way.
 */
#include <linux/atomic.h>
#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/inet.h>
#include <linux/kthread.h>
#include <linux/random.h>
#include <linux/sched/task.h>
#include <linux/timekeeping.h>
#include <linux/wait.h>
#include <linux/fs.h>
#include <linux/kernel.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/preempt.h>
#include <linux/sched/task_stack.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/vmalloc.h>
#include <asm/asm.h>
#include <asm/io.h>

#include "krpc_rdma_ofed.h"

/* Exported by the Rust object (ofed-shim/src/lib.rs, ofed-shim/ofed-testkit/src/selftest.rs). */
uint32_t krpc_rdma_shim_abi_version(void);
int krpc_rdma_selftest(char *report, size_t len, uint32_t rdma_addr_be);
int krpc_rdma_peer(char *report, size_t len, uint32_t kind, uint32_t addr_be, uint32_t port,
    uint32_t conns, const uint8_t *fh, size_t fh_len, uint32_t mib);

/* The in-kernel NFSv3 server (ofed-shim/kernel-nfsd/src/lib.rs). */
struct krpc_nfsd_config {
	uint8_t addr[4];
	uint32_t port;
	uint32_t mib;
	uint32_t max_conns;
	uint32_t no_root_squash;
	uint32_t instance;
};
int krpc_nfsd_start(const struct krpc_nfsd_config *cfg, uint8_t *fh_hex, size_t len);
void krpc_nfsd_stop(void);
size_t krpc_nfsd_report(uint8_t *buf, size_t len);

/* The sleeping wait of every kernel user of a queue pair (ofed-shim/src/wait.rs). */
void krpc_ofed_wake(void *arg);
uint64_t krpc_ofed_wake_gen(void);
int krpc_ofed_wait_gen(uint64_t gen, uint32_t ms);
void krpc_selftest_log(int verbose, const uint8_t *msg, size_t len);

/* Lines of at most ~900 bytes each (printk's limit is 1024 with the prefix). */
#define KRPC_REPORT_LEN 4096

static bool selftest;
module_param(selftest, bool, 0444);
MODULE_PARM_DESC(selftest, "run the in-kernel self-test at load (a failure fails the load)");

static unsigned int selftest_stack_kib;
module_param(selftest_stack_kib, uint, 0644);
MODULE_PARM_DESC(selftest_stack_kib,
    "0 (default): run the self-test on the task's own kernel stack; N: on a private stack of N KiB");

static bool selftest_verbose;
module_param(selftest_verbose, bool, 0644);
MODULE_PARM_DESC(selftest_verbose, "log every scenario of the kernel-verbs fixture as it starts");

static char *rdma_addr = "";
module_param(rdma_addr, charp, 0644);
MODULE_PARM_DESC(rdma_addr,
    "IPv4 address of an RDMA device (rxe0's netdev): the self-test also runs over the kernel's verbs there");

static char *peer = "";
module_param(peer, charp, 0644);
MODULE_PARM_DESC(peer,
    "a run against a real peer at load (a failure fails the load): harness-server (our Requester against `userspace-harness server` at rdma_addr:peer_port), harness-client (our Responder serving the harness program to `userspace-harness client` on rdma_addr:peer_port), knfsd (our Requester speaking NFSv3 to knfsd at rdma_addr:peer_port, root handle nfs_fh)");

static unsigned int peer_port = 20049;
module_param(peer_port, uint, 0644);
MODULE_PARM_DESC(peer_port, "the peer run's port (the server's, or ours for harness-client)");

static unsigned int peer_conns = 1;
module_param(peer_conns, uint, 0644);
MODULE_PARM_DESC(peer_conns, "harness-client: connections to serve before the run ends");

static unsigned int peer_mib = 256;
module_param(peer_mib, uint, 0644);
MODULE_PARM_DESC(peer_mib, "knfsd-bench-*: MiB moved (NULL: thousands of calls)");

static char *nfs_fh = "";
module_param(nfs_fh, charp, 0644);
MODULE_PARM_DESC(nfs_fh, "knfsd: the export's root file handle, in hex (from userspace MOUNT)");

static bool nfsd;
module_param(nfsd, bool, 0444);
MODULE_PARM_DESC(nfsd,
    "serve NFSv3 over RDMA from kernel memory on rdma_addr:nfsd_port until unload (MOUNT: `userspace-harness mountd` with nfsd_root_fh)");

static unsigned int nfsd_port = 20050;
module_param(nfsd_port, uint, 0444);
MODULE_PARM_DESC(nfsd_port, "nfsd: the RDMA port (default 20050; knfsd's listener may hold 20049)");

static unsigned int nfsd_mib = 512;
module_param(nfsd_mib, uint, 0444);
MODULE_PARM_DESC(nfsd_mib, "nfsd: the file system's size in MiB (file data and metadata)");

static unsigned int nfsd_conns = 16;
module_param(nfsd_conns, uint, 0444);
MODULE_PARM_DESC(nfsd_conns, "nfsd: connections served at once, at most");

static bool nfsd_no_root_squash;
module_param(nfsd_no_root_squash, bool, 0444);
MODULE_PARM_DESC(nfsd_no_root_squash,
    "nfsd: do not map root to 65534 (knfsd's no_root_squash; the default squashes, as knfsd)");

static char nfsd_root_fh[132];
module_param_string(nfsd_root_fh, nfsd_root_fh, sizeof(nfsd_root_fh), 0444);
MODULE_PARM_DESC(nfsd_root_fh, "nfsd: the root file handle, in hex (read-only: set at load)");

/* Counters: live allocations and page references now, totals since load. */
static atomic_long_t krpc_allocs_live = ATOMIC_LONG_INIT(0);
static atomic_long_t krpc_allocs_total = ATOMIC_LONG_INIT(0);
static atomic_long_t krpc_allocs_atomic = ATOMIC_LONG_INIT(0);
static atomic_long_t krpc_allocs_failed = ATOMIC_LONG_INIT(0);
static atomic_long_t krpc_allocs_misaligned = ATOMIC_LONG_INIT(0);
static atomic_long_t krpc_page_refs_live = ATOMIC_LONG_INIT(0);
static atomic_long_t krpc_pages_total = ATOMIC_LONG_INIT(0);
static atomic_long_t krpc_page_bad = ATOMIC_LONG_INIT(0);

static bool krpc_may_sleep(void)
{
	/* preemptible(): preempt count 0 and interrupts on (Debian's 6.1 has PREEMPT_COUNT
	 * through PREEMPT_DYNAMIC; without it preemptible() is 0 and we always say no). */
	return preemptible();
}

void *krpc_ofed_malloc(size_t size, int flags)
{
	gfp_t gfp;
	void *p;

	if ((flags & KRPC_M_NOWAIT) && !krpc_may_sleep()) {
		gfp = GFP_ATOMIC;
		atomic_long_inc(&krpc_allocs_atomic);
	} else {
		gfp = GFP_KERNEL;
	}
	if (flags & KRPC_M_ZERO)
		gfp |= __GFP_ZERO;
	/* kvmalloc falls back to vmalloc only for GFP_KERNEL; for GFP_ATOMIC it is kmalloc. */
	p = kvmalloc(size ? size : 1, gfp);
	if (!p) {
		atomic_long_inc(&krpc_allocs_failed);
		return NULL;
	}
	/*
	 * The Rust allocator relies on the alignment of its layout for align <= 16; a layout's
	 * size is a multiple of its alignment, so the most it can need is the lowest set bit
	 * of the size, at most 16 (kmalloc's power-of-two caches are naturally aligned).
	 */
	if ((uintptr_t)p & (min_t(size_t, 16, (size ? size : 1) & -(size ? size : 1)) - 1))
		atomic_long_inc(&krpc_allocs_misaligned);
	atomic_long_inc(&krpc_allocs_live);
	atomic_long_inc(&krpc_allocs_total);
	return p;
}

void krpc_ofed_free(void *p)
{
	if (!p)
		return;
	atomic_long_dec(&krpc_allocs_live);
	kvfree(p);
}

void krpc_ofed_panic(const uint8_t *msg, size_t len)
{
	panic("%.*s", (int)len, (const char *)msg);
}

/* The struct page of one of our page addresses, or NULL. */
static struct page *krpc_pa_page(uint64_t pa)
{
	if (pa & ~PAGE_MASK)
		return NULL;
	if (!pfn_valid(PHYS_PFN(pa)))
		return NULL;
	return pfn_to_page(PHYS_PFN(pa));
}

int krpc_ofed_page_alloc(uint64_t *pa)
{
	gfp_t gfp = (krpc_may_sleep() ? GFP_KERNEL : GFP_ATOMIC) | __GFP_ZERO;
	struct page *pg = alloc_page(gfp);

	if (!pg)
		return -ENOMEM;
	*pa = page_to_phys(pg);
	atomic_long_inc(&krpc_page_refs_live);
	atomic_long_inc(&krpc_pages_total);
	return 0;
}

int krpc_ofed_page_ref(uint64_t pa)
{
	struct page *pg = krpc_pa_page(pa);

	if (!pg || page_count(pg) == 0) {
		atomic_long_inc(&krpc_page_bad);
		return -EINVAL;
	}
	get_page(pg);
	atomic_long_inc(&krpc_page_refs_live);
	return 0;
}

void krpc_ofed_page_unref(uint64_t pa)
{
	struct page *pg = krpc_pa_page(pa);

	if (!pg || page_count(pg) == 0) {
		atomic_long_inc(&krpc_page_bad);
		pr_warn_once("krpc_rdma: unref of an unknown page %llx\n", (unsigned long long)pa);
		return;
	}
	atomic_long_dec(&krpc_page_refs_live);
	put_page(pg);
}

uint8_t *krpc_ofed_page_kva(uint64_t pa)
{
	struct page *pg = krpc_pa_page(pa);

	return pg ? page_address(pg) : NULL;
}

/* ---- sleeping wait ------------------------------------------------------------------ */

static DECLARE_WAIT_QUEUE_HEAD(krpc_wait_queue);
static atomic64_t krpc_wake_generation = ATOMIC64_INIT(0);

/* Any context (CQ completion handler: softirq or hardirq; CM handler: process). */
void krpc_ofed_wake(void *arg)
{
	atomic64_inc(&krpc_wake_generation);
	wake_up_all(&krpc_wait_queue);
}

uint64_t krpc_ofed_wake_gen(void)
{
	return (uint64_t)atomic64_read(&krpc_wake_generation);
}

/* Process context: sleep until the generation is not `gen` or `ms` passed; 1 if woken. */
int krpc_ofed_wait_gen(uint64_t gen, uint32_t ms)
{
	return wait_event_timeout(krpc_wait_queue,
	    (uint64_t)atomic64_read(&krpc_wake_generation) != gen,
	    msecs_to_jiffies(ms)) > 0;
}

uint64_t krpc_monotonic_ns(void)
{
	return ktime_get_ns();
}

/* ---- kernel services of the NFS server (ofed-shim/kernel-nfsd/src/sys.rs) ----------- */

void *krpc_mutex_new(void)
{
	struct mutex *m = kmalloc(sizeof(*m), GFP_KERNEL);

	if (m)
		mutex_init(m);
	return m;
}

void krpc_mutex_lock(void *m)
{
	mutex_lock(m);
}

void krpc_mutex_unlock(void *m)
{
	mutex_unlock(m);
}

void krpc_mutex_free(void *m)
{
	mutex_destroy(m);
	kfree(m);
}

/* A kernel thread running fn(arg), with a reference on its task for krpc_kthread_stop. */
void *krpc_kthread_run(int (*fn)(void *), void *arg, const char *name)
{
	struct task_struct *t = kthread_create(fn, arg, "%s", name);

	if (IS_ERR(t))
		return NULL;
	get_task_struct(t);
	wake_up_process(t);
	return t;
}

int krpc_kthread_should_stop(void)
{
	return kthread_should_stop();
}

/* Ask the thread to stop, wait for it to end (it may have ended already), drop the task. */
int krpc_kthread_stop(void *t)
{
	int rc = kthread_stop(t);

	put_task_struct(t);
	return rc;
}

void krpc_wall_clock(int64_t *sec, uint32_t *nsec)
{
	struct timespec64 ts;

	ktime_get_real_ts64(&ts);
	*sec = ts.tv_sec;
	*nsec = (uint32_t)ts.tv_nsec;
}

int krpc_module_get(void)
{
	return try_module_get(THIS_MODULE);
}

void krpc_module_put(void)
{
	module_put(THIS_MODULE);
}

/* A line of the self-test's log (a failed scenario; with verbose, progress). */
void krpc_selftest_log(int verbose, const uint8_t *msg, size_t len)
{
	if (verbose && !selftest_verbose)
		return;
	pr_info("krpc_rdma selftest: %.*s\n", (int)min_t(size_t, len, 900), (const char *)msg);
}

/* ---- self-test ---------------------------------------------------------------------- */

static DEFINE_MUTEX(krpc_selftest_lock);

#define KRPC_STACK_FILL 0x5a

/* What runs on the private stack: the self-test or a peer run, with its arguments. */
struct krpc_stack_call {
	char *buf;
	uint32_t addr;
	uint32_t peer_kind; /* 0: the self-test */
	uint32_t port;
	uint32_t conns;
	const uint8_t *fh;
	size_t fh_len;
	uint32_t mib;
};

/* The function called on the private stack (one argument: the call); global, as the asm
 * below calls it by name. */
__visible int krpc_stack_entry(struct krpc_stack_call *c);
__visible int krpc_stack_entry(struct krpc_stack_call *c)
{
	if (c->peer_kind == 0)
		return krpc_rdma_selftest(c->buf, KRPC_REPORT_LEN, c->addr);
	return krpc_rdma_peer(c->buf, KRPC_REPORT_LEN, c->peer_kind, c->addr, c->port, c->conns,
	    c->fh, c->fh_len, c->mib);
}

/*
 * krpc_stack_entry(c) with RSP at `tos` (16-byte aligned, 8 writable bytes at it): the old
 * RSP is stored at tos, the call runs below it, `popq %rsp` restores it. The same sequence
 * as the kernel's call_on_stack (arch/x86/include/asm/irq_stack.h).
 */
static int krpc_selftest_on_stack(void *tos, struct krpc_stack_call *c)
{
	register void *t asm("r11") = tos;
	register struct krpc_stack_call *a1 asm("rdi") = c;
	int rc;

	asm volatile(
		"movq	%%rsp, (%[tos])\n\t"
		"movq	%[tos], %%rsp\n\t"
		"call	krpc_stack_entry\n\t"
		"popq	%%rsp\n\t"
		: "=a" (rc), [tos] "+r" (t), "+D" (a1),
		  ASM_CALL_CONSTRAINT
		:
		: "cc", "rcx", "rdx", "rsi", "r8", "r9", "r10", "memory");
	return rc;
}

/*
 * Run the call on the task's own stack, measured: the free part of the stack (above the
 * STACK_END_MAGIC word at its end, up to KRPC_STACK_MARGIN below our stack pointer: room
 * for memset's own frame) is filled with KRPC_STACK_FILL first and scanned after the run;
 * `*peak` gets the bytes from the stack's top to the deepest byte touched (the whole depth:
 * the syscall entry, insmod's or read's path, and the run), `*size` THREAD_SIZE.
 */
#define KRPC_STACK_MARGIN 1024
static noinline int krpc_selftest_on_task_stack(struct krpc_stack_call *c, size_t *peak,
    size_t *size)
{
	unsigned char *base = task_stack_page(current);
	unsigned char *lo = (unsigned char *)(end_of_stack(current) + 1);
	unsigned char *hi = (unsigned char *)current_stack_pointer - KRPC_STACK_MARGIN;
	unsigned char *p;
	int rc;

	*size = THREAD_SIZE;
	*peak = 0;
	if (hi <= lo)
		return krpc_stack_entry(c);
	memset(lo, KRPC_STACK_FILL, hi - lo);
	rc = krpc_stack_entry(c);
	for (p = lo; p < hi && *p == KRPC_STACK_FILL; p++)
		;
	*peak = base + THREAD_SIZE - p;
	return rc;
}

/* Run the call on the task's stack (selftest_stack_kib 0) or on a private stack of
 * selftest_stack_kib KiB; `*peak` gets the bytes of the stack the run touched, `*size` the
 * stack's size. */
static int krpc_selftest_call(struct krpc_stack_call *c, size_t *peak, size_t *size)
{
	size_t sz = (size_t)selftest_stack_kib * 1024;
	unsigned char *stack;
	size_t i;
	int rc;

	*peak = 0;
	*size = sz;
	if (sz == 0)
		return krpc_selftest_on_task_stack(c, peak, size);
	if (sz < PAGE_SIZE)
		return -EINVAL;
	stack = vmalloc(sz);
	if (!stack)
		return -ENOMEM;
	memset(stack, KRPC_STACK_FILL, sz);
	rc = krpc_selftest_on_stack(stack + sz - 16, c);
	for (i = 0; i < sz && stack[i] == KRPC_STACK_FILL; i++)
		;
	*peak = sz - i;
	vfree(stack);
	return rc;
}

/* Run the self-test (c->peer_kind 0) or a peer run; the report lines in c->buf
 * (KRPC_REPORT_LEN bytes). */
static int krpc_run_on_stack(struct krpc_stack_call *c)
{
	char *buf = c->buf;
	long allocs = atomic_long_read(&krpc_allocs_live);
	long refs = atomic_long_read(&krpc_page_refs_live);
	size_t peak, size, n;
	uint32_t addr = 0;
	char *line, *rest;
	int rc;

	if (rdma_addr && rdma_addr[0] && !in4_pton(rdma_addr, -1, (u8 *)&addr, -1, NULL)) {
		snprintf(buf, KRPC_REPORT_LEN, "krpc_rdma %s: FAIL: rdma_addr=%s is not an IPv4 address",
		    c->peer_kind ? "peer" : "selftest", rdma_addr);
		pr_err("%s\n", buf);
		return -EINVAL;
	}
	c->addr = addr;
	mutex_lock(&krpc_selftest_lock);
	rc = krpc_selftest_call(c, &peak, &size);
	mutex_unlock(&krpc_selftest_lock);
	buf[KRPC_REPORT_LEN - 1] = '\0';
	n = strnlen(buf, KRPC_REPORT_LEN);
	snprintf(buf + n, KRPC_REPORT_LEN - n, "; stack used %zu of %zu bytes (%s)", peak, size,
	    selftest_stack_kib ? "private" : "task stack");
	if (rc == 0 && (atomic_long_read(&krpc_allocs_live) != allocs ||
	    atomic_long_read(&krpc_page_refs_live) != refs)) {
		pr_err("krpc_rdma: %s left %ld allocations, %ld page references\n",
		    c->peer_kind ? "peer run" : "self-test",
		    atomic_long_read(&krpc_allocs_live) - allocs,
		    atomic_long_read(&krpc_page_refs_live) - refs);
		rc = -EIO;
	}
	/* One printk per line of the report (the buffer is restored afterwards). */
	for (line = buf; line; line = rest) {
		rest = strchr(line, '\n');
		if (rest)
			*rest = '\0';
		if (rc == 0)
			pr_info("%s\n", line);
		else
			pr_err("%s (rc %d)\n", line, rc);
		if (rest)
			*rest++ = '\n';
	}
	return rc;
}

/* The self-test; its report lines in `buf` (KRPC_REPORT_LEN bytes). */
static int krpc_run_selftest(char *buf)
{
	struct krpc_stack_call c = { .buf = buf };

	return krpc_run_on_stack(&c);
}

static struct dentry *krpc_debugfs_dir;

static ssize_t krpc_selftest_read(struct file *f, char __user *ubuf, size_t count, loff_t *ppos)
{
	char *buf;
	ssize_t n;
	size_t len;

	/* One run per open file, at its first read. */
	if (*ppos != 0 && f->private_data == NULL)
		return 0;
	if (f->private_data == NULL) {
		buf = kzalloc(KRPC_REPORT_LEN + 2, GFP_KERNEL);
		if (!buf)
			return -ENOMEM;
		krpc_run_selftest(buf);
		len = strnlen(buf, KRPC_REPORT_LEN);
		buf[len] = '\n';
		buf[len + 1] = '\0';
		f->private_data = buf;
	}
	buf = f->private_data;
	n = simple_read_from_buffer(ubuf, count, ppos, buf, strlen(buf));
	return n;
}

static int krpc_selftest_release(struct inode *inode, struct file *f)
{
	kfree(f->private_data);
	return 0;
}

static const struct file_operations krpc_selftest_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.read = krpc_selftest_read,
	.release = krpc_selftest_release,
	.llseek = default_llseek,
};

static ssize_t krpc_nfsd_read(struct file *f, char __user *ubuf, size_t count, loff_t *ppos)
{
	char *buf = kzalloc(KRPC_REPORT_LEN, GFP_KERNEL);
	ssize_t n;
	size_t len;

	if (!buf)
		return -ENOMEM;
	len = krpc_nfsd_report((uint8_t *)buf, KRPC_REPORT_LEN);
	n = simple_read_from_buffer(ubuf, count, ppos, buf, len);
	kfree(buf);
	return n;
}

static const struct file_operations krpc_nfsd_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.read = krpc_nfsd_read,
	.llseek = default_llseek,
};

/* The NFS server `nfsd=1` asks for; 0 when none or when it started. */
static int krpc_start_nfsd(void)
{
	struct krpc_nfsd_config c = {
		.port = nfsd_port,
		.mib = nfsd_mib,
		.max_conns = nfsd_conns,
		.no_root_squash = nfsd_no_root_squash,
		.instance = get_random_u32(),
	};
	int rc;

	if (!nfsd)
		return 0;
	if (!rdma_addr || !in4_pton(rdma_addr, -1, c.addr, -1, NULL)) {
		pr_err("krpc_rdma nfsd: FAIL: nfsd=1 needs rdma_addr= (an IPv4 address of an RDMA device)\n");
		return -EINVAL;
	}
	rc = krpc_nfsd_start(&c, (uint8_t *)nfsd_root_fh, sizeof(nfsd_root_fh));
	if (rc)
		pr_err("krpc_rdma nfsd: FAIL: cannot serve on %pI4:%u (%d)\n", c.addr, nfsd_port, rc);
	else
		pr_info("krpc_rdma nfsd: serving NFSv3 on %pI4:%u, %u MiB, at most %u connections, root %s, root handle %s\n",
		    c.addr, nfsd_port, nfsd_mib, nfsd_conns,
		    nfsd_no_root_squash ? "not squashed" : "squashed to 65534", nfsd_root_fh);
	return rc;
}

/* The run `peer=` asks for, at load; 0 when none or when it passed. */
static int krpc_run_peer(void)
{
	struct krpc_stack_call c = { .port = peer_port, .conns = peer_conns, .mib = peer_mib };
	uint8_t fh[64];
	size_t n = 0, i;
	int rc;

	if (!peer || !peer[0])
		return 0;
	if (!strcmp(peer, "harness-server"))
		c.peer_kind = 1;
	else if (!strcmp(peer, "harness-client"))
		c.peer_kind = 2;
	else if (!strcmp(peer, "knfsd"))
		c.peer_kind = 3;
	else if (!strcmp(peer, "knfsd-bench-write"))
		c.peer_kind = 4;
	else if (!strcmp(peer, "knfsd-bench-read"))
		c.peer_kind = 5;
	else if (!strcmp(peer, "knfsd-bench-null"))
		c.peer_kind = 6;
	else {
		pr_err("krpc_rdma peer: FAIL: peer=%s: expected harness-server, harness-client, knfsd or knfsd-bench-{write,read,null}\n",
		    peer);
		return -EINVAL;
	}
	if (!rdma_addr || !rdma_addr[0] || peer_port == 0 || peer_port > 65535) {
		pr_err("krpc_rdma peer: FAIL: peer=%s needs rdma_addr= and peer_port= (1..65535)\n",
		    peer);
		return -EINVAL;
	}
	if (nfs_fh) {
		size_t len = strlen(nfs_fh);

		if (len % 2 || len / 2 > sizeof(fh)) {
			pr_err("krpc_rdma peer: FAIL: nfs_fh: an even number of hex digits, at most %zu bytes\n",
			    sizeof(fh));
			return -EINVAL;
		}
		for (i = 0; i < len; i += 2) {
			int hi = hex_to_bin(nfs_fh[i]), lo = hex_to_bin(nfs_fh[i + 1]);

			if (hi < 0 || lo < 0) {
				pr_err("krpc_rdma peer: FAIL: nfs_fh is not hex\n");
				return -EINVAL;
			}
			fh[n++] = (uint8_t)(hi << 4 | lo);
		}
	}
	c.fh = fh;
	c.fh_len = n;
	c.buf = kzalloc(KRPC_REPORT_LEN, GFP_KERNEL);
	if (!c.buf)
		return -ENOMEM;
	rc = krpc_run_on_stack(&c);
	kfree(c.buf);
	return rc;
}

/* ---- module ------------------------------------------------------------------------- */

static void krpc_report_counters(const char *when)
{
	long allocs = atomic_long_read(&krpc_allocs_live);
	long refs = atomic_long_read(&krpc_page_refs_live);
	long bad = atomic_long_read(&krpc_page_bad);
	long misaligned = atomic_long_read(&krpc_allocs_misaligned);
	struct krpc_ofed_counts v;
	uint64_t verbs;

	krpc_ofed_get_counts(&v);
	verbs = v.cm_ids_live | v.pds_live | v.cqs_live | v.qps_live | v.mrs_live |
	    v.dma_maps_live;
	if (allocs || refs || bad || misaligned || verbs)
		pr_err("krpc_rdma: %s: LEAK/MISUSE: %ld allocations and %ld page references outstanding, %ld bad page operations, %ld misaligned allocations; verbs objects live: cm ids %lld, pds %lld, cqs %lld, qps %lld, mrs %lld, dma maps %lld\n",
		    when, allocs, refs, bad, misaligned, (long long)v.cm_ids_live,
		    (long long)v.pds_live, (long long)v.cqs_live, (long long)v.qps_live,
		    (long long)v.mrs_live, (long long)v.dma_maps_live);
	else
		pr_info("krpc_rdma: %s: 0 allocations and 0 page references outstanding, 0 cm ids, pds, cqs, qps, mrs and dma maps live (%ld allocations, %ld atomic, %ld failed, %ld pages, %llu REG_MR, %llu LOCAL_INV since load)\n",
		    when, atomic_long_read(&krpc_allocs_total),
		    atomic_long_read(&krpc_allocs_atomic),
		    atomic_long_read(&krpc_allocs_failed),
		    atomic_long_read(&krpc_pages_total),
		    (unsigned long long)v.reg_mrs, (unsigned long long)v.local_invs);
}

static int __init krpc_rdma_init(void)
{
	char *buf;
	int rc = 0;

	if (krpc_rdma_shim_abi_version() != KRPC_OFED_ABI_VERSION) {
		pr_err("krpc_rdma: Rust shim ABI %u, C glue ABI %u: refusing to load\n",
		    krpc_rdma_shim_abi_version(), KRPC_OFED_ABI_VERSION);
		return -EINVAL;
	}
	if (selftest) {
		buf = kzalloc(KRPC_REPORT_LEN, GFP_KERNEL);
		if (!buf)
			return -ENOMEM;
		rc = krpc_run_selftest(buf);
		kfree(buf);
		if (rc != 0) {
			krpc_report_counters("failed load");
			return -EIO;
		}
	}
	rc = krpc_run_peer();
	if (rc != 0) {
		krpc_report_counters("failed load");
		return rc == -EINVAL ? rc : -EIO;
	}
	rc = krpc_start_nfsd();
	if (rc != 0) {
		krpc_report_counters("failed load");
		return rc;
	}
	krpc_debugfs_dir = debugfs_create_dir("krpc_rdma", NULL);
	debugfs_create_file("selftest", 0400, krpc_debugfs_dir, NULL, &krpc_selftest_fops);
	debugfs_create_file("nfsd", 0400, krpc_debugfs_dir, NULL, &krpc_nfsd_fops);
	pr_info("krpc_rdma: loaded (Rust shim ABI %u)\n", krpc_rdma_shim_abi_version());
	return 0;
}

static void __exit krpc_rdma_exit(void)
{
	char *buf;

	debugfs_remove_recursive(krpc_debugfs_dir);
	if (nfsd) {
		buf = kzalloc(KRPC_REPORT_LEN, GFP_KERNEL);
		if (buf) {
			krpc_nfsd_report((uint8_t *)buf, KRPC_REPORT_LEN);
			pr_info("%s", buf);
			kfree(buf);
		}
		krpc_nfsd_stop();
	}
	krpc_report_counters("unload");
}

module_init(krpc_rdma_init);
module_exit(krpc_rdma_exit);
MODULE_DESCRIPTION("krpc-rdma: RPC-over-RDMA v1 (RFC 8166) core, in-kernel self-test");
MODULE_LICENSE("Dual BSD/GPL");
