//! NLM v4 / NSM v1: golden encodings derived by hand from the XDR of X/Open XNFS (chapters
//! 10 and 11; RFC 1813 appendix II), round trips, hostile lengths, and the lock table's
//! behaviour (conflicts, upgrade / downgrade, split ranges, the blocking queue, FREE_ALL,
//! shares, the grace period) and the monitor's.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use nfs_proto::nlm::*;
use nfs_proto::nsm::{self, Mon, MonId, Monitor, MyId, StatChge};
use onc_rpc::xdr::{Decoder, Encoder, XdrError};

fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_be_bytes()).collect()
}

fn enc(f: impl FnOnce(&mut Encoder)) -> Vec<u8> {
    let mut e = Encoder::new();
    f(&mut e);
    e.finish().unwrap()
}

fn lock(host: &str, fh: &[u8], svid: i32, off: u64, len: u64) -> Nlm4Lock {
    Nlm4Lock {
        caller_name: host.as_bytes().to_vec(),
        fh: fh.to_vec(),
        oh: format!("{host}-{svid}").into_bytes(),
        svid,
        l_offset: off,
        l_len: len,
    }
}

#[test]
fn lockargs_golden() {
    let a = LockArgs {
        cookie: vec![0, 0, 0, 1],
        block: true,
        exclusive: true,
        alock: Nlm4Lock {
            caller_name: b"host".to_vec(),
            fh: vec![0xaa, 0xbb, 0xcc],
            oh: b"o".to_vec(),
            svid: 7,
            l_offset: 0x1_0000_0002,
            l_len: 0,
        },
        reclaim: false,
        state: 3,
    };
    let want = words(&[
        4,
        0x0000_0001, // cookie<>: length 4, bytes
        1,           // block
        1,           // exclusive
        4,
        0x686f_7374, // caller_name "host"
        3,
        0xaabb_cc00, // fh: 3 bytes + 1 pad
        1,
        0x6f00_0000, // oh "o" + 3 pad
        7,           // svid
        1,
        2, // l_offset (uint64, high word first)
        0,
        0, // l_len 0: to the end
        0, // reclaim
        3, // state
    ]);
    let got = enc(|e| a.encode(e));
    assert_eq!(got, want);
    assert_eq!(LockArgs::decode(&mut Decoder::new(&want)).unwrap(), a);
}

#[test]
fn testres_and_shareargs_golden() {
    let denied = TestRes {
        cookie: vec![9],
        stat: Nlm4Stat::DENIED.0,
        holder: Some(Holder {
            exclusive: false,
            svid: -2,
            oh: vec![],
            l_offset: 5,
            l_len: 10,
        }),
    };
    let want = words(&[
        1,
        0x0900_0000, // cookie
        1,           // NLM4_DENIED
        0,           // exclusive
        0xffff_fffe, // svid -2
        0,           // oh, empty
        0,
        5, // l_offset
        0,
        10, // l_len
    ]);
    assert_eq!(enc(|e| denied.encode(e)), want);
    assert_eq!(TestRes::decode(&mut Decoder::new(&want)).unwrap(), denied);
    // GRANTED carries no holder.
    let ok = TestRes {
        cookie: vec![],
        stat: 0,
        holder: None,
    };
    assert_eq!(enc(|e| ok.encode(e)), words(&[0, 0]));
    // A holder with a status other than DENIED cannot be encoded.
    let mut bad = Encoder::new();
    TestRes {
        holder: denied.holder.clone(),
        ..ok.clone()
    }
    .encode(&mut bad);
    assert!(bad.finish().is_err());

    let s = ShareArgs {
        cookie: vec![],
        share: Share {
            caller_name: b"pc".to_vec(),
            fh: vec![1, 2, 3, 4],
            oh: vec![5],
            mode: 2,
            access: 1,
        },
        reclaim: true,
    };
    let want = words(&[0, 2, 0x7063_0000, 4, 0x0102_0304, 1, 0x0500_0000, 2, 1, 1]);
    assert_eq!(enc(|e| s.encode(e)), want);
    assert_eq!(ShareArgs::decode(&mut Decoder::new(&want)).unwrap(), s);
    // fsh4_mode 4 does not exist.
    let mut w = want.clone();
    w[28..32].copy_from_slice(&4u32.to_be_bytes());
    assert!(matches!(
        ShareArgs::decode(&mut Decoder::new(&w)),
        Err(XdrError::BadEnum { .. })
    ));
}

