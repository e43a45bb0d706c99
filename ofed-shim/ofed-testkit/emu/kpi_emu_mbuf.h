/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * krpc-rdma host tests: an emulated struct mbuf with M_EXTPG, the subset of FreeBSD 14's
 * sys/sys/mbuf.h that ../c/krpc_rdma_mbuf.c uses, with the same field names, flag values and
 * semantics: m_next/m_nextpkt/m_data/m_len/m_type/m_flags; M_EXT, M_PKTHDR, M_EOR, M_RDONLY,
 * M_EXTPG, M_PROTO1; the M_EXTPG metadata (m_epg_npgs, m_epg_nrdy, m_epg_hdrlen,
 * m_epg_trllen, m_epg_1st_off, m_epg_last_len, m_epg_flags) overlaying m_pkthdr, and
 * m_ext with the page vector (m_epg_pa[MBUF_PEXT_MAX_PGS], m_epg_trail, m_epg_hdr) and
 * ext_free; an M_EXTPG mbuf's m_data is the offset of its first byte within header | pages
 * | trailer (mb_alloc_ext_pgs sets it to NULL). MBUF_PEXT_MAX_PGS is 40 / sizeof(vm_paddr_t)
 * = 5 as on amd64.
 *
 * Functions: m_get, m_gethdr, m_getcl, m_free, m_freem, mb_alloc_ext_pgs, m_copydata,
 * m_length, and the macros mtod, M_WRITABLE, M_START, M_SIZE, M_TRAILINGSPACE. Mbufs are
 * MSIZE (256) bytes from malloc, clusters MCLBYTES (2048); no reference sharing (no m_copym
 * here): an M_EXT/M_EXTPG mbuf holds the only reference to its storage, and m_free runs
 * ext_free of an M_EXTPG mbuf as mb_free_extpg does. Pages are the emulation's arena pages
 * (kpi_emu.h: vm_page wiring; vm_page_free of a wired page panics).
 *
 * Also (tests only, not the KPI): live counts, and helpers that build chains the way
 * FreeBSD's NFS does (M_EXTPG mbufs over freshly wired pages freed by an
 * mb_free_mext_pgs-style routine that unwires and frees unconditionally).
 */
#ifndef KRPC_KPI_EMU_MBUF_H
#define KRPC_KPI_EMU_MBUF_H

#include "kpi_emu.h"

#define MSIZE		256
#define MCLBYTES	2048
#define MT_DATA		1

#define MBUF_PEXT_HDR_LEN	23
#define MBUF_PEXT_TRAIL_LEN	64
#define MBUF_PEXT_MAX_PGS	(40 / sizeof(vm_paddr_t))

#define M_EXT		0x00000001
#define M_PKTHDR	0x00000002
#define M_EOR		0x00000004
#define M_RDONLY	0x00000008
#define M_EXTPG		0x00000100
#define M_PROTO1	0x00002000

#define EXT_CLUSTER	1
#define EXT_FLAG_EMBREF	0x000001

struct mbuf;
typedef void m_ext_free_t(struct mbuf *);

/* sys/sys/mbuf.h's struct pkthdr is 56 bytes on LP64; only len is used here. */
struct pkthdr {
	void *rcvif;
	void *tags;
	int32_t len;
	uint32_t spare32;
	uint64_t spare[4];
};

struct m_ext {
	union {
		volatile unsigned int ext_count;
		volatile unsigned int *ext_cnt;
	};
	uint32_t ext_size;
	uint32_t ext_type:8,
		 ext_flags:24;
	union {
		struct {
			char *ext_buf;
			void *ext_arg2;
		};
		struct {
			vm_paddr_t extpg_pa[MBUF_PEXT_MAX_PGS];
			char extpg_trail[MBUF_PEXT_TRAIL_LEN];
			char extpg_hdr[MBUF_PEXT_HDR_LEN];
#define m_epg_pa	m_ext.extpg_pa
#define m_epg_trail	m_ext.extpg_trail
#define m_epg_hdr	m_ext.extpg_hdr
		};
	};
	m_ext_free_t *ext_free;
	void *ext_arg1;
};

struct mbuf {
	union {
		struct mbuf *m_next;
	};
	union {
		struct mbuf *m_nextpkt;
	};
	caddr_t m_data;
	int32_t m_len;
	uint32_t m_type:8,
		 m_flags:24;
	union {
		struct {
			union {
				struct pkthdr m_pkthdr;
				struct {
					uint8_t m_epg_npgs;
					uint8_t m_epg_nrdy;
					uint8_t m_epg_hdrlen;
					uint8_t m_epg_trllen;
					uint16_t m_epg_1st_off;
					uint16_t m_epg_last_len;
					uint8_t m_epg_flags;
					uint8_t m_epg_record_type;
					uint8_t __spare[2];
					int m_epg_enc_cnt;
					void *m_epg_tls;
					void *m_epg_so;
					uint64_t m_epg_seqno;
					void *m_epg_stailq_next;
				};
			};
			union {
				struct m_ext m_ext;
				char m_pktdat[0];
			};
		};
		char m_dat[0];
	};
};

#define MHSIZE		__builtin_offsetof(struct mbuf, m_dat)
#define MPKTHSIZE	__builtin_offsetof(struct mbuf, m_pktdat)
#define MLEN		((int)(MSIZE - MHSIZE))
#define MHLEN		((int)(MSIZE - MPKTHSIZE))

