/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma: the mbuf bridge (krpc_rdma_mbuf.h): FreeBSD struct mbuf chains, M_EXTPG page
 * mbufs included, to and from flat descriptors the Rust side turns into mbuf::Chain.
 *
 * Compiled against FreeBSD's sys/sys/mbuf.h (the kernel module), or unchanged against the
 * emulated struct mbuf of ../ofed-testkit/emu/kpi_emu_mbuf.h (host tests: ../ofed-testkit/emu/include/sys/mbuf.h
 * includes it), which has the same field names, flags and semantics.
 */
#include <sys/param.h>
#include <sys/systm.h>
#include <sys/malloc.h>
#include <sys/mbuf.h>
#include <vm/vm.h>
#include <vm/vm_param.h>
#include <vm/vm_page.h>

#include "krpc_rdma_ofed.h"
#include "krpc_rdma_mbuf.h"
#include "krpc_rdma_clnt.h"
#include "krpc_rdma_svc.h"

_Static_assert(KRPC_MF_PKTHDR == M_PKTHDR, "M_PKTHDR");
_Static_assert(KRPC_MF_EOR == M_EOR, "M_EOR");
_Static_assert(KRPC_MF_PROTO1 == M_PROTO1, "M_PROTO1");
_Static_assert(MBUF_PEXT_HDR_LEN <= KRPC_MD_HDR_MAX, "M_EXTPG header fits a descriptor");
_Static_assert(MBUF_PEXT_TRAIL_LEN <= KRPC_MD_TRL_MAX, "M_EXTPG trailer fits a descriptor");
_Static_assert(MBUF_PEXT_MAX_PGS <= 255, "m_epg_npgs is a uint8_t");
_Static_assert(PAGE_SIZE <= 65535, "m_epg_1st_off / m_epg_last_len are uint16_t");

#define KRPC_MF_KEEP	(M_PKTHDR | M_EOR | M_PROTO1)

static struct krpc_mbuf_counts counts;

void
krpc_mbuf_get_counts(struct krpc_mbuf_counts *out)
{
	out->walks = atomic_load_64(&counts.walks);
	out->builds = atomic_load_64(&counts.builds);
	out->extpg_built = atomic_load_64(&counts.extpg_built);
	out->extpg_live = atomic_load_64(&counts.extpg_live);
	out->page_refs = atomic_load_64(&counts.page_refs);
	out->page_unrefs = atomic_load_64(&counts.page_unrefs);
}

/* See krpc_rdma_svc.h: what MOD_UNLOAD must not pull from under (krpc_rdma_mod.c). */
uint64_t
krpc_rdma_busy(uint64_t *clients, uint64_t *xprts, uint64_t *extpg)
{
	uint64_t c, x, e;

	c = krpc_clnt_live();
	x = krpc_svc_live();
	e = atomic_load_64(&counts.extpg_live);
	if (clients != NULL)
		*clients = c;
	if (xprts != NULL)
		*xprts = x;
	if (extpg != NULL)
		*extpg = e;
	return (c + x + e);
}

/* Bytes of page data of an M_EXTPG mbuf (m_epg_pagelen summed). */
static uint32_t
epg_page_bytes(uint32_t npgs, uint32_t first_off, uint32_t last_len)
{
	if (npgs == 1)
		return (last_len);
	return ((PAGE_SIZE - first_off) + (npgs - 2) * PAGE_SIZE + last_len);
}

/* The MBUF_EXT_PGS_ASSERT_SANITY checks, as errors. */
static int
epg_sane(uint32_t npgs, uint32_t maxpgs, uint32_t first_off, uint32_t last_len)
{
	return (npgs >= 1 && npgs <= maxpgs && first_off < PAGE_SIZE && last_len >= 1 &&
	    last_len <= PAGE_SIZE && (npgs > 1 || first_off + last_len <= PAGE_SIZE));
}