#[test]
fn nsm_golden() {
    let m = Mon {
        mon_id: MonId {
            mon_name: b"srv".to_vec(),
            my_id: MyId {
                my_name: b"lo".to_vec(),
                my_prog: 100_021,
                my_vers: 4,
                my_proc: 16,
            },
        },
        priv_: [0x11; 16],
    };
    let want = words(&[
        3,
        0x7372_7600, // mon_name "srv"
        2,
        0x6c6f_0000, // my_name "lo"
        100_021,
        4,
        16, // my_prog, my_vers, my_proc
        0x1111_1111,
        0x1111_1111,
        0x1111_1111,
        0x1111_1111, // priv[16]
    ]);
    assert_eq!(enc(|e| m.encode(e)), want);
    assert_eq!(Mon::decode(&mut Decoder::new(&want)).unwrap(), m);
    let c = StatChge {
        mon_name: b"a".to_vec(),
        state: 5,
    };
    assert_eq!(enc(|e| c.encode(e)), words(&[1, 0x6100_0000, 5]));
    // priv cut short.
    assert!(Mon::decode(&mut Decoder::new(&want[..want.len() - 4])).is_err());
}

#[test]
fn hostile_lengths_are_refused_before_allocation() {
    // A cookie claiming 4 GiB, and one just over MAXNETOBJ_SZ.
    for len in [u32::MAX, MAXNETOBJ_SZ as u32 + 1] {
        let w = words(&[len, 0, 0]);
        assert!(matches!(
            LockArgs::decode(&mut Decoder::new(&w)),
            Err(XdrError::TooLong { .. })
        ));
    }
    // caller_name over LM_MAXSTRLEN.
    let mut w = words(&[0, 1, 1, LM_MAXSTRLEN as u32 + 1]);
    w.extend(vec![0u8; 2048]);
    assert!(LockArgs::decode(&mut Decoder::new(&w)).is_err());
    // Every truncation of a valid encoding fails without panicking.
    let a = LockArgs {
        cookie: vec![1, 2, 3],
        alock: lock("h", b"fh", 1, 0, 1),
        ..LockArgs::default()
    };
    let full = enc(|e| a.encode(e));
    for n in 0..full.len() {
        assert!(
            LockArgs::decode(&mut Decoder::new(&full[..n])).is_err(),
            "{n}"
        );
    }
}

#[test]
fn ranges_checked() {
    assert_eq!(
        Range::from_wire(10, 0),
        Some(Range {
            start: 10,
            end: u64::MAX
        })
    );
    assert_eq!(
        Range::from_wire(u64::MAX, 1).unwrap().to_wire(),
        (u64::MAX, 0)
    );
    assert_eq!(Range::from_wire(u64::MAX, 2), None);
    assert_eq!(
        Range::from_wire(1, u64::MAX),
        Some(Range {
            start: 1,
            end: u64::MAX
        })
    );
    assert_eq!(Range::from_wire(2, u64::MAX), None);
    assert_eq!(Range::from_wire(0, 5).unwrap().to_wire(), (0, 5));
}

type T = LockTable<u32>;

fn la(host: &str, svid: i32, ex: bool, block: bool, off: u64, len: u64) -> LockArgs {
    LockArgs {
        cookie: vec![svid as u8],
        block,
        exclusive: ex,
        alock: lock(host, b"F", svid, off, len),
        reclaim: false,
        state: 1,
    }
}

fn ta(host: &str, svid: i32, ex: bool, off: u64, len: u64) -> TestArgs {
    TestArgs {
        cookie: vec![],
        exclusive: ex,
        alock: lock(host, b"F", svid, off, len),
    }
}

