//! The duplicate request cache: the replies of non-idempotent NFSv3 calls, kept so that a
//! retransmission (the Linux client resends its outstanding calls, same xid, after a
//! reconnect) gets the original reply instead of running again (a second REMOVE would answer
//! NFS3ERR_NOENT, a second exclusive CREATE EXIST).
//!
//! It stores RPC reply messages only (what [`super::Nfs3Service::dispatch`] returns), never
//! transport framing (chimera's lesson, DESIGN.md section 8): a replay is sent through the
//! transport like any reply. A call is identified by the client (a number the caller picks
//! that survives reconnects, e.g. from the peer's address), its xid, program, version and
//! procedure, its length and a checksum of its first [`CSUM_LEN`] bytes (as Linux's
//! `nfsd_cache_lookup`). Procedures cached: those Linux's server caches (SETATTR, WRITE,
//! CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK).
//!
//! The cache is a ring of preallocated slots, oldest replaced first (no clock is read); a
//! slot's reply buffer is reused, so once every slot has held a reply of the usual size a
//! lookup and an insert allocate nothing. Slots are found through a preallocated hash index
//! (a bucket per slot, chained through the slots): a lookup compares the keys of one bucket,
//! not of every slot (with 1,024 slots the linear search was ~15,000 instructions per cached
//! call, half of a SETATTR's user-space work in the small-file profile of issue 13). `&mut self`: a multi-threaded server wraps it in
//! its lock. A call still being served is [`Begin::InProgress`]: drop the retransmission.

use alloc::vec::Vec;

use mbuf::Chain;

use nfs_proto::nfs3::*;

/// Bytes of the call checksummed into its key.
pub const CSUM_LEN: usize = 256;

/// Whether NFSv3 procedure `proc_` is cached (it is not idempotent).
pub fn cacheable(proc_: u32) -> bool {
    matches!(
        proc_,
        NFSPROC3_SETATTR
            | NFSPROC3_WRITE
            | NFSPROC3_CREATE
            | NFSPROC3_MKDIR
            | NFSPROC3_SYMLINK
            | NFSPROC3_MKNOD
            | NFSPROC3_REMOVE
            | NFSPROC3_RMDIR
            | NFSPROC3_RENAME
            | NFSPROC3_LINK
    )
}

/// What identifies a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallKey {
    client: u64,
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    len: usize,
    sum: u32,
}

impl CallKey {
    /// The key of `call` from `client`, or `None` when the call is too short to carry an RPC
    /// call header's fixed part.
    pub fn of(client: u64, call: &Chain) -> Option<CallKey> {
        let mut head = [0u8; CSUM_LEN];
        let n = call.len().min(CSUM_LEN);
        let head = head.get_mut(..n)?;
        call.copydata(0, head).ok()?;
        let word = |i: usize| {
            head.get(i * 4..i * 4 + 4)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map(u32::from_be_bytes)
        };
        // FNV-1a over the bytes.
        let sum = head.iter().fold(0x811c_9dc5u32, |h, b| {
            (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
        });
        Some(CallKey {
            client,
            xid: word(0)?,
            prog: word(3)?,
            vers: word(4)?,
            proc_: word(5)?,
            len: call.len(),
            sum,
        })
    }

    /// The procedure number.
    pub fn proc_(&self) -> u32 {
        self.proc_
    }
}

/// No slot (end of a bucket's chain).
const NONE: u32 = u32::MAX;

#[derive(Debug)]
struct Slot {
    key: Option<CallKey>,
    done: bool,
    reply: Vec<u8>,
    /// The next slot in this slot's bucket.
    next: u32,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            key: None,
            done: false,
            reply: Vec::new(),
            next: NONE,
        }
    }
}

impl CallKey {
    /// The bucket of this key among `buckets` (a power of two).
    fn bucket(&self, buckets: usize) -> usize {
        let mut h = u64::from(self.xid) ^ self.client.rotate_left(32);
        h ^= u64::from(self.sum) << 17 ^ u64::from(self.proc_) << 7 ^ self.len as u64;
        h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> 32) as usize & (buckets - 1)
    }
}

/// What [`ReplyCache::begin`] found.
#[derive(Debug)]
pub enum Begin {
    /// A new call: serve it, then [`ReplyCache::finish`].
    New,
    /// A retransmission of a call already answered: send this reply again.
    Replay(Chain),
    /// A retransmission of a call still being served: drop it.
    InProgress,
}

/// The duplicate request cache (see the module documentation).
#[derive(Debug)]
pub struct ReplyCache {
    slots: Vec<Slot>,
    /// First slot of each bucket ([`NONE`]: empty); a power of two of them.
    heads: Vec<u32>,
    next: usize,
    replays: u64,
}

