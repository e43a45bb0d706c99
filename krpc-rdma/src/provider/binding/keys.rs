//! The pool of registration keys (FRWR MRs, memory windows, per-run MRs) of one queue pair,
//! and the index from a valid rkey to its key, for the peer's Send With Invalidate.
//!
//! A key is `present` when its hardware object exists (a kernel MR pool is allocated up
//! front; memory windows are allocated on first use and freed when they cannot be
//! invalidated), `busy` while a registration owns it, `valid` while the peer may use its rkey,
//! `inv_pending` while a LOCAL_INV of it is outstanding.

use alloc::vec::Vec;

use crate::provider::ProviderError;

/// The state of one key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Key {
    /// Current rkey (the hardware object's key, key byte included).
    pub rkey: u32,
    /// The hardware object exists.
    pub present: bool,
    /// Owned by a registration.
    pub busy: bool,
    /// The peer may use `rkey`.
    pub valid: bool,
    /// A LOCAL_INV is posted and not complete.
    pub inv_pending: bool,
}

/// The key pool (see the module documentation). Sized once; nothing here allocates later.
#[derive(Debug, Default)]
pub struct KeyPool {
    keys: Vec<Key>,
    free: Vec<u32>,
    index: RkeyIndex,
}

impl KeyPool {
    /// `n` keys, all free; `present` says whether their hardware objects exist already.
    ///
    /// # Errors
    /// [`ProviderError::NoMemory`].
    pub fn new(n: u32, present: bool) -> Result<KeyPool, ProviderError> {
        let mut keys = Vec::new();
        keys.try_reserve_exact(n as usize)
            .map_err(|_| ProviderError::NoMemory)?;
        keys.resize(
            n as usize,
            Key {
                present,
                ..Key::default()
            },
        );
        let mut free = Vec::new();
        free.try_reserve_exact(n as usize)
            .map_err(|_| ProviderError::NoMemory)?;
        free.extend((0..n).rev());
        Ok(KeyPool {
            keys,
            free,
            index: RkeyIndex::new(n as usize)?,
        })
    }

    /// Keys free now.
    pub fn free(&self) -> usize {
        self.free.len()
    }

    /// Keys whose hardware object exists.
    pub fn present(&self) -> usize {
        self.keys.iter().filter(|k| k.present).count()
    }

    /// Take a free key (marked busy).
    pub fn take(&mut self) -> Option<u32> {
        let i = self.free.pop()?;
        if let Some(k) = self.keys.get_mut(i as usize) {
            k.busy = true;
        }
        Some(i)
    }

    /// Return a key to the pool. It must be neither valid nor pending (the caller revokes
    /// such a key first).
    pub fn put(&mut self, i: u32) {
        if let Some(k) = self.keys.get_mut(i as usize) {
            debug_assert!(k.busy && !k.valid && !k.inv_pending);
            if k.busy {
                k.busy = false;
                self.free.push(i);
            }
        }
    }

    /// The key `i`.
    pub fn get(&self, i: u32) -> Option<&Key> {
        self.keys.get(i as usize)
    }

    /// The key `i`, mutable. Do not change `rkey` or `valid` through this: use
    /// [`set_valid`](Self::set_valid) / [`set_invalid`](Self::set_invalid), which keep the
    /// rkey index.
    pub fn get_mut(&mut self, i: u32) -> Option<&mut Key> {
        self.keys.get_mut(i as usize)
    }

    /// Key `i` now answers to `rkey` and the peer may use it.
    pub fn set_valid(&mut self, i: u32, rkey: u32) {
        if let Some(k) = self.keys.get_mut(i as usize) {
            if k.valid {
                self.index.remove(k.rkey);
            }
            k.rkey = rkey;
            k.valid = true;
            self.index.insert(rkey, i);
        }
    }

    /// The peer can no longer use key `i`.
    pub fn set_invalid(&mut self, i: u32) {
        if let Some(k) = self.keys.get_mut(i as usize) {
            if k.valid {
                k.valid = false;
                self.index.remove(k.rkey);
            }
        }
    }

    /// The valid key that answers to `rkey`.
    pub fn by_rkey(&self, rkey: u32) -> Option<u32> {
        self.index.get(rkey)
    }
}

/// An open-addressing map from valid rkey to key index (linear probing, backward-shift
/// deletion, no tombstones), sized for every key at half load: O(1), allocation-free after
/// construction.
#[derive(Debug, Default)]
struct RkeyIndex {
    slots: Vec<Option<(u32, u32)>>,
    mask: usize,
}