static uint32_t
clip(uint64_t x, uint64_t lo, uint64_t len)
{
	if (x <= lo)
		return (0);
	return ((uint32_t)(x - lo < len ? x - lo : len));
}

struct walk {
	struct krpc_mdesc *d;
	uint32_t nd, di;
	uint64_t *pa;
	uint32_t npa, pi;
};

static struct krpc_mdesc *
walk_next(struct walk *w)
{
	struct krpc_mdesc *d;

	if (w->di >= w->nd)
		return (NULL);
	d = &w->d[w->di++];
	memset(d, 0, sizeof(*d));
	return (d);
}

static int
walk_bytes(struct walk *w, const void *p, uint32_t len, uint32_t mflags)
{
	struct krpc_mdesc *d;

	if (len == 0)
		return (0);
	if ((d = walk_next(w)) == NULL)
		return (E2BIG);
	d->kind = KRPC_MD_BYTES;
	d->kva = (uint64_t)(uintptr_t)p;
	d->len = len;
	d->mflags = mflags;
	return (0);
}

/*
 * One M_EXTPG mbuf. Its bytes are header | pages | trailer; the mbuf's window is
 * [m_data, m_data + m_len) of them (m_data is an offset here, as m_unmapped_uiomove reads
 * it). Page bytes in the window become one PAGES descriptor (with the header/trailer bytes
 * in the window); a window without page bytes becomes BYTES descriptors.
 */
static int
walk_extpg(struct walk *w, const struct mbuf *m)
{
	struct krpc_mdesc *d;
	uint32_t npgs, hdrlen, trllen, pb, h0, h1, p0, p1, t0, t1, pos, pglen, pgoff, i;
	uint32_t i0 = 0, i1 = 0, fo = 0, ll = 0, mflags;
	uint64_t a, b;
	int err;

	npgs = m->m_epg_npgs;
	hdrlen = m->m_epg_hdrlen;
	trllen = m->m_epg_trllen;
	mflags = m->m_flags & KRPC_MF_KEEP;
	if (!epg_sane(npgs, MBUF_PEXT_MAX_PGS, m->m_epg_1st_off, m->m_epg_last_len) ||
	    hdrlen > MBUF_PEXT_HDR_LEN || trllen > MBUF_PEXT_TRAIL_LEN || m->m_len < 0)
		return (EINVAL);
	pb = epg_page_bytes(npgs, m->m_epg_1st_off, m->m_epg_last_len);
	a = (uint64_t)(uintptr_t)m->m_data;
	b = a + (uint64_t)m->m_len;
	if (b > (uint64_t)hdrlen + pb + trllen)
		return (EINVAL);
	h0 = clip(a, 0, hdrlen);
	h1 = clip(b, 0, hdrlen);
	p0 = clip(a, hdrlen, pb);
	p1 = clip(b, hdrlen, pb);
	t0 = clip(a, (uint64_t)hdrlen + pb, trllen);
	t1 = clip(b, (uint64_t)hdrlen + pb, trllen);
	if (p1 == p0) {
		err = walk_bytes(w, &m->m_epg_hdr[h0], h1 - h0, mflags);
		if (err == 0)
			err = walk_bytes(w, &m->m_epg_trail[t0], t1 - t0, mflags);
		return (err);
	}
	/* Pages i0..=i1 hold page bytes [p0, p1): i0 from in-page offset fo, i1 up to ll. */
	pos = 0;
	pgoff = m->m_epg_1st_off;
	for (i = 0; i < npgs; i++) {
		pglen = (i == npgs - 1) ? m->m_epg_last_len : PAGE_SIZE - pgoff;
		if (p0 >= pos && p0 < pos + pglen) {
			i0 = i;
			fo = pgoff + (p0 - pos);
		}
		if (p1 > pos && p1 <= pos + pglen) {
			i1 = i;
			ll = (i1 == i0) ? p1 - p0 : p1 - pos;
			break;
		}
		pos += pglen;
		pgoff = 0;
	}
	if (i == npgs)
		return (EINVAL);
	if ((d = walk_next(w)) == NULL || w->npa - w->pi < i1 - i0 + 1)
		return (E2BIG);
	d->kind = KRPC_MD_PAGES;
	d->kva = (uint64_t)(uintptr_t)&m->m_epg_hdr[h0];
	d->hdrlen = (uint8_t)(h1 - h0);
	d->trl_kva = (uint64_t)(uintptr_t)&m->m_epg_trail[t0];
	d->trllen = (uint8_t)(t1 - t0);
	d->len = p1 - p0;
	d->pa_first = w->pi;
	d->npgs = (uint16_t)(i1 - i0 + 1);
	d->first_off = (uint16_t)fo;
	d->last_len = (uint16_t)ll;
	d->mflags = mflags;
	for (i = i0; i <= i1; i++)
		w->pa[w->pi++] = m->m_epg_pa[i];
	return (0);
}

