//! The Network Lock Manager protocol, version 4 (program 100021; the NLM of NFSv3: X/Open
//! XNFS "Protocols for Interworking", chapter 10, and RFC 1813 appendix II), and the lock
//! manager's state: [`LockTable`].
//!
//! * Codecs for every argument and result type, both directions (a server decodes the
//!   arguments and encodes the results; a client, a test or a GRANTED callback the other way):
//!   [`Nlm4Lock`], [`LockArgs`], [`CancArgs`], [`TestArgs`], [`UnlockArgs`], [`ShareArgs`],
//!   [`NotifyArgs`] (FREE_ALL), [`Res`], [`TestRes`], [`ShareRes`]. Strings and netobjs are
//!   bounded ([`LM_MAXSTRLEN`], [`MAXNETOBJ_SZ`]) before anything is allocated.
//! * [`LockTable`]: advisory byte-range locks keyed by the file handle's bytes (never
//!   interpreted), owned by (caller name, svid) as Linux's lockd owns them; shared and
//!   exclusive locks, POSIX upgrade / downgrade / split of an owner's own ranges, a FIFO queue
//!   of blocked requests woken when a lock goes away ([`Grant`]s for the GRANTED callbacks),
//!   DOS share reservations, FREE_ALL, and the grace period after a restart (only reclaims).
//!
//! Ranges: `l_offset` and `l_len` are 64-bit; `l_len == 0` means "to the end of the file"; a
//! range whose last byte does not fit in 64 bits is refused with `NLM4_FBIG` (checked
//! arithmetic, never a wrap). Deadlock detection is not done (`NLM4_DEADLCK` is never
//! returned): a blocked request waits until the holder unlocks, is cancelled, or its host is
//! freed.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;

use onc_rpc::xdr::{Decoder, Encoder, XdrError};

/// The NLM program number.
pub const NLM_PROGRAM: u32 = 100_021;
/// NLM version 4 (the one for NFSv3: 64-bit offsets).
pub const NLM_V4: u32 = 4;
/// The longest `caller_name` (`LM_MAXSTRLEN`).
pub const LM_MAXSTRLEN: usize = 1024;
/// The longest netobj (cookie, file handle, owner handle).
pub const MAXNETOBJ_SZ: usize = 1024;
/// The longest FREE_ALL `name` (`MAXNAMELEN` = `LM_MAXSTRLEN` + 1).
pub const MAXNAMELEN: usize = LM_MAXSTRLEN + 1;

/// `NLMPROC4_NULL`.
pub const NLMPROC4_NULL: u32 = 0;
/// `NLMPROC4_TEST`.
pub const NLMPROC4_TEST: u32 = 1;
/// `NLMPROC4_LOCK`.
pub const NLMPROC4_LOCK: u32 = 2;
/// `NLMPROC4_CANCEL`.
pub const NLMPROC4_CANCEL: u32 = 3;
/// `NLMPROC4_UNLOCK`.
pub const NLMPROC4_UNLOCK: u32 = 4;
/// `NLMPROC4_GRANTED` (server to client: a blocked lock was granted).
pub const NLMPROC4_GRANTED: u32 = 5;
/// `NLMPROC4_TEST_MSG`.
pub const NLMPROC4_TEST_MSG: u32 = 6;
/// `NLMPROC4_LOCK_MSG`.
pub const NLMPROC4_LOCK_MSG: u32 = 7;
/// `NLMPROC4_CANCEL_MSG`.
pub const NLMPROC4_CANCEL_MSG: u32 = 8;
/// `NLMPROC4_UNLOCK_MSG`.
pub const NLMPROC4_UNLOCK_MSG: u32 = 9;
/// `NLMPROC4_GRANTED_MSG`.
pub const NLMPROC4_GRANTED_MSG: u32 = 10;
/// `NLMPROC4_TEST_RES`.
pub const NLMPROC4_TEST_RES: u32 = 11;
/// `NLMPROC4_LOCK_RES`.
pub const NLMPROC4_LOCK_RES: u32 = 12;
/// `NLMPROC4_CANCEL_RES`.
pub const NLMPROC4_CANCEL_RES: u32 = 13;
/// `NLMPROC4_UNLOCK_RES`.
pub const NLMPROC4_UNLOCK_RES: u32 = 14;
/// `NLMPROC4_GRANTED_RES`.
pub const NLMPROC4_GRANTED_RES: u32 = 15;
/// `NLMPROC4_SHARE`.
pub const NLMPROC4_SHARE: u32 = 20;
/// `NLMPROC4_UNSHARE`.
pub const NLMPROC4_UNSHARE: u32 = 21;
/// `NLMPROC4_NM_LOCK` (LOCK without monitoring).
pub const NLMPROC4_NM_LOCK: u32 = 22;
/// `NLMPROC4_FREE_ALL`.
pub const NLMPROC4_FREE_ALL: u32 = 23;

