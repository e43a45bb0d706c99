/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: the emulated struct mbuf of kpi_emu_mbuf.h (see there).
 */
#include <stdio.h>

#include "kpi_emu_mbuf.h"
#include "krpc_rdma_mbuf.h"

static struct krpc_emu_mbuf_stats mstats;

#define STAT_ADD(f, v)	__atomic_fetch_add(&mstats.f, (v), __ATOMIC_RELAXED)
#define STAT_SUB(f, v)	__atomic_fetch_sub(&mstats.f, (v), __ATOMIC_RELAXED)

_Static_assert(sizeof(struct mbuf) <= MSIZE, "struct mbuf fits MSIZE");
_Static_assert(MBUF_PEXT_MAX_PGS == 5, "amd64's MBUF_PEXT_MAX_PGS");

void
krpc_emu_get_mbuf_stats(struct krpc_emu_mbuf_stats *out)
{
	out->mbufs_live = __atomic_load_n(&mstats.mbufs_live, __ATOMIC_RELAXED);
	out->clusters_live = __atomic_load_n(&mstats.clusters_live, __ATOMIC_RELAXED);
	out->extpg_live = __atomic_load_n(&mstats.extpg_live, __ATOMIC_RELAXED);
	out->nfs_pages_freed = __atomic_load_n(&mstats.nfs_pages_freed, __ATOMIC_RELAXED);
}

static struct mbuf *
m_alloc(int how, short type, int flags)
{
	struct mbuf *m;

	(void)how;
	m = (calloc)(1, MSIZE);
	if (m == NULL)
		return (NULL);
	m->m_type = type;
	m->m_flags = flags & M_PKTHDR;
	m->m_data = (flags & M_PKTHDR) ? m->m_pktdat : m->m_dat;
	STAT_ADD(mbufs_live, 1);
	return (m);
}

struct mbuf *
m_get(int how, short type)
{
	return (m_alloc(how, type, 0));
}

struct mbuf *
m_gethdr(int how, short type)
{
	return (m_alloc(how, type, M_PKTHDR));
}

struct mbuf *
m_getcl(int how, short type, int flags)
{
	struct mbuf *m;
	char *cl;

	m = m_alloc(how, type, flags);
	if (m == NULL)
		return (NULL);
	cl = (malloc)(MCLBYTES);
	if (cl == NULL) {
		m_free(m);
		return (NULL);
	}
	STAT_ADD(clusters_live, 1);
	m->m_ext.ext_buf = cl;
	m->m_ext.ext_size = MCLBYTES;
	m->m_ext.ext_type = EXT_CLUSTER;
	m->m_ext.ext_flags = EXT_FLAG_EMBREF;
	m->m_ext.ext_count = 1;
	m->m_ext.ext_free = NULL;
	m->m_data = cl;
	m->m_flags |= M_EXT;
	return (m);
}

struct mbuf *
mb_alloc_ext_pgs(int how, m_ext_free_t ext_free)
{
	struct mbuf *m;

	m = m_get(how, MT_DATA);
	if (m == NULL)
		return (NULL);
	m->m_epg_npgs = 0;
	m->m_epg_nrdy = 0;
	m->m_epg_1st_off = 0;
	m->m_epg_last_len = 0;
	m->m_epg_flags = 0;
	m->m_epg_hdrlen = 0;
	m->m_epg_trllen = 0;
	m->m_epg_tls = NULL;
	m->m_epg_so = NULL;
	m->m_data = NULL;
	m->m_flags |= (M_EXT | M_RDONLY | M_EXTPG);
	m->m_ext.ext_flags = EXT_FLAG_EMBREF;
	m->m_ext.ext_count = 1;
	m->m_ext.ext_size = 0;
	m->m_ext.ext_free = ext_free;
	STAT_ADD(extpg_live, 1);
	return (m);
}

