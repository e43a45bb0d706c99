//! The provider contract (`krpc_rdma::provider`), checked through the `Provider` trait on a
//! raw [`Link`]: receives consumed in order, checks at post, RDMA byte-exact and refused where
//! the handle, range or rights are wrong, invalidation (local, remote, by `release`),
//! registration limits and page lifetimes, send-queue depth, whole-chain refusal, flushes.
//!
//! An RDMA access error breaks the connection (both sides see `Disconnected`): each scenario
//! provokes at most one, last.

use alloc::format;
use alloc::vec::Vec;

use krpc_rdma::provider::{
    Access, CmEvent, Completion, Provider, ProviderError, RegId, RegSegment, Registration, SendOp,
    SendWr, WcKind, WcStatus,
};
use mbuf::{Chain, PageFragment, PAGE_SIZE};

use crate::check::{bytes_eq, ensure, eq, fail, At, Failure, Outcome};
use crate::data::pattern;
use crate::fixture::{Feature, Fixture, Limits};
use crate::heap::{try_boxed, Boxed};
use crate::pair::{send_raw, Link, Side};
use crate::wr::{local_inv, rdma, send_inv, send_wr};

const PD_A: &[u8] = &[0x41, 1, 2, 3, 4, 5, 6, 7];
const PD_B: &[u8] = &[0x42, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0xff];

#[inline(never)]
fn link<'f, F: Fixture>(fx: &'f mut F, limits: &Limits) -> Result<Link<'f, F>, Failure> {
    Ok(Link::raw(fx, limits, PD_A, PD_B)?.0)
}

/// A chain of `len` bytes of fresh pages of side `s`, zeroed.
#[inline(never)]
fn zeroed<F: Fixture>(l: &Link<'_, F>, s: Side, len: usize) -> Result<Chain, Failure> {
    let mut c = Chain::alloc_pages(&l.pages(s), len).at("pages")?;
    c.copyback(0, &alloc::vec![0u8; len]).at("zero pages")?;
    Ok(c)
}

#[inline(never)]
fn frags(c: &Chain, r: core::ops::Range<usize>) -> Result<Vec<PageFragment>, Failure> {
    Ok(c.page_fragments_in(r).at("fragments")?.collect())
}

/// Register bytes `r` of `c`'s pages on side `s` for `access`.
#[inline(never)]
fn register_range<F: Fixture>(
    l: &mut Link<'_, F>,
    s: Side,
    c: &Chain,
    r: core::ops::Range<usize>,
    access: Access,
) -> Result<Boxed<Registration>, Failure> {
    register(l, s, &frags(c, r)?, access)
}

#[inline(never)]
fn register<F: Fixture>(
    l: &mut Link<'_, F>,
    s: Side,
    f: &[PageFragment],
    access: Access,
) -> Result<Boxed<Registration>, Failure> {
    // On the heap: a registration is 400 bytes, and a scenario holds several.
    try_boxed("register", || l.qp(s).register(f, access))
}

/// A zeroed page of side `s`, registered whole for `access`: the page, the registration,
/// its first segment.
#[inline(never)]
fn exposed_page<F: Fixture>(
    l: &mut Link<'_, F>,
    s: Side,
    access: Access,
) -> Result<(Chain, Boxed<Registration>, RegSegment), Failure> {
    let page = zeroed(l, s, PAGE_SIZE)?;
    let reg = register_range(l, s, &page, 0..PAGE_SIZE, access)?;
    let seg = *reg.segments.first().at("segment")?;
    announce(l, s)?;
    Ok((page, reg, seg))
}

/// Side `s` announces a handle it just registered by a Send the peer receives, as the
/// transport does (a handle travels in a header): a registration is only guaranteed for work
/// posted after it on the owner's own queue. A kernel FRWR's REG_MR runs when that send queue
/// gets to it; a peer using the handle before then gets a remote access error (seen on
/// rxe's kernel verbs under load: `release_of_a_live_registration_revokes`, "read while
/// registered"). The peer's receive and both completions are consumed here.
#[inline(never)]
fn announce<F: Fixture>(l: &mut Link<'_, F>, s: Side) -> Outcome {
    let peer = match s {
        Side::A => Side::B,
        Side::B => Side::A,
    };
    l.qp(peer)
        .post_recv(&[0])
        .at("post receive (the announcement)")?;
    post_ok(l, s, [send_inv(3, 0, 4, None)], "the handle's announcement")?;
    eq(
        "the handle's announcement received",
        1,
        l.completions(peer, 1, "the handle's announcement")?.len(),
    )
}

/// A zeroed page of side `s` and the fragments of its first `n` bytes.
#[inline(never)]
fn local<F: Fixture>(
    l: &Link<'_, F>,
    s: Side,
    n: usize,
) -> Result<(Chain, Vec<PageFragment>), Failure> {
    let c = zeroed(l, s, PAGE_SIZE)?;
    let f = frags(&c, 0..n)?;
    Ok((c, f))
}

