// SPDX-License-Identifier: BSD-2-Clause
/*
 * krpc_rdma.ko, Linux glue: module init/exit, the hooks the Rust staticlib (ofed-shim, made
 * relocation-clean by `cargo xtask kobj`) calls, and the in-kernel self-test's triggers.
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
 *
 * Every allocation and page reference is counted; unload reports what is left (pr_err).
 *
 * Self-test (ofed-shim/src/selftest.rs, built by `cargo xtask kmod`):
 *   insmod krpc_rdma.ko selftest=1      run it at load; the report line goes to the kernel
 *                                       log; a failure fails the load (-EIO)
 *   cat /sys/kernel/debug/krpc_rdma/selftest
 *                                       run it again; the report line is the file's content
 *
 * The stack: the core does not fit a 16 KiB kernel stack today (checkstack: single frames of
 * 27 KiB in Requester::marshal, 16 KiB in Responder::reply, 9.5 KiB in HeaderRepr::parse, all
 * from 2,136-byte HeaderRepr values held by value). Until those frames shrink, the self-test
 * runs on a private stack of selftest_stack_kib KiB (vmalloc'd, guard pages around it),
 * switched to as the kernel switches to its IRQ stacks (call_on_stack in
 * asm/irq_stack.h), and reports the deepest byte of it the run touched.
 * selftest_stack_kib=0 runs on the task's own stack (which overflows today).
 */
#include <linux/atomic.h>
#include <linux/debugfs.h>
#include <linux/fs.h>
#include <linux/kernel.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/preempt.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/vmalloc.h>
#include <asm/asm.h>
#include <asm/io.h>

#include "krpc_rdma_ofed.h"

/* Exported by the Rust object (ofed-shim/src/lib.rs, ofed-shim/src/selftest.rs). */
uint32_t krpc_rdma_shim_abi_version(void);
int krpc_rdma_selftest(char *report, size_t len);

#define KRPC_REPORT_LEN 1024

static bool selftest;
module_param(selftest, bool, 0444);
MODULE_PARM_DESC(selftest, "run the in-kernel self-test at load (a failure fails the load)");

static unsigned int selftest_stack_kib = 256;
module_param(selftest_stack_kib, uint, 0644);
MODULE_PARM_DESC(selftest_stack_kib,
    "KiB of the private stack the self-test runs on (0: the task's own 16 KiB stack)");

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

/* ---- self-test ---------------------------------------------------------------------- */

static DEFINE_MUTEX(krpc_selftest_lock);

#define KRPC_STACK_FILL 0x5a

/*
 * krpc_rdma_selftest(buf, len) with RSP at `tos` (16-byte aligned, 8 writable bytes at it):
 * the old RSP is stored at tos, the call runs below it, `popq %rsp` restores it. The same
 * sequence as the kernel's call_on_stack (arch/x86/include/asm/irq_stack.h).
 */
static int krpc_selftest_on_stack(void *tos, char *buf, size_t len)
{
	register void *t asm("r11") = tos;
	register char *a1 asm("rdi") = buf;
	register size_t a2 asm("rsi") = len;
	int rc;

	asm volatile(
		"movq	%%rsp, (%[tos])\n\t"
		"movq	%[tos], %%rsp\n\t"
		"call	krpc_rdma_selftest\n\t"
		"popq	%%rsp\n\t"
		: "=a" (rc), [tos] "+r" (t), "+D" (a1), "+S" (a2), ASM_CALL_CONSTRAINT
		:
		: "cc", "rcx", "rdx", "r8", "r9", "r10", "memory");
	return rc;
}

/* Run the Rust self-test on a private stack of selftest_stack_kib KiB (or on ours for 0);
 * `*peak` gets the bytes of the private stack the run touched (0 without one). */
