//! Credit accounting (RFC 8166 §3.3).
//!
//! The requester asks for credits in every call's `rdma_credit` and the responder grants them
//! in every reply. A new connection starts with a grant of 1; a received grant of 0 is taken as
//! 1 (Version 1 must never grant 0, and a requester left with no credit could never send
//! again); a grant larger than what the requester can hold (`max_requests`) is clamped. The
//! requester never has more calls outstanding than granted.

/// The requester's view of its credits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequesterCredits {
    granted: u32,
    outstanding: u32,
    max: u32,
}

impl RequesterCredits {
    /// A fresh connection: grant 1, nothing outstanding, at most `max` ever.
    pub fn new(max: u32) -> Self {
        RequesterCredits {
            granted: 1,
            outstanding: 0,
            max: max.max(1),
        }
    }

    /// Apply a grant received in a reply: clamped to `1..=max`.
    pub fn update_grant(&mut self, grant: u32) {
        self.granted = grant.clamp(1, self.max);
    }

    /// The current grant.
    pub fn granted(&self) -> u32 {
        self.granted
    }

    /// Calls outstanding (sent, reply not yet received).
    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }

    /// Whether one more call may be sent.
    pub fn can_send(&self) -> bool {
        self.outstanding < self.granted
    }

    /// Take a credit for a call being sent; false (nothing taken) if none is free.
    pub fn acquire(&mut self) -> bool {
        if self.can_send() {
            self.outstanding += 1;
            true
        } else {
            false
        }
    }

    /// A reply (or a failure) ended one outstanding call.
    pub fn release(&mut self) {
        self.outstanding = self.outstanding.saturating_sub(1);
    }

    /// Connection lost: back to the initial grant of 1 with nothing outstanding.
    pub fn reset(&mut self) {
        self.granted = 1;
        self.outstanding = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_at_one_clamps_zero_and_large() {
        let mut c = RequesterCredits::new(8);
        assert_eq!(c.granted(), 1);
        assert!(c.acquire());
        assert!(!c.acquire());
        c.update_grant(0);
        assert_eq!(c.granted(), 1);
        c.update_grant(1000);
        assert_eq!(c.granted(), 8);
        assert!(c.acquire());
        c.release();
        c.release();
        c.release();
        assert_eq!(c.outstanding(), 0);
    }
}