impl ReplyCache {
    /// A cache of `capacity` replies (at least 1).
    ///
    /// # Errors
    /// `None` when memory for the slots cannot be had.
    pub fn new(capacity: usize) -> Option<ReplyCache> {
        let n = capacity.clamp(1, NONE as usize - 1);
        let mut slots = Vec::new();
        slots.try_reserve_exact(n).ok()?;
        slots.resize_with(n, Slot::default);
        let b = n.checked_next_power_of_two()?;
        let mut heads = Vec::new();
        heads.try_reserve_exact(b).ok()?;
        heads.resize(b, NONE);
        Some(ReplyCache {
            slots,
            heads,
            next: 0,
            replays: 0,
        })
    }

    /// The slot holding `key`.
    fn find(&self, key: &CallKey) -> Option<usize> {
        let mut i = *self.heads.get(key.bucket(self.heads.len()))?;
        while let Some(s) = self.slots.get(i as usize) {
            if s.key.as_ref() == Some(key) {
                return Some(i as usize);
            }
            i = s.next;
        }
        None
    }

    /// Take slot `i` out of its bucket's chain and forget its key.
    fn unlink(&mut self, i: usize) {
        let Some(key) = self.slots.get_mut(i).and_then(|s| s.key.take()) else {
            return;
        };
        let after = self.slots.get(i).map_or(NONE, |s| s.next);
        let b = key.bucket(self.heads.len());
        let Some(head) = self.heads.get_mut(b) else {
            return;
        };
        if *head as usize == i {
            *head = after;
        } else {
            let mut j = *head;
            while let Some(s) = self.slots.get_mut(j as usize) {
                if s.next as usize == i {
                    s.next = after;
                    break;
                }
                j = s.next;
            }
        }
        if let Some(s) = self.slots.get_mut(i) {
            s.next = NONE;
        }
    }

    /// Replies sent again so far.
    pub fn replays(&self) -> u64 {
        self.replays
    }

    /// Look `key` up: a cacheable call not seen before takes the oldest slot (marked in
    /// progress) and is [`Begin::New`]; so is every call of a procedure not cached.
    pub fn begin(&mut self, key: &CallKey) -> Begin {
        if !cacheable(key.proc_) || key.prog != NFS_PROGRAM || key.vers != NFS_V3 {
            return Begin::New;
        }
        if let Some(s) = self.find(key).and_then(|i| self.slots.get(i)) {
            if !s.done {
                return Begin::InProgress;
            }
            return match Chain::from_bytes(&s.reply) {
                Ok(c) => {
                    self.replays += 1;
                    Begin::Replay(c)
                }
                // No memory to replay: as if still in progress (the client retries).
                Err(_) => Begin::InProgress,
            };
        }
        let n = self.slots.len();
        let i = self.next;
        self.unlink(i);
        let b = key.bucket(self.heads.len());
        if let (Some(s), Some(head)) = (self.slots.get_mut(i), self.heads.get_mut(b)) {
            s.key = Some(*key);
            s.done = false;
            s.reply.clear();
            s.next = *head;
            *head = i as u32;
        }
        self.next = (self.next + 1) % n;
        Begin::New
    }

    /// Forget a call [`ReplyCache::begin`] called new that got no reply (the dispatcher
    /// refused to answer it): a retransmission then runs again.
    pub fn abandon(&mut self, key: &CallKey) {
        if let Some(i) = self.find(key) {
            self.unlink(i);
            if let Some(s) = self.slots.get_mut(i) {
                s.reply.clear();
            }
        }
    }