int
krpc_mbuf_walk(const struct mbuf *m, struct krpc_mdesc *d, uint32_t nd, uint64_t *pa,
    uint32_t npa, uint32_t *nd_out, uint32_t *npa_out)
{
	struct walk w = { d, nd, 0, pa, npa, 0 };
	struct krpc_mdesc *md;
	int err = 0;

	for (; m != NULL && err == 0; m = m->m_next) {
		if (m->m_flags & M_EXTPG)
			err = walk_extpg(&w, m);
		else if (m->m_len == 0 && (m->m_flags & M_PROTO1)) {
			if ((md = walk_next(&w)) == NULL)
				err = E2BIG;
			else {
				md->kind = KRPC_MD_MARKER;
				md->mflags = m->m_flags & KRPC_MF_KEEP;
			}
		} else if (m->m_len < 0)
			err = EINVAL;
		else
			err = walk_bytes(&w, mtod(m, const void *), (uint32_t)m->m_len,
			    m->m_flags & KRPC_MF_KEEP);
	}
	*nd_out = w.di;
	*npa_out = w.pi;
	atomic_add_64(&counts.walks, 1);
	return (err);
}

/* ---- building ------------------------------------------------------------------------ */

void
krpc_mbuf_free_pages(struct mbuf *m)
{
	vm_page_t pg;
	int i;

	for (i = 0; i < m->m_epg_npgs; i++) {
		pg = PHYS_TO_VM_PAGE(m->m_epg_pa[i]);
		if (vm_page_unwire_noq(pg))
			vm_page_free(pg);
	}
	atomic_add_64(&counts.page_unrefs, m->m_epg_npgs);
	atomic_subtract_64(&counts.extpg_live, 1);
}

void
krpc_mbuf_freem(struct mbuf *m)
{
	m_freem(m);
}

struct build {
	struct mbuf *top, *last;
	struct mbuf *fill;	/* an ordinary mbuf of ours that bytes may still go into */
	int how;
	int pkthdr;
	int flat;		/* KRPC_MB_FLAT: pages copied into mbufs, markers left out */
};

static void
build_link(struct build *b, struct mbuf *m)
{
	if (b->last == NULL)
		b->top = m;
	else
		b->last->m_next = m;
	b->last = m;
}

static struct mbuf *
build_get(struct build *b, int cluster)
{
	struct mbuf *m;
	int hdr = b->top == NULL && b->pkthdr;

	if (cluster)
		m = m_getcl(b->how, MT_DATA, hdr ? M_PKTHDR : 0);
	else
		m = hdr ? m_gethdr(b->how, MT_DATA) : m_get(b->how, MT_DATA);
	if (m != NULL)
		build_link(b, m);
	return (m);
}

static int
build_bytes(struct build *b, const uint8_t *p, uint32_t len)
{
	struct mbuf *m;
	uint32_t n, room;

	while (len > 0) {
		m = b->fill;
		room = m != NULL ? (uint32_t)M_TRAILINGSPACE(m) : 0;
		if (room == 0) {
			m = build_get(b, len > (uint32_t)MLEN);
			if (m == NULL)
				return (ENOMEM);
			b->fill = m;
			room = (uint32_t)M_TRAILINGSPACE(m);
		}
		n = len < room ? len : room;
		memcpy(mtod(m, uint8_t *) + m->m_len, p, n);
		m->m_len += (int32_t)n;
		p += n;
		len -= n;
	}
	return (0);
}

