//! The two foundation pieces together: RPC-over-RDMA headers carried in mbuf chains, and a
//! WRITE-shaped chain (XDR, DDP marker, page mbufs, trailing XDR) described by a read chunk.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use krpc_rdma::wire::{
    Body, ChunkLists, HeaderRepr, ReadSegment, Segment, MAX_HEADER_LEN, RPCRDMA_VERSION,
};
use mbuf::{Chain, Fragment, HeapPageArena, Mbuf, PageProvider, PAGE_SIZE};

fn arena(pages: usize) -> (Arc<HeapPageArena>, Arc<dyn PageProvider>) {
    let arena = Arc::new(HeapPageArena::new(pages).unwrap());
    let provider: Arc<dyn PageProvider> = arena.clone();
    (arena, provider)
}

/// A WRITE-like call: `xdr_head`, marker, `data` in page mbufs, then `xdr_tail`.
fn write_shaped_chain(
    provider: &Arc<dyn PageProvider>,
    xdr_head: &[u8],
    data: &[u8],
    xdr_tail: &[u8],
) -> Chain {
    let mut chain = Chain::from_bytes(xdr_head).unwrap();
    chain.append_mbuf(Mbuf::ddp_marker()).unwrap();
    let mut pages = Chain::alloc_pages(provider, data.len()).unwrap();
    pages.copyback(0, data).unwrap();
    chain.cat(pages).unwrap();
    let tail = Chain::from_bytes(xdr_tail).unwrap();
    chain.cat(tail).unwrap();
    chain
}

#[test]
fn read_chunk_describes_the_ddp_region_of_a_write_shaped_chain() {
    let (arena, provider) = arena(64);
    let head: Vec<u8> = (0..132u32).map(|i| i as u8).collect(); // RPC + NFS WRITE args up to data
    let data: Vec<u8> = (0..3 * PAGE_SIZE as u32 + 5)
        .map(|i| (i * 7) as u8)
        .collect();
    let tail = [0u8, 0, 0, 0xaa, 0xbb, 0xcc, 0xdd]; // XDR pad (3 zero bytes) + next item
    let chain = write_shaped_chain(&provider, &head, &data, &tail);

    let regions: Vec<_> = chain.ddp_regions().collect();
    assert_eq!(regions.len(), 1);
    let region = &regions[0];
    assert_eq!(region.offset, head.len());
    assert_eq!(region.len, data.len());

    // One read segment per page fragment, at the region's XDR position (RFC 8166 §3.4.5).
    let mut lists = ChunkLists::default();
    let mut copied = Vec::new();
    for frag in chain.page_fragments_in(region.range()).unwrap() {
        lists
            .read_list
            .push(ReadSegment {
                position: region.offset as u32,
                segment: Segment {
                    handle: 0x1234,
                    length: frag.len as u32,
                    offset: frag.addr + frag.offset as u64,
                },
            })
            .unwrap();
        let mut buf = vec![0u8; frag.len];
        provider
            .with_page(frag.addr, &mut |page: &[u8]| {
                buf.copy_from_slice(&page[frag.offset..frag.offset + frag.len])
            })
            .unwrap();
        copied.extend_from_slice(&buf);
    }
    assert_eq!(copied, data, "page fragments cover exactly the DDP data");

    let repr = HeaderRepr {
        xid: 7,
        vers: RPCRDMA_VERSION,
        credit: 32,
        body: Body::Msg(lists),
    };
    let mut hdr = vec![0u8; repr.buffer_len()];
    repr.emit(&mut hdr).unwrap();
    let parsed = HeaderRepr::parse(&hdr).unwrap();
    let chunks: Vec<_> = parsed.chunk_lists().unwrap().read_chunks().collect();
    assert_eq!(
        chunks.len(),
        1,
        "all segments share one position: one read chunk"
    );
    assert_eq!(chunks[0].0 as usize, head.len());
    assert_eq!(chunks[0].1.total_length() as usize, data.len());

    drop(chain);
    assert_eq!(arena.in_use(), 0, "every page returned to the arena");
}

#[test]
fn header_spread_over_mbufs_parses_after_pullup() {
    let (arena, provider) = arena(8);
    let mut lists = ChunkLists::default();
    let mut chunk = krpc_rdma::wire::WriteChunk::new();
    for i in 0..8u32 {
        chunk
            .push(Segment {
                handle: 0x100 + i,
                length: 4096,
                offset: u64::from(i) << 12,
            })
            .unwrap();
    }
    lists.write_list.push(chunk.clone()).unwrap();
    lists.reply_chunk = Some(chunk);
    let repr = HeaderRepr {
        xid: 0xdead_beef,
        vers: RPCRDMA_VERSION,
        credit: 128,
        body: Body::Msg(lists),
    };
    let len = repr.buffer_len();
    assert!(len <= MAX_HEADER_LEN);
    let mut hdr = vec![0u8; len];
    repr.emit(&mut hdr).unwrap();

    // Received into a page mbuf at an odd offset, then small mbufs: bytes are not contiguous.
    let mut chain = Chain::alloc_pages(&provider, 100).unwrap();
    chain.copyback(0, &hdr[..100]).unwrap();
    for piece in hdr[100..].chunks(37) {
        chain.append_mbuf(Mbuf::internal(piece).unwrap()).unwrap();
    }
    chain.append(b"payload").unwrap();
    assert!(chain.mbuf_count() > 3);
    assert!(matches!(
        chain.fragments().next(),
        Some(Fragment::Page { .. })
    ));

    let contiguous = chain.pullup(len).unwrap();
    assert_eq!(HeaderRepr::parse(contiguous).unwrap(), repr);
    let mut payload = [0u8; 7];
    chain.copydata(len, &mut payload).unwrap();
    assert_eq!(&payload, b"payload");
    drop(chain);
    assert_eq!(arena.in_use(), 0);
}

#[test]
fn truncated_header_in_a_chain_is_a_typed_error() {
    let repr = HeaderRepr {
        xid: 1,
        vers: RPCRDMA_VERSION,
        credit: 1,
        body: Body::NoMsg(ChunkLists {
            reply_chunk: Some(
                [Segment {
                    handle: 1,
                    length: 8192,
                    offset: 0,
                }]
                .into_iter()
                .collect(),
            ),
            ..ChunkLists::default()
        }),
    };
    let mut hdr = vec![0u8; repr.buffer_len()];
    repr.emit(&mut hdr).unwrap();
    for cut in 0..hdr.len() {
        let chain = Chain::from_bytes(&hdr[..cut]).unwrap();
        let mut flat = vec![0u8; chain.len()];
        chain.copydata(0, &mut flat).unwrap();
        assert!(HeaderRepr::parse(&flat).is_err(), "cut at {cut}");
    }
}
