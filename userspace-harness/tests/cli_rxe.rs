//! The built `userspace-harness` binary over a real RDMA device (Soft-RoCE `rxe0` in the
//! project's VM): `cargo xtask vm -- cargo test --release -p userspace-harness --test cli_rxe
//! -- --nocapture --test-threads=1`. Without an RDMA device every test prints "skipped: no
//! RDMA device" and passes (unless `KRPC_RDMA_REQUIRE_RDMA=1`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use userspace_harness::verbs;

const BIN: &str = env!("CARGO_BIN_EXE_userspace-harness");

/// As in `verbs_rxe.rs`: skip without a device, unless `KRPC_RDMA_REQUIRE_RDMA=1`.
fn skip() -> bool {
    if verbs::rdma_present() {
        false
    } else if std::env::var_os("KRPC_RDMA_REQUIRE_RDMA").is_some_and(|v| v == "1") {
        panic!("no RDMA device, and KRPC_RDMA_REQUIRE_RDMA=1");
    } else {
        println!("skipped: no RDMA device");
        true
    }
}

fn ip() -> String {
    std::env::var("RXE_IP").unwrap_or_else(|_| "10.0.2.15".into())
}

/// `--no-reconnect`: a killed server ends the run at once, as a lost connection (exit 3).
#[test]
fn killed_server_is_reported_as_a_lost_connection() {
    if skip() {
        return;
    }
    let addr = format!("{}:20151", ip());
    let mut server = start_server(&addr);
    let mut client = write_client(&addr, &["--duration", "60", "--no-reconnect"]);
    // Kill the server once the client is connected and its calls complete (its first progress
    // line), not after a fixed sleep: one lost CM packet delays a connection set-up by the
    // CM's ~4.3 s retry, which in a loaded VM made a 4 s sleep kill the server mid-handshake
    // (the client then reported "refused", not a lost connection).
    let (lines, stderr_all) = stderr_lines(&mut client);
    wait_progress(&lines);
    stop(&mut server);
    let t = Instant::now();
    let status = client.wait().unwrap();
    let stderr = stderr_all.join().unwrap();
    println!(
        "client exit {:?} after {:?}; stderr:\n{stderr}",
        status.code(),
        t.elapsed()
    );
    assert_eq!(status.code(), Some(3), "exit status of a lost connection");
    let last = stderr.lines().last().unwrap_or("");
    assert!(
        last.starts_with("userspace-harness: connection to ")
            && last.contains(" lost: ")
            && last.contains(" calls completed, ")
            && last.contains(" lost in flight"),
        "{last}"
    );
    let completed: u64 = last
        .split(" lost: ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(completed > 0, "some calls completed before the kill");
    assert!(!stderr.contains("panicked"), "no panic");
    assert!(
        t.elapsed() < Duration::from_secs(45),
        "the loss is noticed promptly"
    );
}

/// By default the client reconnects; a server that stays down makes it give up after
/// `--give-up`: one line when the loss is seen, one when it gives up, then the loss (exit 3).
#[test]
fn a_server_that_stays_down_makes_the_client_give_up() {
    if skip() {
        return;
    }
    let addr = format!("{}:20154", ip());
    let mut server = start_server(&addr);
    let mut client = write_client(&addr, &["--duration", "60", "--give-up", "5"]);
    let (lines, stderr_all) = stderr_lines(&mut client);
    wait_progress(&lines);
    stop(&mut server);
    let status = client.wait().unwrap();
    let stderr = stderr_all.join().unwrap();
    println!("client exit {:?}; stderr:\n{stderr}", status.code());
    assert_eq!(status.code(), Some(3), "exit status of a lost connection");
    assert!(
        stderr.contains(&format!(
            "connection to {addr} lost; reconnecting (giving up after 5 s)"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("giving up reconnecting to {addr} after ")),
        "{stderr}"
    );
    assert!(!stderr.contains("reconnected to "), "{stderr}");
    let last = stderr.lines().last().unwrap_or("");
    assert!(
        last.starts_with("userspace-harness: connection to ") && last.contains(" lost: "),
        "{last}"
    );
}

#[test]
fn refused_connection_is_one_line_and_nonzero() {
    if skip() {
        return;
    }
    let got = Command::new(BIN)
        .args([
            "client",
            "--server",
            &format!("{}:20199", ip()),
            "--count",
            "1",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&got.stderr);
    println!("{stderr}");
    assert_eq!(got.status.code(), Some(1));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("refused") || stderr.contains("unreachable"));
}

#[test]
fn bench_json_and_trace() {
    if skip() {
        return;
    }
    let trace = std::env::temp_dir().join(format!("cli_rxe_trace_{}.jsonl", std::process::id()));
    let got = Command::new(BIN)
        .args([
            "bench",
            "--addr",
            &format!("{}:20152", ip()),
            "--workload",
            "read",
            "--size",
            "64k",
            "--depth",
            "4",
            "--count",
            "40",
            "--json",
            "--trace",
            trace.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        got.status.success(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    let stdout = String::from_utf8(got.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["workload"], "read");
    assert_eq!(v["ops"], 40);
    assert_eq!(v["errors"], 0);
    assert_eq!(v["counters"]["write_chunks"], 40);
    let text = std::fs::read_to_string(&trace).unwrap();
    let _ = std::fs::remove_file(&trace);
    let mut dirs = [0usize; 2];
    for l in text.lines() {
        let t: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(t["reencoded"], t["message"], "{l}");
        assert!(t["peer"].is_string());
        match t["dir"].as_str() {
            Some("tx") => dirs[0] += 1,
            Some("rx") => dirs[1] += 1,
            d => panic!("dir {d:?}"),
        }
    }
    // 4 WRITEs to prepare and 40 READs, each a call and a reply, seen by both sides.
    assert_eq!(dirs, [88, 88]);
}

/// A client making 64 KiB WRITEs, 4 in flight, to `addr`, with `more` arguments.
fn write_client(addr: &str, more: &[&str]) -> std::process::Child {
    client(addr, "write", more)
}

fn client(addr: &str, workload: &str, more: &[&str]) -> std::process::Child {
    Command::new(BIN)
        .args([
            "client",
            "--server",
            addr,
            "--workload",
            workload,
            "--size",
            "64k",
        ])
        .args(["--depth", "4"])
        .args(more)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The child's stderr, line by line as it comes (the receiver) and whole at its end (the
/// handle's result).
fn stderr_lines(
    child: &mut std::process::Child,
) -> (
    std::sync::mpsc::Receiver<String>,
    std::thread::JoinHandle<String>,
) {
    let err = BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let all = std::thread::spawn(move || {
        let mut all = String::new();
        for line in err.lines().map_while(Result::ok) {
            all.push_str(&line);
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    (rx, all)
}

/// The N of a client progress line ("[  t s] N ops, …").
fn progress_ops(line: &str) -> Option<u64> {
    line.split_once("] ")
        .and_then(|(_, rest)| rest.split_once(" ops"))
        .and_then(|(k, _)| k.trim().parse().ok())
}

/// Wait (at most 60 s) for a line of the client's stderr that `want` accepts.
fn wait_line(lines: &std::sync::mpsc::Receiver<String>, what: &str, want: impl Fn(&str) -> bool) {
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(l) if want(&l) => return,
            Ok(_) => {}
            Err(e) => panic!("no {what} from the client within 60 s: {e}"),
        }
    }
}

/// Wait for the client's first progress line (its calls complete).
fn wait_progress(lines: &std::sync::mpsc::Receiver<String>) {
    wait_line(lines, "a progress line", |l| progress_ops(l).is_some());
}

/// Kill `server` and reap it.
fn stop(server: &mut std::process::Child) {
    server.kill().unwrap();
    server.wait().unwrap();
}

/// Kill `server`, and half a second later start another on `addr` in its place.
fn restart(server: &mut std::process::Child, addr: &str) {
    stop(server);
    std::thread::sleep(Duration::from_millis(500));
    *server = start_server(addr);
}

/// Wait for `client` to end, then stop `server`: the client's output, its whole stderr (from
/// `stderr_all`) and its stdout as text; both printed.
fn finish(
    client: std::process::Child,
    server: &mut std::process::Child,
    stderr_all: std::thread::JoinHandle<String>,
) -> (std::process::Output, String, String) {
    let got = client.wait_with_output().unwrap();
    stop(server);
    let stderr = stderr_all.join().unwrap();
    let stdout = String::from_utf8_lossy(&got.stdout).into_owned();
    println!(
        "client exit {:?}; stderr:\n{stderr}\nstdout:\n{stdout}",
        got.status.code()
    );
    (got, stderr, stdout)
}

/// A server on `addr`, once it says "listening on".
fn start_server(addr: &str) -> std::process::Child {
    let mut server = Command::new(BIN)
        .args(["server", "--listen", addr])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(server.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.starts_with("listening on"), "server said {line:?}");
    // Keep reading its stdout so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in out.lines() {});
    server
}

/// `client --give-up 30`: the server is killed and restarted three times during a 20 s WRITE
/// run; the client reconnects each time, resends what was owed with the same XIDs, and ends
/// with every call answered and every byte verified by the server (no error).
#[test]
fn the_client_survives_three_server_restarts() {
    if skip() {
        return;
    }
    let addr = format!("{}:20152", ip());
    let mut server = start_server(&addr);
    let mut client = write_client(&addr, &["--duration", "45", "--give-up", "30", "--json"]);
    let (lines, stderr_all) = stderr_lines(&mut client);
    // Each kill comes once the client makes calls on its current connection (a progress
    // line after the last reconnect), so no kill lands in a connection set-up however slow
    // the VM is.
    for _ in 0..3 {
        wait_progress(&lines);
        restart(&mut server, &addr);
        wait_line(&lines, "a reconnect", |l| l.contains("reconnected to "));
    }
    let (got, stderr, stdout) = finish(client, &mut server, stderr_all);
    assert_eq!(got.status.code(), Some(0), "the run survives the restarts");
    let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(v["errors"], 0, "every byte verified");
    assert!(v["ops"].as_u64().unwrap() > 100, "{v}");
    let summary = stderr
        .lines()
        .find(|l| l.contains(" reconnects, "))
        .expect("a reconnect summary");
    // "N reconnects, M calls resent"
    let figures: Vec<u64> = summary
        .trim_start_matches("userspace-harness: ")
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let (reconnects, resent) = (figures[0], figures[1]);
    assert!(reconnects >= 3, "{summary}");
    // Four WRITEs are always in flight: each kill leaves some owed, sent again with their
    // XIDs on the next connection (and verified by the new server like any other).
    assert!(resent >= 3, "{summary}");
    assert_eq!(
        stderr.matches("reconnected to ").count() as u64,
        reconnects,
        "one line per reconnect"
    );
}

/// The NULL workload across a server restart, with the default options (the client
/// reconnects unless told `--no-reconnect`): every call answered exactly once (a NULL reply
/// carries nothing to verify, so "exactly once" is what the report's error count and the
/// resent calls show).
#[test]
fn the_null_workload_survives_a_server_restart() {
    if skip() {
        return;
    }
    let addr = format!("{}:20153", ip());
    let mut server = start_server(&addr);
    let mut client = client(&addr, "null", &["--duration", "15", "--json"]);
    let (lines, stderr_all) = stderr_lines(&mut client);
    wait_progress(&lines);
    restart(&mut server, &addr);
    let (got, stderr, stdout) = finish(client, &mut server, stderr_all);
    assert_eq!(got.status.code(), Some(0), "the run survives the restart");
    let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(v["errors"], 0);
    assert!(v["ops"].as_u64().unwrap() > 100, "{v}");
    assert_eq!(stderr.matches("reconnected to ").count(), 1, "{stderr}");
}
