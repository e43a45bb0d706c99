//! Connection set-up through `rdma_cm`: [`connect`] (client) and [`VerbsListener`] (server).
//!
//! Both block, with the timeouts of [`VerbsConfig::timeout_ms`], until the connection is
//! established, then hand over a [`VerbsQp`] whose first
//! [`poll_event`](krpc_rdma::provider::Provider::poll_event) is
//! `Established { private_data }` with the peer's RFC 8797 private data (the server's from its
//! accept on the client, the client's from its connect request on the server). Each queue pair
//! owns its own event channel (the server migrates the new id off the listener's channel),
//! non-blocking once established.

use std::net::SocketAddr;
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys::{
    rdma_accept, rdma_ack_cm_event, rdma_bind_addr, rdma_cm_event_type, rdma_cm_id,
    rdma_conn_param, rdma_connect, rdma_create_event_channel, rdma_create_id,
    rdma_destroy_event_channel, rdma_destroy_id, rdma_event_channel, rdma_event_str,
    rdma_get_cm_event, rdma_listen, rdma_migrate_id, rdma_port_space, rdma_reject,
    rdma_resolve_addr, rdma_resolve_route,
};

use super::arena::VerbsArena;
use super::qp::VerbsQp;
use super::{errno, sys, VerbsConfig, VerbsError};

/// RNR retries: finite (6), so a Send that finds no Receive fails as on the software provider
/// instead of retrying forever.
const RNR_RETRY: u8 = 6;
/// Transport retries.
const RETRY: u8 = 7;

/// A copied CM event.
struct Event {
    kind: u32,
    status: i32,
    id: *mut rdma_cm_id,
    private_data: Vec<u8>,
}

fn event_name(kind: u32) -> String {
    // SAFETY: `rdma_event_str` returns a static string for any value.
    let p = unsafe { rdma_event_str(kind) };
    if p.is_null() {
        return format!("event {kind}");
    }
    // SAFETY: non-null static NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

/// Wait up to `timeout` for the next event on `channel`; `None` on timeout.
fn next_event(
    channel: *mut rdma_event_channel,
    timeout: Duration,
) -> Result<Option<Event>, VerbsError> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        // SAFETY: `channel` is live.
        let fd = unsafe { (*channel).fd };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return Err(sys("poll (cm channel)"));
        }
        if rc == 0 {
            return Ok(None);
        }
        let mut ev = ptr::null_mut();
        // SAFETY: the fd is readable, so this does not block; `ev` is a valid out-pointer.
        if unsafe { rdma_get_cm_event(channel, &mut ev) } != 0 || ev.is_null() {
            if errno() == libc::EAGAIN {
                continue;
            }
            return Err(sys("rdma_get_cm_event"));
        }
        // SAFETY: `ev` is live until acked below; the private data pointer, when non-null,
        // points at `private_data_len` bytes owned by the event.
        let out = unsafe {
            let e = &*ev;
            let conn = &e.param.conn;
            let pd = if conn.private_data.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    usize::from(conn.private_data_len),
                )
                .to_vec()
            };
            Event {
                kind: e.event,
                status: e.status,
                id: e.id,
                private_data: pd,
            }
        };
        // SAFETY: acked exactly once; nothing of it is used afterwards.
        unsafe { rdma_ack_cm_event(ev) };
        return Ok(Some(out));
    }
}

/// Wait for `want` on `channel`, mapping the usual failures to typed errors.
fn expect_event(
    channel: *mut rdma_event_channel,
    want: u32,
    what: &'static str,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<Event, VerbsError> {
    let ev = next_event(channel, timeout)?.ok_or(VerbsError::Timeout { what, addr })?;
    if ev.kind == want {
        return Ok(ev);
    }
    Err(match ev.kind {
        rdma_cm_event_type::RDMA_CM_EVENT_ADDR_ERROR => VerbsError::AddrUnresolved(addr),
        rdma_cm_event_type::RDMA_CM_EVENT_ROUTE_ERROR => VerbsError::RouteUnresolved(addr),
        rdma_cm_event_type::RDMA_CM_EVENT_REJECTED => VerbsError::Refused(addr),
        rdma_cm_event_type::RDMA_CM_EVENT_UNREACHABLE => VerbsError::Unreachable(addr),
        k => VerbsError::UnexpectedEvent {
            wanted: what,
            got: event_name(k),
            status: ev.status,
        },
    })
}

