//! The requester's pending-XID index: XID → slot, open addressing with linear probing,
//! sized at construction (twice the slots, a power of two) so lookups stay O(1) however many
//! calls are outstanding, and nothing is allocated after construction.

use alloc::vec::Vec;

const EMPTY: u32 = u32::MAX;

/// XID → slot index for at most `n` entries (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct XidTable {
    /// `(xid, slot)`; `slot == EMPTY` marks a free bucket.
    buckets: Vec<(u32, u32)>,
    mask: usize,
}

impl XidTable {
    /// A table for `n` entries.
    pub(crate) fn new(n: usize) -> Result<Self, alloc::collections::TryReserveError> {
        let cap = n.saturating_mul(2).max(4).next_power_of_two();
        let mut buckets = Vec::new();
        buckets.try_reserve_exact(cap)?;
        buckets.resize(cap, (0, EMPTY));
        Ok(XidTable {
            buckets,
            mask: cap - 1,
        })
    }

    fn home(&self, xid: u32) -> usize {
        let h = xid.wrapping_mul(0x9e37_79b9);
        (h ^ (h >> 16)) as usize & self.mask
    }

    /// The slot of `xid`.
    pub(crate) fn get(&self, xid: u32) -> Option<u32> {
        let mut i = self.home(xid);
        for _ in 0..self.buckets.len() {
            let &(k, v) = self.buckets.get(i)?;
            if v == EMPTY {
                return None;
            }
            if k == xid {
                return Some(v);
            }
            i = (i + 1) & self.mask;
        }
        None
    }

    /// Record `xid` → `slot`; false (nothing changed) if `xid` is present or the table full.
    pub(crate) fn insert(&mut self, xid: u32, slot: u32) -> bool {
        let mut i = self.home(xid);
        for _ in 0..self.buckets.len() {
            let Some(b) = self.buckets.get_mut(i) else {
                return false;
            };
            if b.1 == EMPTY {
                *b = (xid, slot);
                return true;
            }
            if b.0 == xid {
                return false;
            }
            i = (i + 1) & self.mask;
        }
        false
    }

    /// Forget `xid` (backward-shift deletion: no tombstones, probes stay short).
    pub(crate) fn remove(&mut self, xid: u32) -> Option<u32> {
        let mut i = self.home(xid);
        let mut found = None;
        for _ in 0..self.buckets.len() {
            let &(k, v) = self.buckets.get(i)?;
            if v == EMPTY {
                return None;
            }
            if k == xid {
                found = Some(v);
                break;
            }
            i = (i + 1) & self.mask;
        }
        let slot = found?;
        // Shift later members of the probe run back into the hole.
        let mut hole = i;
        let mut j = (i + 1) & self.mask;
        loop {
            let &(k, v) = self.buckets.get(j)?;
            if v == EMPTY {
                break;
            }
            let home = self.home(k);
            // Move (k, v) into the hole unless its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                if let Some(h) = self.buckets.get_mut(hole) {
                    *h = (k, v);
                }
                hole = j;
            }
            j = (j + 1) & self.mask;
        }
        if let Some(h) = self.buckets.get_mut(hole) {
            *h = (0, EMPTY);
        }
        Some(slot)
    }

    /// Forget everything.
    pub(crate) fn clear(&mut self) {
        for b in &mut self.buckets {
            *b = (0, EMPTY);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;

    #[test]
    fn matches_a_map_under_churn() {
        let mut t = XidTable::new(8).unwrap();
        let mut m = BTreeMap::new();
        // Colliding and non-colliding XIDs, inserted and removed in a scrambled order.
        let mut x = 12345u32;
        for step in 0..20_000u32 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let xid = (x >> 8) % 40;
            if m.len() < 8 && step % 3 != 0 {
                let ok = t.insert(xid, step);
                assert_eq!(ok, !m.contains_key(&xid));
                m.entry(xid).or_insert(step);
            } else {
                assert_eq!(t.remove(xid), m.remove(&xid));
            }
            for k in 0..40 {
                assert_eq!(t.get(k), m.get(&k).copied(), "xid {k} at step {step}");
            }
        }
        t.clear();
        assert_eq!(t.get(1), None);
    }
}