fn ua(host: &str, svid: i32, off: u64, len: u64) -> UnlockArgs {
    UnlockArgs {
        cookie: vec![],
        alock: lock(host, b"F", svid, off, len),
    }
}

fn ranges(t: &T) -> Vec<(i32, bool, u64, u64)> {
    let mut v: Vec<_> = t
        .locks(b"F")
        .iter()
        .map(|l| (l.owner.svid, l.exclusive, l.range.start, l.range.end))
        .collect();
    v.sort();
    v
}

#[test]
fn conflicts_shared_exclusive_and_ranges() {
    let mut t = T::default();
    assert_eq!(
        t.lock(&la("a", 1, false, false, 0, 10), 0),
        Nlm4Stat::GRANTED
    );
    // Shared with shared: fine; exclusive over it: no.
    assert_eq!(
        t.lock(&la("b", 2, false, false, 5, 10), 0),
        Nlm4Stat::GRANTED
    );
    assert_eq!(t.lock(&la("c", 3, true, false, 9, 1), 0), Nlm4Stat::DENIED);
    // Just past both: fine.
    assert_eq!(
        t.lock(&la("c", 3, true, false, 15, 1), 0),
        Nlm4Stat::GRANTED
    );
    // Same host, another svid, is another owner.
    assert_eq!(
        t.lock(&la("c", 4, false, false, 15, 0), 0),
        Nlm4Stat::DENIED
    );
    // TEST reports the holder, with the range as it was given.
    let (st, h) = t.test(&ta("d", 9, true, 12, 0));
    assert_eq!(st, Nlm4Stat::DENIED);
    let h = h.unwrap();
    assert_eq!(
        (h.svid, h.exclusive, h.l_offset, h.l_len),
        (2, false, 5, 10)
    );
    assert_eq!(h.oh, b"b-2");
    assert_eq!(t.test(&ta("d", 9, false, 0, 15)), (Nlm4Stat::GRANTED, None));
    // A lock to the end of the file conflicts with anything past it.
    assert_eq!(
        t.lock(&la("e", 5, true, false, 1000, 0), 0),
        Nlm4Stat::GRANTED
    );
    assert_eq!(
        t.lock(&la("f", 6, false, false, u64::MAX, 1), 0),
        Nlm4Stat::DENIED
    );
    let (_, h) = t.test(&ta("f", 6, false, u64::MAX - 1, 2));
    assert_eq!((h.unwrap().l_offset, 0), (1000, 0));
    // Ranges past 2^64: FBIG.
    assert_eq!(
        t.lock(&la("f", 6, true, false, u64::MAX, 2), 0),
        Nlm4Stat::FBIG
    );
    assert_eq!(t.test(&ta("f", 6, true, 3, u64::MAX)).0, Nlm4Stat::FBIG);
    // Another file is independent.
    let mut other = la("z", 1, true, false, 0, 0);
    other.alock.fh = b"G".to_vec();
    assert_eq!(t.lock(&other, 0), Nlm4Stat::GRANTED);
}

#[test]
fn upgrade_downgrade_split_and_merge() {
    let mut t = T::default();
    assert_eq!(
        t.lock(&la("a", 1, false, false, 0, 100), 0),
        Nlm4Stat::GRANTED
    );
    // Upgrade the middle: the shared lock is split around it.
    assert_eq!(
        t.lock(&la("a", 1, true, false, 40, 20), 0),
        Nlm4Stat::GRANTED
    );
    assert_eq!(
        ranges(&t),
        vec![(1, false, 0, 39), (1, false, 60, 99), (1, true, 40, 59)]
    );
    // Another owner may share outside the exclusive part only.
    assert_eq!(
        t.lock(&la("b", 2, false, false, 30, 5), 0),
        Nlm4Stat::GRANTED
    );
    assert_eq!(
        t.lock(&la("b", 2, false, false, 50, 1), 0),
        Nlm4Stat::DENIED
    );
    // An upgrade that meets another owner's shared lock is refused.
    assert_eq!(t.lock(&la("a", 1, true, false, 0, 35), 0), Nlm4Stat::DENIED);
    // Downgrade back: the pieces merge into one shared range again.
    assert_eq!(
        t.lock(&la("a", 1, false, false, 40, 20), 0),
        Nlm4Stat::GRANTED
    );
    assert_eq!(ranges(&t), vec![(1, false, 0, 99), (2, false, 30, 34)]);
    // Unlock a hole in the middle: split in two.
    assert_eq!(t.unlock(&ua("a", 1, 10, 10)).0, Nlm4Stat::GRANTED);
    assert_eq!(
        ranges(&t),
        vec![(1, false, 0, 9), (1, false, 20, 99), (2, false, 30, 34)]
    );
    // Unlocking what is not held is fine; unlock to EOF clears the owner.
    assert_eq!(t.unlock(&ua("q", 7, 0, 0)).0, Nlm4Stat::GRANTED);
    assert_eq!(t.unlock(&ua("a", 1, 0, 0)).0, Nlm4Stat::GRANTED);
    assert_eq!(ranges(&t), vec![(2, false, 30, 34)]);
    assert_eq!(t.lock_count(), 1);
}