/* The sanity checks of MBUF_EXT_PGS_ASSERT_SANITY (INVARIANTS), always on here. */
static void
extpg_sanity(const struct mbuf *m)
{
	if (m->m_epg_npgs == 0 || m->m_epg_npgs > MBUF_PEXT_MAX_PGS ||
	    m->m_epg_nrdy > m->m_epg_npgs || m->m_epg_1st_off >= PAGE_SIZE ||
	    m->m_epg_last_len == 0 || m->m_epg_last_len > PAGE_SIZE ||
	    (m->m_epg_npgs == 1 && m->m_epg_1st_off + m->m_epg_last_len > PAGE_SIZE) ||
	    m->m_epg_hdrlen > MBUF_PEXT_HDR_LEN || m->m_epg_trllen > MBUF_PEXT_TRAIL_LEN)
		krpc_emu_panic("Multi page mbuf %p insane: npgs %u 1st_off %u last_len %u",
		    (const void *)m, m->m_epg_npgs, m->m_epg_1st_off, m->m_epg_last_len);
}

struct mbuf *
m_free(struct mbuf *m)
{
	struct mbuf *n = m->m_next;

	if (m->m_flags & M_EXTPG) {
		if (m->m_epg_npgs != 0)
			extpg_sanity(m);
		if (m->m_ext.ext_free == NULL)
			krpc_emu_panic("m_free: M_EXTPG mbuf %p without ext_free", (void *)m);
		m->m_ext.ext_free(m);
		STAT_SUB(extpg_live, 1);
	} else if (m->m_flags & M_EXT) {
		(free)(m->m_ext.ext_buf);
		STAT_SUB(clusters_live, 1);
	}
	memset(m, 0xdb, MSIZE);		/* use after free shows */
	(free)(m);
	STAT_SUB(mbufs_live, 1);
	return (n);
}

void
m_freem(struct mbuf *m)
{
	while (m != NULL)
		m = m_free(m);
}

unsigned int
m_length(struct mbuf *m, struct mbuf **last)
{
	unsigned int len = 0;
	struct mbuf *l = NULL;

	for (; m != NULL; m = m->m_next) {
		len += m->m_len;
		l = m;
	}
	if (last != NULL)
		*last = l;
	return (len);
}

static unsigned int
epg_pagelen(const struct mbuf *m, int i, unsigned int pgoff)
{
	return (i == m->m_epg_npgs - 1 ? m->m_epg_last_len : PAGE_SIZE - pgoff);
}

/* Bytes [off, off + len) of an M_EXTPG mbuf's window (as m_unmapped_uiomove walks it). */
static void
extpg_copy(const struct mbuf *m, unsigned int off, unsigned int len, uint8_t *cp)
{
	unsigned int pgoff, pglen, seg;
	int i;

	off += (unsigned int)(uintptr_t)m->m_data;
	if (off < m->m_epg_hdrlen) {
		seg = m->m_epg_hdrlen - off;
		seg = seg < len ? seg : len;
		memcpy(cp, &m->m_epg_hdr[off], seg);
		cp += seg;
		len -= seg;
		off = 0;
	} else
		off -= m->m_epg_hdrlen;
	pgoff = m->m_epg_1st_off;
	for (i = 0; i < m->m_epg_npgs && len > 0; i++) {
		pglen = epg_pagelen(m, i, pgoff);
		if (off >= pglen) {
			off -= pglen;
			pgoff = 0;
			continue;
		}
		seg = pglen - off;
		seg = seg < len ? seg : len;
		memcpy(cp, (const uint8_t *)(uintptr_t)PHYS_TO_DMAP(m->m_epg_pa[i]) + pgoff + off,
		    seg);
		cp += seg;
		len -= seg;
		off = 0;
		pgoff = 0;
	}
	if (len > 0) {
		if (off + len > m->m_epg_trllen)
			krpc_emu_panic("extpg_copy: past the trailer");
		memcpy(cp, &m->m_epg_trail[off], len);
	}
}