static int krpc_selftest_call(char *buf, size_t *peak, size_t *size)
{
	size_t sz = (size_t)selftest_stack_kib * 1024;
	unsigned char *stack;
	size_t i;
	int rc;

	*peak = 0;
	*size = sz;
	if (sz == 0)
		return krpc_rdma_selftest(buf, KRPC_REPORT_LEN);
	if (sz < PAGE_SIZE)
		return -EINVAL;
	stack = vmalloc(sz);
	if (!stack)
		return -ENOMEM;
	memset(stack, KRPC_STACK_FILL, sz);
	rc = krpc_selftest_on_stack(stack + sz - 16, buf, KRPC_REPORT_LEN);
	for (i = 0; i < sz && stack[i] == KRPC_STACK_FILL; i++)
		;
	*peak = sz - i;
	vfree(stack);
	return rc;
}

/* Run the self-test; the report line in `buf` (KRPC_REPORT_LEN bytes). */
static int krpc_run_selftest(char *buf)
{
	long allocs = atomic_long_read(&krpc_allocs_live);
	long refs = atomic_long_read(&krpc_page_refs_live);
	size_t peak, size, n;
	int rc;

	mutex_lock(&krpc_selftest_lock);
	rc = krpc_selftest_call(buf, &peak, &size);
	mutex_unlock(&krpc_selftest_lock);
	buf[KRPC_REPORT_LEN - 1] = '\0';
	n = strnlen(buf, KRPC_REPORT_LEN);
	if (size)
		snprintf(buf + n, KRPC_REPORT_LEN - n, "; stack used %zu of %zu bytes (private)",
		    peak, size);
	else
		snprintf(buf + n, KRPC_REPORT_LEN - n, "; on the task stack");
	if (rc == 0 && (atomic_long_read(&krpc_allocs_live) != allocs ||
	    atomic_long_read(&krpc_page_refs_live) != refs)) {
		pr_err("krpc_rdma: self-test left %ld allocations, %ld page references\n",
		    atomic_long_read(&krpc_allocs_live) - allocs,
		    atomic_long_read(&krpc_page_refs_live) - refs);
		rc = -EIO;
	}
	if (rc == 0)
		pr_info("%s\n", buf);
	else
		pr_err("%s (rc %d)\n", buf, rc);
	return rc;
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

/* ---- module ------------------------------------------------------------------------- */

static void krpc_report_counters(const char *when)
{
	long allocs = atomic_long_read(&krpc_allocs_live);
	long refs = atomic_long_read(&krpc_page_refs_live);
	long bad = atomic_long_read(&krpc_page_bad);
	long misaligned = atomic_long_read(&krpc_allocs_misaligned);

	if (allocs || refs || bad || misaligned)
		pr_err("krpc_rdma: %s: LEAK/MISUSE: %ld allocations and %ld page references outstanding, %ld bad page operations, %ld misaligned allocations\n",
		    when, allocs, refs, bad, misaligned);
	else
		pr_info("krpc_rdma: %s: 0 allocations and 0 page references outstanding (%ld allocations, %ld atomic, %ld failed, %ld pages since load)\n",
		    when, atomic_long_read(&krpc_allocs_total),
		    atomic_long_read(&krpc_allocs_atomic),
		    atomic_long_read(&krpc_allocs_failed),
		    atomic_long_read(&krpc_pages_total));
}

static int __init krpc_rdma_init(void)
{
	char *buf;
	int rc;

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
	krpc_debugfs_dir = debugfs_create_dir("krpc_rdma", NULL);
	debugfs_create_file("selftest", 0400, krpc_debugfs_dir, NULL, &krpc_selftest_fops);
	pr_info("krpc_rdma: loaded (Rust shim ABI %u)\n", krpc_rdma_shim_abi_version());
	return 0;
}

static void __exit krpc_rdma_exit(void)
{
	debugfs_remove_recursive(krpc_debugfs_dir);
	krpc_report_counters("unload");
}

module_init(krpc_rdma_init);
module_exit(krpc_rdma_exit);
MODULE_DESCRIPTION("krpc-rdma: RPC-over-RDMA v1 (RFC 8166) core, in-kernel self-test");
MODULE_LICENSE("Dual BSD/GPL");
