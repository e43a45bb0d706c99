//! Sizing READDIR and READDIRPLUS replies (RFC 1813 sections 3.3.16 and 3.3.17): a pure
//! planner that says whether one more entry fits what the client asked for, so a reply never
//! exceeds the buffer (or the RPC-over-RDMA reply chunk) the client provisioned.
//!
//! * READDIR `count`: the most bytes of `READDIR3resok`, all XDR included: `dir_attributes`,
//!   `cookieverf`, every `entry3` with its `value_follows` word, the list's end word and
//!   `eof`.
//! * READDIRPLUS `maxcount`: the same bound on `READDIRPLUS3resok` (entries with their
//!   `post_op_attr` and `post_op_fh3`); `dircount`: the most bytes of directory information,
//!   counted per entry as FreeBSD's server does: `value_follows`, `fileid`, the name with its
//!   length word and pad, `cookie` (24 bytes + the padded name). The first entry is always
//!   allowed by `dircount` (so a reply always makes progress); `maxcount` is never exceeded.
//!
//! When not even the first entry fits the byte bound the reply is `NFS3ERR_TOOSMALL`.

use onc_rpc::xdr::roundup;

/// XDR bytes of a `fattr3`.
pub const FATTR3_LEN: usize = 84;
/// XDR bytes of `dir_attributes` with attributes.
const POST_OP_ATTR_LEN: usize = 4 + FATTR3_LEN;
/// `cookieverf3`, the list's end word and `eof`.
const LIST_FIXED_LEN: usize = 8 + 4 + 4;

/// The byte budget of one READDIR or READDIRPLUS reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirBudget {
    max_total: usize,
    used_total: usize,
    max_dir: Option<usize>,
    used_dir: usize,
    entries: usize,
}

/// XDR bytes of an entry's directory information: `value_follows`, `fileid`, the name with
/// its length word and pad, `cookie`.
pub fn dir_info_len(name_len: usize) -> usize {
    4 + 8 + 4 + roundup(name_len) + 8
}

/// XDR bytes of an `entryplus3` (with `value_follows`): directory information, then
/// `post_op_attr` (with or without attributes) and `post_op_fh3` (with a handle of `fh_len`
/// bytes, or without).
pub fn plus_entry_len(name_len: usize, attr: bool, fh_len: Option<usize>) -> usize {
    dir_info_len(name_len)
        + if attr { POST_OP_ATTR_LEN } else { 4 }
        + fh_len.map_or(4, |n| 4 + 4 + roundup(n))
}

impl DirBudget {
    /// READDIR with `count`; `dir_attr`: whether `dir_attributes` carries attributes.
    pub fn readdir(count: u32, dir_attr: bool) -> DirBudget {
        DirBudget::new(count as usize, None, dir_attr)
    }

    /// READDIRPLUS with `dircount` and `maxcount`.
    pub fn readdirplus(dircount: u32, maxcount: u32, dir_attr: bool) -> DirBudget {
        DirBudget::new(maxcount as usize, Some(dircount as usize), dir_attr)
    }

    fn new(max_total: usize, max_dir: Option<usize>, dir_attr: bool) -> DirBudget {
        DirBudget {
            max_total,
            used_total: if dir_attr { POST_OP_ATTR_LEN } else { 4 } + LIST_FIXED_LEN,
            max_dir,
            used_dir: 0,
            entries: 0,
        }
    }

    /// Whether the reply without any entry fits.
    pub fn fixed_fits(&self) -> bool {
        self.used_total <= self.max_total
    }

    /// Entries taken so far.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// Bytes of the `resok` body so far (the fixed part and the entries taken).
    pub fn used(&self) -> usize {
        self.used_total
    }

    /// Take an entry of `entry_len` XDR bytes (as [`dir_info_len`] or [`plus_entry_len`]
    /// give) whose directory information is `dir_len` bytes, if it fits; `false` (nothing
    /// taken) if not.
    pub fn try_take(&mut self, entry_len: usize, dir_len: usize) -> bool {
        let total = match self.used_total.checked_add(entry_len) {
            Some(t) if t <= self.max_total => t,
            _ => return false,
        };
        let dir = match self.used_dir.checked_add(dir_len) {
            Some(d) => d,
            None => return false,
        };
        if self.entries > 0 && self.max_dir.is_some_and(|m| dir > m) {
            return false;
        }
        self.used_total = total;
        self.used_dir = dir;
        self.entries += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readdir_count_is_exact() {
        // Fixed part with dir attributes: 88 + 16 = 104; an entry named "abcde": 32 bytes.
        let e = dir_info_len(5);
        assert_eq!(e, 32);
        let mut b = DirBudget::readdir(104 + 2 * 32, true);
        assert!(b.fixed_fits());
        assert!(b.try_take(e, e));
        assert!(b.try_take(e, e));
        assert!(!b.try_take(e, e));
        assert_eq!((b.entries(), b.used()), (2, 168));
        let mut small = DirBudget::readdir(104 + 31, true);
        assert!(!small.try_take(e, e));
        assert!(!DirBudget::readdir(103, true).fixed_fits());
        assert!(DirBudget::readdir(20, false).fixed_fits());
    }

    #[test]
    fn readdirplus_dircount_and_maxcount() {
        let e = plus_entry_len(5, true, Some(16));
        assert_eq!(e, 32 + 88 + 4 + 4 + 16);
        // dircount lets the first entry through even when it is too small.
        let mut b = DirBudget::readdirplus(1, 10_000, true);
        assert!(b.try_take(e, dir_info_len(5)));
        assert!(!b.try_take(e, dir_info_len(5)));
        // maxcount is never exceeded.
        let mut b = DirBudget::readdirplus(10_000, (104 + e - 1) as u32, true);
        assert!(!b.try_take(e, dir_info_len(5)));
        let mut b = DirBudget::readdirplus(64, 10_000, false);
        assert!(b.try_take(e, 32));
        assert!(b.try_take(e, 32));
        assert!(!b.try_take(e, 32));
        assert_eq!(plus_entry_len(0, false, None), 24 + 4 + 4);
        // Huge lengths do not overflow.
        assert!(!b.try_take(usize::MAX, usize::MAX));
    }
}
