//! The lock services (`krpc_rdma_nfsd::lockd`) over loopback TCP and UDP: registration with
//! an rpcbind (a small stand-in speaking rpcbind v4 SET / UNSET / GETADDR and PMAP GETPORT),
//! LOCK / TEST / UNLOCK, a blocked LOCK granted by an NLM_GRANTED call to the client's lock
//! manager, the `_MSG` / `_RES` path, RPC refusals, and a restart: SM_NOTIFY to the recorded
//! client's statd with the next state number, the grace period (only reclaims), the state
//! directory.
//!
//! Two hosts on one machine: the server on 127.0.0.1 (its rpcbind there), the client on
//! 127.0.0.2 (its rpcbind, lock manager and statd there), so that the server's callbacks
//! find the client's services and not its own.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use krpc_rdma_nfsd::lockd::{Lockd, LockdConfig, Reg, RpcbindConfig};
use krpc_rdma_nfsd::mountd::{read_record, write_record};
use nfs_proto::nlm::*;
use nfs_proto::nsm::{StatChge, SM_NOTIFY, SM_PROG, SM_VERS};
use onc_rpc::rpc::{AcceptStat, Auth, CallHeader, ReplyHeader};
use onc_rpc::xdr::{Decoder, Encoder};

const SERVER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const CLIENT: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// Only a guard against a hang: every wait ends as soon as its message arrives.
const GUARD: Duration = Duration::from_secs(60);

type Map = Arc<Mutex<HashMap<(u32, u32, String), String>>>;

fn enc(f: impl FnOnce(&mut Encoder)) -> Vec<u8> {
    let mut e = Encoder::new();
    f(&mut e);
    e.finish().unwrap()
}

fn port_of(uaddr: &str) -> u16 {
    let mut it = uaddr.rsplit('.');
    let lo: u16 = it.next().unwrap().parse().unwrap();
    let hi: u16 = it.next().unwrap().parse().unwrap();
    hi * 256 + lo
}

fn success(xid: u32, body: &[u8]) -> Vec<u8> {
    let mut e = Encoder::new();
    ReplyHeader::success(xid).encode(&mut e);
    e.raw(body);
    e.finish().unwrap()
}

/// An rpcbind stand-in on `ip:port` (0: any): rpcbind v4 SET / UNSET / GETADDR over TCP,
/// PMAP v2 GETPORT over UDP.
fn rpcbind(ip: Ipv4Addr, port: u16) -> (u16, Map) {
    let map: Map = Arc::default();
    let l = TcpListener::bind((ip, port)).unwrap();
    let port = l.local_addr().unwrap().port();
    let u = UdpSocket::bind((ip, port)).unwrap();
    let m = map.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let mut s = s.unwrap();
            let m = m.clone();
            std::thread::spawn(move || {
                while let Ok(Some(call)) = read_record(&mut s) {
                    let mut d = Decoder::new(&call);
                    let h = CallHeader::decode(&mut d).unwrap();
                    assert_eq!((h.prog, h.vers), (100_000, 4));
                    let prog = d.u32().unwrap();
                    let vers = d.u32().unwrap();
                    let netid = String::from_utf8(d.opaque("", 64).unwrap().to_vec()).unwrap();
                    let addr = String::from_utf8(d.opaque("", 64).unwrap().to_vec()).unwrap();
                    let mut map = m.lock().unwrap();
                    let key = (prog, vers, netid);
                    let body = match h.proc_ {
                        1 if map.contains_key(&key) => enc(|e| e.bool(false)),
                        1 => {
                            map.insert(key, addr);
                            enc(|e| e.bool(true))
                        }
                        2 => enc(|e| e.bool(map.remove(&key).is_some())),
                        3 => enc(|e| e.opaque(map.get(&key).map_or("", |s| s).as_bytes())),
                        p => panic!("rpcbind proc {p}"),
                    };
                    write_record(&mut s, &success(h.xid, &body)).unwrap();
                }
            });
        }
    });
    let m = map.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        loop {
            let (n, from) = u.recv_from(&mut buf).unwrap();
            let mut d = Decoder::new(&buf[..n]);
            let h = CallHeader::decode(&mut d).unwrap();
            assert_eq!((h.prog, h.vers, h.proc_), (100_000, 2, 3), "GETPORT");
            let (prog, vers, prot) = (d.u32().unwrap(), d.u32().unwrap(), d.u32().unwrap());
            assert_eq!(prot, 17);
            let port = m
                .lock()
                .unwrap()
                .get(&(prog, vers, "udp".to_string()))
                .map_or(0, |a| port_of(a));
            u.send_to(&success(h.xid, &enc(|e| e.u32(u32::from(port)))), from)
                .unwrap();
        }
    });
    (port, map)
}

