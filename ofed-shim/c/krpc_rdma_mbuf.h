/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma: the mbuf bridge between FreeBSD's struct mbuf chains and the Rust core's
 * mbuf::Chain (ofed-shim/krpc-face/src/mbuf_bridge.rs).
 *
 * The C side (krpc_rdma_mbuf.c, compiled against sys/sys/mbuf.h, or against the emulation's
 * ofed-testkit/emu/kpi_emu_mbuf.h for host tests) walks and builds chains; Rust never reads a FreeBSD
 * struct layout. What crosses is a flat array of struct krpc_mdesc, one per mbuf, plus one
 * array of page addresses (vm_paddr_t) that the PAGES descriptors index:
 *
 *   KRPC_MD_BYTES   an ordinary mbuf or cluster: len bytes at kva (mtod). Also the header or
 *                   trailer bytes of an M_EXTPG mbuf whose window holds no page byte.
 *   KRPC_MD_PAGES   an M_EXTPG mbuf: npgs physical page addresses pa[pa_first ..], the data
 *                   from first_off in the first page and last_len bytes of the last page
 *                   (m_epg_1st_off / m_epg_last_len semantics, m_epg_pagelen), len page
 *                   bytes in all; hdrlen header bytes at kva (m_epg_hdr) before them and
 *                   trllen trailer bytes at trl_kva (m_epg_trail) after them. The walk
 *                   clips to the mbuf's window (m_data is the offset of an M_EXTPG mbuf's
 *                   first byte, m_len its length: what m_adj leaves).
 *   KRPC_MD_MARKER  the zero-length M_PROTO1 mbuf of Macklem's plan: a DDP region (page
 *                   mbufs holding an NFS WRITE's or READ reply's data) starts behind it.
 *
 * Ownership. krpc_mbuf_walk takes nothing: the kva pointers and page addresses are valid
 * while the caller holds the chain; the Rust side copies the bytes and takes its own page
 * references (krpc_ofed_page_ref = vm_page_wire). krpc_mbuf_build copies the BYTES into new
 * mbufs and clusters, and makes M_EXTPG mbufs (mb_alloc_ext_pgs) over the descriptors'
 * pages, taking one wiring per page per mbuf; their free routine (krpc_mbuf_free_pages)
 * gives each wiring back and frees a page at its last one (vm_page_unwire_noq, then
 * vm_page_free), i.e. mb_free_mext_pgs made reference-aware, so pages still referenced by
 * the Rust side (a registration, a copy) stay allocated.
 */
#ifndef KRPC_RDMA_MBUF_H
#define KRPC_RDMA_MBUF_H

#ifdef _KERNEL
#include <sys/types.h>
#else
#include <stddef.h>
#include <stdint.h>
#endif

/* Bumped whenever a struct or a function below changes (separate from
 * KRPC_OFED_ABI_VERSION: the bridge is its own boundary). */
#define KRPC_MBUF_ABI_VERSION	2

/* krpc_mbuf_build's flags. KRPC_MB_PKTHDR: the first mbuf is an M_PKTHDR mbuf with
 * m_pkthdr.len set. KRPC_MB_FLAT (the stock-NFS mode of clnt_rdma / svc_rdma): no M_EXTPG
 * mbuf and no marker are built; a PAGES descriptor's bytes (header, pages through the direct
 * map, trailer) are copied into ordinary mbufs and clusters, what a receive path that only
 * mtod()s (FreeBSD 14.2's NFS) can parse. */
#define KRPC_MB_PKTHDR	0x1
#define KRPC_MB_FLAT	0x2

#define KRPC_MD_BYTES	1
#define KRPC_MD_PAGES	2
#define KRPC_MD_MARKER	3

/* m_flags bits carried in krpc_mdesc.mflags (FreeBSD's values; asserted in the .c). */
#define KRPC_MF_PKTHDR	0x00000002
#define KRPC_MF_EOR	0x00000004
#define KRPC_MF_PROTO1	0x00002000

/* Largest header/trailer of an M_EXTPG mbuf a descriptor may carry (MBUF_PEXT_HDR_LEN is
 * 23 and MBUF_PEXT_TRAIL_LEN 64 in FreeBSD 14; the builder moves a longer header into an
 * ordinary mbuf). */