/// `nlm4_stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Nlm4Stat(pub u32);

impl Nlm4Stat {
    /// `NLM4_GRANTED`.
    pub const GRANTED: Nlm4Stat = Nlm4Stat(0);
    /// `NLM4_DENIED`: a conflicting lock is held.
    pub const DENIED: Nlm4Stat = Nlm4Stat(1);
    /// `NLM4_DENIED_NOLOCKS`: out of resources.
    pub const DENIED_NOLOCKS: Nlm4Stat = Nlm4Stat(2);
    /// `NLM4_BLOCKED`: queued; a GRANTED callback follows.
    pub const BLOCKED: Nlm4Stat = Nlm4Stat(3);
    /// `NLM4_DENIED_GRACE_PERIOD`: only reclaims now (or a reclaim outside the grace period).
    pub const DENIED_GRACE_PERIOD: Nlm4Stat = Nlm4Stat(4);
    /// `NLM4_DEADLCK`.
    pub const DEADLCK: Nlm4Stat = Nlm4Stat(5);
    /// `NLM4_ROFS`.
    pub const ROFS: Nlm4Stat = Nlm4Stat(6);
    /// `NLM4_STALE_FH`.
    pub const STALE_FH: Nlm4Stat = Nlm4Stat(7);
    /// `NLM4_FBIG`: the range does not fit 64 bits.
    pub const FBIG: Nlm4Stat = Nlm4Stat(8);
    /// `NLM4_FAILED`.
    pub const FAILED: Nlm4Stat = Nlm4Stat(9);
}

/// `fsh4_mode`: what a share denies others (`fsm_DN` 0, `fsm_DR` 1, `fsm_DW` 2, `fsm_DRW` 3).
pub type ShareMode = u32;
/// `fsh4_access`: what a share wants (`fsa_NONE` 0, `fsa_R` 1, `fsa_W` 2, `fsa_RW` 3).
pub type ShareAccess = u32;

fn netobj(d: &mut Decoder<'_>, what: &'static str, max: usize) -> Result<Vec<u8>, XdrError> {
    let b = d.opaque(what, max)?;
    let mut v = Vec::new();
    v.try_reserve_exact(b.len()).map_err(|_| XdrError::Alloc)?;
    v.extend_from_slice(b);
    Ok(v)
}

fn put(e: &mut Encoder, b: &[u8], max: usize) {
    if b.len() > max {
        e.fail();
    } else {
        e.opaque(b);
    }
}