/// A UDP service of the client host (its lock manager, its statd), registered with its
/// rpcbind: the calls it receives, each answered with `reply`.
fn client_service(
    map: &Map,
    prog: u32,
    vers: u32,
    reply: fn(u32, &[u8]) -> Vec<u8>,
) -> std::sync::mpsc::Receiver<(u32, Vec<u8>)> {
    let u = UdpSocket::bind((CLIENT, 0)).unwrap();
    let port = u.local_addr().unwrap().port();
    map.lock().unwrap().insert(
        (prog, vers, "udp".into()),
        format!("{CLIENT}.{}.{}", port >> 8, port & 0xff),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            let (n, from) = u.recv_from(&mut buf).unwrap();
            let mut d = Decoder::new(&buf[..n]);
            let h = CallHeader::decode(&mut d).unwrap();
            assert_eq!((h.prog, h.vers), (prog, vers));
            let args = buf[d.pos()..n].to_vec();
            u.send_to(&success(h.xid, &reply(h.proc_, &args)), from)
                .unwrap();
            if tx.send((h.proc_, args)).is_err() {
                return;
            }
        }
    });
    rx
}

static XID: AtomicU32 = AtomicU32::new(1);

fn call_msg(prog: u32, vers: u32, proc_: u32, args: &[u8]) -> (u32, Vec<u8>) {
    let xid = XID.fetch_add(1, Ordering::Relaxed);
    let mut e = CallHeader::new(xid, prog, vers, proc_, Auth::None).encoder();
    e.raw(args);
    (xid, e.finish().unwrap())
}

fn results(xid: u32, msg: &[u8]) -> Result<Vec<u8>, ReplyHeader> {
    let mut d = Decoder::new(msg);
    let h = ReplyHeader::decode(&mut d).unwrap();
    assert_eq!(h.xid(), xid);
    if h.is_success() {
        Ok(msg[d.pos()..].to_vec())
    } else {
        Err(h)
    }
}

enum Conn {
    Tcp(TcpStream),
    Udp(UdpSocket, SocketAddr),
}

impl Conn {
    fn call(&mut self, prog: u32, proc_: u32, args: &[u8]) -> Result<Vec<u8>, ReplyHeader> {
        let vers = if prog == SM_PROG { SM_VERS } else { NLM_V4 };
        self.call_v(prog, vers, proc_, args)
    }

    fn call_v(
        &mut self,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: &[u8],
    ) -> Result<Vec<u8>, ReplyHeader> {
        let (xid, msg) = call_msg(prog, vers, proc_, args);
        match self {
            Conn::Tcp(s) => {
                write_record(s, &msg).unwrap();
                results(xid, &read_record(s).unwrap().unwrap())
            }
            Conn::Udp(u, to) => {
                u.send_to(&msg, *to).unwrap();
                let mut buf = [0u8; 4096];
                let n = u.recv(&mut buf).unwrap();
                results(xid, &buf[..n])
            }
        }
    }