    /// Record the reply of a call [`ReplyCache::begin`] called new. A reply that cannot be
    /// copied (memory) is forgotten with its key: a retransmission then runs again.
    pub fn finish(&mut self, key: &CallKey, reply: &Chain) {
        let Some(i) = self.find(key) else {
            return;
        };
        let Some(s) = self.slots.get_mut(i) else {
            return;
        };
        let n = reply.len();
        let ok = s.reply.try_reserve(n).is_ok() && {
            s.reply.resize(n, 0);
            reply.copydata(0, &mut s.reply).is_ok()
        };
        if ok {
            s.done = true;
        } else {
            s.reply.clear();
            self.unlink(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(xid: u32, proc_: u32, arg: u8) -> Chain {
        let mut b = alloc::vec::Vec::new();
        for w in [xid, 0, 2, NFS_PROGRAM, NFS_V3, proc_, 0, 0, 0, 0] {
            b.extend_from_slice(&w.to_be_bytes());
        }
        b.push(arg);
        Chain::from_bytes(&b).unwrap()
    }

    #[test]
    fn replays_in_progress_and_eviction() {
        let mut c = ReplyCache::new(2).unwrap();
        let k = CallKey::of(1, &call(7, NFSPROC3_REMOVE, 0)).unwrap();
        assert!(matches!(c.begin(&k), Begin::New));
        assert!(matches!(c.begin(&k), Begin::InProgress));
        c.finish(&k, &Chain::from_bytes(b"reply-7").unwrap());
        match c.begin(&k) {
            Begin::Replay(r) => assert_eq!(r.to_vec().unwrap(), b"reply-7"),
            b => panic!("{b:?}"),
        }
        assert_eq!(c.replays(), 1);
        // Same xid, other client or other arguments: a different call.
        assert!(matches!(
            c.begin(&CallKey::of(2, &call(7, NFSPROC3_REMOVE, 0)).unwrap()),
            Begin::New
        ));
        let k2 = CallKey::of(1, &call(7, NFSPROC3_REMOVE, 1)).unwrap();
        assert!(matches!(c.begin(&k2), Begin::New));
        c.abandon(&k2);
        assert!(matches!(c.begin(&k2), Begin::New));
        // Newer calls took both slots: the first is forgotten.
        assert!(matches!(c.begin(&k), Begin::New));
        // Idempotent procedures are never cached.
        let g = CallKey::of(1, &call(8, NFSPROC3_GETATTR, 0)).unwrap();
        assert!(matches!(c.begin(&g), Begin::New));
        assert!(matches!(c.begin(&g), Begin::New));
        assert!(CallKey::of(1, &Chain::from_bytes(&[0; 20]).unwrap()).is_none());
    }

    #[test]
    fn the_index_finds_every_live_call_and_forgets_evicted_ones() {
        // More calls than slots, several rounds: each of the last `cap` calls is found (and
        // replayed), every older one is new again; abandoned ones leave their bucket.
        let cap = 37;
        let mut c = ReplyCache::new(cap).unwrap();
        let key = |x: u32| CallKey::of(9, &call(x, NFSPROC3_SETATTR, (x % 7) as u8)).unwrap();
        for x in 0..500u32 {
            assert!(matches!(c.begin(&key(x)), Begin::New), "{x}");
            if x % 11 == 0 {
                c.abandon(&key(x));
            } else {
                c.finish(&key(x), &Chain::from_bytes(&x.to_be_bytes()).unwrap());
            }
        }
        for x in (500 - cap as u32)..500 {
            match c.begin(&key(x)) {
                Begin::Replay(r) if x % 11 != 0 => {
                    assert_eq!(r.to_vec().unwrap(), x.to_be_bytes())
                }
                Begin::New if x % 11 == 0 => c.abandon(&key(x)),
                b => panic!("{x}: {b:?}"),
            }
        }
        assert!(matches!(c.begin(&key(0)), Begin::New));
        assert!(matches!(c.begin(&key(400)), Begin::New));
    }
}

/// What [`serve`] did with a call.
#[derive(Debug)]
pub enum Served {
    /// The service answered it.
    Reply(super::Dispatched),
    /// A retransmission of a call already answered: its reply again.
    Replay(Chain),
    /// Nothing to send: a retransmission of a call still being served, or a message that
    /// is not a call (or memory ran out even for a refusal).
    Drop,
}

/// Serve one call from `client` (the cache's name for the peer, e.g. from its address)
/// granted `access`: through the reply cache `cache` into `svc`. The cache's lock is held
/// only to look the call up and to store its reply, never while the backend runs. Every
/// server over this service does it this way (the userspace `krpc-rdma-nfsd`, the kernel
/// module's).
pub fn serve<B, L>(
    svc: &super::Nfs3Service<B>,
    cache: &L,
    client: u64,
    access: onc_rpc::svc::Access,
    call: &Chain,
) -> Served
where
    B: super::Backend,
    L: crate::lock::Lock<ReplyCache>,
{
    let key = CallKey::of(client, call);
    if let Some(k) = &key {
        match cache.with(|c| c.begin(k)) {
            Begin::New => {}
            Begin::Replay(r) => return Served::Replay(r),
            Begin::InProgress => return Served::Drop,
        }
    }
    match svc.dispatch_as(call, access) {
        Ok(d) => {
            if let Some(k) = &key {
                cache.with(|c| c.finish(k, &d.reply));
            }
            Served::Reply(d)
        }
        Err(_) => {
            if let Some(k) = &key {
                cache.with(|c| c.abandon(k));
            }
            Served::Drop
        }
    }
}