#[test]
fn blocking_queue_grants_in_order() {
    let mut t = T::default();
    assert_eq!(
        t.lock(&la("a", 1, true, false, 0, 0), 10),
        Nlm4Stat::GRANTED
    );
    // Two exclusive waiters, then a non-blocking try.
    assert_eq!(
        t.lock(&la("b", 2, true, true, 0, 10), 20),
        Nlm4Stat::BLOCKED
    );
    assert_eq!(
        t.lock(&la("c", 3, true, true, 5, 10), 30),
        Nlm4Stat::BLOCKED
    );
    assert_eq!(t.lock(&la("d", 4, true, false, 0, 1), 40), Nlm4Stat::DENIED);
    // b polls again: still blocked, still one entry, still first.
    assert_eq!(
        t.lock(&la("b", 2, true, true, 0, 10), 20),
        Nlm4Stat::BLOCKED
    );
    assert_eq!(t.blocked_count(), 2);
    // Partial unlock that frees nothing either waiter wants entirely.
    let (_, g) = t.unlock(&ua("a", 1, 100, 0));
    assert!(g.is_empty());
    // Unlock all: b is granted (the first in the queue); c still conflicts with b.
    let (st, g) = t.unlock(&ua("a", 1, 0, 0));
    assert_eq!(st, Nlm4Stat::GRANTED);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].peer, 20);
    assert_eq!(g[0].args.alock, la("b", 2, true, true, 0, 10).alock);
    assert_eq!(g[0].args.cookie, vec![2]);
    assert!(g[0].args.exclusive);
    assert_eq!(ranges(&t), vec![(2, true, 0, 9)]);
    t.granted_reply(&g[0].args, true);
    // b unlocks: c next.
    let (_, g) = t.unlock(&ua("b", 2, 0, 10));
    assert_eq!(g.iter().map(|g| g.peer).collect::<Vec<_>>(), vec![30]);
    assert_eq!(t.blocked_count(), 0);
    // Shared waiters are all granted together.
    assert_eq!(
        t.lock(&la("e", 5, false, true, 5, 1), 50),
        Nlm4Stat::BLOCKED
    );
    assert_eq!(
        t.lock(&la("f", 6, false, true, 5, 1), 60),
        Nlm4Stat::BLOCKED
    );
    let (_, g) = t.unlock(&ua("c", 3, 0, 0));
    assert_eq!(g.iter().map(|g| g.peer).collect::<Vec<_>>(), vec![50, 60]);
}

