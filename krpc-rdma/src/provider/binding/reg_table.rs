//! The table of live registrations of one queue pair: generation-tagged slots and a free
//! list, so a [`RegId`] from an earlier registration in the same slot is refused, and neither
//! lookup nor allocation scans. Each slot keeps its keys and one page reference on every
//! distinct page it covers; the page list's storage stays with the slot from one
//! registration to the next, so steady state does not allocate.

use alloc::vec::Vec;

use crate::provider::{ProviderError, RegId};
use crate::wire::MAX_CHUNK_SEGMENTS;

/// One registration.
#[derive(Debug, Default)]
pub struct Reg {
    /// Generation of the live registration in this slot (0: free).
    gen: u16,
    /// Keys used, in segment order.
    pub keys: heapless::Vec<u32, MAX_CHUNK_SEGMENTS>,
    /// Distinct pages referenced.
    pub pages: Vec<u64>,
    /// Revoked by [`Provider::revoke`](crate::provider::Provider::revoke): invalidated, pages
    /// unmapped and unreferenced, keys held (not given out again) until `release`.
    pub revoked: bool,
}

/// The registration table (see the module documentation).
#[derive(Debug, Default)]
pub struct RegTable {
    slots: Vec<Reg>,
    free: Vec<u16>,
    gen: u16,
    live: u32,
}

impl RegTable {
    /// `n` slots (at most 65,536).
    ///
    /// # Errors
    /// [`ProviderError::NoMemory`], or [`ProviderError::BadId`] for `n` out of range.
    pub fn new(n: u32) -> Result<RegTable, ProviderError> {
        if n == 0 || n > 1 << 16 {
            return Err(ProviderError::BadId);
        }
        let mut slots = Vec::new();
        slots
            .try_reserve_exact(n as usize)
            .map_err(|_| ProviderError::NoMemory)?;
        slots.resize_with(n as usize, Reg::default);
        let mut free = Vec::new();
        free.try_reserve_exact(n as usize)
            .map_err(|_| ProviderError::NoMemory)?;
        free.extend((0..n).rev().filter_map(|i| u16::try_from(i).ok()));
        Ok(RegTable {
            slots,
            free,
            gen: 0,
            live: 0,
        })
    }

    /// Live registrations.
    pub fn live(&self) -> u32 {
        self.live
    }

    /// Allocate a slot: its id and its (empty) registration to fill.
    pub fn alloc(&mut self) -> Option<(RegId, &mut Reg)> {
        let slot = self.free.pop()?;
        self.gen = self.gen.wrapping_add(1).max(1);
        let gen = self.gen;
        let reg = self.slots.get_mut(usize::from(slot))?;
        reg.gen = gen;
        reg.keys.clear();
        reg.pages.clear();
        reg.revoked = false;
        self.live += 1;
        Some((RegId((u32::from(gen) << 16) | u32::from(slot)), reg))
    }

    fn slot_of(&self, id: RegId) -> Option<usize> {
        let slot = (id.0 & 0xffff) as usize;
        let gen = (id.0 >> 16) as u16;
        self.slots
            .get(slot)
            .filter(|r| r.gen != 0 && r.gen == gen)
            .map(|_| slot)
    }

    /// The live registration `id`.
    pub fn get(&self, id: RegId) -> Option<&Reg> {
        self.slots.get(self.slot_of(id)?)
    }

    /// The live registration `id`, mutable.
    pub fn get_mut(&mut self, id: RegId) -> Option<&mut Reg> {
        let s = self.slot_of(id)?;
        self.slots.get_mut(s)
    }

    /// Free `id`'s slot; `f` sees the registration one last time (to drop its page
    /// references).
    pub fn free(&mut self, id: RegId, f: impl FnOnce(&mut Reg)) -> Result<(), ProviderError> {
        let s = self.slot_of(id).ok_or(ProviderError::BadId)?;
        let reg = self.slots.get_mut(s).ok_or(ProviderError::BadId)?;
        f(reg);
        reg.gen = 0;
        reg.keys.clear();
        reg.pages.clear();
        if !core::mem::take(&mut reg.revoked) {
            self.live = self.live.saturating_sub(1);
        }
        self.free.push(s as u16);
        Ok(())
    }

    /// Mark `id` revoked: no longer counted live (its keys stay with it until `free`).
    pub fn set_revoked(&mut self, id: RegId) {
        if let Some(r) = self.get_mut(id).filter(|r| !r.revoked) {
            r.revoked = true;
            self.live = self.live.saturating_sub(1);
        }
    }

    /// Every live registration (teardown).
    pub fn live_mut(&mut self) -> impl Iterator<Item = &mut Reg> {
        self.slots.iter_mut().filter(|r| r.gen != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_ids_are_refused_and_slots_reused() {
        let mut t = RegTable::new(2).unwrap();
        let (a, _) = t.alloc().unwrap();
        let (b, _) = t.alloc().unwrap();
        assert!(t.alloc().is_none());
        assert_eq!(t.live(), 2);
        t.free(a, |_| {}).unwrap();
        assert!(t.get(a).is_none());
        assert_eq!(t.free(a, |_| {}), Err(ProviderError::BadId));
        let (c, _) = t.alloc().unwrap();
        assert_ne!(a, c, "same slot, new generation");
        assert!(t.get(c).is_some() && t.get(b).is_some());
        assert_eq!(t.live_mut().count(), 2);
    }
}
