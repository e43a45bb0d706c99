//! The NFSv3 client (`Nfs3Client`, the code the harness's `nfs3` command runs over rxe)
//! over the software provider, against the minimal in-memory NFSv3 server of
//! `common` (the core's `Responder`, nfs-proto's XDR): NULL, GETATTR, LOOKUP, WRITE data in
//! read chunks, READ data through write chunks, READDIRPLUS through reply chunks, COMMIT,
//! and the rewrite after a write-verifier change; every byte compared, at the DDP edge
//! sizes; and the comparison shown to catch one corrupted byte each way. Calls the server
//! answers `NFS3ERR_JUKEBOX` are sent again under new XIDs after the delay, up to the
//! give-up time (the dialer's virtual clock).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::{assert_no_pages_held, fh, scratch, Hooks, NfsServer, Seen, SoftDialer, ROOT};
use krpc_rdma_session::nfs3::{nfs_transport, Nfs3Client, Nfs3Opts, NfsError, Transfer};
use krpc_rdma_session::Session;
use nfs_proto::nfs3::{
    Ftype3, Nfsstat3, NFSPROC3_CREATE, NFSPROC3_GETATTR, NFSPROC3_READ, NFSPROC3_WRITE,
};
use tests::file_data::{content, first_difference};

/// The DDP edge sizes: empty, one byte, a page and either side of it, 1 MiB + 3 (two
/// WRITEs / READs at a 1 MiB transfer size, the second of 3 bytes).
const SIZES: &[usize] = &[0, 1, 4095, 4096, 4097, (1 << 20) + 3];

fn client(server: NfsServer, reconnect: Option<Duration>, depth: usize) -> Nfs3Client<SoftDialer> {
    let s = Session::connect(SoftDialer::new(server), nfs_transport(), reconnect).unwrap();
    let o = Nfs3Opts {
        depth,
        ..Nfs3Opts::default()
    };
    Nfs3Client::new(s, fh(ROOT), "/soft", &o).unwrap()
}

fn server(c: &mut Nfs3Client<SoftDialer>) -> &mut NfsServer {
    &mut c.session_mut().dialer_mut().server
}

/// The calls of `proc_` the server has seen, in order.
fn calls_of(srv: &NfsServer, proc_: u32) -> impl Iterator<Item = &Seen> {
    srv.log.iter().filter(move |s| s.proc_ == proc_)
}

fn write_local(path: &Path, data: &[u8]) {
    std::fs::write(path, data).unwrap();
}

/// Drop the client (every connection, every kept call) and check no page is still held.
fn finish(c: Nfs3Client<SoftDialer>) {
    let a = c.session().dialer().client_arena.clone();
    let b = c.session().dialer().server_arena.clone();
    drop(c);
    assert_no_pages_held(&a, &b);
}