/// `addr` as a `sockaddr_storage` (a `sockaddr_in` / `sockaddr_in6` in it) and its length:
/// for rdma_cm and for plain sockets.
pub fn sockaddr_of(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// The address in a `sockaddr_in` / `sockaddr_in6` held in `ss`; `None` for other families.
pub(crate) fn socket_addr_of(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a `sockaddr_in`, which is smaller.
            let sin: libc::sockaddr_in =
                unsafe { ptr::read((ss as *const libc::sockaddr_storage).cast()) };
            let ip = std::net::Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::from((ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a `sockaddr_in6`, which is smaller.
            let sin6: libc::sockaddr_in6 =
                unsafe { ptr::read((ss as *const libc::sockaddr_storage).cast()) };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::from((ip, u16::from_be(sin6.sin6_port))))
        }
        _ => None,
    }
}

/// An event channel and an id, destroyed on drop unless taken.
struct CmPair {
    channel: *mut rdma_event_channel,
    id: *mut rdma_cm_id,
}

impl CmPair {
    fn new() -> Result<CmPair, VerbsError> {
        // SAFETY: no arguments; returns null on failure.
        let channel = unsafe { rdma_create_event_channel() };
        if channel.is_null() {
            return Err(sys("rdma_create_event_channel"));
        }
        let mut pair = CmPair {
            channel,
            id: ptr::null_mut(),
        };
        // SAFETY: `channel` is live; `pair.id` is a valid out-pointer.
        let rc = unsafe {
            rdma_create_id(
                channel,
                &mut pair.id,
                ptr::null_mut(),
                rdma_port_space::RDMA_PS_TCP,
            )
        };
        if rc != 0 {
            return Err(sys("rdma_create_id"));
        }
        Ok(pair)
    }

    fn take(mut self) -> (*mut rdma_event_channel, *mut rdma_cm_id) {
        let out = (self.channel, self.id);
        self.channel = ptr::null_mut();
        self.id = ptr::null_mut();
        out
    }
}

impl Drop for CmPair {
    fn drop(&mut self) {
        if !self.id.is_null() {
            // SAFETY: live id with every event acknowledged.
            unsafe { rdma_destroy_id(self.id) };
        }
        if !self.channel.is_null() {
            // SAFETY: its id is gone.
            unsafe { rdma_destroy_event_channel(self.channel) };
        }
    }
}

fn conn_param(qp: &VerbsQp, private_data: &[u8]) -> rdma_conn_param {
    let rd = u8::try_from(
        krpc_rdma::provider::Provider::resources(qp)
            .max_rd_atomic
            .min(255),
    )
    .unwrap_or(16);
    rdma_conn_param {
        private_data: private_data.as_ptr().cast(),
        private_data_len: u8::try_from(private_data.len()).unwrap_or(u8::MAX),
        responder_resources: rd,
        initiator_depth: rd,
        flow_control: 1,
        retry_count: RETRY,
        rnr_retry_count: RNR_RETRY,
        srq: 0,
        qp_num: 0,
    }
}

