/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma: FreeBSD's memory, page and panic hooks of the C boundary (krpc_rdma_ofed.h):
 * malloc(9), wired vm_pages addressed by physical address, panic(9). The shared verbs wrapper
 * (krpc_rdma_ofed.c) allocates through krpc_ofed_malloc too. Also built over the userspace
 * emulation of the KPI (../ofed-testkit/emu/include's FreeBSD header names) for the host tests. The Linux
 * module has its own (../linux/krpc_rdma_linux.c: kvmalloc, struct page).
 */
#include "krpc_ofed_kpi.h"
#include "krpc_rdma_ofed.h"

MALLOC_DEFINE(M_KRPC_RDMA, "krpc_rdma", "krpc RPC-over-RDMA transport");

void *
krpc_ofed_malloc(size_t size, int flags)
{
	int mflags;

	mflags = (flags & KRPC_M_NOWAIT) ? M_NOWAIT : M_WAITOK;
	if (flags & KRPC_M_ZERO)
		mflags |= M_ZERO;
	return (malloc(size, M_KRPC_RDMA, mflags));
}

void
krpc_ofed_free(void *p)
{
	free(p, M_KRPC_RDMA);
}

void
krpc_ofed_panic(const uint8_t *msg, size_t len)
{
	panic("%.*s", (int)len, (const char *)msg);
}

int
krpc_ofed_page_alloc(uint64_t *pa)
{
	vm_page_t m;

	m = vm_page_alloc_noobj(VM_ALLOC_WIRED | VM_ALLOC_ZERO | VM_ALLOC_NOWAIT);
	if (m == NULL)
		return (ENOMEM);
	*pa = VM_PAGE_TO_PHYS(m);
	return (0);
}

int
krpc_ofed_page_ref(uint64_t pa)
{
	vm_page_t m;

	m = PHYS_TO_VM_PAGE(pa);
	if (m == NULL)
		return (EINVAL);
	vm_page_wire(m);
	return (0);
}

void
krpc_ofed_page_unref(uint64_t pa)
{
	vm_page_t m;

	m = PHYS_TO_VM_PAGE(pa);
	if (m != NULL && vm_page_unwire_noq(m))
		vm_page_free(m);
}

uint8_t *
krpc_ofed_page_kva(uint64_t pa)
{
	if (PHYS_TO_VM_PAGE(pa) == NULL)
		return (NULL);
	return ((uint8_t *)PHYS_TO_DMAP(pa));
}
