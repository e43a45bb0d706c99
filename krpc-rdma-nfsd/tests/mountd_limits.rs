//! The MOUNT service's connection limit, over TCP on the host: with
//! `--max-mount-connections 2`, two clients are served, a third connection is closed at once
//! without a reply, and the first two go on being served.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use krpc_rdma_nfsd::exports::{Clients, OneExport};
use krpc_rdma_nfsd::mountd::{read_record, write_record, MountLimits, Mountd};
use krpc_rdma_nfsd::LocalFs;
use nfs_proto::mount::{MOUNTPROC3_NULL, MOUNT_PROGRAM, MOUNT_V3};
use nfs_service::mount::MountService;
use onc_rpc::rpc::{Auth, CallHeader, ReplyHeader};
use onc_rpc::svc::AuthPolicy;
use onc_rpc::xdr::Decoder;

static STOP: AtomicBool = AtomicBool::new(false);

fn null_call(xid: u32) -> Vec<u8> {
    CallHeader::new(xid, MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_NULL, Auth::None)
        .to_bytes()
        .unwrap()
}

/// A MOUNT NULL call on `s`; whether a successful reply with our XID came back.
fn null(s: &mut TcpStream, xid: u32) -> bool {
    write_record(s, &null_call(xid)).unwrap();
    let Ok(Some(rec)) = read_record(s) else {
        return false;
    };
    let h = ReplyHeader::decode(&mut Decoder::new(&rec)).unwrap();
    h.xid() == xid && h.is_success()
}

fn connect(a: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(a).unwrap();
    // A backstop against a hang, not a timing assertion.
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s
}

#[test]
fn the_connection_over_the_limit_is_closed_and_the_others_are_served() {
    let dir = std::env::temp_dir().join(format!("nfsd-mountd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fs = Arc::new(LocalFs::new(&dir).unwrap());
    let clients = Clients::parse("127.0.0.0/8(rw)").unwrap();
    let export = OneExport::new(fs, dir.as_os_str().as_encoded_bytes(), clients);
    let svc = Arc::new(MountService::new(export, AuthPolicy::AllowNone));
    let m = Mountd::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = m.local_addr().unwrap();
    let (open, refused) = m.counts();
    let limits = MountLimits {
        max_mount_connections: 2,
    };
    let t = m.spawn(svc, limits, &STOP).unwrap();

    let mut a = connect(addr);
    assert!(null(&mut a, 1));
    let mut b = connect(addr);
    assert!(null(&mut b, 2));
    assert_eq!(open.load(Ordering::Acquire), 2);
    // The third: its call is never answered, the server closes the connection (end of
    // stream, or a reset when the call arrived after the close).
    let mut c = connect(addr);
    let _ = write_record(&mut c, &null_call(5));
    let mut buf = [0u8; 4];
    let got = c.read(&mut buf);
    assert!(
        matches!(&got, Ok(0))
            || got
                .as_ref()
                .is_err_and(|e| e.kind() == ErrorKind::ConnectionReset),
        "the connection over the limit: {got:?}"
    );
    assert_eq!(refused.load(Ordering::Acquire), 1);
    // The first two are unaffected.
    assert!(null(&mut a, 3));
    assert!(null(&mut b, 4));
    assert_eq!(open.load(Ordering::Acquire), 2);

    STOP.store(true, Ordering::SeqCst);
    drop((a, b, c));
    t.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
