//! The session layer over the software provider: a connection lost mid-call is dialled
//! again and the call resent with the same XID, answered exactly once — lost after the
//! server was handed the call, lost before it arrived (the soft provider's fault injector
//! drops the Send), several calls owed at once with the credits restarting at 1; without
//! reconnection the loss is reported; a server that stays down makes the session give up at
//! the stated time (the dialer's virtual clock); with the default options a dropped
//! connection is made again.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{fh, NfsServer, SoftDialer, ROOT};
use krpc_rdma::soft::FaultConfig;
use krpc_rdma::transport::{CallError, ReplySpec, RequesterEvent};
use krpc_rdma_session::nfs3::{nfs_transport, Nfs3Client, Nfs3Opts, NfsError};
use krpc_rdma_session::nfs4::{nfs4_transport, CB_PROGRAM};
use krpc_rdma_session::nfs4cb::CbService;
use krpc_rdma_session::session::ReverseService;
use krpc_rdma_session::{Conn, RunError, Session, DEFAULT_GIVE_UP};
use mbuf::Chain;
use nfs_proto::nfs3::{NFSPROC3_LOOKUP, NFSPROC3_NULL, NFS_PROGRAM, NFS_V3};
use nfs_proto::nfs4::Sessionid4;
use onc_rpc::rpc::{Auth, CallHeader, ReplyHeader};
use onc_rpc::xdr::{Decoder, Encoder};
use tests::file_data::content;