void
m_copydata(const struct mbuf *m, int off, int len, caddr_t cp)
{
	unsigned int count;

	while (off > 0) {
		if (m == NULL)
			krpc_emu_panic("m_copydata, offset > size of mbuf chain");
		if (off < m->m_len)
			break;
		off -= m->m_len;
		m = m->m_next;
	}
	while (len > 0) {
		if (m == NULL)
			krpc_emu_panic("m_copydata, length > size of mbuf chain");
		count = (unsigned int)(m->m_len - off) < (unsigned int)len ?
		    (unsigned int)(m->m_len - off) : (unsigned int)len;
		if (m->m_flags & M_EXTPG)
			extpg_copy(m, off, count, (uint8_t *)cp);
		else
			memcpy(cp, mtod(m, caddr_t) + off, count);
		len -= count;
		cp += count;
		off = 0;
		m = m->m_next;
	}
}

/* ---- tests only ------------------------------------------------------------------------ */

int
krpc_emu_m_info(const struct mbuf *m, uint32_t idx, struct krpc_emu_minfo *out)
{
	int i;

	for (; m != NULL && idx > 0; idx--)
		m = m->m_next;
	if (m == NULL)
		return (ENOENT);
	memset(out, 0, sizeof(*out));
	out->data = (uint64_t)(uintptr_t)m->m_data;
	out->len = m->m_len;
	out->flags = m->m_flags;
	if (m->m_flags & M_EXTPG) {
		out->npgs = m->m_epg_npgs;
		out->first_off = m->m_epg_1st_off;
		out->last_len = m->m_epg_last_len;
		out->hdrlen = m->m_epg_hdrlen;
		out->trllen = m->m_epg_trllen;
		for (i = 0; i < m->m_epg_npgs && i < 5; i++)
			out->pa[i] = m->m_epg_pa[i];
		out->is_bridge = m->m_ext.ext_free == krpc_mbuf_free_pages;
	}
	return (0);
}

struct mbuf *
krpc_emu_m_bytes(const uint8_t *p, uint32_t len, uint32_t seg)
{
	struct mbuf *top = NULL, *last = NULL, *m;
	uint32_t n;

	if (seg == 0)
		seg = MCLBYTES;
	while (len > 0) {
		n = len < seg ? len : seg;
		if (n > MCLBYTES)
			n = MCLBYTES;
		m = n > (uint32_t)MLEN ? m_getcl(M_WAITOK, MT_DATA, 0) : m_get(M_WAITOK, MT_DATA);
		if (m == NULL)
			krpc_emu_panic("krpc_emu_m_bytes: no memory");
		memcpy(mtod(m, void *), p, n);
		m->m_len = (int32_t)n;
		if (last == NULL)
			top = m;
		else
			last->m_next = m;
		last = m;
		p += n;
		len -= n;
	}
	return (top);
}

struct mbuf *
krpc_emu_m_marker(void)
{
	struct mbuf *m = m_get(M_WAITOK, MT_DATA);

	if (m == NULL)
		krpc_emu_panic("krpc_emu_m_marker: no memory");
	m->m_flags |= M_PROTO1;
	return (m);
}

/* sys/kern/uipc_mbuf.c's mb_free_mext_pgs: unwire and free, whatever else wires the page
 * (so a page still wired by someone else panics in vm_page_free, as KASSERTs would). */
static void
krpc_emu_mb_free_mext_pgs(struct mbuf *m)
{
	vm_page_t pg;
	int i;

	for (i = 0; i < m->m_epg_npgs; i++) {
		pg = PHYS_TO_VM_PAGE(m->m_epg_pa[i]);
		vm_page_unwire_noq(pg);
		vm_page_free(pg);
		STAT_ADD(nfs_pages_freed, 1);
	}
}