/* One M_EXTPG mbuf over pa[0 .. npgs), one wiring taken per page. */
static int
build_extpg(struct build *b, const uint64_t *pa, uint32_t npgs, uint32_t first_off,
    uint32_t last_len, const uint8_t *hdr, uint32_t hdrlen, const uint8_t *trl,
    uint32_t trllen)
{
	struct mbuf *m;
	vm_page_t pg;
	uint32_t i;

	for (i = 0; i < npgs; i++)
		if (PHYS_TO_VM_PAGE(pa[i]) == NULL)
			return (EINVAL);
	if (b->top == NULL && b->pkthdr) {
		/* M_EXTPG and M_PKTHDR share storage: a leading empty header mbuf. */
		if (build_get(b, 0) == NULL)
			return (ENOMEM);
	}
	m = mb_alloc_ext_pgs(b->how, krpc_mbuf_free_pages);
	if (m == NULL)
		return (ENOMEM);
	for (i = 0; i < npgs; i++) {
		pg = PHYS_TO_VM_PAGE(pa[i]);
		vm_page_wire(pg);
		m->m_epg_pa[i] = pa[i];
	}
	m->m_epg_npgs = (uint8_t)npgs;
	m->m_epg_1st_off = (uint16_t)first_off;
	m->m_epg_last_len = (uint16_t)last_len;
	m->m_epg_hdrlen = (uint8_t)hdrlen;
	m->m_epg_trllen = (uint8_t)trllen;
	if (hdrlen > 0)
		memcpy(m->m_epg_hdr, hdr, hdrlen);
	if (trllen > 0)
		memcpy(m->m_epg_trail, trl, trllen);
	m->m_len = (int32_t)(hdrlen + epg_page_bytes(npgs, first_off, last_len) + trllen);
	atomic_add_64(&counts.extpg_built, 1);
	atomic_add_64(&counts.extpg_live, 1);
	atomic_add_64(&counts.page_refs, npgs);
	build_link(b, m);
	b->fill = NULL;
	return (0);
}

/*
 * A PAGES descriptor under KRPC_MB_FLAT: its header, page and trailer bytes copied into
 * ordinary mbufs and clusters (the one copy of the stock-NFS mode; see krpc_rdma_mbuf.h).
 */
static int
build_pages_flat(struct build *b, const struct krpc_mdesc *d, const uint64_t *pa)
{
	const uint8_t *p;
	uint32_t i, off, n;
	int err;

	if (d->hdrlen > 0 &&
	    (err = build_bytes(b, (const uint8_t *)(uintptr_t)d->kva, d->hdrlen)) != 0)
		return (err);
	for (i = 0; i < d->npgs; i++) {
		/* m_epg_pagelen: the last page holds last_len bytes (from first_off when it
		 * is also the first), the others run to the end of the page. */
		off = i == 0 ? d->first_off : 0;
		n = i + 1 == d->npgs ? d->last_len : PAGE_SIZE - off;
		if ((p = krpc_ofed_page_kva(pa[i])) == NULL)
			return (EINVAL);
		if ((err = build_bytes(b, p + off, n)) != 0)
			return (err);
	}
	if (d->trllen > 0)
		return (build_bytes(b, (const uint8_t *)(uintptr_t)d->trl_kva, d->trllen));
	return (0);
}