fn nfs(dialer: SoftDialer, reconnect: Option<Duration>) -> Nfs3Client<SoftDialer> {
    let s = Session::connect(dialer, nfs_transport(), reconnect).unwrap();
    let o = Nfs3Opts {
        depth: 4,
        ..Nfs3Opts::default()
    };
    Nfs3Client::new(s, fh(ROOT), "/soft", &o).unwrap()
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
    // One line when the loss is seen, one when the connection is back.
    let notes = c.session().dialer().notes.borrow().clone();
    assert_eq!(
        notes,
        [
            "connection to soft-nfs lost; reconnecting (giving up after 5 s)",
            "reconnected to soft-nfs after 0.0 s; resending 1 calls"
        ]
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

/// The server goes away and refuses every dial: the session backs off (100 ms doubling, by
/// the dialer's virtual clock), makes its last attempt at the stated give-up time (the wait
/// before it cut short), gives up and reports the loss.
#[test]
fn a_server_that_stays_down_makes_the_session_give_up_at_the_stated_time() {
    let mut srv = with_file();
    srv.hooks.disconnect_at_call = Some(2);
    let mut c = nfs(SoftDialer::new(srv), Some(Duration::from_secs(10)));
    c.session_mut().dialer_mut().refuse = u32::MAX;
    let r = c.null();
    assert!(
        matches!(r, Err(NfsError::Run(RunError::Lost { .. }))),
        "{r:?}"
    );
    let d = c.session().dialer();
    // The first dial made the connection; the attempts after the loss:
    let attempts: Vec<u128> = d.dial_times[1..].iter().map(|t| t.as_millis()).collect();
    assert_eq!(attempts, [0, 100, 300, 700, 1500, 3100, 6300, 10_000]);
    assert_eq!(d.clock, Duration::from_secs(10));
    let notes = d.notes.borrow().clone();
    assert_eq!(
        notes,
        [
            "connection to soft-nfs lost; reconnecting (giving up after 10 s)",
            "giving up reconnecting to soft-nfs after 10.0 s: soft-nfs: connection refused"
        ]
    );
}

/// With the default options (`Nfs3Opts::default()`: what the harness's `nfs3` command runs
/// with unless told `--no-reconnect`), a connection the server drops mid-run is made again
/// and the command completes: the server, unreachable for 7 s after the drop, is dialled
/// until it answers (the attempt at 12.7 s, well inside the default two minutes).
#[test]
fn with_default_options_a_dropped_connection_is_made_again_and_the_command_completes() {
    assert_eq!(Nfs3Opts::default().give_up, DEFAULT_GIVE_UP);
    assert_eq!(DEFAULT_GIVE_UP, Duration::from_secs(120));
    let mut srv = with_file();
    srv.hooks.disconnect_at_call = Some(3);
    let mut d = SoftDialer::new(srv);
    d.down_after_loss = Duration::from_secs(7);
    let mut c = Nfs3Client::connect(d, fh(ROOT), "/soft", &Nfs3Opts::default()).unwrap();
    c.null().unwrap();
    assert_eq!(c.stat("/f").unwrap().size, 100);
    assert_eq!(c.session().reconnect_stats(), (1, 1));
    let d = c.session().dialer();
    let attempts: Vec<u128> = d.dial_times[1..].iter().map(|t| t.as_millis()).collect();
    assert_eq!(attempts, [0, 100, 300, 700, 1500, 3100, 6300, 12_700]);
    let notes = d.notes.borrow().clone();
    assert_eq!(
        notes,
        [
            "connection to soft-nfs lost; reconnecting (giving up after 120 s)",
            "reconnected to soft-nfs after 12.7 s; resending 1 calls"
        ]
    );
}

fn null_call(xid: u32) -> Chain {
    let mut e = Encoder::new();
    CallHeader {
        xid,
        prog: NFS_PROGRAM,
        vers: NFS_V3,
        proc_: NFSPROC3_NULL,
        cred: onc_rpc_tcp::mount::auth_sys_root(),
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

/// A session over the soft provider whose server may send two reverse-direction calls at
/// once, answered by `service`.
fn reverse_session(service: ReverseService) -> Session<SoftDialer> {
    let mut d = SoftDialer::new(NfsServer::new());
    d.reverse_slots = 2;
    let mut s = Session::connect(d, nfs4_transport(), None).unwrap();
    s.serve_reverse(2, service).unwrap();
    s
}

fn cb_null(xid: u32) -> Vec<u8> {
    let mut e = Encoder::new();
    CallHeader {
        xid,
        prog: CB_PROGRAM,
        vers: 1,
        proc_: 0,
        cred: Auth::None,
        verf: Auth::None,
    }
    .encode(&mut e);
    e.finish().unwrap()
}

/// The accept status of an RPC reply (`None`: not an accepted reply of `xid`).
fn accept_stat(reply: &[u8], xid: u32) -> Option<u32> {
    let mut d = Decoder::new(reply);
    let h = ReplyHeader::decode(&mut d).ok()?;
    (h.xid() == xid).then(|| u32::from_be_bytes(reply[20..24].try_into().unwrap()))
}

/// The server's probe (CB_NULL) arrives while the client is idle: `idle` answers it through
/// the service, inline on the same connection; a second one arrives while the client waits
/// for the reply of its own call and is answered then too.
#[test]
fn reverse_calls_are_answered_while_idle_and_while_waiting_for_a_reply() {
    // NFSv4.1's callback service (no session named yet: CB_NULL is answered).
    let cb = Arc::new(Mutex::new(CbService::new(
        CB_PROGRAM,
        Sessionid4::default(),
        2,
    )));
    let svc = Arc::clone(&cb);
    let mut s = reverse_session(Box::new(move |m| svc.lock().unwrap().serve(m)));
    s.dialer_mut().reverse_call(&cb_null(0x1000)).unwrap();
    s.idle(Duration::from_millis(50)).unwrap();
    s.dialer_mut().serve();
    let r = std::mem::take(&mut s.dialer_mut().reverse_replies);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].0, 0x1000);
    assert_eq!(accept_stat(&r[0].1, 0x1000), Some(0), "SUCCESS");

    // A forward call in flight, and a reverse call before its reply.
    let xid = s.next_xid();
    s.submit(xid, null_call(xid), ReplySpec::inline(256))
        .unwrap();
    s.dialer_mut().reverse_call(&cb_null(0x1001)).unwrap();
    s.wait(xid).unwrap();
    s.dialer_mut().serve();
    let r = std::mem::take(&mut s.dialer_mut().reverse_replies);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(accept_stat(&r[0].1, 0x1001), Some(0));
    let st = s.reverse_stats();
    assert_eq!((st.calls, st.replies, st.refused), (2, 2, 0));
    assert_eq!(cb.lock().unwrap().answered, 2);
    let k = s.counters();
    assert_eq!((k.reverse_calls, k.reverse_replies), (2, 2));
}

/// A reverse call the service refuses (`None`) is still answered, by the transport,
/// `SYSTEM_ERR`: the server is never left waiting.
#[test]
fn a_reverse_call_the_service_refuses_is_answered_system_err() {
    let mut s = reverse_session(Box::new(|_| None));
    s.dialer_mut().reverse_call(&cb_null(0x2000)).unwrap();
    // The first reap hands the call to the service, which drops it; the next answers it.
    s.idle(Duration::from_millis(50)).unwrap();
    s.idle(Duration::from_millis(50)).unwrap();
    s.dialer_mut().serve();
    let r = std::mem::take(&mut s.dialer_mut().reverse_replies);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].0, 0x2000);
    assert_eq!(r[0].1.len(), 24, "{:?}", r[0].1);
    assert_eq!(accept_stat(&r[0].1, 0x2000), Some(5), "SYSTEM_ERR");
    let st = s.reverse_stats();
    assert_eq!((st.calls, st.replies, st.refused), (1, 0, 1));
    assert_eq!(s.counters().reverse_dropped, 1);
    // The slot is free again: the next call is answered the same way.
    s.dialer_mut().reverse_call(&cb_null(0x2001)).unwrap();
    s.idle(Duration::from_millis(50)).unwrap();
    s.idle(Duration::from_millis(50)).unwrap();
    s.dialer_mut().serve();
    assert_eq!(s.dialer_mut().reverse_replies.len(), 1);
    assert_eq!(s.counters().reverse_dropped, 2);
}