/// Connect to `addr` (client): resolve address and route, create the queue pair on the
/// arena's device, `rdma_connect` with `private_data` (our RFC 8797 data, at most 56 bytes),
/// wait for the connection.
///
/// # Errors
/// Typed [`VerbsError`]s: unresolvable address, refused, unreachable, timeouts, wrong device,
/// failing library calls.
pub fn connect(
    arena: &Arc<VerbsArena>,
    addr: SocketAddr,
    private_data: &[u8],
    cfg: &VerbsConfig,
) -> Result<VerbsQp, VerbsError> {
    if private_data.len() > 56 {
        return Err(VerbsError::Config("private data longer than 56 bytes"));
    }
    let timeout = Duration::from_millis(u64::from(cfg.timeout_ms));
    let tmo = i32::try_from(cfg.timeout_ms).unwrap_or(i32::MAX);
    let pair = CmPair::new()?;
    let (mut ss, _) = sockaddr_of(addr);
    // SAFETY: live id; `ss` holds a valid sockaddr of the right family.
    let rc = unsafe {
        rdma_resolve_addr(
            pair.id,
            ptr::null_mut(),
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            tmo,
        )
    };
    if rc != 0 {
        return Err(sys("rdma_resolve_addr"));
    }
    expect_event(
        pair.channel,
        rdma_cm_event_type::RDMA_CM_EVENT_ADDR_RESOLVED,
        "address resolution",
        addr,
        timeout,
    )?;
    // SAFETY: live id with a resolved address.
    if unsafe { rdma_resolve_route(pair.id, tmo) } != 0 {
        return Err(sys("rdma_resolve_route"));
    }
    expect_event(
        pair.channel,
        rdma_cm_event_type::RDMA_CM_EVENT_ROUTE_RESOLVED,
        "route resolution",
        addr,
        timeout,
    )?;
    // SAFETY: live id; `verbs` is set once the address is resolved.
    if unsafe { (*pair.id).verbs } != arena.device().ctx() {
        return Err(VerbsError::WrongDevice(addr));
    }
    let (channel, id) = pair.take();
    let mut qp = VerbsQp::create(arena, cfg, channel, id)?;
    let mut param = conn_param(&qp, private_data);
    // SAFETY: live id with a QP; `param` and the private data outlive the call.
    if unsafe { rdma_connect(id, &mut param) } != 0 {
        return Err(sys("rdma_connect"));
    }
    let ev = expect_event(
        channel,
        rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED,
        "connection",
        addr,
        timeout,
    )?;
    qp.established(&ev.private_data);
    Ok(qp)
}

/// How long [`VerbsListener::accept_with`] waits for an accepted connection to be established,
/// whatever the timeout it was given for the connect request.
pub const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(30);

/// A listening `rdma_cm` id.
pub struct VerbsListener {
    arena: Arc<VerbsArena>,
    pair: CmPair,
    addr: SocketAddr,
}

impl std::fmt::Debug for VerbsListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsListener")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

// SAFETY: the channel and id are owned by the listener and only used through `&self` calls
// that are serialized by the caller (accept is not reentrant: it takes `&mut self`).
unsafe impl Send for VerbsListener {}

impl VerbsListener {
    /// Bind and listen on `addr` (use [`super::DEFAULT_PORT`] for NFS/RDMA).
    ///
    /// # Errors
    /// A failing library call (address in use, no device for the address).
    pub fn bind(arena: &Arc<VerbsArena>, addr: SocketAddr) -> Result<VerbsListener, VerbsError> {
        let pair = CmPair::new()?;
        let (mut ss, _) = sockaddr_of(addr);
        // SAFETY: live id; valid sockaddr.
        if unsafe { rdma_bind_addr(pair.id, (&mut ss as *mut libc::sockaddr_storage).cast()) } != 0
        {
            return Err(sys("rdma_bind_addr"));
        }
        // SAFETY: bound id.
        if unsafe { rdma_listen(pair.id, 16) } != 0 {
            return Err(sys("rdma_listen"));
        }
        Ok(VerbsListener {
            arena: Arc::clone(arena),
            pair,
            addr,
        })
    }

    /// The address listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Accept one connection, replying with `private_data`. `cfg.timeout_ms` bounds the wait
    /// for a connect request; the wait for the accepted connection to be established is
    /// bounded by the longer of it and [`ESTABLISH_TIMEOUT`].
    ///
    /// # Errors
    /// Timeout waiting for a request or for the connection, failing library calls.
    pub fn accept(
        &mut self,
        private_data: &[u8],
        cfg: &VerbsConfig,
    ) -> Result<VerbsQp, VerbsError> {
        self.accept_with(private_data, cfg, |_| {})
    }