#[test]
fn cancel_and_refused_grant() {
    let mut t = T::default();
    t.lock(&la("a", 1, true, false, 0, 0), 1);
    assert_eq!(t.lock(&la("b", 2, true, true, 0, 0), 2), Nlm4Stat::BLOCKED);
    assert_eq!(t.lock(&la("c", 3, true, true, 0, 0), 3), Nlm4Stat::BLOCKED);
    let canc = |h: &str, s: i32| CancArgs {
        cookie: vec![],
        block: true,
        exclusive: true,
        alock: lock(h, b"F", s, 0, 0),
    };
    // b gives up: c is next.
    assert_eq!(t.cancel(&canc("b", 2)).0, Nlm4Stat::GRANTED);
    assert_eq!(t.cancel(&canc("b", 2)).0, Nlm4Stat::DENIED);
    let (_, g) = t.unlock(&ua("a", 1, 0, 0));
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].peer, 3);
    // c's client says it no longer waits: the lock goes, nobody else waits.
    assert!(t.granted_reply(&g[0].args, false).is_empty());
    assert_eq!(t.lock_count(), 0);
    // A cancel racing a grant whose callback is unanswered releases the granted lock.
    t.lock(&la("a", 1, true, false, 0, 0), 1);
    assert_eq!(t.lock(&la("c", 3, true, true, 0, 0), 3), Nlm4Stat::BLOCKED);
    assert_eq!(t.lock(&la("d", 4, true, true, 0, 0), 4), Nlm4Stat::BLOCKED);
    let (_, g) = t.unlock(&ua("a", 1, 0, 0));
    assert_eq!(g[0].peer, 3);
    let (st, g) = t.cancel(&canc("c", 3));
    assert_eq!(st, Nlm4Stat::GRANTED);
    assert_eq!(g.iter().map(|g| g.peer).collect::<Vec<_>>(), vec![4]);
}

#[test]
fn free_all_releases_a_host_and_wakes_waiters() {
    let mut t = T::default();
    t.lock(&la("a", 1, true, false, 0, 10), 1);
    t.lock(&la("a", 2, true, false, 20, 10), 1);
    let mut g = la("a", 3, true, false, 0, 0);
    g.alock.fh = b"G".to_vec();
    t.lock(&g, 1);
    assert_eq!(t.lock(&la("b", 1, true, true, 0, 0), 2), Nlm4Stat::BLOCKED);
    assert_eq!(t.lock(&la("a", 9, true, true, 0, 0), 1), Nlm4Stat::BLOCKED);
    assert_eq!(t.lock_count(), 3);
    let grants = t.free_host(b"a");
    // a's locks and its own waiter are gone; b gets the file.
    assert_eq!(grants.iter().map(|g| g.peer).collect::<Vec<_>>(), vec![2]);
    assert_eq!(ranges(&t), vec![(1, true, 0, u64::MAX)]);
    assert!(t.locks(b"G").is_empty());
    assert_eq!(t.blocked_count(), 0);
}

#[test]
fn grace_period_serves_only_reclaims() {
    let mut t = T::default();
    t.set_grace(true);
    assert_eq!(
        t.lock(&la("a", 1, true, false, 0, 0), 0),
        Nlm4Stat::DENIED_GRACE_PERIOD
    );
    assert_eq!(
        t.test(&ta("a", 1, true, 0, 0)).0,
        Nlm4Stat::DENIED_GRACE_PERIOD
    );
    assert_eq!(t.unlock(&ua("a", 1, 0, 0)).0, Nlm4Stat::DENIED_GRACE_PERIOD);
    let mut r = la("a", 1, true, false, 0, 0);
    r.reclaim = true;
    assert_eq!(t.lock(&r, 0), Nlm4Stat::GRANTED);
    t.set_grace(false);
    // After the grace period: a reclaim is refused, the reclaimed lock conflicts.
    let mut r2 = la("b", 2, true, false, 0, 0);
    r2.reclaim = true;
    assert_eq!(t.lock(&r2, 0), Nlm4Stat::DENIED_GRACE_PERIOD);
    assert_eq!(t.lock(&la("b", 2, true, false, 0, 1), 0), Nlm4Stat::DENIED);
    assert_eq!(t.test(&ta("b", 2, false, 0, 1)).1.unwrap().svid, 1);
}

