//! The session layer over the software provider: a connection lost mid-call is dialled
//! again and the call resent with the same XID, answered exactly once — lost after the
//! server was handed the call, lost before it arrived (the soft provider's fault injector
//! drops the Send), several calls owed at once with the credits restarting at 1; without
//! reconnection the loss is reported; a server that stays down makes the session give up.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::data::content;
use common::{fh, NfsServer, SoftDialer, ROOT};
use krpc_rdma::soft::FaultConfig;
use krpc_rdma::transport::{CallError, ReplySpec, RequesterEvent};
use krpc_rdma_session::nfs3::{nfs_transport, Nfs3Client, NfsError};
use krpc_rdma_session::{Conn, RunError, Session};
use mbuf::Chain;
use nfs_glue::nfs3::{NFSPROC3_LOOKUP, NFSPROC3_NULL, NFS_PROGRAM, NFS_V3};
use nfs_glue::rpc::{Auth, CallHeader, ReplyHeader};
use nfs_glue::xdr::{Decoder, Encoder};

fn nfs(dialer: SoftDialer, reconnect: Option<Duration>) -> Nfs3Client<SoftDialer> {
    let s = Session::connect(dialer, nfs_transport(), reconnect).unwrap();
    Nfs3Client::new(s, fh(ROOT), "/soft", 4, false).unwrap()
}

fn server(c: &mut Nfs3Client<SoftDialer>) -> &mut NfsServer {
    &mut c.session_mut().dialer_mut().server
}

/// A file `f` of 100 bytes in the root.
fn with_file() -> NfsServer {
    let mut s = NfsServer::new();
    s.add(ROOT, "f", Some(&content(100, 5)));
    s
}

/// Calls handed to the server: 1 is FSINFO (the client's first), 2 the NULL, 3 the LOOKUP
/// of `stat`. The server executes the LOOKUP and drops the connection instead of answering;
/// the session dials again and resends it with its XID; it is answered once, on the new
/// connection, and `stat` completes.
#[test]
fn a_call_lost_after_hand_up_is_resent_with_its_xid_and_answered_once() {
    let mut srv = with_file();
    srv.hooks.disconnect_at_call = Some(3);
    let mut c = nfs(SoftDialer::new(srv), Some(Duration::from_secs(5)));
    c.null().unwrap();
    let a = c.stat("/f").unwrap();
    assert_eq!(a.size, 100);
    let lookup = server(&mut c)
        .log
        .iter()
        .find(|s| s.proc_ == NFSPROC3_LOOKUP)
        .unwrap()
        .clone();
    let srv = server(&mut c);
    let seen = srv.seen(lookup.xid);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!((seen[0].conn, seen[0].answered), (0, false));
    assert_eq!((seen[1].conn, seen[1].answered), (1, true));
    // Every XID the server saw was answered exactly once.
    let mut answered: BTreeMap<u32, u32> = BTreeMap::new();
    for s in &srv.log {
        *answered.entry(s.xid).or_default() += u32::from(s.answered);
    }
    assert!(answered.values().all(|&n| n == 1), "{answered:?}");
    assert_eq!(c.session().reconnect_stats(), (1, 1));
    assert_eq!(c.session().dialer().dials, 2);
    let notes = c.session().dialer().notes.borrow().clone();
    assert!(
        notes[0].starts_with("reconnected to soft-nfs after")
            && notes[0].ends_with("resending 1 calls"),
        "{notes:?}"
    );
}

/// The fault injector loses the client's second Send (the NULL call) on the wire: the
/// connection breaks, the session dials again, and the server is handed the NULL once,
/// with the XID it was first sent with.
#[test]
fn a_call_lost_before_it_arrives_is_resent_and_answered_once() {
    let mut d = SoftDialer::new(with_file());
    d.faults.push_back(FaultConfig {
        drop_send: Some(2),
        ..FaultConfig::default()
    });
    let mut c = nfs(d, Some(Duration::from_secs(5)));
    c.null().unwrap();
    let srv = server(&mut c);
    let nulls: Vec<_> = srv
        .log
        .iter()
        .filter(|s| s.proc_ == NFSPROC3_NULL)
        .collect();
    assert_eq!(nulls.len(), 1, "{:?}", srv.log);
    assert_eq!((nulls[0].conn, nulls[0].answered), (1, true));
    assert_eq!(c.session().reconnect_stats(), (1, 1));
    c.stat("/f").unwrap();
}

/// Without reconnection a lost connection fails the call as `Lost` (exit status 3).
#[test]
fn without_reconnection_a_lost_connection_is_reported_lost() {
    let mut srv = with_file();
    srv.hooks.disconnect_at_call = Some(2);
    let mut c = nfs(SoftDialer::new(srv), None);
    match c.null() {
        Err(NfsError::Run(e)) => {
            assert_eq!(
                e,
                RunError::Lost {
                    peer: "soft-nfs".into(),
                    completed: 1,
                    lost: 1
                }
            );
            assert_eq!(e.exit_code(), 3);
        }
        other => panic!("NULL over a lost connection: {other:?}"),
    }
    assert_eq!(c.session().dialer().dials, 1);
}