#define mtod(m, t)	((t)((m)->m_data))
#define M_WRITABLE(m)	(((m)->m_flags & (M_RDONLY | M_EXTPG)) == 0)
#define M_START(m)							\
	(((m)->m_flags & M_EXTPG) ? NULL :				\
	 ((m)->m_flags & M_EXT) ? (m)->m_ext.ext_buf :			\
	 ((m)->m_flags & M_PKTHDR) ? &(m)->m_pktdat[0] :		\
	 &(m)->m_dat[0])
#define M_SIZE(m)							\
	(((m)->m_flags & M_EXT) ? (int)(m)->m_ext.ext_size :		\
	 ((m)->m_flags & M_PKTHDR) ? MHLEN :				\
	 MLEN)
#define M_TRAILINGROOM(m) ((M_START(m) + M_SIZE(m)) - ((m)->m_data + (m)->m_len))
#define M_TRAILINGSPACE(m) (M_WRITABLE(m) ? M_TRAILINGROOM(m) : 0)

struct mbuf *m_get(int how, short type);
struct mbuf *m_gethdr(int how, short type);
struct mbuf *m_getcl(int how, short type, int flags);
struct mbuf *m_free(struct mbuf *m);
void m_freem(struct mbuf *m);
struct mbuf *mb_alloc_ext_pgs(int how, m_ext_free_t ext_free);
void m_copydata(const struct mbuf *m, int off, int len, caddr_t cp);
unsigned int m_length(struct mbuf *m, struct mbuf **last);

/* machine/atomic.h, the three the bridge uses (relaxed). */
#define atomic_add_64(p, v)		((void)__atomic_fetch_add((p), (v), __ATOMIC_RELAXED))
#define atomic_subtract_64(p, v)	((void)__atomic_fetch_sub((p), (v), __ATOMIC_RELAXED))
#define atomic_load_64(p)		__atomic_load_n((p), __ATOMIC_RELAXED)

/* ---- tests only ------------------------------------------------------------------------ */

struct krpc_emu_mbuf_stats {
	uint64_t mbufs_live;	/* m_get/m_getcl/mb_alloc_ext_pgs'd, not yet freed */
	uint64_t clusters_live;
	uint64_t extpg_live;	/* M_EXTPG mbufs not yet freed */
	uint64_t nfs_pages_freed; /* pages freed by krpc_emu_mb_free_mext_pgs */
};

void krpc_emu_get_mbuf_stats(struct krpc_emu_mbuf_stats *out);

/* One mbuf of a chain, for inspection (index idx along m_next). */
struct krpc_emu_minfo {
	uint64_t pa[5];		/* m_epg_pa (M_EXTPG) */
	uint64_t data;		/* m_data */
	int32_t len;		/* m_len */
	uint32_t flags;		/* m_flags */
	uint16_t first_off;
	uint16_t last_len;
	uint8_t npgs;
	uint8_t hdrlen;
	uint8_t trllen;
	uint8_t is_bridge;	/* ext_free is the bridge's krpc_mbuf_free_pages */
};

/* 0 and *out, or ENOENT past the end. */
int krpc_emu_m_info(const struct mbuf *m, uint32_t idx, struct krpc_emu_minfo *out);
/* An mbuf chain holding a copy of len bytes (m_get / m_getcl pieces of at most seg bytes). */
struct mbuf *krpc_emu_m_bytes(const uint8_t *p, uint32_t len, uint32_t seg);
/* A zero-length M_PROTO1 marker. */
struct mbuf *krpc_emu_m_marker(void);
/* M_EXTPG mbufs as FreeBSD's NFS grows them (nfsm_add_ext_pgs): an empty one from
 * mb_alloc_ext_pgs with hdrlen bytes of hdr as its m_epg_hdr (NULL for bad arguments), whose
 * free routine unwires and frees each of its pages unconditionally, as mb_free_mext_pgs does;
 * then its pages one at a time: _add appends pa (taking over the caller's one wiring of that
 * freshly allocated page) holding len data bytes from in-page offset off (the first page only;
 * every page before must be full), m_epg_last_len and m_len growing with the data; _trail
 * sets the trailer (m_epg_trail) once the pages are in. EINVAL for bad arguments. */
struct mbuf *krpc_emu_m_extpg_new(const uint8_t *hdr, uint32_t hdrlen);
int krpc_emu_m_extpg_add(struct mbuf *m, uint64_t pa, uint32_t off, uint32_t len);
int krpc_emu_m_extpg_trail(struct mbuf *m, const uint8_t *trl, uint32_t trllen);
/* Link b after the last mbuf of a; a (or b when a is NULL). */
struct mbuf *krpc_emu_m_cat(struct mbuf *a, struct mbuf *b);
/* Narrow mbuf idx of the chain to [off, off + len) of its current bytes (what m_adj does at
 * the ends of a chain); EINVAL when out of range. */
int krpc_emu_m_window(struct mbuf *m, uint32_t idx, uint32_t off, uint32_t len);
/* m_copydata of [off, off + len), EINVAL when out of range. */
int krpc_emu_m_copydata(const struct mbuf *m, uint32_t off, uint32_t len, uint8_t *out);

#endif /* KRPC_KPI_EMU_MBUF_H */