    fn nlm<T>(&mut self, proc_: u32, args: &[u8], dec: fn(&mut Decoder<'_>) -> T) -> T {
        let r = self.call(NLM_PROGRAM, proc_, args).unwrap();
        dec(&mut Decoder::new(&r))
    }

    fn lock(&mut self, a: &LockArgs) -> Nlm4Stat {
        let r = self.nlm(NLMPROC4_LOCK, &enc(|e| a.encode(e)), |d| {
            Res::decode(d).unwrap()
        });
        assert_eq!(r.cookie, a.cookie);
        Nlm4Stat(r.stat)
    }

    fn test(&mut self, a: &TestArgs) -> TestRes {
        self.nlm(NLMPROC4_TEST, &enc(|e| a.encode(e)), |d| {
            TestRes::decode(d).unwrap()
        })
    }

    fn unlock(&mut self, a: &UnlockArgs) -> Nlm4Stat {
        Nlm4Stat(
            self.nlm(NLMPROC4_UNLOCK, &enc(|e| a.encode(e)), |d| {
                Res::decode(d).unwrap()
            })
            .stat,
        )
    }
}

fn tcp(l: &Lockd) -> Conn {
    Conn::Tcp(TcpStream::connect(l.tcp_addr()).unwrap())
}

fn udp_from(ip: Ipv4Addr, l: &Lockd) -> Conn {
    let u = UdpSocket::bind((ip, 0)).unwrap();
    u.set_read_timeout(Some(GUARD)).unwrap();
    Conn::Udp(u, l.udp_addr())
}

fn alock(host: &str, svid: i32, off: u64, len: u64) -> Nlm4Lock {
    Nlm4Lock {
        caller_name: host.as_bytes().to_vec(),
        fh: vec![0x4b, 0x52, 0x4e, 0x31, 1, 2, 3],
        oh: format!("{svid}@{host}").into_bytes(),
        svid,
        l_offset: off,
        l_len: len,
    }
}

fn lockargs(host: &str, svid: i32, block: bool, reclaim: bool) -> LockArgs {
    LockArgs {
        cookie: vec![svid as u8, 0xc0],
        block,
        exclusive: true,
        alock: alock(host, svid, 0, 100),
        reclaim,
        state: 1,
    }
}

fn config(dir: &Path, rpcbind_port: u16, grace: Duration, replace: Vec<Reg>) -> LockdConfig {
    LockdConfig {
        bind: IpAddr::V4(SERVER),
        port: 0,
        state_dir: dir.to_path_buf(),
        grace,
        name: SERVER.to_string().into_bytes(),
        rpcbind: RpcbindConfig {
            register: true,
            unix: None,
            port: rpcbind_port,
            replace,
        },
    }
}

fn state_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lockd-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn stop_flag() -> &'static AtomicBool {
    Box::leak(Box::new(AtomicBool::new(false)))
}

fn granted_ok(_proc: u32, args: &[u8]) -> Vec<u8> {
    // GRANTED: answer nlm4_res GRANTED with the call's cookie; _RES calls: void.
    match TestArgs::decode(&mut Decoder::new(args)) {
        Ok(a) if _proc == NLMPROC4_GRANTED => enc(|e| {
            Res {
                cookie: a.cookie,
                stat: 0,
            }
            .encode(e)
        }),
        _ => Vec::new(),
    }
}