impl RkeyIndex {
    fn new(keys: usize) -> Result<RkeyIndex, ProviderError> {
        let cap = keys
            .max(1)
            .checked_mul(2)
            .and_then(usize::checked_next_power_of_two)
            .ok_or(ProviderError::NoMemory)?;
        let mut slots = Vec::new();
        slots
            .try_reserve_exact(cap)
            .map_err(|_| ProviderError::NoMemory)?;
        slots.resize(cap, None);
        Ok(RkeyIndex {
            slots,
            mask: cap - 1,
        })
    }

    fn home(&self, rkey: u32) -> usize {
        // Fibonacci hashing: rkeys differ mostly in their upper 24 bits.
        (rkey.wrapping_mul(0x9E37_79B9) as usize) & self.mask
    }

    fn get(&self, rkey: u32) -> Option<u32> {
        let mut i = self.home(rkey);
        for _ in 0..self.slots.len() {
            match self.slots.get(i).copied().flatten() {
                Some((k, v)) if k == rkey => return Some(v),
                Some(_) => i = (i + 1) & self.mask,
                None => return None,
            }
        }
        None
    }

    fn insert(&mut self, rkey: u32, key: u32) {
        let mut i = self.home(rkey);
        for _ in 0..self.slots.len() {
            match self.slots.get_mut(i) {
                Some(s @ None) => {
                    *s = Some((rkey, key));
                    return;
                }
                Some(Some((k, v))) if *k == rkey => {
                    *v = key;
                    return;
                }
                _ => i = (i + 1) & self.mask,
            }
        }
        debug_assert!(false, "rkey index full");
    }

    fn remove(&mut self, rkey: u32) {
        let mut i = self.home(rkey);
        let mut found = None;
        for _ in 0..self.slots.len() {
            match self.slots.get(i).copied().flatten() {
                Some((k, _)) if k == rkey => {
                    found = Some(i);
                    break;
                }
                Some(_) => i = (i + 1) & self.mask,
                None => return,
            }
        }
        let Some(mut hole) = found else { return };
        if let Some(s) = self.slots.get_mut(hole) {
            *s = None;
        }
        // Backward-shift: move later members of the probe run into the hole when their home
        // is not between the hole and their slot.
        let mut j = (hole + 1) & self.mask;
        while let Some(Some((k, v))) = self.slots.get(j).copied() {
            let home = self.home(k);
            let dist_home = j.wrapping_sub(home) & self.mask;
            let dist_hole = j.wrapping_sub(hole) & self.mask;
            if dist_home >= dist_hole {
                if let Some(s) = self.slots.get_mut(hole) {
                    *s = Some((k, v));
                }
                if let Some(s) = self.slots.get_mut(j) {
                    *s = None;
                }
                hole = j;
            }
            j = (j + 1) & self.mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_put_and_rkey_lookup() {
        let mut p = KeyPool::new(3, true).unwrap();
        let a = p.take().unwrap();
        let b = p.take().unwrap();
        assert_eq!(p.free(), 1);
        p.set_valid(a, 0x100);
        p.set_valid(b, 0x200);
        assert_eq!(p.by_rkey(0x100), Some(a));
        assert_eq!(p.by_rkey(0x200), Some(b));
        // A new key byte replaces the old rkey.
        p.set_valid(a, 0x101);
        assert_eq!(p.by_rkey(0x100), None);
        assert_eq!(p.by_rkey(0x101), Some(a));
        p.set_invalid(a);
        assert_eq!(p.by_rkey(0x101), None);
        p.put(a);
        assert_eq!(p.free(), 2);
    }

    #[test]
    fn index_survives_heavy_collisions_and_deletions() {
        let mut ix = RkeyIndex::new(64).unwrap();
        // Many keys, inserted and removed in an interleaved order, against a model.
        let mut model = alloc::collections::BTreeMap::new();
        let mut x: u32 = 12345;
        for step in 0..20_000u32 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let rkey = (x >> 8) % 97;
            if model.len() < 64 && step % 3 != 0 {
                ix.insert(rkey, step);
                model.insert(rkey, step);
            } else {
                ix.remove(rkey);
                model.remove(&rkey);
            }
            for probe in 0..97 {
                assert_eq!(ix.get(probe), model.get(&probe).copied(), "step {step}");
            }
        }
    }
}