#[test]
fn shares_and_limits() {
    let mut t = LockTable::<u32>::new(Limits {
        locks: 3,
        blocked: 1,
        shares: 2,
    });
    let sh = |h: &str, oh: u8, mode, access| ShareArgs {
        cookie: vec![],
        share: Share {
            caller_name: h.as_bytes().to_vec(),
            fh: b"F".to_vec(),
            oh: vec![oh],
            mode,
            access,
        },
        reclaim: false,
    };
    // a reads and denies writers; b wants to write: denied; b reads: fine.
    assert_eq!(t.share(&sh("a", 1, 2, 1)), Nlm4Stat::GRANTED);
    assert_eq!(t.share(&sh("b", 1, 0, 2)), Nlm4Stat::DENIED);
    assert_eq!(t.share(&sh("b", 1, 0, 1)), Nlm4Stat::GRANTED);
    assert_eq!(t.share(&sh("c", 1, 0, 1)), Nlm4Stat::DENIED_NOLOCKS);
    assert_eq!(t.unshare(&sh("a", 1, 0, 0)), Nlm4Stat::GRANTED);
    assert_eq!(t.share(&sh("c", 1, 0, 2)), Nlm4Stat::GRANTED);
    // Lock limits: a split needs room for one more.
    assert_eq!(
        t.lock(&la("a", 1, true, false, 0, 100), 0),
        Nlm4Stat::GRANTED
    );
    assert_eq!(t.lock(&la("b", 1, true, true, 0, 1), 0), Nlm4Stat::BLOCKED);
    assert_eq!(
        t.lock(&la("c", 1, true, true, 0, 1), 0),
        Nlm4Stat::DENIED_NOLOCKS
    );
    assert_eq!(
        t.lock(&la("d", 1, true, false, 200, 1), 0),
        Nlm4Stat::GRANTED
    );
    assert_eq!(
        t.lock(&la("e", 1, true, false, 300, 1), 0),
        Nlm4Stat::DENIED_NOLOCKS
    );
}

#[test]
fn monitor_state_and_notify() {
    assert_eq!(nsm::next_state(0), 1);
    assert_eq!(nsm::next_state(1), 3);
    assert_eq!(nsm::next_state(4), 5);
    assert_eq!(nsm::next_state(i32::MAX), 1);
    let mut m = Monitor::new(3, 2);
    let mon = |name: &str, p: u8| Mon {
        mon_id: MonId {
            mon_name: name.as_bytes().to_vec(),
            my_id: MyId {
                my_name: b"localhost".to_vec(),
                my_prog: 100_021,
                my_vers: 4,
                my_proc: 16,
            },
        },
        priv_: [p; 16],
    };
    assert_eq!(m.mon(&mon("srv", 1), false).0, nsm::STAT_FAIL);
    assert_eq!(m.mon(&mon("srv", 1), true), (nsm::STAT_SUCC, 3));
    assert_eq!(m.mon(&mon("srv", 1), true), (nsm::STAT_SUCC, 3));
    assert_eq!(m.mon(&mon("10.0.0.9", 2), true).0, nsm::STAT_SUCC);
    assert_eq!(m.mon(&mon("third", 3), true).0, nsm::STAT_FAIL);
    // srv restarted: one callback with its priv; the same state again: none.
    let cb = m.notify(
        &StatChge {
            mon_name: b"srv".to_vec(),
            state: 7,
        },
        b"10.0.0.1",
    );
    assert_eq!(cb.len(), 1);
    assert_eq!((cb[0].status.state, cb[0].status.priv_), (7, [1; 16]));
    assert_eq!(cb[0].my_id.my_proc, 16);
    assert!(m
        .notify(
            &StatChge {
                mon_name: b"srv".to_vec(),
                state: 7
            },
            b"x"
        )
        .is_empty());
    // Matched by the caller's address when the name differs.
    let cb = m.notify(
        &StatChge {
            mon_name: b"other-name".to_vec(),
            state: 9,
        },
        b"10.0.0.9",
    );
    assert_eq!(cb.len(), 1);
    assert_eq!(cb[0].status.mon_name, b"10.0.0.9");
    assert_eq!(m.unmon(&mon("srv", 1).mon_id, true), 3);
    assert_eq!(m.monitored().len(), 1);
    assert_eq!(m.unmon_all(&mon("x", 0).mon_id.my_id, true), 3);
    assert!(m.monitored().is_empty());
    assert_eq!(m.simu_crash(), 5);
}