/// [`finish`], then remove the test's scratch directory.
fn finish_in(c: Nfs3Client<SoftDialer>, dir: &Path) {
    finish(c);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn null_getattr_and_lookup_are_answered_by_the_server() {
    let mut srv = NfsServer::new();
    let d = srv.add(ROOT, "d", None);
    srv.add(d, "f", Some(&content(5000, 1)));
    let mut c = client(srv, None, 4);
    c.null().unwrap();
    let a = c.stat("/d/f").unwrap();
    assert_eq!((a.type_, a.size), (Ftype3::Reg, 5000));
    let a = c.stat("/d").unwrap();
    assert_eq!(a.type_, Ftype3::Dir);
    assert_eq!(c.lookup("/d/f").unwrap(), fh(d + 1));
    match c.lookup("/d/nothing") {
        Err(NfsError::Status { op, status, what }) => {
            assert_eq!(
                (op, status, what.as_str()),
                ("LOOKUP", Nfsstat3::ERR_NOENT, "/d/nothing")
            );
        }
        other => panic!("LOOKUP of a missing name: {other:?}"),
    }
    // FSINFO's sizes were taken.
    assert_eq!(c.io_sizes(), (1 << 20, 1 << 20));
    finish(c);
}

/// The pieces a transfer of `size` bytes is cut into at the 1 MiB transfer size.
fn pieces(size: usize) -> Vec<usize> {
    let mut v = Vec::new();
    let mut left = size;
    while left > 0 {
        let n = left.min(1 << 20);
        v.push(n);
        left -= n;
    }
    v
}

/// Bytes of a WRITE or READ piece from which the call (RPC header, arguments, data) or the
/// largest reply (256 bytes of slack plus the data) no longer fits the 4096-byte inline
/// threshold: the data goes as a read chunk / comes through a write chunk.
const DDP_FROM: usize = 4095;

#[test]
fn put_and_get_are_byte_exact_at_every_ddp_size() {
    let dir = scratch("sizes");
    let mut c = client(NfsServer::new(), None, 8);
    for (k, &size) in SIZES.iter().enumerate() {
        let want = content(size, k as u64 + 7);
        let local = dir.join(format!("src-{size}"));
        write_local(&local, &want);
        let remote = format!("/f-{size}");
        let before = c.counters();
        let logged = server(&mut c).log.len();
        let t = c.put(&local, &remote).unwrap();
        assert_eq!((t.bytes, t.rewrites), (size as u64, 0), "put of {size}");
        let (data, stable) = server(&mut c).file(&remote).unwrap();
        assert_eq!(
            first_difference(stable, &want),
            None,
            "server's copy of {size} bytes"
        );
        assert_eq!(data, stable, "everything committed");
        let k1 = c.counters();
        // Each WRITE's data too large for the inline threshold went as a read chunk, and the
        // server found it behind the DDP marker; smaller ones went inline.
        // (In any order: a WRITE whose data is read by RDMA Read is handed up after a small
        // one sent behind it.)
        let mut writes: Vec<usize> = server(&mut c).log[logged..]
            .iter()
            .filter(|s| s.proc_ == NFSPROC3_WRITE)
            .map(|s| s.ddp_regions)
            .collect();
        writes.sort_unstable();
        let mut want_ddp: Vec<usize> = pieces(size)
            .iter()
            .map(|&n| usize::from(n >= DDP_FROM))
            .collect();
        want_ddp.sort_unstable();
        assert_eq!(writes, want_ddp, "WRITEs of {size}: DDP regions");
        let chunked: usize = pieces(size).iter().filter(|&&n| n >= DDP_FROM).sum();
        assert_eq!(
            k1.read_chunks - before.read_chunks,
            want_ddp.iter().sum::<usize>() as u64,
            "WRITEs of {size}: read chunks"
        );
        assert_eq!(
            k1.rdma_read_bytes - before.rdma_read_bytes,
            chunked as u64,
            "WRITEs of {size}: bytes exposed to RDMA Read"
        );

        let back = dir.join(format!("back-{size}"));
        let t = c.get(&remote, &back).unwrap();
        assert_eq!(t.bytes, size as u64);
        let got = std::fs::read(&back).unwrap();
        assert_eq!(first_difference(&got, &want), None, "get of {size} bytes");
        let k2 = c.counters();
        // Each READ piece whose largest reply exceeds the threshold was given a write chunk,
        // and its data was placed there by RDMA Write.
        let chunks = pieces(size).iter().filter(|&&n| n >= DDP_FROM).count();
        assert_eq!(
            k2.write_chunks - k1.write_chunks,
            chunks as u64,
            "READs of {size}: write chunks"
        );
        assert_eq!(
            k2.rdma_write_bytes - k1.rdma_write_bytes,
            chunked as u64,
            "READs of {size}: bytes placed by RDMA Write"
        );
    }
    finish_in(c, &dir);
}

#[test]
fn readdirplus_of_300_entries_comes_back_through_reply_chunks() {
    let mut srv = NfsServer::new();
    let d = srv.add(ROOT, "big", None);
    let mut want: Vec<String> = (0..300).map(|i| format!("entry-{i:04}")).collect();
    for (i, n) in want.iter().enumerate() {
        srv.add(d, n, Some(&content(i, 3)));
    }
    want.sort();
    let mut c = client(srv, None, 1);
    let entries = c.ls("/big").unwrap();
    let got: Vec<String> = entries
        .iter()
        .map(|e| String::from_utf8(e.name.clone()).unwrap())
        .collect();
    assert_eq!(got, want);
    for (i, e) in entries.iter().enumerate() {
        let a = e.attrs.as_ref().unwrap();
        assert_eq!(a.size, i as u64, "{}", got[i]);
    }
    let k = c.counters();
    assert!(k.reply_chunks >= 1, "no reply chunk provisioned: {k:?}");
    assert!(k.long_replies >= 1, "no Long Reply received: {k:?}");
    finish(c);
}

/// A 1 MiB + 3 file in 64 KiB WRITEs; the server changes its write verifier (losing what was
/// not committed) at the third WRITE. A reconnecting client sends the file again: one
/// rewrite, and the committed copy is exact.
#[test]
fn a_write_verifier_change_sends_the_unstable_writes_again() {
    let dir = scratch("verf");
    let want = content((1 << 20) + 3, 11);
    let local = dir.join("src");
    write_local(&local, &want);
    let mut srv = NfsServer::new();
    srv.wtmax = 64 << 10;
    srv.hooks = Hooks {
        new_verf_at_write: Some(3),
        ..Hooks::default()
    };
    let mut c = client(srv, Some(Duration::from_secs(5)), 4);
    let t = c.put(&local, "/v").unwrap();
    assert_eq!(t.rewrites, 1);
    assert!(t.bytes > want.len() as u64, "the file went again: {t:?}");
    let (_, stable) = server(&mut c).file("/v").unwrap();
    assert_eq!(first_difference(stable, &want), None);
    let notes = c.session().dialer().notes.borrow().clone();
    assert!(
        notes.iter().any(|n| n.contains("write verifier changed")),
        "{notes:?}"
    );
    finish_in(c, &dir);
}

/// Without reconnection the client cannot resend, and says the data is not stable.
#[test]
fn a_write_verifier_change_without_reconnection_is_an_error() {
    let dir = scratch("verf-noreconnect");
    let local = dir.join("src");
    write_local(&local, &content(300 << 10, 12));
    let mut srv = NfsServer::new();
    srv.wtmax = 64 << 10;
    srv.hooks.new_verf_at_write = Some(2);
    let mut c = client(srv, None, 2);
    match c.put(&local, "/v") {
        Err(NfsError::Other(m)) => assert!(m.contains("write verifier changed"), "{m}"),
        other => panic!("put across a verifier change: {other:?}"),
    }
    finish_in(c, &dir);
}

/// `put` of a 1 MiB + 3 file in 128 KiB WRITEs, `depth` in flight, to a server that
/// restarts at the 4th WRITE; the committed copy checked byte for byte.
fn put_across_a_restart(depth: usize) -> (Nfs3Client<SoftDialer>, Transfer) {
    let dir = scratch(&format!("restart-{depth}"));
    let want = content((1 << 20) + 3, 13);
    let local = dir.join("src");
    write_local(&local, &want);
    let mut srv = NfsServer::new();
    srv.wtmax = 128 << 10;
    srv.hooks.restart_at_write = Some(4);
    let mut c = client(srv, Some(Duration::from_secs(5)), depth);
    let t = c.put(&local, "/r").unwrap();
    let (_, stable) = server(&mut c).file("/r").unwrap();
    assert_eq!(first_difference(stable, &want), None);
    let _ = std::fs::remove_dir_all(dir);
    (c, t)
}

/// The server restarts at the 4th WRITE of a 1 MiB + 3 put (connections gone, uncommitted
/// data lost, new verifier): the client reconnects, resends the WRITE it was owed a reply
/// for with its XID, sees the new verifier and sends the file again. One WRITE in flight,
/// so the first three replies (old verifier) surely reached the client before the crash.
#[test]
fn put_survives_a_server_restart_mid_write() {
    let (mut c, t) = put_across_a_restart(1);
    assert_eq!(t.rewrites, 1, "{t:?}");
    assert_eq!(c.session().reconnect_stats(), (1, 1));
    // The WRITE the server crashed on was resent with its XID and answered once.
    let srv = server(&mut c);
    let crashed = calls_of(srv, NFSPROC3_WRITE).nth(3).unwrap().clone();
    assert!(!crashed.answered);
    let seen = srv.seen(crashed.xid);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen.iter().filter(|s| s.answered).count(), 1);
    assert!(seen[1].conn > seen[0].conn);
    finish(c);
}

