//! Which receive buffers are posted. A posted buffer belongs to the NIC: the core may not
//! read it, and it may not be posted twice.

use alloc::vec::Vec;

use crate::provider::ProviderError;

/// The posted-receive table of one queue pair.
#[derive(Debug, Default)]
pub struct RecvTable {
    posted: Vec<bool>,
}

impl RecvTable {
    /// `n` buffers, none posted.
    ///
    /// # Errors
    /// [`ProviderError::NoMemory`].
    pub fn new(n: u32) -> Result<RecvTable, ProviderError> {
        let mut posted = Vec::new();
        posted
            .try_reserve_exact(n as usize)
            .map_err(|_| ProviderError::NoMemory)?;
        posted.resize(n as usize, false);
        Ok(RecvTable { posted })
    }

    /// Whether `buf` exists and is not posted (its bytes may be read).
    pub fn readable(&self, buf: u32) -> bool {
        self.posted.get(buf as usize) == Some(&false)
    }

    /// Claim `bufs` for posting: each must exist, be unposted, and appear once. All are
    /// marked posted, or none (on error).
    ///
    /// # Errors
    /// [`ProviderError::BadId`].
    pub fn claim(&mut self, bufs: &[u32]) -> Result<(), ProviderError> {
        for (k, &b) in bufs.iter().enumerate() {
            match self.posted.get_mut(b as usize) {
                Some(p) if !*p => *p = true,
                _ => {
                    self.unclaim(bufs.get(..k).unwrap_or(&[]));
                    return Err(ProviderError::BadId);
                }
            }
        }
        Ok(())
    }

    /// Undo a claim of `bufs` (not posted after all).
    pub fn unclaim(&mut self, bufs: &[u32]) {
        for &b in bufs {
            if let Some(p) = self.posted.get_mut(b as usize) {
                *p = false;
            }
        }
    }

    /// `buf` completed: the core owns it again.
    pub fn completed(&mut self, buf: u32) {
        self.unclaim(core::slice::from_ref(&buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_is_all_or_nothing() {
        let mut t = RecvTable::new(4).unwrap();
        assert_eq!(t.claim(&[0, 1, 1]), Err(ProviderError::BadId));
        assert!(t.readable(0) && t.readable(1));
        assert_eq!(t.claim(&[0, 9]), Err(ProviderError::BadId));
        assert!(t.readable(0));
        t.claim(&[0, 1]).unwrap();
        assert!(!t.readable(0));
        assert_eq!(t.claim(&[1]), Err(ProviderError::BadId));
        t.completed(0);
        assert!(t.readable(0) && !t.readable(1));
    }
}