#[test]
fn locks_blocking_and_callbacks_over_tcp_and_udp() {
    let (rb_port, server_rb) = rpcbind(SERVER, 0);
    let (_, client_rb) = rpcbind(CLIENT, rb_port);
    // Someone else holds NSM/udp and NLM/tcp: the first stays, the second is taken over.
    server_rb
        .lock()
        .unwrap()
        .insert((SM_PROG, 1, "udp".into()), "127.0.0.1.0.99".into());
    server_rb
        .lock()
        .unwrap()
        .insert((NLM_PROGRAM, 4, "tcp".into()), "127.0.0.1.0.98".into());
    let nlm_cb = client_service(&client_rb, NLM_PROGRAM, NLM_V4, granted_ok);
    let statd = client_service(&client_rb, SM_PROG, SM_VERS, notify_ok);
    let dir = state_dir("blocking");
    let stop = stop_flag();
    let l = Lockd::start(config(&dir, rb_port, GUARD, vec![Reg::NlmTcp]), stop).unwrap();
    let port = l.tcp_addr().port();
    let ours = format!("127.0.0.1.{}.{}", port >> 8, port & 0xff);
    {
        let m = server_rb.lock().unwrap();
        assert_eq!(m[&(NLM_PROGRAM, 4, "tcp".into())], ours, "replaced");
        assert_eq!(m[&(NLM_PROGRAM, 4, "udp".into())], ours);
        assert_eq!(m[&(SM_PROG, 1, "tcp".into())], ours);
        assert_eq!(
            m[&(SM_PROG, 1, "udp".into())],
            "127.0.0.1.0.99",
            "not replaced"
        );
    }
    // No grace period on a first start.
    assert!(!l.in_grace());

    // Host A over TCP (from 127.0.0.1) locks; host B over UDP (from 127.0.0.2) sees it.
    let mut a = tcp(&l);
    let mut b = udp_from(CLIENT, &l);
    assert!(a.call(NLM_PROGRAM, NLMPROC4_NULL, &[]).unwrap().is_empty());
    assert_eq!(
        a.lock(&lockargs("hostA", 11, false, false)),
        Nlm4Stat::GRANTED
    );
    let t = b.test(&TestArgs {
        cookie: vec![7],
        exclusive: false,
        alock: alock("hostB", 22, 50, 0),
    });
    assert_eq!(t.stat, Nlm4Stat::DENIED.0);
    let h = t.holder.unwrap();
    assert_eq!(
        (h.svid, h.exclusive, h.l_offset, h.l_len),
        (11, true, 0, 100)
    );
    assert_eq!(h.oh, b"11@hostA");
    assert_eq!(
        b.lock(&lockargs("hostB", 22, false, false)),
        Nlm4Stat::DENIED
    );

    // B blocks; A unlocks; B's lock manager gets NLM_GRANTED with B's own arguments.
    let want = lockargs("hostB", 22, true, false);
    assert_eq!(b.lock(&want), Nlm4Stat::BLOCKED);
    assert_eq!(b.lock(&want), Nlm4Stat::BLOCKED, "a poll keeps its place");
    assert_eq!(
        a.unlock(&UnlockArgs {
            cookie: vec![],
            alock: alock("hostA", 11, 0, 0)
        }),
        Nlm4Stat::GRANTED
    );
    let (proc_, args) = nlm_cb.recv_timeout(GUARD).expect("NLM_GRANTED callback");
    assert_eq!(proc_, NLMPROC4_GRANTED);
    let g = TestArgs::decode(&mut Decoder::new(&args)).unwrap();
    assert_eq!(
        (g.cookie, g.exclusive, g.alock),
        (want.cookie.clone(), true, want.alock.clone())
    );
    // Now B holds it: A is refused and TEST names B.
    assert_eq!(
        a.lock(&lockargs("hostA", 11, false, false)),
        Nlm4Stat::DENIED
    );
    let t = a.test(&TestArgs {
        cookie: vec![],
        exclusive: false,
        alock: alock("hostA", 11, 0, 1),
    });
    assert_eq!(t.holder.unwrap().svid, 22);
    // B polling after the grant finds it granted.
    assert_eq!(b.lock(&want), Nlm4Stat::GRANTED);

    // TEST_MSG: an empty reply, the result as a TEST_RES call to B's lock manager.
    let r = b
        .call(
            NLM_PROGRAM,
            NLMPROC4_TEST_MSG,
            &enc(|e| {
                TestArgs {
                    cookie: vec![1, 2, 3],
                    exclusive: true,
                    alock: alock("hostB", 33, 0, 0),
                }
                .encode(e)
            }),
        )
        .unwrap();
    assert!(r.is_empty());
    let (proc_, args) = nlm_cb.recv_timeout(GUARD).expect("NLM_TEST_RES call");
    assert_eq!(proc_, NLMPROC4_TEST_RES);
    let tr = TestRes::decode(&mut Decoder::new(&args)).unwrap();
    assert_eq!((tr.cookie, tr.stat), (vec![1, 2, 3], Nlm4Stat::DENIED.0));
    assert_eq!(tr.holder.unwrap().svid, 22);

    // FREE_ALL for host B: A gets the lock.
    b.call(
        NLM_PROGRAM,
        NLMPROC4_FREE_ALL,
        &enc(|e| {
            NotifyArgs {
                name: b"hostB".to_vec(),
                state: 2,
            }
            .encode(e)
        }),
    )
    .unwrap();
    assert_eq!(
        a.lock(&lockargs("hostA", 11, false, false)),
        Nlm4Stat::GRANTED
    );

    // Refusals: garbage arguments, an unused procedure, version 3, NSM version 2.
    let garbage = a.call(NLM_PROGRAM, NLMPROC4_LOCK, &[0, 0, 0, 9]);
    assert!(matches!(
        garbage,
        Err(ReplyHeader::Accepted {
            stat: AcceptStat::GarbageArgs,
            ..
        })
    ));
    assert!(matches!(
        a.call(NLM_PROGRAM, 17, &[]),
        Err(ReplyHeader::Accepted {
            stat: AcceptStat::ProcUnavail,
            ..
        })
    ));
    assert!(matches!(
        a.call_v(NLM_PROGRAM, 3, 0, &[]),
        Err(ReplyHeader::Accepted {
            stat: AcceptStat::ProgMismatch { low: 4, high: 4 },
            ..
        })
    ));
    assert!(matches!(
        b.call_v(SM_PROG, 2, 0, &[]),
        Err(ReplyHeader::Accepted {
            stat: AcceptStat::ProgMismatch { low: 1, high: 1 },
            ..
        })
    ));
    // SM_STAT answers this server's state (1 on a first start).
    let r = b.call(SM_PROG, 1, &enc(|e| e.opaque(b"x"))).unwrap();
    assert_eq!(
        r,
        enc(|e| {
            e.u32(0);
            e.i32(1);
        })
    );
    // SM_MON from this machine (127/8) is accepted: STAT_SUCC and the state.
    let mon = enc(|e| {
        nfs_proto::nsm::Mon {
            mon_id: nfs_proto::nsm::MonId {
                mon_name: b"h".to_vec(),
                my_id: nfs_proto::nsm::MyId::default(),
            },
            priv_: [0; 16],
        }
        .encode(e)
    });
    assert_eq!(
        b.call(SM_PROG, 2, &mon).unwrap(),
        enc(|e| {
            e.u32(0);
            e.i32(1);
        })
    );

    // Both client addresses were recorded for a restart.
    assert!(dir.join("sm/127.0.0.1").exists());
    assert!(dir.join("sm/127.0.0.2").exists());
    assert_eq!(std::fs::read_to_string(dir.join("state")).unwrap(), "1\n");

    // SM_SIMU_CRASH (a local caller): state 3, every lock gone, the grace period, and the
    // recorded clients notified.
    assert!(!l.in_grace());
    b.call(SM_PROG, 5, &[]).unwrap();
    let (proc_, args) = statd
        .recv_timeout(GUARD)
        .expect("SM_NOTIFY after SM_SIMU_CRASH");
    assert_eq!(proc_, SM_NOTIFY);
    assert_eq!(StatChge::decode(&mut Decoder::new(&args)).unwrap().state, 3);
    assert_eq!(std::fs::read_to_string(dir.join("state")).unwrap(), "3\n");
    assert_eq!(l.lock_count(), 0);
    assert!(l.in_grace());
    assert_eq!(
        a.lock(&lockargs("hostA", 11, false, false)),
        Nlm4Stat::DENIED_GRACE_PERIOD
    );

    stop.store(true, Ordering::SeqCst);
    l.shutdown();
    let m = server_rb.lock().unwrap();
    assert!(
        !m.contains_key(&(NLM_PROGRAM, 4, "tcp".into())),
        "unregistered"
    );
    assert!(!m.contains_key(&(NLM_PROGRAM, 4, "udp".into())));
    assert!(!m.contains_key(&(SM_PROG, 1, "tcp".into())));
    assert_eq!(
        m[&(SM_PROG, 1, "udp".into())],
        "127.0.0.1.0.99",
        "someone else's stays"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn notify_ok(_proc: u32, _args: &[u8]) -> Vec<u8> {
    Vec::new()
}

#[test]
fn restart_notifies_clients_and_serves_only_reclaims_in_grace() {
    let (rb_port, _server_rb) = rpcbind(SERVER, 0);
    let (_, client_rb) = rpcbind(CLIENT, rb_port);
    let statd = client_service(&client_rb, SM_PROG, SM_VERS, notify_ok);
    let dir = state_dir("restart");

    // First run: host B (127.0.0.2) takes a lock.
    let stop = stop_flag();
    let l = Lockd::start(config(&dir, rb_port, GUARD, vec![]), stop).unwrap();
    let mut b = udp_from(CLIENT, &l);
    assert_eq!(
        b.lock(&lockargs("hostB", 5, false, false)),
        Nlm4Stat::GRANTED
    );
    stop.store(true, Ordering::SeqCst);
    l.shutdown();
    assert!(
        statd.try_recv().is_err(),
        "nothing notified by a first start"
    );

    // Second run: B's statd hears SM_NOTIFY (our name, state 3); the grace period is on.
    let stop = stop_flag();
    let l = Lockd::start(config(&dir, rb_port, GUARD, vec![]), stop).unwrap();
    let (proc_, args) = statd.recv_timeout(GUARD).expect("SM_NOTIFY");
    assert_eq!(proc_, SM_NOTIFY);
    let c = StatChge::decode(&mut Decoder::new(&args)).unwrap();
    assert_eq!((c.mon_name.as_slice(), c.state), (&b"127.0.0.1"[..], 3));
    assert_eq!(std::fs::read_to_string(dir.join("state")).unwrap(), "3\n");
    assert!(l.in_grace());
    let mut b = udp_from(CLIENT, &l);
    let mut a = tcp(&l);
    // In the grace period: a new lock, a TEST and an UNLOCK are refused, the reclaim is not.
    assert_eq!(
        a.lock(&lockargs("hostA", 1, false, false)),
        Nlm4Stat::DENIED_GRACE_PERIOD
    );
    assert_eq!(
        a.test(&TestArgs {
            cookie: vec![],
            exclusive: true,
            alock: alock("hostA", 1, 0, 0)
        })
        .stat,
        Nlm4Stat::DENIED_GRACE_PERIOD.0
    );
    assert_eq!(
        b.lock(&lockargs("hostB", 5, false, true)),
        Nlm4Stat::GRANTED
    );
    assert_eq!(l.lock_count(), 1);
    assert!(
        dir.join("sm/127.0.0.2").exists(),
        "recorded again by the reclaim"
    );
    stop.store(true, Ordering::SeqCst);
    l.shutdown();

    // Third run without a grace period: a reclaim is refused, new locks are served; the
    // reclaimed lock did not survive this restart (locks are not persistent), but B was
    // recorded again and hears the next state.
    let stop = stop_flag();
    let l = Lockd::start(config(&dir, rb_port, Duration::ZERO, vec![]), stop).unwrap();
    let (_, args) = statd.recv_timeout(GUARD).expect("SM_NOTIFY");
    assert_eq!(StatChge::decode(&mut Decoder::new(&args)).unwrap().state, 5);
    assert!(!l.in_grace());
    let mut b = udp_from(CLIENT, &l);
    assert_eq!(
        b.lock(&lockargs("hostB", 5, false, true)),
        Nlm4Stat::DENIED_GRACE_PERIOD
    );
    assert_eq!(
        b.lock(&lockargs("hostB", 5, false, false)),
        Nlm4Stat::GRANTED
    );
    stop.store(true, Ordering::SeqCst);
    l.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
