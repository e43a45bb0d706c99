//! File contents for the NFSv3 client tests, shared by `krpc-rdma-session`'s host tests
//! (`krpc-rdma-session/tests/`) and the VM's NFS interop tests (`userspace-harness/tests/nfs3_rxe.rs`).

/// Deterministic, position-dependent bytes (so misplaced pages show).
pub fn content(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x as u8) ^ (i as u8)
        })
        .collect()
}

/// The first offset where `got` differs from `want` (a length difference counts at the
/// shorter length), or `None` when they are equal byte for byte.
pub fn first_difference(got: &[u8], want: &[u8]) -> Option<usize> {
    match got.iter().zip(want).position(|(a, b)| a != b) {
        Some(i) => Some(i),
        None if got.len() != want.len() => Some(got.len().min(want.len())),
        None => None,
    }
}