/// The comparisons above can fail: one flipped byte in a READ's data shows in the copy
/// `get` made, one flipped byte in a stored WRITE shows in the server's copy.
#[test]
fn one_corrupted_byte_is_caught_either_way() {
    let dir = scratch("corrupt");
    let size = 4097;
    let want = content(size, 14);
    let mut srv = NfsServer::new();
    srv.add(ROOT, "g", Some(&want));
    srv.hooks.corrupt_read = true;
    let mut c = client(srv, None, 2);
    let back = dir.join("back");
    c.get("/g", &back).unwrap();
    let got = std::fs::read(&back).unwrap();
    assert_eq!(first_difference(&got, &want), Some(size / 2));

    server(&mut c).hooks = Hooks {
        corrupt_write: true,
        ..Hooks::default()
    };
    let local = dir.join("src");
    write_local(&local, &want);
    c.put(&local, "/p").unwrap();
    let (_, stable) = server(&mut c).file("/p").unwrap();
    assert_eq!(first_difference(stable, &want), Some(size - 1));
    finish_in(c, &dir);
}

/// The same restart with four WRITEs in flight: every WRITE still owed a reply when the
/// connection died is resent with its XID (the requester does not take replies still
/// unread when it learns of the loss, so the server may have answered some of them already:
/// it executes them again, as a server without a duplicate-request cache does), and the
/// committed copy is exact.
#[test]
fn put_with_writes_in_flight_survives_a_server_restart() {
    let (mut c, _) = put_across_a_restart(4);
    let (reconnects, resent) = c.session().reconnect_stats();
    assert_eq!(reconnects, 1);
    assert!(resent >= 1);
    let srv = server(&mut c);
    // Every XID sent on the first connection and not answered there was sent again on the
    // second, with the same XID; every XID got an answer on the last connection it was
    // sent on.
    let mut last: std::collections::BTreeMap<u32, bool> = std::collections::BTreeMap::new();
    for s in &srv.log {
        last.insert(s.xid, s.answered);
    }
    assert!(last.values().all(|&a| a), "{:?}", srv.log);
    let resent_xids = srv
        .log
        .iter()
        .filter(|s| s.conn == 1 && srv.seen(s.xid).len() == 2)
        .count();
    assert_eq!(resent_xids as u64, resent, "{:?}", srv.log);
    finish(c);
}