#define KRPC_MD_HDR_MAX	24
#define KRPC_MD_TRL_MAX	64

struct krpc_mdesc {
	uint64_t kva;		/* BYTES: the bytes; PAGES: the header bytes (hdrlen) */
	uint64_t trl_kva;	/* PAGES: the trailer bytes (trllen) */
	uint32_t len;		/* BYTES: bytes; PAGES: page bytes (no header/trailer) */
	uint32_t kind;		/* KRPC_MD_* */
	uint32_t pa_first;	/* PAGES: index of the first page in the page array */
	uint32_t mflags;	/* KRPC_MF_* of the mbuf */
	uint16_t npgs;		/* PAGES: pages */
	uint16_t first_off;	/* PAGES: offset of the first byte in the first page */
	uint16_t last_len;	/* PAGES: bytes of the last page (m_epg_last_len) */
	uint8_t hdrlen;		/* PAGES */
	uint8_t trllen;		/* PAGES */
};

/* Counters of the bridge since load (krpc_mbuf_get_counts; relaxed atomics). */
struct krpc_mbuf_counts {
	uint64_t walks;		/* chains walked */
	uint64_t builds;	/* chains built */
	uint64_t extpg_built;	/* M_EXTPG mbufs built */
	uint64_t extpg_live;	/* ... not yet freed (their free routine not yet run) */
	uint64_t page_refs;	/* page wirings taken by built M_EXTPG mbufs */
	uint64_t page_unrefs;	/* ... given back by their free routine */
};

struct mbuf;

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Walk the chain m (m_next) into d[0 .. *nd_out) and pa[0 .. *npa_out). 0, or E2BIG when
 * nd or npa is too small (nothing usable then), EINVAL for an M_EXTPG mbuf whose fields
 * break MBUF_EXT_PGS_ASSERT_SANITY or whose window lies outside its bytes. Never sleeps.
 */
int krpc_mbuf_walk(const struct mbuf *m, struct krpc_mdesc *d, uint32_t nd, uint64_t *pa,
    uint32_t npa, uint32_t *nd_out, uint32_t *npa_out);

/*
 * Build a chain from d[0 .. nd) over the pages pa[]: BYTES copied into mbufs/clusters
 * (m_get/m_getcl), PAGES into M_EXTPG mbufs of at most MBUF_PEXT_MAX_PGS pages each (one
 * wiring taken per page per mbuf), MARKER as a zero-length M_PROTO1 mbuf; with KRPC_MB_FLAT
 * in flags, PAGES copied into mbufs/clusters too and MARKER left out. how is M_NOWAIT or
 * M_WAITOK (malloc(9) values); KRPC_MB_PKTHDR in flags makes the first mbuf an M_PKTHDR
 * mbuf. 0 and *out (NULL for an empty chain), or ENOMEM / EINVAL (a malformed descriptor, a
 * page without a direct-map address), with nothing allocated and no wiring taken.
 */
int krpc_mbuf_build(const struct krpc_mdesc *d, uint32_t nd, const uint64_t *pa, uint32_t npa,
    int how, int flags, struct mbuf **out);

/* m_freem(9). */
void krpc_mbuf_freem(struct mbuf *m);

/* The ext_free routine of the M_EXTPG mbufs krpc_mbuf_build makes: one vm_page_unwire_noq
 * per page, vm_page_free at the last wiring. */
void krpc_mbuf_free_pages(struct mbuf *m);

void krpc_mbuf_get_counts(struct krpc_mbuf_counts *out);

#ifdef __cplusplus
}
#endif

_Static_assert(sizeof(struct krpc_mdesc) == 40, "krpc_mdesc size");
_Static_assert(__builtin_offsetof(struct krpc_mdesc, len) == 16, "krpc_mdesc.len");
_Static_assert(__builtin_offsetof(struct krpc_mdesc, npgs) == 32, "krpc_mdesc.npgs");
_Static_assert(__builtin_offsetof(struct krpc_mdesc, hdrlen) == 38, "krpc_mdesc.hdrlen");
_Static_assert(sizeof(struct krpc_mbuf_counts) == 48, "krpc_mbuf_counts size");

#endif /* KRPC_RDMA_MBUF_H */