/// Side `s` posts the chain `wrs`; its (one) signaled request completes successfully.
#[inline(never)]
fn post_ok<F: Fixture, const N: usize>(
    l: &mut Link<'_, F>,
    s: Side,
    wrs: [SendWr<'_>; N],
    step: &str,
) -> Outcome {
    l.qp(s).post_send(&wrs).at(step)?;
    l.expect_statuses(s, &[WcStatus::Success], step)
}

/// Side `s` releases `reg`; then `chains` go and the link finishes.
#[inline(never)]
fn release_finish<F: Fixture, T>(mut l: Link<'_, F>, s: Side, reg: RegId, chains: T) -> Outcome {
    l.qp(s).release(reg).at("release")?;
    drop(chains);
    l.finish()
}

/// Completions of side `s` until `want.len()` arrived: their ids and statuses are `want`,
/// in order.
#[inline(never)]
fn expect_ids<F: Fixture>(
    l: &mut Link<'_, F>,
    s: Side,
    want: &[(u64, WcStatus)],
    step: &str,
) -> Result<Vec<Completion>, Failure> {
    let wcs = l.completions(s, want.len(), step)?;
    let got: Vec<_> = wcs.iter().map(|c| (c.wr_id, c.status)).collect();
    eq(step, want, got.as_slice())?;
    Ok(wcs)
}

/// Side `a` posts `wr`, which must fail with a remote access error; side B's posted receive
/// is flushed, and both sides see the connection go.
#[inline(never)]
fn expect_remote_access<F: Fixture>(l: &mut Link<'_, F>, wr: SendWr<'_>, step: &str) -> Outcome {
    l.b.post_recv(&[0]).at(format!("{step}: post receive"))?;
    l.a.post_send(&[wr]).at(format!("{step}: post"))?;
    l.expect_statuses(Side::A, &[WcStatus::RemoteAccess], step)?;
    l.expect_statuses(
        Side::B,
        &[WcStatus::Flushed],
        &format!("{step}: peer's receive"),
    )?;
    l.expect_disconnected(Side::A, &format!("{step}: A"))?;
    l.expect_disconnected(Side::B, &format!("{step}: B"))
}

/// `Established` carries the peer's private data (a CM may pad it: compared as a prefix).
pub fn established_carries_private_data<F: Fixture>(fx: &mut F) -> Outcome {
    let want = fx.resources(&Limits::default());
    let (l, [got_a, got_b]) = Link::raw(fx, &Limits::default(), PD_A, PD_B)?;
    eq(
        "A got B's private data",
        PD_B,
        got_a.get(..PD_B.len()).unwrap_or(&got_a),
    )?;
    eq(
        "B got A's private data",
        PD_A,
        got_b.get(..PD_A.len()).unwrap_or(&got_b),
    )?;
    for q in [&l.a, &l.b] {
        let r = q.resources();
        eq(
            "buffers",
            (want.send_bufs, want.recv_bufs),
            (r.send_bufs, r.recv_bufs),
        )?;
        eq("connected", true, l.fx.is_connected(q))?;
    }
    l.finish()
}

/// A Send consumes the peer's oldest posted receive; bytes and lengths exact; completions in
/// order with the ids given.
pub fn sends_consume_receives_in_order<F: Fixture>(fx: &mut F) -> Outcome {
    let mut l = link(fx, &Limits::default())?;
    let max =
        l.a.resources()
            .send_buf_size
            .min(l.b.resources().recv_buf_size) as usize;
    l.b.post_recv(&[5, 2, 7]).at("post receives")?;
    let msgs = [pattern(100, 1), pattern(max, 2), pattern(1, 3)];
    for (i, m) in msgs.iter().enumerate() {
        l.send_bytes(Side::A, 100 + i as u64, i as u32, m)
            .at("send")?;
    }
    let sent = expect_ids(
        &mut l,
        Side::A,
        &[
            (100, WcStatus::Success),
            (101, WcStatus::Success),
            (102, WcStatus::Success),
        ],
        "send completions",
    )?;
    ensure(
        sent.iter().all(|c| c.kind == WcKind::Send),
        "send completions",
        "WcKind::Send",
    )?;
    let got = l.completions(Side::B, 3, "receives")?;
    eq("receives", 3, got.len())?;
    for ((c, buf), m) in got.iter().zip([5u32, 2, 7]).zip(&msgs) {
        let step = format!("receive into buffer {buf}");
        eq(
            &step,
            (u64::from(buf), WcKind::Recv { buf }, WcStatus::Success),
            (c.wr_id, c.kind, c.status),
        )?;
        eq(&step, (m.len() as u32, None), (c.byte_len, c.invalidated))?;
        bytes_eq(
            &step,
            m,
            l.b.recv_buf(buf).at(&step)?.get(..m.len()).at(&step)?,
        )?;
    }
    l.finish()
}

/// A posted receive buffer is the NIC's until its completion was polled: not readable, not
/// postable again; duplicates and unknown ids refuse the whole post.
pub fn receive_buffers_belong_to_the_nic_while_posted<F: Fixture>(fx: &mut F) -> Outcome {
    let mut l = link(fx, &Limits::default())?;
    let (nr, ns) = (l.b.resources().recv_bufs, l.a.resources().send_bufs);
    ensure(
        l.b.recv_buf(3).is_ok(),
        "recv_buf(3)",
        "readable while not posted",
    )?;
    eq(
        "recv_buf out of range",
        Some(ProviderError::BadId),
        l.b.recv_buf(nr).err(),
    )?;
    eq(
        "send_buf out of range",
        Some(ProviderError::BadId),
        l.a.send_buf(ns).err(),
    )?;
    l.b.post_recv(&[3]).at("post 3")?;
    eq(
        "recv_buf while posted",
        Some(ProviderError::BadId),
        l.b.recv_buf(3).err(),
    )?;
    eq("post twice", Err(ProviderError::BadId), l.b.post_recv(&[3]))?;
    eq(
        "duplicate in one post",
        Err(ProviderError::BadId),
        l.b.post_recv(&[4, 4]),
    )?;
    eq(
        "out of range in one post",
        Err(ProviderError::BadId),
        l.b.post_recv(&[4, nr]),
    )?;
    l.send_bytes(Side::A, 1, 0, b"hello").at("send")?;
    l.expect_statuses(Side::A, &[WcStatus::Success], "send")?;
    // Completed (the Send is acknowledged) but not yet polled: still the NIC's.
    eq(
        "recv_buf before the poll",
        Some(ProviderError::BadId),
        l.b.recv_buf(3).err(),
    )?;
    eq(
        "post before the poll",
        Err(ProviderError::BadId),
        l.b.post_recv(&[3]),
    )?;
    expect_ids(&mut l, Side::B, &[(3, WcStatus::Success)], "receive")?;
    eq(
        "bytes",
        Some(&b"hello"[..]),
        l.b.recv_buf(3).at("recv_buf")?.get(..5),
    )?;
    l.b.post_recv(&[3]).at("post 3 again")?;
    // Nothing of the refused posts was posted.
    l.b.post_recv(&[4]).at("post 4")?;
    l.finish()
}

/// A Send's buffer id and length are checked at post (nothing posted); a Send of exactly
/// the receive size fits.
pub fn sends_are_checked_at_post<F: Fixture>(fx: &mut F) -> Outcome {
    let mut l = link(fx, &Limits::default())?;
    let ra = l.a.resources();
    let size = ra.send_buf_size.min(l.b.resources().recv_buf_size);
    l.b.post_recv(&[0]).at("post receive")?;
    eq(
        "unknown buffer",
        Err(ProviderError::BadId),
        l.a.post_send(&[send_wr(1, ra.send_bufs, 1)]),
    )?;
    // The buffer exists and the length is wrong: BadFragments on every provider
    // (`Provider::post_send`'s contract; BadId is only for a buffer that does not exist).
    eq(
        "longer than the buffer",
        Err(ProviderError::BadFragments),
        l.a.post_send(&[send_wr(1, 0, ra.send_buf_size + 1)]),
    )?;
    eq("completions of refused posts", 0, l.ready(Side::A).len())?;
    let m = pattern(size as usize, 4);
    l.send_bytes(Side::A, 2, 0, &m).at("receive-sized send")?;
    l.expect_statuses(Side::A, &[WcStatus::Success], "receive-sized send")?;
    let got = l.completions(Side::B, 1, "receive")?;
    eq(
        "received length",
        alloc::vec![size],
        got.iter().map(|c| c.byte_len).collect::<Vec<_>>(),
    )?;
    l.finish()
}

/// `SendGather` appends page fragments to the buffer's bytes; more SGEs than `max_sge` and a
/// fragment leaving its page are refused at post.
pub fn gathered_send_appends_page_fragments<F: Fixture>(fx: &mut F) -> Outcome {
    let mut l = link(fx, &Limits::default())?;
    let max_sge = l.a.resources().max_sge as usize;
    let mut data = Chain::alloc_pages(&l.pa, 3 * PAGE_SIZE).at("pages")?;
    let bytes = pattern(3 * PAGE_SIZE, 7);
    data.copyback(0, &bytes).at("fill")?;
    let mut pages = frags(&data, 10..110)?;
    pages.extend(frags(&data, PAGE_SIZE + 5..PAGE_SIZE + 55)?);
    l.a.send_buf(2)
        .at("send_buf")?
        .get_mut(..4)
        .at("buf")?
        .copy_from_slice(b"HEAD");
    l.b.post_recv(&[1]).at("post receive")?;
    let gather = |wr_id, len, pages| SendWr {
        wr_id,
        op: SendOp::SendGather {
            buf: 2,
            len,
            pages,
            invalidate: None,
        },
        signaled: true,
    };
    l.a.post_send(&[gather(3, 4, &pages)]).at("gathered send")?;
    let got = l.completions(Side::B, 1, "receive")?;
    eq(
        "received length",
        alloc::vec![154],
        got.iter().map(|c| c.byte_len).collect::<Vec<_>>(),
    )?;
    let mut expect = Vec::from(&b"HEAD"[..]);
    expect.extend_from_slice(bytes.get(10..110).at("slice")?);
    expect.extend_from_slice(bytes.get(PAGE_SIZE + 5..PAGE_SIZE + 55).at("slice")?);
    bytes_eq(
        "gathered bytes",
        &expect,
        l.b.recv_buf(1).at("recv_buf")?.get(..154).at("slice")?,
    )?;
    let many = (0..max_sge)
        .map(|i| frags(&data, i..i + 1).and_then(|f| f.first().copied().at("fragment")))
        .collect::<Result<Vec<_>, _>>()?;
    eq(
        "buffer + max_sge fragments",
        Err(ProviderError::BadFragments),
        l.a.post_send(&[gather(4, 4, &many)]),
    )?;
    l.b.post_recv(&[1]).at("post receive")?;
    l.a.post_send(&[gather(5, 0, &many)])
        .at("max_sge fragments")?;
    let got = l.completions(Side::B, 1, "receive")?;
    eq(
        "received length",
        alloc::vec![max_sge as u32],
        got.iter().map(|c| c.byte_len).collect::<Vec<_>>(),
    )?;
    let bad = [PageFragment {
        addr: many.first().at("fragment")?.addr,
        offset: PAGE_SIZE - 96,
        len: 100,
    }];
    eq(
        "a fragment leaving its page",
        Err(ProviderError::BadFragments),
        l.a.post_send(&[gather(6, 0, &bad)]),
    )?;
    l.completions(Side::A, 2, "send completions")?;
    drop(data);
    l.finish()
}

/// RDMA Write and Read land byte-exact across pages and at in-page offsets on both sides,
/// touching nothing around the range.
pub fn rdma_write_and_read_are_byte_exact<F: Fixture>(fx: &mut F) -> Outcome {
    let mut l = link(fx, &Limits::default())?;
    let target = zeroed(&l, Side::B, 3 * PAGE_SIZE)?;
    let reg = register_range(
        &mut l,
        Side::B,
        &target,
        300..2 * PAGE_SIZE + 1000,
        Access::REMOTE_READ | Access::REMOTE_WRITE,
    )?;
    let total: u32 = reg.segments.iter().map(|s| s.length).sum();
    eq("registered bytes", (2 * PAGE_SIZE + 700) as u32, total)?;
    let seg = *reg.segments.first().at("segment")?;
    eq(
        "first segment's in-page offset",
        300,
        seg.offset % PAGE_SIZE as u64,
    )?;
    // A writes from its own pages, starting at in-page offset 123, to iova + 77.
    let n = 5000.min(seg.length as usize - 77);
    let mut src = Chain::alloc_pages(&l.pa, 3 * PAGE_SIZE).at("pages")?;
    let bytes = pattern(3 * PAGE_SIZE, 11);
    src.copyback(0, &bytes).at("fill")?;
    let sf = frags(&src, 123..123 + n)?;
    post_ok(
        &mut l,
        Side::A,
        [rdma(1, true, &sf, seg.handle, seg.offset + 77)],
        "RDMA Write",
    )?;
    let mut landed = alloc::vec![0u8; n];
    target.copydata(300 + 77, &mut landed).at("copydata")?;
    bytes_eq(
        "written bytes",
        bytes.get(123..123 + n).at("slice")?,
        &landed,
    )?;
    let mut before = [0xffu8; 77];
    target.copydata(300, &mut before).at("copydata")?;
    eq("bytes before the range", [0u8; 77], before)?;
    // A reads the segment back into a fresh chain at in-page offset 50.
    let sink = Chain::alloc_pages(&l.pa, 4 * PAGE_SIZE).at("pages")?;
    let len = seg.length as usize;
    let kf = frags(&sink, 50..50 + len)?;
    post_ok(
        &mut l,
        Side::A,
        [rdma(2, false, &kf, seg.handle, seg.offset)],
        "RDMA Read",
    )?;
    let (mut back, mut expect) = (alloc::vec![0u8; len], alloc::vec![0u8; len]);
    sink.copydata(50, &mut back).at("copydata")?;
    target.copydata(300, &mut expect).at("copydata")?;
    bytes_eq("read bytes", &expect, &back)?;
    bytes_eq(
        "read bytes: the written range",
        bytes.get(123..123 + n).at("slice")?,
        back.get(77..77 + n).at("slice")?,
    )?;
    eq("connected", true, l.fx.is_connected(&l.a))?;
    release_finish(l, Side::B, reg.id, (target, src, sink))
}

/// The last bytes of a registration can be read; one byte more is refused (where the
/// device checks bounds: [`Feature::RangeChecks`]).
pub fn rdma_past_the_end_of_a_registration_is_refused<F: Fixture>(fx: &mut F) -> Outcome {
    let range_checks = fx.supports(Feature::RangeChecks);
    let mut l = link(fx, &Limits::default())?;
    let target = zeroed(&l, Side::B, 2 * PAGE_SIZE)?;
    let reg = register_range(
        &mut l,
        Side::B,
        &target,
        0..2 * PAGE_SIZE,
        Access::REMOTE_READ,
    )?;
    let seg = *reg.segments.last().at("segment")?;
    let end = seg.offset + u64::from(seg.length);
    let (sink, kf) = local(&l, Side::A, 10)?;
    post_ok(
        &mut l,
        Side::A,
        [rdma(1, false, &kf, seg.handle, end - 10)],
        "read the last 10 bytes",
    )?;
    let kf = frags(&sink, 0..11)?;
    if range_checks {
        expect_remote_access(
            &mut l,
            rdma(2, false, &kf, seg.handle, end - 10),
            "read 1 byte past the end",
        )?;
    }
    release_finish(l, Side::B, reg.id, (target, sink))
}

/// A registration the peer may only read refuses an RDMA Write (nothing is written).
pub fn read_only_registration_refuses_write<F: Fixture>(fx: &mut F) -> Outcome {
    let mut l = link(fx, &Limits::default())?;
    let (target, reg, seg) = exposed_page(&mut l, Side::B, Access::REMOTE_READ)?;
    let mut src = Chain::alloc_pages(&l.pa, PAGE_SIZE).at("pages")?;
    src.copyback(0, &[0xaa; 16]).at("fill")?;
    let sf = frags(&src, 0..16)?;
    expect_remote_access(
        &mut l,
        rdma(1, true, &sf, seg.handle, seg.offset),
        "RDMA Write to a read-only registration",
    )?;
    let mut now = [1u8; 16];
    target.copydata(0, &mut now).at("copydata")?;
    eq("bytes after the refused write", [0u8; 16], now)?;
    release_finish(l, Side::B, reg.id, (target, src))
}

/// A registration the peer may only write refuses an RDMA Read.
pub fn write_only_registration_refuses_read<F: Fixture>(fx: &mut F) -> Outcome {
    let mut l = link(fx, &Limits::default())?;
    let (target, reg, seg) = exposed_page(&mut l, Side::B, Access::REMOTE_WRITE)?;
    let (sink, kf) = local(&l, Side::A, 16)?;
    expect_remote_access(
        &mut l,
        rdma(1, false, &kf, seg.handle, seg.offset),
        "RDMA Read of a write-only registration",
    )?;
    release_finish(l, Side::B, reg.id, (target, sink))
}

/// A handle that was never advertised is refused.
pub fn unknown_handle_is_refused<F: Fixture>(fx: &mut F) -> Outcome {
    let mut l = link(fx, &Limits::default())?;
    let (theirs, reg, s) = exposed_page(&mut l, Side::B, Access::REMOTE_READ)?;
    let (sink, kf) = local(&l, Side::A, 1)?;
    post_ok(
        &mut l,
        Side::A,
        [rdma(1, false, &kf, s.handle, s.offset)],
        "read with the handle",
    )?;
    expect_remote_access(
        &mut l,
        rdma(2, false, &kf, s.handle ^ 1, s.offset),
        "read with another handle",
    )?;
    release_finish(l, Side::B, reg.id, (theirs, sink))
}

/// Local Invalidate (always signaled, idempotent until release) makes the handle stale; an
/// invalidated registration still needs its release.
pub fn local_invalidate_makes_the_handle_stale<F: Fixture>(fx: &mut F) -> Outcome {
    let mut l = link(fx, &Limits::default())?;
    let (target, reg, seg) = exposed_page(&mut l, Side::B, Access::REMOTE_READ)?;
    l.b.post_send(&[local_inv(77, reg.id, false)])
        .at("LocalInv")?;
    expect_ids(
        &mut l,
        Side::B,
        &[(77, WcStatus::Success)],
        "LocalInv completion",
    )?;
    post_ok(
        &mut l,
        Side::B,
        [local_inv(78, reg.id, true)],
        "second LocalInv",
    )?;
    eq("live registrations", 1, l.fx.live_registrations(&l.b))?;
    let (sink, kf) = local(&l, Side::A, 1)?;
    expect_remote_access(
        &mut l,
        rdma(1, false, &kf, seg.handle, seg.offset),
        "read after LocalInv",
    )?;
    l.b.release(reg.id).at("release after the break")?;
    eq(
        "live registrations after release",
        0,
        l.fx.live_registrations(&l.b),
    )?;
    drop((target, sink));
    l.finish()
}

/// After `release` the id is unknown and the handle stale; a new registration gets another
/// handle and id.
pub fn release_makes_the_handle_stale_and_the_id_unknown<F: Fixture>(fx: &mut F) -> Outcome {
    let mut l = link(fx, &Limits::default())?;
    let (target, f) = local(&l, Side::B, PAGE_SIZE)?;
    let reg = register(&mut l, Side::B, &f, Access::REMOTE_WRITE)?;
    let seg = *reg.segments.first().at("segment")?;
    l.b.release(reg.id).at("release")?;
    eq(
        "release twice",
        Err(ProviderError::BadId),
        l.b.release(reg.id),
    )?;
    eq(
        "LocalInv after release",
        Err(ProviderError::BadId),
        l.b.post_send(&[local_inv(1, reg.id, true)]),
    )?;
    eq(
        "release of an unknown id",
        Err(ProviderError::BadId),
        l.b.release(RegId(0x1234_5678)),
    )?;
    let reg2 = register(&mut l, Side::B, &f, Access::REMOTE_WRITE)?;
    let seg2 = *reg2.segments.first().at("segment")?;
    ensure(
        seg2.handle != seg.handle && reg2.id != reg.id,
        "new registration",
        "a new handle and id",
    )?;
    let (src, sf) = local(&l, Side::A, 8)?;
    post_ok(
        &mut l,
        Side::A,
        [rdma(1, true, &sf, seg2.handle, seg2.offset)],
        "write with the new handle",
    )?;
    expect_remote_access(
        &mut l,
        rdma(2, true, &sf, seg.handle, seg.offset),
        "write with the released handle",
    )?;
    l.b.release(reg2.id).at("release")?;
    drop((target, src));
    l.finish()
}

/// `release` of a registration that is still valid (no LocalInv by the core) revokes it
/// synchronously.
pub fn release_of_a_live_registration_revokes<F: Fixture>(fx: &mut F) -> Outcome {
    let mut l = link(fx, &Limits::default())?;
    let (page, reg, seg) = exposed_page(&mut l, Side::A, Access::REMOTE_READ)?;
    eq(
        "read while registered",
        WcStatus::Success,
        l.probe_read(Side::B, seg.handle, seg.offset, 64)?,
    )?;
    l.a.release(reg.id).at("release")?;
    eq(
        "read after release",
        WcStatus::RemoteAccess,
        l.probe_read(Side::B, seg.handle, seg.offset, 64)?,
    )?;
    drop(page);
    l.finish()
}

/// A Send With Invalidate revokes the receiver's handle and names it in the receive
/// completion; a Local Invalidate of it afterwards is harmless.
pub fn send_with_invalidate_revokes_the_receivers_handle<F: Fixture>(fx: &mut F) -> Outcome {
    if !fx.supports(Feature::SendWithInvalidate) {
        return Ok(());
    }
    let mut l = link(fx, &Limits::default())?;
    let (target, reg, seg) = exposed_page(&mut l, Side::B, Access::REMOTE_WRITE)?;
    l.b.post_recv(&[4, 5]).at("post receives")?;
    l.a.send_buf(0)
        .at("send_buf")?
        .get_mut(..3)
        .at("buf")?
        .copy_from_slice(b"inv");
    post_ok(
        &mut l,
        Side::A,
        [send_inv(1, 0, 3, Some(seg.handle))],
        "Send With Invalidate",
    )?;
    let got = l.completions(Side::B, 1, "receive")?;
    let c = got.first().at("receive")?;
    eq(
        "receive",
        (WcStatus::Success, Some(seg.handle), 3),
        (c.status, c.invalidated, c.byte_len),
    )?;
    eq(
        "bytes",
        Some(&b"inv"[..]),
        l.b.recv_buf(4).at("recv_buf")?.get(..3),
    )?;
    post_ok(
        &mut l,
        Side::B,
        [local_inv(2, reg.id, true)],
        "LocalInv after the remote one",
    )?;
    let (src, sf) = local(&l, Side::A, 1)?;
    l.a.post_send(&[rdma(3, true, &sf, seg.handle, seg.offset)])
        .at("write with the invalidated handle")?;
    l.expect_statuses(
        Side::A,
        &[WcStatus::RemoteAccess],
        "write with the invalidated handle",
    )?;
    l.expect_statuses(Side::B, &[WcStatus::Flushed], "B's other receive")?;
    l.expect_disconnected(Side::A, "A")?;
    l.expect_disconnected(Side::B, "B")?;
    release_finish(l, Side::B, reg.id, (target, src))
}

/// Fragments no provider can register are refused: none, an empty one, one leaving its page.
pub fn invalid_fragments_are_refused<F: Fixture>(fx: &mut F) -> Outcome {
    let mut l = link(fx, &Limits::default())?;
    let c = zeroed(&l, Side::A, PAGE_SIZE)?;
    let addr = frags(&c, 0..1)?.first().at("fragment")?.addr;
    let rw = Access::REMOTE_READ | Access::REMOTE_WRITE;
    let cases: [(&str, &[PageFragment]); 3] = [
        ("no fragment", &[]),
        (
            "an empty fragment",
            &[PageFragment {
                addr,
                offset: 0,
                len: 0,
            }],
        ),
        (
            "a fragment leaving its page",
            &[PageFragment {
                addr,
                offset: PAGE_SIZE - 96,
                len: 200,
            }],
        ),
    ];
    for (what, f) in cases {
        eq(
            what,
            Err(ProviderError::BadFragments),
            l.a.register(f, rw).map(|r| r.id),
        )?;
    }
    eq("live registrations", 0, l.fx.live_registrations(&l.a))?;
    drop(c);
    l.finish()
}

/// More live registrations than `max_registrations` is `Busy` until one is released.
pub fn max_registrations_is_busy<F: Fixture>(fx: &mut F) -> Outcome {
    let limits = Limits {
        max_registrations: Some(3),
        ..Limits::default()
    };
    let mut l = link(fx, &limits)?;
    let (c, f) = local(&l, Side::A, PAGE_SIZE)?;
    // Each registration in a step of its own, only its id kept (kernel stack frames stay
    // under 1 KiB).
    let mut regs = Vec::new();
    for _ in 0..3 {
        regs.push(register_a(&mut l, &f, "register")?);
    }
    one_more_is_busy(&mut l, &f, "a fourth")?;
    eq("live registrations", 3, l.fx.live_registrations(&l.a))?;
    l.a.release(*regs.get(1).at("reg")?).at("release")?;
    let again = register_a(&mut l, &f, "register after release")?;
    ensure(
        regs.iter().all(|&r| r != again),
        "new id",
        "not one of the live ones",
    )?;
    one_more_is_busy(&mut l, &f, "one more")?;
    for id in [*regs.first().at("reg")?, *regs.get(2).at("reg")?, again] {
        l.a.release(id).at("release")?;
    }
    drop(c);
    l.finish()
}

/// Register `f` on side A for remote reading; its id.
#[inline(never)]
fn register_a<F: Fixture>(
    l: &mut Link<'_, F>,
    f: &[PageFragment],
    step: &str,
) -> Result<RegId, Failure> {
    Ok(l.a.register(f, Access::REMOTE_READ).at(step)?.id)
}

/// One more registration of `f` on side A is `Busy`.
#[inline(never)]
fn one_more_is_busy<F: Fixture>(l: &mut Link<'_, F>, f: &[PageFragment], step: &str) -> Outcome {
    eq(
        step,
        Err(ProviderError::Busy),
        l.a.register(f, Access::REMOTE_READ).map(|r| r.id),
    )
}

/// A registration keeps its pages alive after the chain that held them is dropped: the peer
/// still reads the data; the pages come back once it is released.
pub fn registrations_keep_their_pages_alive<F: Fixture>(fx: &mut F) -> Outcome {
    let mut l = link(fx, &Limits::default())?;
    let mut target = Chain::alloc_pages(&l.pb, 2 * PAGE_SIZE).at("pages")?;
    let data = pattern(2 * PAGE_SIZE, 21);
    target.copyback(0, &data).at("fill")?;
    let reg = register_range(
        &mut l,
        Side::B,
        &target,
        0..2 * PAGE_SIZE,
        Access::REMOTE_READ,
    )?;
    let reg2 = register_range(&mut l, Side::B, &target, 0..PAGE_SIZE, Access::REMOTE_WRITE)?;
    drop(target);
    let s = *reg.segments.first().at("segment")?;
    let n = (s.length as usize - 10).min(PAGE_SIZE);
    let (sink, kf) = local(&l, Side::A, n)?;
    post_ok(
        &mut l,
        Side::A,
        [rdma(1, false, &kf, s.handle, s.offset + 10)],
        "read after the chain was dropped",
    )?;
    let mut got = alloc::vec![0u8; n];
    sink.copydata(0, &mut got).at("copydata")?;
    bytes_eq("data read", data.get(10..10 + n).at("slice")?, &got)?;
    l.b.release(reg.id).at("release")?;
    l.b.release(reg2.id).at("release")?;
    drop(sink);
    l.finish()
}

/// A chain that does not fit the free send-queue entries is `Busy` (nothing posted) until
/// completions are polled; a chain longer than the queue never fits.
pub fn send_queue_depth_is_busy_until_completions_are_polled<F: Fixture>(fx: &mut F) -> Outcome {
    let limits = Limits {
        max_send_wr: Some(4),
        ..Limits::default()
    };
    let mut l = link(fx, &limits)?;
    l.b.post_recv(&(0..10).collect::<Vec<_>>())
        .at("post receives")?;
    l.a.post_send(&(0..4).map(|i| send_wr(i, 0, 8)).collect::<Vec<_>>())
        .at("four sends")?;
    eq(
        "a fifth",
        Err(ProviderError::Busy),
        l.a.post_send(&[send_wr(9, 0, 8)]),
    )?;
    eq(
        "receives at the peer",
        4,
        l.completions(Side::B, 4, "receives")?.len(),
    )?;
    let mut one = [Completion::EMPTY];
    let mut idle = 0;
    while l.a.poll_cq(&mut one) == 0 {
        l.idle(&mut idle, false, "one send completion")?;
    }
    eq(
        "two in one free entry",
        Err(ProviderError::Busy),
        l.a.post_send(&[send_wr(10, 0, 8), send_wr(11, 0, 8)]),
    )?;
    l.a.post_send(&[send_wr(12, 0, 8)])
        .at("one in one free entry")?;
    eq(
        "send completions",
        4,
        l.completions(Side::A, 4, "the other completions")?.len(),
    )?;
    let five: Vec<_> = (0..5).map(|i| send_wr(30 + i, 0, 8)).collect();
    eq(
        "a chain longer than the queue",
        Err(ProviderError::Busy),
        l.a.post_send(&five),
    )?;
    eq(
        "the last receive at the peer",
        1,
        l.completions(Side::B, 1, "receive")?.len(),
    )?;
    l.finish()
}

/// A malformed request anywhere in a chain refuses the whole chain: nothing executes.
pub fn a_malformed_request_refuses_the_whole_chain<F: Fixture>(fx: &mut F) -> Outcome {
    let mut l = link(fx, &Limits::default())?;
    let res = l.a.resources();
    l.b.post_recv(&[0, 1]).at("post receives")?;
    let (c, f) = local(&l, Side::A, PAGE_SIZE)?;
    let reg = register(&mut l, Side::A, &f, Access::REMOTE_READ)?;
    let seg = *reg.segments.first().at("segment")?;
    let too_many = (0..=res.max_sge as usize)
        .map(|i| frags(&c, i..i + 1).and_then(|f| f.first().copied().at("fragment")))
        .collect::<Result<Vec<_>, _>>()?;
    let addr = f.first().at("fragment")?.addr;
    let leaves_page = [PageFragment {
        addr,
        offset: 1,
        len: PAGE_SIZE,
    }];
    // (The provider may have internal work outstanding, e.g. a kernel FRWR's REG_MR.)
    let outstanding = l.fx.sq_outstanding(&l.a);
    let cases: [(&str, SendWr<'_>, ProviderError); 4] = [
        (
            "an unknown send buffer",
            send_wr(2, res.send_bufs + 35, 1),
            ProviderError::BadId,
        ),
        (
            "LocalInv of an unknown registration",
            local_inv(2, RegId(reg.id.0 ^ 0x100), true),
            ProviderError::BadId,
        ),
        (
            "more SGEs than max_sge",
            rdma(2, false, &too_many, seg.handle, seg.offset),
            ProviderError::BadFragments,
        ),
        (
            "a fragment leaving its page",
            rdma(2, true, &leaves_page, seg.handle, seg.offset),
            ProviderError::BadFragments,
        ),
    ];
    for (what, bad, err) in cases {
        eq(
            what,
            Err(err),
            l.a.post_send(&[send_wr(1, 0, 4), local_inv(3, reg.id, true), bad]),
        )?;
    }
    eq(
        "completions of the refused chains",
        0,
        l.ready(Side::A).len(),
    )?;
    eq("send queue", outstanding, l.fx.sq_outstanding(&l.a))?;
    // The registration is still valid, and nothing reached the peer.
    eq(
        "the registration after the refusals",
        WcStatus::Success,
        l.probe_read(Side::B, seg.handle, seg.offset, 1)?,
    )?;
    send_raw(&mut l.a, 4, 0, &[7; 13]).at("a valid send")?;
    let got = l.completions(Side::B, 1, "receive")?;
    eq(
        "first receive at the peer",
        alloc::vec![(0, 13)],
        got.iter()
            .map(|c| (c.wr_id, c.byte_len))
            .collect::<Vec<_>>(),
    )?;
    l.a.release(reg.id).at("release")?;
    drop(c);
    l.finish()
}

/// An error in the middle of a chain flushes the rest, unsignaled requests included; what
/// went before executed.
pub fn an_error_mid_chain_flushes_the_rest<F: Fixture>(fx: &mut F) -> Outcome {
    let mut l = link(fx, &Limits::default())?;
    l.b.post_recv(&[0, 1]).at("post receives")?;
    let (c, f) = local(&l, Side::A, 8)?;
    let unsig = |i| SendWr {
        signaled: false,
        ..send_wr(i, 0, 4)
    };
    l.a.post_send(&[
        unsig(1),
        rdma(2, false, &f, 0x4242, 0),
        unsig(3),
        send_wr(4, 0, 4),
    ])
    .at("chain")?;
    expect_ids(
        &mut l,
        Side::A,
        &[
            (2, WcStatus::RemoteAccess),
            (3, WcStatus::Flushed),
            (4, WcStatus::Flushed),
        ],
        "chain completions",
    )?;
    l.expect_statuses(
        Side::B,
        &[WcStatus::Success, WcStatus::Flushed],
        "peer: first Send arrived, second receive flushed",
    )?;
    eq("send queue", 0, l.fx.sq_outstanding(&l.a))?;
    l.expect_disconnected(Side::A, "A")?;
    l.expect_disconnected(Side::B, "B")?;
    drop(c);
    l.finish()
}

/// `disconnect` (idempotent) flushes both sides' receives and refuses posts; registrations
/// still need their release.
pub fn disconnect_flushes_both_sides_and_refuses_posts<F: Fixture>(fx: &mut F) -> Outcome {
    let mut l = link(fx, &Limits::default())?;
    l.a.post_recv(&[1, 2]).at("post receives")?;
    l.b.post_recv(&[3]).at("post receive")?;
    let c = zeroed(&l, Side::A, PAGE_SIZE)?;
    let reg = register_range(&mut l, Side::A, &c, 0..PAGE_SIZE, Access::REMOTE_READ)?;
    l.b.disconnect();
    l.b.disconnect();
    expect_ids(
        &mut l,
        Side::A,
        &[(1, WcStatus::Flushed), (2, WcStatus::Flushed)],
        "A's receives",
    )?;
    l.expect_statuses(Side::B, &[WcStatus::Flushed], "B's receive")?;
    l.expect_disconnected(Side::A, "A")?;
    l.expect_disconnected(Side::B, "B")?;
    eq(
        "LocalInv after the loss",
        Err(ProviderError::NotConnected),
        l.a.post_send(&[local_inv(1, reg.id, true)]),
    )?;
    ensure(
        l.a.recv_buf(1).is_ok(),
        "flushed receive buffer",
        "back to the owner",
    )?;
    eq("live registrations", 1, l.fx.live_registrations(&l.a))?;
    l.a.release(reg.id).at("release after the loss")?;
    eq(
        "live registrations after release",
        0,
        l.fx.live_registrations(&l.a),
    )?;
    drop(c);
    l.finish()
}

/// Dropping a queue pair disconnects it: the peer sees `Disconnected` and its receives flush;
/// the dropped side's registrations are released with it.
pub fn dropping_a_queue_pair_disconnects_the_peer<F: Fixture>(fx: &mut F) -> Outcome {
    let mut l = link(fx, &Limits::default())?;
    let target = zeroed(&l, Side::B, PAGE_SIZE)?;
    let _reg = register_range(&mut l, Side::B, &target, 0..PAGE_SIZE, Access::REMOTE_READ)?;
    drop(target);
    l.a.post_recv(&[0]).at("post receive")?;
    let Link {
        fx,
        mut a,
        b,
        pa,
        pb,
    } = l;
    drop(b);
    let mut idle = 0;
    let ev = loop {
        if let Some(e) = a.poll_event() {
            break e;
        }
        idle += 1;
        if idle > fx.idle_limit() {
            return Err(fail("A after B was dropped", "Disconnected", "no event"));
        }
        // Nothing to wait on but A: its CM event or its flushed receive.
        let mut wcs = [Completion::EMPTY; 1];
        if a.poll_cq(&mut wcs) == 1 {
            let [w] = wcs;
            eq("A's receive", (0, WcStatus::Flushed), (w.wr_id, w.status))?;
            idle = 0;
        }
    };
    eq("A's event", CmEvent::Disconnected, ev)?;
    drop((a, pa, pb));
    eq("teardown: pages held", 0, fx.pages_in_use())?;
    fx.audit().map_err(|e| fail("teardown: audit", "clean", e))
}

/// Twenty rounds of RDMA Write + Send (With Invalidate where supported) into fresh pages:
/// the data lands every time and every page comes back.
pub fn pages_are_all_returned_after_a_busy_session<F: Fixture>(fx: &mut F) -> Outcome {
    let swi = fx.supports(Feature::SendWithInvalidate);
    let mut l = link(fx, &Limits::default())?;
    for round in 0..20u8 {
        let step = format!("round {round}");
        let target = zeroed(&l, Side::B, 2 * PAGE_SIZE)?;
        let reg = register_range(
            &mut l,
            Side::B,
            &target,
            7..PAGE_SIZE + 9,
            Access::REMOTE_WRITE | Access::REMOTE_READ,
        )?;
        let s = *reg.segments.first().at("segment")?;
        // The peer learns the handle from a message B sends after registering, as the
        // transport does: a registration is only guaranteed for work requests posted after
        // it on B's own queue (a kernel FRWR's REG_MR runs when B's send queue gets to it;
        // used before that, A's Write failed with a remote access error under load).
        l.a.post_recv(&[0]).at("post receive (A)")?;
        post_ok(&mut l, Side::B, [send_inv(3, 0, 4, None)], &step)?;
        eq(
            format!("{step}: the handle's announcement received"),
            1,
            l.completions(Side::A, 1, &step)?.len(),
        )?;
        let n = s.length as usize;
        let mut src = Chain::alloc_pages(&l.pa, n).at("pages")?;
        let data = pattern(n, round);
        src.copyback(0, &data).at("fill")?;
        let sf = frags(&src, 0..n)?;
        l.b.post_recv(&[u32::from(round % 4)]).at("post receive")?;
        let invalidate = swi.then_some(s.handle);
        let unsignaled_write = SendWr {
            signaled: false,
            ..rdma(1, true, &sf, s.handle, s.offset)
        };
        post_ok(
            &mut l,
            Side::A,
            [unsignaled_write, send_inv(2, 0, 16, invalidate)],
            &step,
        )?;
        let got = l.completions(Side::B, 1, &step)?;
        eq(
            format!("{step}: invalidated"),
            alloc::vec![invalidate],
            got.iter().map(|c| c.invalidated).collect::<Vec<_>>(),
        )?;
        let mut landed = alloc::vec![0u8; n];
        target.copydata(7, &mut landed).at("copydata")?;
        bytes_eq(&step, &data, &landed)?;
        drop((target, src));
        l.b.release(reg.id).at("release")?;
    }
    l.finish()
}