/// Files put and got back over connections the fault injector keeps breaking (each of the
/// first eight connections dies after a few of the client's work requests, at Sends, Local
/// Invalidates, wherever the count falls), and a server restart on top: every byte comes back,
/// the directory lists exactly the files, and no page is left held.
#[test]
fn files_survive_connections_broken_by_the_fault_injector() {
    let dir = scratch("faults");
    let sizes = [(1 << 20) + 3, 4097, 300 << 10, 0, 70_000, 1, 4095];
    let mut srv = NfsServer::new();
    srv.wtmax = 64 << 10;
    srv.rtmax = 64 << 10;
    srv.hooks.restart_at_write = Some(20);
    let mut d = SoftDialer::new(srv);
    for after in [9, 4, 17, 1, 25, 6, 12, 3] {
        d.faults.push_back(krpc_rdma::soft::FaultConfig {
            disconnect_after_wrs: Some(after),
            ..krpc_rdma::soft::FaultConfig::default()
        });
    }
    let s = Session::connect(d, nfs_transport(), Some(Duration::from_secs(5))).unwrap();
    let mut c = Nfs3Client::new(s, fh(ROOT), "/soft", &Nfs3Opts::default()).unwrap();
    let mut names = Vec::new();
    for (k, &size) in sizes.iter().enumerate() {
        let want = content(size, 100 + k as u64);
        let local = dir.join(format!("src-{k}"));
        write_local(&local, &want);
        let remote = format!("/file-{k}");
        c.put(&local, &remote).unwrap();
        let back = dir.join(format!("back-{k}"));
        c.get(&remote, &back).unwrap();
        let got = std::fs::read(&back).unwrap();
        assert_eq!(
            first_difference(&got, &want),
            None,
            "file {k} of {size} bytes"
        );
        let (_, stable) = server(&mut c).file(&remote).unwrap();
        assert_eq!(first_difference(stable, &want), None, "server's file {k}");
        names.push(format!("file-{k}"));
    }
    let listed: Vec<String> = c
        .ls("/")
        .unwrap()
        .iter()
        .map(|e| String::from_utf8(e.name.clone()).unwrap())
        .collect();
    assert_eq!(listed, names);
    let dials = c.session().dialer().dials;
    let (reconnects, resent) = c.session().reconnect_stats();
    println!("{dials} connections, {reconnects} reconnects, {resent} calls resent");
    assert_eq!(u64::from(dials), reconnects + 1);
    assert!(
        reconnects >= 8,
        "every injected fault broke a connection: {reconnects}"
    );
    assert!(resent >= 1);
    finish_in(c, &dir);
}