/// The server goes away and refuses every dial: the session backs off, gives up after the
/// reconnection time and reports the loss.
#[test]
fn a_server_that_stays_down_makes_the_session_give_up() {
    let mut srv = with_file();
    srv.hooks.disconnect_at_call = Some(2);
    let mut c = nfs(SoftDialer::new(srv), Some(Duration::from_millis(300)));
    c.session_mut().dialer_mut().refuse = u32::MAX;
    let start = Instant::now();
    let r = c.null();
    assert!(
        matches!(r, Err(NfsError::Run(RunError::Lost { .. }))),
        "{r:?}"
    );
    // Attempts after 0, 100 and 200 ms of backoff: the third failure is past 300 ms.
    assert!(start.elapsed() >= Duration::from_millis(300));
    let notes = c.session().dialer().notes.borrow().clone();
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("giving up reconnecting")),
        "{notes:?}"
    );
}

fn null_call(xid: u32) -> Chain {
    let mut e = Encoder::new();
    CallHeader {
        xid,
        prog: NFS_PROGRAM,
        vers: NFS_V3,
        proc_: NFSPROC3_NULL,
        cred: krpc_rdma_oncrpc::mount::auth_sys_root(),
        verf: Auth::None,
    }
    .encode(&mut e);
    Chain::from_bytes(&e.finish().unwrap()).unwrap()
}

/// Poll `c` until `want` replies came (reconnecting on a loss); every reply's XID counted.
fn collect(c: &mut Conn<SoftDialer>, want: usize, got: &mut BTreeMap<u32, u32>) -> u32 {
    let mut losses = 0;
    let start = Instant::now();
    while got.values().sum::<u32>() < want as u32 {
        assert!(start.elapsed() < Duration::from_secs(20), "stuck: {got:?}");
        let mut evs = Vec::new();
        c.poll(Duration::from_millis(10), &mut evs);
        let mut lost = false;
        for e in evs {
            match e {
                RequesterEvent::Reply { xid, reply } => {
                    let b = reply.to_vec().unwrap();
                    let h = ReplyHeader::decode(&mut Decoder::new(&b)).unwrap();
                    assert!(h.is_success() && h.xid() == xid);
                    *got.entry(xid).or_default() += 1;
                }
                RequesterEvent::Failed {
                    error: CallError::ConnectionLost,
                    ..
                } => lost = true,
                RequesterEvent::ConnectionLost => lost = true,
                e => panic!("unexpected {e:?}"),
            }
        }
        if lost {
            losses += 1;
            c.reconnect(&|| false).unwrap();
            // A new connection starts at one credit (RFC 8166 §3.3.1).
            assert_eq!(c.req.credits_granted(), 1);
        }
    }
    losses
}

/// Six calls owed at once when the connection dies at the third: after the reconnect the
/// credits restart at 1 and every owed call is resent from its kept copy with its XID;
/// each XID gets exactly one reply.
#[test]
fn every_owed_call_is_resent_once_as_credits_restart_at_one() {
    let mut srv = NfsServer::new();
    srv.hooks.disconnect_at_call = Some(4);
    let mut c = Conn::open(
        SoftDialer::new(srv),
        nfs_transport(),
        Some(Duration::from_secs(5)),
    )
    .unwrap();
    let mut got = BTreeMap::new();
    c.call(null_call(100), ReplySpec::inline(256)).unwrap();
    assert_eq!(collect(&mut c, 1, &mut got), 0);
    assert!(
        c.req.credits_granted() >= 6,
        "grant {}",
        c.req.credits_granted()
    );
    for xid in 101..107 {
        c.call(null_call(xid), ReplySpec::inline(256)).unwrap();
    }
    assert_eq!(collect(&mut c, 7, &mut got), 1, "one loss");
    assert_eq!(got.len(), 7);
    assert!(got.values().all(|&n| n == 1), "{got:?}");
    let srv = &c.dialer.server;
    // The call the server dropped (the third of the six, xid 103) and the ones behind it
    // were sent again on connection 1 with their XIDs and answered there. (So may the two
    // before it: the requester learns of the loss before it reads the replies already
    // received, so it resends those calls too; the client still takes one reply per XID.)
    for xid in 103..107 {
        let seen = srv.seen(xid);
        assert_eq!(seen.len(), 2, "xid {xid}: {seen:?}");
        assert_eq!((seen[1].conn, seen[1].answered), (1, true), "xid {xid}");
    }
    for xid in 100..107 {
        assert!(srv.seen(xid).last().unwrap().answered, "xid {xid}");
    }
    let (reconnects, resent) = c.reconnect_stats();
    assert_eq!(reconnects, 1);
    assert!(resent >= 4, "resent {resent}");
}
