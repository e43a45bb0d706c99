//! The accept loop's connection limit over Soft-RoCE, in the project's VM (`cargo xtask vm --
//! cargo test --release -p krpc-rdma-verbs --test accept_limit_rxe`): with
//! `max_connections` 1, the first connection is served, a second connect request is
//! rejected (the client's connect fails as refused), counted and reported as one line, and
//! the first connection is not disturbed. Without an RDMA device it prints why and passes
//! (unless `KRPC_RDMA_REQUIRE_RDMA=1`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use krpc_rdma::provider::{CmEvent, Provider};
use krpc_rdma::transport::ResponderEvent;
use krpc_rdma_verbs::accept::{accept_each, ServerConfig};
use krpc_rdma_verbs::arena::VerbsArena;
use krpc_rdma_verbs::cm::{self, VerbsListener};
use krpc_rdma_verbs::device::Device;
use krpc_rdma_verbs::{rdma_present, VerbsConfig, VerbsError};
use mbuf::PageProvider;

fn skip() -> bool {
    if rdma_present() {
        return false;
    }
    if std::env::var_os("KRPC_RDMA_REQUIRE_RDMA").is_some_and(|v| v == "1") {
        panic!("no RDMA device, and KRPC_RDMA_REQUIRE_RDMA=1");
    }
    println!("skipped: no RDMA device");
    true
}

#[test]
fn the_connection_over_the_limit_is_rejected_and_the_first_is_unaffected() {
    if skip() {
        return;
    }
    let ip = std::env::var("RXE_IP").unwrap_or_else(|_| "10.0.2.15".into());
    let addr: SocketAddr = format!("{ip}:20349").parse().unwrap();
    let dev = Device::open(None).unwrap();
    let server_arena = VerbsArena::new(&dev, 1024).unwrap();
    let client_arena = VerbsArena::new(&dev, 1024).unwrap();
    let mut listener = VerbsListener::bind(&server_arena, addr).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let notes = Arc::new(Mutex::new(Vec::new()));
    let cfg = ServerConfig {
        max_connections: 1,
        accept_poll_ms: 100,
        ..ServerConfig::default()
    };
    let pages: Arc<dyn PageProvider> = server_arena.clone();
    let (st, nt) = (stop.clone(), notes.clone());
    let server = std::thread::spawn(move || {
        let st2 = st.clone();
        let conns = accept_each(
            &mut listener,
            &cfg,
            &pages,
            |_| st.load(Ordering::SeqCst),
            |n| nt.lock().unwrap().push(n.to_string()),
            move |a| {
                // Hold the connection until the test ends; whether it was lost meanwhile.
                let (mut qp, mut resp, mut lost) = (a.qp, a.responder, false);
                while !st2.load(Ordering::SeqCst) && !lost {
                    resp.poll(&mut qp, &mut |e| {
                        lost |= matches!(e, ResponderEvent::ConnectionLost)
                    });
                    std::thread::sleep(Duration::from_millis(10));
                }
                lost
            },
        )
        .unwrap();
        (conns.accepted(), conns.refused(), conns.join())
    });
    let ccfg = VerbsConfig::default();
    let mut first = cm::connect(&client_arena, addr, &[], &ccfg).unwrap();
    let second = cm::connect(&client_arena, addr, &[], &ccfg);
    assert!(
        matches!(second, Err(VerbsError::Refused(_))),
        "the second connection: {second:?}"
    );
    // The first is still up: no disconnect event on its side.
    let mut events = Vec::new();
    while let Some(e) = first.poll_event() {
        events.push(e);
    }
    assert!(
        !events.iter().any(|e| matches!(e, CmEvent::Disconnected)),
        "{events:?}"
    );
    stop.store(true, Ordering::SeqCst);
    let (accepted, refused, lost) = server.join().unwrap();
    assert_eq!((accepted, refused, lost), (1, 1, vec![false]));
    let notes = notes.lock().unwrap();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("refused a connection from ")
            && notes[0].contains("1 connections open"),
        "{}",
        notes[0]
    );
    drop(first);
}