/// The server answers the READ of a 5000-byte file `NFS3ERR_JUKEBOX` twice (not executing
/// it), then serves it: `get` completes byte-exact. The READ was sent three times, each under
/// a new XID (a duplicate request cache cannot replay the JUKEBOX answer), 5 s after each
/// answer (the default, as Linux), each with a fresh write chunk; one line said so; and no
/// page is left held. Reconnection is off: the retry does not depend on it.
#[test]
fn a_read_answered_jukebox_twice_is_sent_again_with_new_xids() {
    let dir = scratch("jukebox-read");
    let want = content(5000, 21);
    let mut srv = NfsServer::new();
    srv.add(ROOT, "g", Some(&want));
    srv.hooks.jukebox.insert(NFSPROC3_READ, 2);
    let mut c = client(srv, None, 4);
    let back = dir.join("back");
    let t = c.get("/g", &back).unwrap();
    assert_eq!(t.bytes, 5000);
    assert_eq!(
        first_difference(&std::fs::read(&back).unwrap(), &want),
        None
    );
    assert_eq!(c.jukebox_retries(), 2);
    let reads: Vec<Seen> = calls_of(server(&mut c), NFSPROC3_READ).cloned().collect();
    let flags: Vec<(bool, bool)> = reads.iter().map(|s| (s.jukeboxed, s.answered)).collect();
    assert_eq!(flags, [(true, true), (true, true), (false, true)]);
    let xids: BTreeSet<u32> = reads.iter().map(|s| s.xid).collect();
    assert_eq!(xids.len(), 3, "a new XID each time: {reads:?}");
    let d = c.session().dialer();
    assert_eq!(d.slept, [Duration::from_secs(5), Duration::from_secs(5)]);
    assert_eq!(
        *d.notes.borrow(),
        [
            "READ: the server is busy (NFS3ERR_JUKEBOX); sending the call again every 5 s with \
          a new XID, for up to 120 s"
        ]
    );
    // Each READ had a write chunk; the JUKEBOX answers left theirs unused.
    assert_eq!(c.counters().write_chunks, 3);
    finish_in(c, &dir);
}

/// Non-idempotent procedures answered `NFS3ERR_JUKEBOX` are sent again too (the server did
/// not perform them): `put` of 300 KiB in 64 KiB WRITEs, four in flight, whose CREATE is
/// answered JUKEBOX twice and whose first three WRITEs once each. The file is created once
/// (two JUKEBOX answers, one CREATE executed) and the committed copy is exact. The three
/// WRITE answers arrived together, so their retries share one 5 s wait: the delay counts
/// from each answer's arrival, not from when the client got round to it.
#[test]
fn a_create_and_writes_answered_jukebox_are_sent_again_and_the_file_is_exact() {
    let dir = scratch("jukebox-put");
    let want = content(300 << 10, 22);
    let local = dir.join("src");
    write_local(&local, &want);
    let mut srv = NfsServer::new();
    srv.wtmax = 64 << 10;
    srv.hooks.jukebox.insert(NFSPROC3_CREATE, 2);
    srv.hooks.jukebox.insert(NFSPROC3_WRITE, 3);
    let mut c = client(srv, None, 4);
    let t = c.put(&local, "/j").unwrap();
    assert_eq!((t.bytes, t.rewrites), (want.len() as u64, 0));
    assert_eq!(c.jukebox_retries(), 5);
    let srv = server(&mut c);
    let (data, stable) = srv.file("/j").unwrap();
    assert_eq!(first_difference(stable, &want), None);
    assert_eq!(data, stable);
    let creates: Vec<&Seen> = calls_of(srv, NFSPROC3_CREATE).collect();
    let flags: Vec<bool> = creates.iter().map(|s| s.jukeboxed).collect();
    assert_eq!(flags, [true, true, false], "one CREATE executed");
    let xids: BTreeSet<u32> = creates.iter().map(|s| s.xid).collect();
    assert_eq!(xids.len(), 3);
    let writes: Vec<&Seen> = calls_of(srv, NFSPROC3_WRITE).collect();
    assert_eq!(writes.len(), 5 + 3);
    assert_eq!(writes.iter().filter(|s| s.jukeboxed).count(), 3);
    let xids: BTreeSet<u32> = writes.iter().map(|s| s.xid).collect();
    assert_eq!(xids.len(), 8, "every WRITE sent under its own XID");
    let d = c.session().dialer();
    assert_eq!(
        d.slept,
        [Duration::from_secs(5); 3],
        "CREATE twice, WRITEs once"
    );
    finish_in(c, &dir);
}