/// A field of an NLM struct other than a string or netobj: its XDR is its own.
trait Item: Sized {
    fn put(&self, e: &mut Encoder);
    fn get(d: &mut Decoder<'_>) -> Result<Self, XdrError>;
}

macro_rules! scalar_items {
    ($($t:ident),*) => {$(
        impl Item for $t {
            fn put(&self, e: &mut Encoder) {
                e.$t(*self);
            }
            fn get(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
                d.$t()
            }
        }
    )*};
}

scalar_items!(bool, i32, u32, u64);

/// One field's encoding or decoding: `[max]` after a field's type marks a string or netobj
/// of at most `max` bytes (decoding errors name the field), anything else is an [`Item`].
macro_rules! nlm_field {
    (put $e:ident, $v:expr, []) => {
        Item::put($v, $e)
    };
    (put $e:ident, $v:expr, [$max:expr]) => {
        put($e, $v, $max)
    };
    (get $d:ident, $f:ident, []) => {
        Item::get($d)?
    };
    (get $d:ident, $f:ident, [$max:expr]) => {
        netobj($d, stringify!($f), $max)?
    };
}

/// Define an NLM struct whose XDR is its fields in order, with inherent `encode` / `decode`
/// (and the [`Item`] impl, so that another struct can hold it). A string or netobj field
/// is `pub f: Vec<u8> [max],`.
macro_rules! nlm_struct {
    (
        $(#[$m:meta])*
        pub struct $name:ident {
            $( $(#[$fm:meta])* pub $f:ident : $t:ty $([$max:expr])?, )*
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct $name {
            $( $(#[$fm])* pub $f: $t, )*
        }

        impl $name {
            /// Append the XDR encoding (an over-long string or netobj marks `e` failed).
            pub fn encode(&self, e: &mut Encoder) {
                $( nlm_field!(put e, &self.$f, [$($max)?]); )*
            }

            /// Decode.
            ///
            /// # Errors
            /// Truncated input, an over-long string or netobj, a boolean neither 0 nor 1,
            /// [`XdrError::Alloc`].
            pub fn decode(d: &mut Decoder<'_>) -> Result<$name, XdrError> {
                Ok($name {
                    $( $f: nlm_field!(get d, $f, [$($max)?]), )*
                })
            }
        }

        impl Item for $name {
            fn put(&self, e: &mut Encoder) {
                self.encode(e);
            }
            fn get(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
                $name::decode(d)
            }
        }
    };
}

nlm_struct! {
    /// `nlm4_lock`: who locks which range of which file.
    pub struct Nlm4Lock {
        /// `caller_name`: the client host's name.
        pub caller_name: Vec<u8> [LM_MAXSTRLEN],
        /// `fh`: the NFS file handle, opaque.
        pub fh: Vec<u8> [MAXNETOBJ_SZ],
        /// `oh`: the owner handle, opaque.
        pub oh: Vec<u8> [MAXNETOBJ_SZ],
        /// `svid`: the owner's id on the client (a process, or Linux's lock owner number).
        pub svid: i32,
        /// `l_offset`.
        pub l_offset: u64,
        /// `l_len` (0: to the end of the file).
        pub l_len: u64,
    }
}

nlm_struct! {
    /// `nlm4_lockargs` (LOCK, LOCK_MSG, NM_LOCK).
    pub struct LockArgs {
        /// `cookie`, echoed in the result.
        pub cookie: Vec<u8> [MAXNETOBJ_SZ],
        /// `block`: wait for a conflicting lock to go away.
        pub block: bool,
        /// `exclusive`: a write lock.
        pub exclusive: bool,
        /// `alock`.
        pub alock: Nlm4Lock,
        /// `reclaim`: re-establishing a lock held before the server restarted.
        pub reclaim: bool,
        /// `state`: the client's NSM state number.
        pub state: i32,
    }
}

nlm_struct! {
    /// `nlm4_cancargs` (CANCEL, CANCEL_MSG).
    pub struct CancArgs {
        /// `cookie`.
        pub cookie: Vec<u8> [MAXNETOBJ_SZ],
        /// `block`.
        pub block: bool,
        /// `exclusive`.
        pub exclusive: bool,
        /// `alock`.
        pub alock: Nlm4Lock,
    }
}

nlm_struct! {
    /// `nlm4_testargs` (TEST, TEST_MSG, and the GRANTED callback).
    pub struct TestArgs {
        /// `cookie`.
        pub cookie: Vec<u8> [MAXNETOBJ_SZ],
        /// `exclusive`.
        pub exclusive: bool,
        /// `alock`.
        pub alock: Nlm4Lock,
    }
}

nlm_struct! {
    /// `nlm4_unlockargs` (UNLOCK, UNLOCK_MSG).
    pub struct UnlockArgs {
        /// `cookie`.
        pub cookie: Vec<u8> [MAXNETOBJ_SZ],
        /// `alock`.
        pub alock: Nlm4Lock,
    }
}

/// `nlm4_share`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Share {
    /// `caller_name`.
    pub caller_name: Vec<u8>,
    /// `fh`.
    pub fh: Vec<u8>,
    /// `oh`.
    pub oh: Vec<u8>,
    /// `mode` (deny).
    pub mode: ShareMode,
    /// `access`.
    pub access: ShareAccess,
}

/// A `fsh4_mode` or `fsh4_access` (0..=3).
fn share_enum(d: &mut Decoder<'_>, what: &'static str) -> Result<u32, XdrError> {
    let value = d.u32()?;
    if value > 3 {
        return Err(XdrError::BadEnum { what, value });
    }
    Ok(value)
}

/// `mode` and `access` must be 0..=3 ([`XdrError::BadEnum`]).
impl Item for Share {
    fn put(&self, e: &mut Encoder) {
        put(e, &self.caller_name, LM_MAXSTRLEN);
        put(e, &self.fh, MAXNETOBJ_SZ);
        put(e, &self.oh, MAXNETOBJ_SZ);
        e.u32(self.mode);
        e.u32(self.access);
    }
    fn get(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(Share {
            caller_name: netobj(d, "caller_name", LM_MAXSTRLEN)?,
            fh: netobj(d, "fh", MAXNETOBJ_SZ)?,
            oh: netobj(d, "oh", MAXNETOBJ_SZ)?,
            mode: share_enum(d, "fsh4_mode")?,
            access: share_enum(d, "fsh4_access")?,
        })
    }
}

nlm_struct! {
    /// `nlm4_shareargs` (SHARE, UNSHARE); decoding also refuses a `mode` or `access` above 3
    /// ([`XdrError::BadEnum`]).
    pub struct ShareArgs {
        /// `cookie`.
        pub cookie: Vec<u8> [MAXNETOBJ_SZ],
        /// `share`.
        pub share: Share,
        /// `reclaim`.
        pub reclaim: bool,
    }
}

nlm_struct! {
    /// `nlm4_notify`: FREE_ALL's arguments.
    pub struct NotifyArgs {
        /// `name`: the host whose locks and shares go.
        pub name: Vec<u8> [MAXNAMELEN],
        /// `state`.
        pub state: i32,
    }
}

nlm_struct! {
    /// `nlm4_res` (LOCK, CANCEL, UNLOCK, GRANTED and their `_RES`).
    pub struct Res {
        /// `cookie`.
        pub cookie: Vec<u8> [MAXNETOBJ_SZ],
        /// `stat`.
        pub stat: u32,
    }
}

impl Res {
    /// The result `stat` of the call whose `cookie` it echoes.
    pub fn new(cookie: Vec<u8>, stat: Nlm4Stat) -> Res {
        Res {
            cookie,
            stat: stat.0,
        }
    }
}

nlm_struct! {
    /// `nlm4_holder`: who holds the lock that conflicts (TEST's answer).
    pub struct Holder {
        /// `exclusive`.
        pub exclusive: bool,
        /// `svid`.
        pub svid: i32,
        /// `oh`.
        pub oh: Vec<u8> [MAXNETOBJ_SZ],
        /// `l_offset`.
        pub l_offset: u64,
        /// `l_len` (0: to the end of the file).
        pub l_len: u64,
    }
}

/// `nlm4_testres`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TestRes {
    /// `cookie`.
    pub cookie: Vec<u8>,
    /// `test_stat.stat`.
    pub stat: u32,
    /// The holder, present exactly when `stat` is `NLM4_DENIED`.
    pub holder: Option<Holder>,
}

impl TestRes {
    /// Append the XDR encoding (a `DENIED` without a holder, or a holder with another
    /// status, marks `e` failed).
    pub fn encode(&self, e: &mut Encoder) {
        put(e, &self.cookie, MAXNETOBJ_SZ);
        e.u32(self.stat);
        match (&self.holder, self.stat == Nlm4Stat::DENIED.0) {
            (Some(h), true) => h.encode(e),
            (None, false) => {}
            _ => e.fail(),
        }
    }

    /// Decode.
    ///
    /// # Errors
    /// Truncated input, over-long fields.
    pub fn decode(d: &mut Decoder<'_>) -> Result<TestRes, XdrError> {
        let cookie = netobj(d, "cookie", MAXNETOBJ_SZ)?;
        let stat = d.u32()?;
        let holder = if stat == Nlm4Stat::DENIED.0 {
            Some(Holder::decode(d)?)
        } else {
            None
        };
        Ok(TestRes {
            cookie,
            stat,
            holder,
        })
    }
}

nlm_struct! {
    /// `nlm4_shareres`.
    pub struct ShareRes {
        /// `cookie`.
        pub cookie: Vec<u8> [MAXNETOBJ_SZ],
        /// `stat`.
        pub stat: u32,
        /// `sequence`.
        pub sequence: i32,
    }
}

/// A byte range, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Range {
    /// First byte.
    pub start: u64,
    /// Last byte (`u64::MAX`: to the end of the file, however far it grows).
    pub end: u64,
}

impl Range {
    /// The range of `l_offset` / `l_len` (0: to the end); `None` when the last byte does not
    /// fit 64 bits (`NLM4_FBIG`).
    pub fn from_wire(offset: u64, len: u64) -> Option<Range> {
        if len == 0 {
            return Some(Range {
                start: offset,
                end: u64::MAX,
            });
        }
        let end = offset.checked_add(len - 1)?;
        Some(Range { start: offset, end })
    }

    /// Back to `(l_offset, l_len)`; a range reaching `u64::MAX` is "to the end" (length 0).
    pub fn to_wire(self) -> (u64, u64) {
        if self.end == u64::MAX {
            (self.start, 0)
        } else {
            // Saturating: a hand-made range with end < start cannot panic here.
            (
                self.start,
                self.end.saturating_sub(self.start).saturating_add(1),
            )
        }
    }

    /// Whether the two share a byte.
    pub fn overlaps(self, o: Range) -> bool {
        self.start <= o.end && o.start <= self.end
    }

    /// Whether `o` starts right after this range ends (or the other way round).
    fn adjacent(self, o: Range) -> bool {
        self.end.checked_add(1) == Some(o.start) || o.end.checked_add(1) == Some(self.start)
    }
}

/// A lock owner: the client host (its `caller_name`) and the `svid` it gave the owner.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Owner {
    /// The host's `caller_name`.
    pub host: Vec<u8>,
    /// The owner's `svid`.
    pub svid: i32,
}

/// One held lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLock {
    /// Its owner.
    pub owner: Owner,
    /// The owner handle the client sent with it (reported by TEST).
    pub oh: Vec<u8>,
    /// A write lock.
    pub exclusive: bool,
    /// The bytes.
    pub range: Range,
}

/// A blocked LOCK waiting in the queue of its file.
#[derive(Debug, Clone)]
struct Blocked<P> {
    args: LockArgs,
    owner: Owner,
    range: Range,
    peer: P,
}

/// A lock granted from the queue: the GRANTED callback to send to `peer` (the arguments are
/// the blocked LOCK's own: cookie, `exclusive` and `alock` exactly as the client sent them,
/// which is how Linux's client finds its waiter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant<P> {
    /// Where the blocked request came from (the service's tag).
    pub peer: P,
    /// The GRANTED arguments.
    pub args: TestArgs,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ShareEntry {
    host: Vec<u8>,
    oh: Vec<u8>,
    mode: ShareMode,
    access: ShareAccess,
}

#[derive(Debug)]
struct FileState<P> {
    locks: Vec<HeldLock>,
    queue: VecDeque<Blocked<P>>,
    shares: Vec<ShareEntry>,
    /// Granted from the queue; the GRANTED callback not yet answered.
    unconfirmed: Vec<(Owner, Range)>,
}

impl<P> FileState<P> {
    fn new() -> Self {
        FileState {
            locks: Vec::new(),
            queue: VecDeque::new(),
            shares: Vec::new(),
            unconfirmed: Vec::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.locks.is_empty()
            && self.queue.is_empty()
            && self.shares.is_empty()
            && self.unconfirmed.is_empty()
    }

    /// The first lock of another owner that conflicts with (`owner`, `exclusive`, `r`).
    fn conflict(&self, owner: &Owner, exclusive: bool, r: Range) -> Option<&HeldLock> {
        self.locks
            .iter()
            .find(|l| l.owner != *owner && (exclusive || l.exclusive) && l.range.overlaps(r))
    }

    /// Remove `owner`'s locks on `r`, splitting a lock that covers more than `r`.
    fn cut(&mut self, owner: &Owner, r: Range) -> Result<(), ()> {
        let mut extra = Vec::new();
        for l in &mut self.locks {
            if l.owner != *owner || !l.range.overlaps(r) {
                continue;
            }
            let left = (l.range.start < r.start).then(|| Range {
                start: l.range.start,
                end: r.start - 1,
            });
            let right = (l.range.end > r.end).then(|| Range {
                start: r.end + 1,
                end: l.range.end,
            });
            match (left, right) {
                (Some(a), Some(b)) => {
                    l.range = a;
                    let mut split = l.clone();
                    split.range = b;
                    extra.try_reserve(1).map_err(|_| ())?;
                    extra.push(split);
                }
                (Some(a), None) => l.range = a,
                (None, Some(b)) => l.range = b,
                // Covered entirely: marked by an empty-looking range, removed below.
                (None, None) => l.range = Range { start: 1, end: 0 },
            }
        }
        self.locks.retain(|l| l.range.start <= l.range.end);
        self.locks.try_reserve(extra.len()).map_err(|_| ())?;
        self.locks.extend(extra);
        Ok(())
    }

    /// Give `owner` the range `r` (POSIX: its own locks on `r` are replaced, so this is also
    /// an upgrade or downgrade), then merge its touching locks of the same kind.
    fn apply(&mut self, owner: &Owner, oh: &[u8], exclusive: bool, r: Range) -> Result<(), ()> {
        self.cut(owner, r)?;
        let mut merged = r;
        self.locks.retain(|l| {
            let same = l.owner == *owner && l.exclusive == exclusive;
            if same && (l.range.overlaps(merged) || l.range.adjacent(merged)) {
                merged.start = merged.start.min(l.range.start);
                merged.end = merged.end.max(l.range.end);
                false
            } else {
                true
            }
        });
        let mut oh_v = Vec::new();
        oh_v.try_reserve_exact(oh.len()).map_err(|_| ())?;
        oh_v.extend_from_slice(oh);
        self.locks.try_reserve(1).map_err(|_| ())?;
        self.locks.push(HeldLock {
            owner: owner.clone(),
            oh: oh_v,
            exclusive,
            range: merged,
        });
        Ok(())
    }
}

/// Limits of a [`LockTable`] (peers cannot grow it past them: `NLM4_DENIED_NOLOCKS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most held locks (all files).
    pub locks: usize,
    /// Most blocked requests waiting (all files).
    pub blocked: usize,
    /// Most share reservations (all files).
    pub shares: usize,
}

impl Default for Limits {
    /// 65,536 locks, 4,096 blocked requests, 4,096 shares.
    fn default() -> Self {
        Limits {
            locks: 65_536,
            blocked: 4_096,
            shares: 4_096,
        }
    }
}

/// The lock manager's state: locks, blocked requests and shares per file handle. `P` tags a
/// blocked request with where to send its GRANTED callback (the service's peer address).
#[derive(Debug)]
pub struct LockTable<P> {
    files: BTreeMap<Vec<u8>, FileState<P>>,
    limits: Limits,
    nlocks: usize,
    nblocked: usize,
    nshares: usize,
    grace: bool,
}

impl<P: Clone> Default for LockTable<P> {
    fn default() -> Self {
        LockTable::new(Limits::default())
    }
}

impl<P: Clone> LockTable<P> {
    /// An empty table, not in a grace period.
    pub fn new(limits: Limits) -> Self {
        LockTable {
            files: BTreeMap::new(),
            limits,
            nlocks: 0,
            nblocked: 0,
            nshares: 0,
            grace: false,
        }
    }

    /// Enter (`true`) or leave the grace period: while in it, only reclaims are served;
    /// outside it, reclaims are refused (as Linux's lockd).
    pub fn set_grace(&mut self, on: bool) {
        self.grace = on;
    }

    /// Whether in the grace period.
    pub fn in_grace(&self) -> bool {
        self.grace
    }

    /// Locks held (all files).
    pub fn lock_count(&self) -> usize {
        self.nlocks
    }

    /// Blocked requests waiting (all files).
    pub fn blocked_count(&self) -> usize {
        self.nblocked
    }

    /// The locks held on `fh`.
    pub fn locks(&self, fh: &[u8]) -> &[HeldLock] {
        self.files.get(fh).map_or(&[], |f| f.locks.as_slice())
    }

    fn recount(&mut self) {
        self.nlocks = self.files.values().map(|f| f.locks.len()).sum();
        self.nblocked = self.files.values().map(|f| f.queue.len()).sum();
        self.nshares = self.files.values().map(|f| f.shares.len()).sum();
        self.files.retain(|_, f| !f.is_empty());
    }

    /// TEST: the holder of a conflicting lock (`NLM4_DENIED`), or `NLM4_GRANTED`.
    pub fn test(&self, a: &TestArgs) -> (Nlm4Stat, Option<Holder>) {
        if self.grace {
            return (Nlm4Stat::DENIED_GRACE_PERIOD, None);
        }
        let Some(r) = Range::from_wire(a.alock.l_offset, a.alock.l_len) else {
            return (Nlm4Stat::FBIG, None);
        };
        let owner = owner_of(&a.alock);
        let Some(f) = self.files.get(&a.alock.fh) else {
            return (Nlm4Stat::GRANTED, None);
        };
        match f.conflict(&owner, a.exclusive, r) {
            None => (Nlm4Stat::GRANTED, None),
            Some(l) => {
                let (l_offset, l_len) = l.range.to_wire();
                (
                    Nlm4Stat::DENIED,
                    Some(Holder {
                        exclusive: l.exclusive,
                        svid: l.owner.svid,
                        oh: l.oh.clone(),
                        l_offset,
                        l_len,
                    }),
                )
            }
        }
    }

    /// LOCK (also NM_LOCK and reclaims): `GRANTED`, `DENIED` (conflict, not blocking),
    /// `BLOCKED` (queued: a [`Grant`] comes out of a later call), `DENIED_GRACE_PERIOD`,
    /// `FBIG`, `DENIED_NOLOCKS`. `peer` is kept with a queued request, for its [`Grant`].
    pub fn lock(&mut self, a: &LockArgs, peer: P) -> Nlm4Stat {
        if self.grace != a.reclaim {
            return Nlm4Stat::DENIED_GRACE_PERIOD;
        }
        let Some(r) = Range::from_wire(a.alock.l_offset, a.alock.l_len) else {
            return Nlm4Stat::FBIG;
        };
        let owner = owner_of(&a.alock);
        if !self.files.contains_key(&a.alock.fh) {
            let mut fh = Vec::new();
            if fh.try_reserve_exact(a.alock.fh.len()).is_err() {
                return Nlm4Stat::DENIED_NOLOCKS;
            }
            fh.extend_from_slice(&a.alock.fh);
            self.files.insert(fh, FileState::new());
        }
        let (nlocks, nblocked, limits) = (self.nlocks, self.nblocked, self.limits);
        let Some(f) = self.files.get_mut(&a.alock.fh) else {
            return Nlm4Stat::DENIED_NOLOCKS;
        };
        let st = if f.conflict(&owner, a.exclusive, r).is_none() {
            // A split can add one lock; the merge never adds.
            if nlocks.saturating_add(2) > limits.locks
                || f.apply(&owner, &a.alock.oh, a.exclusive, r).is_err()
            {
                Nlm4Stat::DENIED_NOLOCKS
            } else {
                // A request of the same owner still queued for these bytes is now moot.
                f.queue.retain(|b| {
                    !(b.owner == owner && b.range == r && b.args.exclusive == a.exclusive)
                });
                Nlm4Stat::GRANTED
            }
        } else if !a.block {
            Nlm4Stat::DENIED
        } else if f
            .queue
            .iter()
            .any(|b| b.owner == owner && b.range == r && b.args.exclusive == a.exclusive)
        {
            // The client polling again: keep its place in the queue.
            Nlm4Stat::BLOCKED
        } else if nblocked >= limits.blocked || f.queue.try_reserve(1).is_err() {
            Nlm4Stat::DENIED_NOLOCKS
        } else {
            f.queue.push_back(Blocked {
                args: a.clone(),
                owner,
                range: r,
                peer,
            });
            Nlm4Stat::BLOCKED
        };
        self.recount();
        st
    }

    /// UNLOCK: `GRANTED` (also when nothing was held), `DENIED_GRACE_PERIOD`, `FBIG`; and the
    /// blocked requests the freed bytes let through.
    pub fn unlock(&mut self, a: &UnlockArgs) -> (Nlm4Stat, Vec<Grant<P>>) {
        if self.grace {
            return (Nlm4Stat::DENIED_GRACE_PERIOD, Vec::new());
        }
        let Some(r) = Range::from_wire(a.alock.l_offset, a.alock.l_len) else {
            return (Nlm4Stat::FBIG, Vec::new());
        };
        let owner = owner_of(&a.alock);
        let mut grants = Vec::new();
        if let Some(f) = self.files.get_mut(&a.alock.fh) {
            if f.cut(&owner, r).is_err() {
                return (Nlm4Stat::DENIED_NOLOCKS, grants);
            }
            f.unconfirmed
                .retain(|(o, ur)| !(*o == owner && ur.overlaps(r)));
            wake(f, &mut grants);
        }
        self.recount();
        (Nlm4Stat::GRANTED, grants)
    }

    /// CANCEL a blocked request: `GRANTED` when it was queued (or had just been granted from
    /// the queue, GRANTED callback unanswered: that lock is released), `DENIED` when there is
    /// no such request, `DENIED_GRACE_PERIOD`; and what a released lock lets through.
    pub fn cancel(&mut self, a: &CancArgs) -> (Nlm4Stat, Vec<Grant<P>>) {
        if self.grace {
            return (Nlm4Stat::DENIED_GRACE_PERIOD, Vec::new());
        }
        let Some(r) = Range::from_wire(a.alock.l_offset, a.alock.l_len) else {
            return (Nlm4Stat::FBIG, Vec::new());
        };
        let owner = owner_of(&a.alock);
        let mut grants = Vec::new();
        let mut st = Nlm4Stat::DENIED;
        if let Some(f) = self.files.get_mut(&a.alock.fh) {
            let before = f.queue.len();
            f.queue
                .retain(|b| !(b.owner == owner && b.range == r && b.args.exclusive == a.exclusive));
            if f.queue.len() != before {
                st = Nlm4Stat::GRANTED;
            } else if let Some(i) = f
                .unconfirmed
                .iter()
                .position(|(o, ur)| *o == owner && *ur == r)
            {
                f.unconfirmed.swap_remove(i);
                if f.cut(&owner, r).is_err() {
                    return (Nlm4Stat::DENIED_NOLOCKS, grants);
                }
                st = Nlm4Stat::GRANTED;
            }
            wake(f, &mut grants);
        }
        self.recount();
        (st, grants)
    }

    /// The client answered a GRANTED callback: `accepted` (`NLM4_GRANTED`) keeps the lock;
    /// anything else means no one waits for it any more, so it is released (and what that
    /// lets through is returned).
    pub fn granted_reply(&mut self, g: &TestArgs, accepted: bool) -> Vec<Grant<P>> {
        let mut grants = Vec::new();
        let Some(r) = Range::from_wire(g.alock.l_offset, g.alock.l_len) else {
            return grants;
        };
        let owner = owner_of(&g.alock);
        if let Some(f) = self.files.get_mut(&g.alock.fh) {
            let Some(i) = f
                .unconfirmed
                .iter()
                .position(|(o, ur)| *o == owner && *ur == r)
            else {
                return grants;
            };
            f.unconfirmed.swap_remove(i);
            if !accepted && f.cut(&owner, r).is_ok() {
                wake(f, &mut grants);
            }
        }
        self.recount();
        grants
    }

    /// FREE_ALL, or an SM_NOTIFY from a rebooted client: every lock, blocked request and
    /// share of `host` goes; what that lets through is returned.
    pub fn free_host(&mut self, host: &[u8]) -> Vec<Grant<P>> {
        let mut grants = Vec::new();
        for f in self.files.values_mut() {
            let n = f.locks.len();
            f.locks.retain(|l| l.owner.host != host);
            f.queue.retain(|b| b.owner.host != host);
            f.shares.retain(|s| s.host != host);
            f.unconfirmed.retain(|(o, _)| o.host != host);
            if f.locks.len() != n {
                wake(f, &mut grants);
            }
        }
        self.recount();
        grants
    }

    /// Forget everything (SM_SIMU_CRASH).
    pub fn clear(&mut self) {
        self.files.clear();
        self.recount();
    }

    /// SHARE: `GRANTED`, `DENIED` (another owner's share conflicts), `DENIED_GRACE_PERIOD`
    /// (a new share in the grace period), `DENIED_NOLOCKS`. The same (host, owner handle)
    /// sharing again replaces its reservation.
    pub fn share(&mut self, a: &ShareArgs) -> Nlm4Stat {
        if self.grace && !a.reclaim {
            return Nlm4Stat::DENIED_GRACE_PERIOD;
        }
        let s = &a.share;
        let (n, max) = (self.nshares, self.limits.shares);
        let f = self
            .files
            .entry(s.fh.clone())
            .or_insert_with(FileState::new);
        let st = if let Some(e) = f
            .shares
            .iter_mut()
            .find(|e| e.host == s.caller_name && e.oh == s.oh)
        {
            e.mode = s.mode;
            e.access = s.access;
            Nlm4Stat::GRANTED
        } else if f
            .shares
            .iter()
            .any(|e| (s.access & e.mode) != 0 || (s.mode & e.access) != 0)
        {
            Nlm4Stat::DENIED
        } else if n >= max || f.shares.try_reserve(1).is_err() {
            Nlm4Stat::DENIED_NOLOCKS
        } else {
            f.shares.push(ShareEntry {
                host: s.caller_name.clone(),
                oh: s.oh.clone(),
                mode: s.mode,
                access: s.access,
            });
            Nlm4Stat::GRANTED
        };
        self.recount();
        st
    }

    /// UNSHARE: `GRANTED` (also when there was none), `DENIED_GRACE_PERIOD`.
    pub fn unshare(&mut self, a: &ShareArgs) -> Nlm4Stat {
        if self.grace {
            return Nlm4Stat::DENIED_GRACE_PERIOD;
        }
        if let Some(f) = self.files.get_mut(&a.share.fh) {
            f.shares
                .retain(|e| !(e.host == a.share.caller_name && e.oh == a.share.oh));
        }
        self.recount();
        Nlm4Stat::GRANTED
    }
}

fn owner_of(l: &Nlm4Lock) -> Owner {
    Owner {
        host: l.caller_name.clone(),
        svid: l.svid,
    }
}

/// Grant, in queue order, every blocked request that no longer conflicts.
fn wake<P: Clone>(f: &mut FileState<P>, grants: &mut Vec<Grant<P>>) {
    let mut i = 0;
    while let Some(b) = f.queue.get(i) {
        let (owner, ex, r) = (b.owner.clone(), b.args.exclusive, b.range);
        if f.conflict(&owner, ex, r).is_some()
            || grants.try_reserve(1).is_err()
            || f.unconfirmed.try_reserve(1).is_err()
        {
            i += 1;
            continue;
        }
        let Some(b) = f.queue.remove(i) else {
            break;
        };
        if f.apply(&owner, &b.args.alock.oh, ex, r).is_err() {
            continue;
        }
        f.unconfirmed.push((owner, r));
        grants.push(Grant {
            peer: b.peer,
            args: TestArgs {
                cookie: b.args.cookie,
                exclusive: ex,
                alock: b.args.alock,
            },
        });
    }
}