/* A PAGES descriptor: M_EXTPG mbufs of at most MBUF_PEXT_MAX_PGS pages each. */
static int
build_pages(struct build *b, const struct krpc_mdesc *d, const uint64_t *pa)
{
	const uint8_t *hdr = (const uint8_t *)(uintptr_t)d->kva;
	const uint8_t *trl = (const uint8_t *)(uintptr_t)d->trl_kva;
	uint32_t n = d->npgs, s, e, fo, ll, hl, tl;
	int err;

	hl = d->hdrlen;
	if (hl > MBUF_PEXT_HDR_LEN) {
		if ((err = build_bytes(b, hdr, hl)) != 0)
			return (err);
		hl = 0;
	}
	tl = d->trllen;
	for (s = 0; s < n; s = e) {
		e = s + MBUF_PEXT_MAX_PGS < n ? s + (uint32_t)MBUF_PEXT_MAX_PGS : n;
		fo = s == 0 ? d->first_off : 0;
		if (e == n)
			ll = d->last_len;
		else
			ll = PAGE_SIZE - (e - 1 == 0 ? fo : 0);
		err = build_extpg(b, pa + s, e - s, fo, ll, hdr, s == 0 ? hl : 0, trl,
		    e == n && tl <= MBUF_PEXT_TRAIL_LEN ? tl : 0);
		if (err != 0)
			return (err);
	}
	if (tl > MBUF_PEXT_TRAIL_LEN)
		return (build_bytes(b, trl, tl));
	return (0);
}

static int
desc_valid(const struct krpc_mdesc *d, uint32_t npa)
{
	switch (d->kind) {
	case KRPC_MD_BYTES:
		return (d->len == 0 || d->kva != 0);
	case KRPC_MD_MARKER:
		return (d->len == 0);
	case KRPC_MD_PAGES:
		return (epg_sane(d->npgs, 65535, d->first_off, d->last_len) &&
		    d->pa_first <= npa && d->npgs <= npa - d->pa_first &&
		    d->hdrlen <= KRPC_MD_HDR_MAX && d->trllen <= KRPC_MD_TRL_MAX &&
		    (d->hdrlen == 0 || d->kva != 0) && (d->trllen == 0 || d->trl_kva != 0) &&
		    (uint64_t)d->len == (uint64_t)epg_page_bytes(d->npgs, d->first_off,
		    d->last_len));
	default:
		return (0);
	}
}

int
krpc_mbuf_build(const struct krpc_mdesc *d, uint32_t nd, const uint64_t *pa, uint32_t npa,
    int how, int flags, struct mbuf **out)
{
	struct build b = { NULL, NULL, NULL, (how & KRPC_M_NOWAIT) ? M_NOWAIT : M_WAITOK,
	    (flags & KRPC_MB_PKTHDR) != 0, (flags & KRPC_MB_FLAT) != 0 };
	struct mbuf *m;
	uint64_t total = 0;
	uint32_t i;
	int err = 0;

	*out = NULL;
	for (i = 0; i < nd; i++)
		if (!desc_valid(&d[i], npa))
			return (EINVAL);
	for (i = 0; i < nd && err == 0; i++) {
		switch (d[i].kind) {
		case KRPC_MD_BYTES:
			err = build_bytes(&b, (const uint8_t *)(uintptr_t)d[i].kva, d[i].len);
			break;
		case KRPC_MD_MARKER:
			if (b.flat)
				break;
			m = build_get(&b, 0);
			if (m == NULL) {
				err = ENOMEM;
				break;
			}
			m->m_flags |= M_PROTO1;
			b.fill = NULL;
			break;
		case KRPC_MD_PAGES:
			if (b.flat)
				err = build_pages_flat(&b, &d[i], pa + d[i].pa_first);
			else
				err = build_pages(&b, &d[i], pa + d[i].pa_first);
			break;
		}
	}
	if (err != 0) {
		m_freem(b.top);
		return (err);
	}
	if (b.top != NULL && (b.top->m_flags & M_PKTHDR)) {
		for (m = b.top; m != NULL; m = m->m_next)
			total += (uint64_t)m->m_len;
		b.top->m_pkthdr.len = (int)total;
	}
	atomic_add_64(&counts.builds, 1);
	*out = b.top;
	return (0);
}