/// A server that keeps answering `NFS3ERR_JUKEBOX`: with a 2 s delay and a 7 s give-up time
/// the GETATTR is sent again at 2, 4 and 6 s (a retry at 8 s would be past the give-up
/// time), and the command then fails with the status, after exactly 6 s of the dialer's
/// virtual clock.
#[test]
fn a_call_answered_jukebox_for_longer_than_the_give_up_time_fails_with_the_status() {
    let mut srv = NfsServer::new();
    srv.add(ROOT, "f", Some(b"x"));
    srv.hooks.jukebox.insert(NFSPROC3_GETATTR, u32::MAX);
    let o = Nfs3Opts {
        reconnect: false,
        give_up: Duration::from_secs(7),
        jukebox_delay: Duration::from_secs(2),
        ..Nfs3Opts::default()
    };
    let mut c = Nfs3Client::connect(SoftDialer::new(srv), fh(ROOT), "/soft", &o).unwrap();
    match c.stat("/f") {
        Err(e @ NfsError::Status { .. }) => {
            assert_eq!(e.status(), Some(Nfsstat3::ERR_JUKEBOX));
            assert_eq!(e.to_string(), "GETATTR /f: NFS3ERR_JUKEBOX");
            assert_eq!(e.exit_code(), 1);
        }
        other => panic!("GETATTR of a busy server: {other:?}"),
    }
    assert_eq!(c.jukebox_retries(), 3);
    let getattrs = calls_of(server(&mut c), NFSPROC3_GETATTR)
        .filter(|s| s.jukeboxed)
        .count();
    assert_eq!(getattrs, 4);
    let d = c.session().dialer();
    assert_eq!(d.slept, [Duration::from_secs(2); 3]);
    assert_eq!(d.clock, Duration::from_secs(6));
    let notes = d.notes.borrow().clone();
    assert_eq!(
        notes.last().map(String::as_str),
        Some("GETATTR: the server answered NFS3ERR_JUKEBOX for 6.0 s; giving up")
    );
    finish(c);
}

/// What knfsd did under `nfs3 get` when it was restarted (issue 27): the connection drops
/// mid-READ, the server is unreachable for 7 s, and once back it answers JUKEBOX twice while
/// its export cache refills. With the default options the client reconnects, resends the READ
/// with its XID, sends it again under new XIDs after each JUKEBOX, and the copy is exact.
#[test]
fn get_with_default_options_survives_a_restart_and_a_busy_server() {
    let dir = scratch("jukebox-restart");
    let want = content(5000, 23);
    let mut srv = NfsServer::new();
    srv.add(ROOT, "g", Some(&want));
    // Calls: FSINFO, LOOKUP, GETATTR, then the READ.
    srv.hooks.disconnect_at_call = Some(4);
    srv.hooks.jukebox.insert(NFSPROC3_READ, 2);
    srv.hooks.jukebox_from_conn = 1;
    let mut d = SoftDialer::new(srv);
    d.down_after_loss = Duration::from_secs(7);
    let mut c = Nfs3Client::connect(d, fh(ROOT), "/soft", &Nfs3Opts::default()).unwrap();
    let back = dir.join("back");
    c.get("/g", &back).unwrap();
    assert_eq!(
        first_difference(&std::fs::read(&back).unwrap(), &want),
        None
    );
    assert_eq!(c.session().reconnect_stats(), (1, 1));
    assert_eq!(c.jukebox_retries(), 2);
    let reads: Vec<Seen> = calls_of(server(&mut c), NFSPROC3_READ).cloned().collect();
    let seen: Vec<(u32, bool, bool)> = reads
        .iter()
        .map(|s| (s.conn, s.jukeboxed, s.answered))
        .collect();
    assert_eq!(
        seen,
        [
            (0, false, false),
            (1, true, true),
            (1, true, true),
            (1, false, true)
        ]
    );
    assert_eq!(reads[0].xid, reads[1].xid, "resent with its XID");
    assert!(reads[1].xid != reads[2].xid && reads[2].xid != reads[3].xid);
    assert_eq!(c.session().dialer().clock, Duration::from_millis(22_700));
    finish_in(c, &dir);
}
