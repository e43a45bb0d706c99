//! Memory registrations of one side: the handle (rkey) scheme, FRWR fragment rules, page
//! references, invalidation and the remote access check.
//!
//! # Handles
//!
//! A handle is `slot << 8 | key`, like a real rkey (24-bit MR index, 8-bit consumer key). The
//! key of a slot changes every time the slot is (re)used, starting from a per-slot, per-side
//! pseudo-random value, and free slots are reused in FIFO order. So a handle is never reused
//! while its registration is live, and a stale handle can only match a newer registration
//! after its slot has been reused 256 times, i.e. after at least `256 * max_registrations`
//! registrations in between. [`RegId`] carries the same value as the handle, so a stale
//! `RegId` is refused ([`ProviderError::BadId`]) just like a stale handle.
//!
//! # Iova
//!
//! Each registration is one FRWR-like segment: the fragments are mapped back to back into one
//! iova range that starts at a page-aligned per-registration base plus the in-page offset of
//! the first fragment. Bases are derived from the handle, so the ranges of different
//! registrations are unrelated.
//!
//! # Page references
//!
//! A registration takes one page reference ([`PageProvider::page_ref`]) on each distinct page
//! it covers and drops them only when it is released, so the pages cannot be freed (and reused
//! for something else) while the peer may still address them — not even if the registrant
//! drops its mbuf chain first.

use super::alloc::collections::VecDeque;
use super::alloc::vec::Vec;

use mbuf::{PageFragment, PageProvider};

use crate::provider::{Access, ProviderError, RegId, RegSegment, Registration, WcStatus};

/// Most registrations one soft queue pair may have live at once: handles carry a 24-bit slot
/// index.
pub const MAX_SOFT_REGISTRATIONS: u32 = 1 << 24;

/// One live registration.
pub(crate) struct RegEntry {
    /// The handle (rkey), also the [`RegId`] value.
    pub(crate) handle: u32,
    /// Rights granted to the peer.
    pub(crate) access: Access,
    /// Still usable by the peer (not invalidated locally or remotely).
    pub(crate) valid: bool,
    /// Iova of the first registered byte.
    pub(crate) iova: u64,
    /// Registered bytes.
    pub(crate) len: u64,
    /// The fragments, in iova order.
    pub(crate) frags: Vec<PageFragment>,
    /// Distinct pages, one reference held on each.
    pages: Vec<u64>,
    /// Revoked with its handle held back (`revoke`): invalid, no pages, not counted live,
    /// its slot not reused until `release`; a Send With Invalidate of it is accepted (as rxe
    /// invalidates an MR whose key still matches, whatever its state).
    held: bool,
}

/// A registration slot: the key generation survives the entry.
struct Slot {
    generation: u8,
    entry: Option<RegEntry>,
}

/// The registration table of one side.
pub(crate) struct RegTable {
    slots: Vec<Slot>,
    /// Free slot indices, reused oldest first.
    free: VecDeque<u32>,
    live: u32,
}

/// Why a remote access was refused (all map to [`WcStatus::RemoteAccess`]).
fn refuse<T>() -> Result<T, WcStatus> {
    Err(WcStatus::RemoteAccess)
}

impl RegTable {
    /// A table of `max` slots. `salt` makes the two sides' handles differ.
    pub(crate) fn new(max: u32, salt: u8) -> Result<Self, ProviderError> {
        if max > MAX_SOFT_REGISTRATIONS {
            return Err(ProviderError::NoMemory);
        }
        let n = usize::try_from(max).map_err(|_| ProviderError::NoMemory)?;
        let mut slots = Vec::new();
        slots
            .try_reserve_exact(n)
            .map_err(|_| ProviderError::NoMemory)?;
        let mut free = VecDeque::new();
        free.try_reserve_exact(n)
            .map_err(|_| ProviderError::NoMemory)?;
        for i in 0..max {
            // A pseudo-random starting key per slot (an odd multiplier spreads them).
            let mixed = i.wrapping_mul(0x9E37_79B1) >> 24;
            let generation = u8::try_from(mixed & 0xff).unwrap_or(0) ^ salt;
            slots.push(Slot {
                generation,
                entry: None,
            });
            free.push_back(i);
        }
        Ok(RegTable {
            slots,
            free,
            live: 0,
        })
    }

    /// Live (not yet released) registrations.
    pub(crate) fn live(&self) -> u32 {
        self.live
    }

    /// Register `frags` (FRWR rules: one iova range), taking one page reference per distinct
    /// page.
    pub(crate) fn register(
        &mut self,
        pages: &dyn PageProvider,
        frags: &[PageFragment],
        access: Access,
    ) -> Result<Registration, ProviderError> {
        let length = crate::provider::binding::runs::check_frwr(frags)?;
        let first_off = frags.first().map_or(0, |f| f.offset);
        let Some(&index) = self.free.front() else {
            return Err(ProviderError::Busy);
        };
        let mut list = Vec::new();
        list.try_reserve_exact(frags.len())
            .map_err(|_| ProviderError::NoMemory)?;
        list.extend_from_slice(frags);
        let mut held: Vec<u64> = Vec::new();
        held.try_reserve_exact(frags.len())
            .map_err(|_| ProviderError::NoMemory)?;
        for f in frags {
            if held.contains(&f.addr) {
                continue;
            }
            if pages.page_ref(f.addr).is_err() {
                for &a in &held {
                    pages.page_unref(a);
                }
                return Err(ProviderError::BadFragments);
            }
            held.push(f.addr);
        }
        let slot = usize::try_from(index)
            .ok()
            .and_then(|i| self.slots.get_mut(i));
        let Some(slot) = slot else {
            for &a in &held {
                pages.page_unref(a);
            }
            return Err(ProviderError::Busy);
        };
        self.free.pop_front();
        slot.generation = slot.generation.wrapping_add(1);
        let handle = (index << 8) | u32::from(slot.generation);
        let iova = iova_base(handle) + first_off as u64;
        slot.entry = Some(RegEntry {
            handle,
            access,
            valid: true,
            iova,
            len: u64::from(length),
            frags: list,
            pages: held,
            held: false,
        });
        self.live += 1;
        let mut segments = heapless::Vec::new();
        // Capacity is MAX_CHUNK_SEGMENTS >= 1.
        let _ = segments.push(RegSegment {
            handle,
            length,
            offset: iova,
        });
        Ok(Registration {
            id: RegId(handle),
            segments,
        })
    }