/*
 * M_EXTPG mbufs grown the way sys/fs/nfs fills them (nfsm_add_ext_pgs and the copies into
 * it): mb_alloc_ext_pgs gives an mbuf without pages; each page is appended at
 * m_epg_pa[m_epg_npgs++] with m_epg_last_len restarting at 0, and the data put into it grows
 * m_epg_last_len and m_len. A page is appended only when the one before is full.
 */
struct mbuf *
krpc_emu_m_extpg_new(const uint8_t *hdr, uint32_t hdrlen)
{
	struct mbuf *m;

	if (hdrlen > MBUF_PEXT_HDR_LEN)
		return (NULL);
	m = mb_alloc_ext_pgs(M_WAITOK, krpc_emu_mb_free_mext_pgs);
	if (m == NULL)
		return (NULL);
	if (hdrlen > 0) {
		memcpy(m->m_epg_hdr, hdr, hdrlen);
		m->m_epg_hdrlen = (uint8_t)hdrlen;
		m->m_len += (int32_t)hdrlen;
	}
	return (m);
}

int
krpc_emu_m_extpg_add(struct mbuf *m, uint64_t pa, uint32_t off, uint32_t len)
{
	uint32_t room;

	if ((m->m_flags & M_EXTPG) == 0 || m->m_epg_npgs >= MBUF_PEXT_MAX_PGS ||
	    m->m_epg_trllen != 0 || off >= PAGE_SIZE || len == 0 || len > PAGE_SIZE - off)
		return (EINVAL);
	if (m->m_epg_npgs == 0) {
		m->m_epg_1st_off = (uint16_t)off;
	} else {
		/* Only after a full page, and only the first page starts at an offset. */
		room = PAGE_SIZE - (m->m_epg_npgs == 1 ? m->m_epg_1st_off : 0);
		if (off != 0 || m->m_epg_last_len != room)
			return (EINVAL);
	}
	m->m_epg_pa[m->m_epg_npgs++] = pa;
	m->m_epg_last_len = 0;
	/* The data put into the page. */
	m->m_epg_last_len += (uint16_t)len;
	m->m_len += (int32_t)len;
	return (0);
}

int
krpc_emu_m_extpg_trail(struct mbuf *m, const uint8_t *trl, uint32_t trllen)
{
	if ((m->m_flags & M_EXTPG) == 0 || m->m_epg_npgs == 0 || m->m_epg_trllen != 0 ||
	    trllen > MBUF_PEXT_TRAIL_LEN)
		return (EINVAL);
	if (trllen > 0) {
		memcpy(m->m_epg_trail, trl, trllen);
		m->m_epg_trllen = (uint8_t)trllen;
		m->m_len += (int32_t)trllen;
	}
	return (0);
}

struct mbuf *
krpc_emu_m_cat(struct mbuf *a, struct mbuf *b)
{
	struct mbuf *l;

	if (a == NULL)
		return (b);
	for (l = a; l->m_next != NULL; l = l->m_next)
		;
	l->m_next = b;
	return (a);
}

int
krpc_emu_m_window(struct mbuf *m, uint32_t idx, uint32_t off, uint32_t len)
{
	for (; m != NULL && idx > 0; idx--)
		m = m->m_next;
	if (m == NULL || off > (uint32_t)m->m_len || len > (uint32_t)m->m_len - off)
		return (EINVAL);
	m->m_data += off;
	m->m_len = (int32_t)len;
	return (0);
}

int
krpc_emu_m_copydata(const struct mbuf *m, uint32_t off, uint32_t len, uint8_t *out)
{
	const struct mbuf *n;
	uint64_t total = 0;

	for (n = m; n != NULL; n = n->m_next)
		total += (uint64_t)n->m_len;
	if ((uint64_t)off + len > total || len > INT32_MAX || off > INT32_MAX)
		return (EINVAL);
	m_copydata(m, (int)off, (int)len, (caddr_t)out);
	return (0);
}