    /// Accept one connection; `before` runs on the new queue pair before `rdma_accept` (to
    /// post Receives, e.g. `Responder::post_receives`, so the client's first Send finds one).
    ///
    /// # Errors
    /// As [`VerbsListener::accept`].
    pub fn accept_with(
        &mut self,
        private_data: &[u8],
        cfg: &VerbsConfig,
        before: impl FnOnce(&mut VerbsQp),
    ) -> Result<VerbsQp, VerbsError> {
        if private_data.len() > 56 {
            return Err(VerbsError::Config("private data longer than 56 bytes"));
        }
        let timeout = Duration::from_millis(u64::from(cfg.timeout_ms));
        let ev = self.next_request(timeout)?;
        let id = ev.id;
        // SAFETY: no arguments.
        let channel = unsafe { rdma_create_event_channel() };
        if channel.is_null() {
            let e = sys("rdma_create_event_channel");
            // SAFETY: the request's live id, neither accepted nor rejected; not used again.
            unsafe { reject(id) };
            return Err(e);
        }
        // SAFETY: live id and channel; every event of the id was acknowledged.
        if unsafe { rdma_migrate_id(id, channel) } != 0 {
            let e = sys("rdma_migrate_id");
            // SAFETY: the request's live id, neither accepted nor rejected; not used again.
            unsafe { reject(id) };
            // SAFETY: no id uses it.
            unsafe { rdma_destroy_event_channel(channel) };
            return Err(e);
        }
        // SAFETY: live id.
        if unsafe { (*id).verbs } != self.arena.device().ctx() {
            // SAFETY: the request's live id, neither accepted nor rejected; not used again.
            unsafe { reject(id) };
            // SAFETY: no id uses it.
            unsafe { rdma_destroy_event_channel(channel) };
            return Err(VerbsError::WrongDevice(self.addr));
        }
        let mut qp = match VerbsQp::create(&self.arena, cfg, channel, id) {
            Ok(qp) => qp,
            Err(e) => {
                // The queue pair's drop destroyed id and channel; the client times out.
                return Err(e);
            }
        };
        before(&mut qp);
        let mut param = conn_param(&qp, private_data);
        // SAFETY: live id with a QP; `param` and the private data outlive the call.
        if unsafe { rdma_accept(id, &mut param) } != 0 {
            return Err(sys("rdma_accept"));
        }
        // Once accepted, the handshake is the CM's to finish: it ends in ESTABLISHED, or in
        // CONNECT_ERROR / REJECTED / UNREACHABLE when the peer goes away. `timeout` is how
        // long to wait for a *request* (a server's accept loop polls with a short one); using
        // it here too dropped connections whose RTU came late (rxe under a loaded qemu took
        // over 1 s), which the client saw as "refused". The longer bound is a backstop only.
        expect_event(
            channel,
            rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED,
            "connection establishment",
            self.addr,
            timeout.max(ESTABLISH_TIMEOUT),
        )?;
        qp.established(&ev.private_data);
        Ok(qp)
    }

    /// Wait up to `timeout` for a connect request and reject it (`rdma_reject`, no private
    /// data: the peer's connect fails at once as refused, its CM sees `REJECTED`); the
    /// peer's address, if the CM gave one. For a server at its connection limit.
    ///
    /// # Errors
    /// [`VerbsError::Timeout`] when no request came; CM failures.
    pub fn reject_next(&mut self, timeout: Duration) -> Result<Option<SocketAddr>, VerbsError> {
        let id = self.next_request(timeout)?.id;
        // SAFETY: `id` is the live id of the request (its event acknowledged); the route's
        // destination address is plain data, filled by rdma_cm with the request.
        let ss = unsafe { (*id).route.addr.dst_addr_union.dst_storage };
        // SAFETY: the request's live id, neither accepted nor rejected; not used again.
        unsafe { reject(id) };
        Ok(socket_addr_of(&ss))
    }

    /// Wait up to `timeout` for the next connect request on the listener.
    fn next_request(&mut self, timeout: Duration) -> Result<Event, VerbsError> {
        expect_event(
            self.pair.channel,
            rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST,
            "a connect request",
            self.addr,
            timeout,
        )
    }
}

/// Refuse the connect request whose new id is `id` (no private data: the peer's connect
/// fails at once as refused) and destroy the id.
///
/// # Safety
/// `id` must be the live id of a request this listener received and has not yet accepted,
/// rejected or destroyed; it is dangling afterwards.
unsafe fn reject(id: *mut rdma_cm_id) {
    // SAFETY: per the contract above, `id` is live and is rejected and destroyed once.
    unsafe {
        rdma_reject(id, ptr::null(), 0);
        rdma_destroy_id(id);
    }
}