    /// The live registration with this handle (valid or invalidated), if any.
    pub(crate) fn get(&self, handle: u32) -> Option<&RegEntry> {
        let index = usize::try_from(handle >> 8).ok()?;
        let entry = self.slots.get(index)?.entry.as_ref()?;
        (entry.handle == handle).then_some(entry)
    }

    fn get_mut(&mut self, handle: u32) -> Option<&mut RegEntry> {
        let index = usize::try_from(handle >> 8).ok()?;
        let entry = self.slots.get_mut(index)?.entry.as_mut()?;
        (entry.handle == handle).then_some(entry)
    }

    /// Whether `reg` names a live registration.
    pub(crate) fn contains(&self, reg: RegId) -> bool {
        self.get(reg.0).is_some()
    }

    /// LOCAL_INV: revoke `reg`. Idempotent: an already invalidated registration stays
    /// invalid and the call succeeds.
    pub(crate) fn local_inv(&mut self, reg: RegId) -> Result<(), ProviderError> {
        let entry = self.get_mut(reg.0).ok_or(ProviderError::BadId)?;
        entry.valid = false;
        Ok(())
    }

    /// Whether the peer may invalidate `handle` with Send With Invalidate (it must be live
    /// and valid, or held by `revoke`).
    pub(crate) fn can_remote_invalidate(&self, handle: u32) -> bool {
        self.get(handle).is_some_and(|e| e.valid || e.held)
    }

    /// Remote invalidation (Send With Invalidate); `false` if the handle is not live and
    /// valid (or held).
    pub(crate) fn remote_invalidate(&mut self, handle: u32) -> bool {
        match self.get_mut(handle) {
            Some(e) if e.valid || e.held => {
                e.valid = false;
                true
            }
            _ => false,
        }
    }

    /// Revoke `reg` and hold its handle back until `release`: invalid, page references
    /// dropped, no longer counted live. Idempotent.
    pub(crate) fn revoke(
        &mut self,
        reg: RegId,
        pages: &dyn PageProvider,
    ) -> Result<(), ProviderError> {
        let entry = self.get_mut(reg.0).ok_or(ProviderError::BadId)?;
        if entry.held {
            return Ok(());
        }
        entry.valid = false;
        entry.held = true;
        for &a in &entry.pages {
            pages.page_unref(a);
        }
        entry.pages.clear();
        self.live = self.live.saturating_sub(1);
        Ok(())
    }

    /// Release `reg`: revoke, drop its page references, free the slot.
    pub(crate) fn release(
        &mut self,
        reg: RegId,
        pages: &dyn PageProvider,
    ) -> Result<(), ProviderError> {
        let index = reg.0 >> 8;
        let slot = usize::try_from(index)
            .ok()
            .and_then(|i| self.slots.get_mut(i))
            .ok_or(ProviderError::BadId)?;
        match &slot.entry {
            Some(e) if e.handle == reg.0 => {}
            _ => return Err(ProviderError::BadId),
        }
        let mut held = false;
        if let Some(entry) = slot.entry.take() {
            for &a in &entry.pages {
                pages.page_unref(a);
            }
            held = entry.held;
        }
        // `free` has capacity for every slot: this never reallocates.
        self.free.push_back(index);
        if !held {
            self.live = self.live.saturating_sub(1);
        }
        Ok(())
    }

    /// Release every live registration (teardown).
    pub(crate) fn release_all(&mut self, pages: &dyn PageProvider) {
        let mut index = 0u32;
        for slot in &mut self.slots {
            if let Some(entry) = slot.entry.take() {
                for &a in &entry.pages {
                    pages.page_unref(a);
                }
                self.free.push_back(index);
                if !entry.held {
                    self.live = self.live.saturating_sub(1);
                }
            }
            index = index.wrapping_add(1);
        }
    }

    /// The peer's access check for an RDMA operation of `len` bytes at iova `offset` needing
    /// `need`: the handle is live and valid, grants `need`, and the range lies inside the
    /// registration. Returns the entry and the byte offset into it.
    pub(crate) fn check_remote(
        &self,
        handle: u32,
        offset: u64,
        len: u64,
        need: Access,
    ) -> Result<(&RegEntry, u64), WcStatus> {
        let Some(entry) = self.get(handle) else {
            return refuse();
        };
        if !entry.valid || !entry.access.contains(need) {
            return refuse();
        }
        let Some(start) = offset.checked_sub(entry.iova) else {
            return refuse();
        };
        match start.checked_add(len) {
            Some(end) if end <= entry.len => Ok((entry, start)),
            _ => refuse(),
        }
    }
}

/// Page-aligned iova base of the registration with `handle`.
fn iova_base(handle: u32) -> u64 {
    0x4000_0000_0000_0000 | (u64::from(handle) << 28)
}
