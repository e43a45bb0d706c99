//! Transport statistics, after the "xprt: rdma" line of Linux's `/proc/self/mountstats`.

/// Counters of one transport endpoint (requester or responder). All monotonically increasing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// RPC messages sent (calls by a requester, replies by a responder).
    pub messages_sent: u64,
    /// RPC messages received and handed up.
    pub messages_received: u64,
    /// Read chunks sent (requester) or pulled (responder).
    pub read_chunks: u64,
    /// Write chunks provisioned (requester) or written (responder).
    pub write_chunks: u64,
    /// Reply chunks provisioned (requester) or written (responder).
    pub reply_chunks: u64,
    /// Bytes sent inline in Sends (headers included).
    pub inline_bytes_sent: u64,
    /// Bytes received inline in Sends (headers included).
    pub inline_bytes_received: u64,
    /// Bytes moved by RDMA Read (responder) or exposed to it (requester).
    pub rdma_read_bytes: u64,
    /// Bytes moved by RDMA Write (responder) or reported written (requester).
    pub rdma_write_bytes: u64,
    /// Long Calls (`RDMA_NOMSG` with a position-zero read chunk).
    pub long_calls: u64,
    /// Long Replies (`RDMA_NOMSG` through the reply chunk).
    pub long_replies: u64,
    /// Pull-up copies: non-page bytes copied into pages for RDMA.
    pub pullup_copies: u64,
    /// Bytes copied by pull-ups.
    pub pullup_bytes: u64,
    /// Payload bytes of DDP regions that were copied instead of placed directly (target: 0).
    pub ddp_payload_copied_bytes: u64,
    /// Memory registrations made.
    pub registrations: u64,
    /// Registrations revoked by our own Local Invalidate (or a synchronous release).
    pub local_invalidations: u64,
    /// Registrations revoked by the peer's Send With Invalidate.
    pub remote_invalidations: u64,
    /// Sends With Invalidate we posted.
    pub send_with_invalidate: u64,
    /// Received messages that were not valid: dropped (unknown XID, a message too short to
    /// name one, a requester's `RDMA_ERROR`), refused with `RDMA_ERROR` (responder), or
    /// failing the call their XID names (requester, also in `bad_replies`).
    pub bad_messages: u64,
    /// `RDMA_ERROR` / `ERR_VERS` sent.
    pub err_vers_sent: u64,
    /// `RDMA_ERROR` / `ERR_CHUNK` sent.
    pub err_chunk_sent: u64,
    /// `RDMA_ERROR` / `ERR_VERS` received.
    pub err_vers_received: u64,
    /// `RDMA_ERROR` / `ERR_CHUNK` received.
    pub err_chunk_received: u64,
    /// Calls refused for lack of credit (requester).
    pub credit_stalls: u64,
    /// Calls refused for a busy resource (send buffer, slot, queue).
    pub resource_stalls: u64,
    /// Connection losses seen.
    pub connection_losses: u64,
    /// Calls (requester) or call contexts (responder) ended by a connection loss.
    pub calls_lost: u64,
    /// Connections we closed because a message could be neither answered nor refused
    /// (RFC 8166 §4.5.4), or a receive buffer could not be reposted.
    pub closes: u64,
    /// Calls the upper layer chose not to answer (responder `drop_call`).
    pub calls_dropped: u64,
    /// Times a call's RDMA Reads waited for the connection's DDP budget (responder).
    pub ddp_budget_waits: u64,
    /// Times a call's RDMA Reads waited for the server-wide page budget shared with the
    /// other connections (responder with a [`PageShare`](super::PageShare)).
    pub shared_budget_waits: u64,
    /// Calls the caller abandoned before their reply (requester `abandon`).
    pub calls_abandoned: u64,
    /// Replies that arrived for abandoned calls and were dropped (requester).
    pub late_replies: u64,
    /// Abandoned calls whose registrations were revoked with their handles held back
    /// (`Provider::revoke`) until the late reply or the connection's end (requester).
    pub abandon_quarantines: u64,
    /// Connections closed by `abandon` because too many abandoned calls held handles back
    /// (requester; the bound on the quarantine).
    pub abandon_closes: u64,
    /// Calls failed by their reply (requester; Linux's `bad_reply_count`): a transport
    /// header the codec rejects whose XID names the call (`CallError::MalformedReply`), or
    /// one whose chunks do not match what was provisioned (`CallError::BadReply`). Each
    /// such message is also counted in `bad_messages`.
    pub bad_replies: u64,
    /// Call contexts given back because the upper layer dropped the call's `ReplyCtx`
    /// (or the `Incoming` holding it) without `reply` or `drop_call` (responder).
    pub contexts_reclaimed: u64,
    /// Reverse-direction calls (RFC 8167): received and handed up (requester), sent
    /// (responder).
    pub reverse_calls: u64,
    /// Reverse-direction replies: sent by the upper layer (requester; not those in
    /// `reverse_dropped`), received and handed up (responder).
    pub reverse_replies: u64,
    /// Reverse-direction calls beyond the slots provisioned for them: the connection was
    /// closed (requester).
    pub reverse_overflows: u64,
    /// Reverse-direction replies matching no reverse call outstanding: discarded
    /// (responder).
    pub reverse_replies_unexpected: u64,
    /// Reverse-direction calls nobody above answered, answered by the requester itself with
    /// an RPC reply `SYSTEM_ERR` (or, when even that could not be sent, ended by closing the
    /// connection): their `ReverseCtx` dropped unanswered, or no mbuf to hand them up in
    /// (requester).
    pub reverse_dropped: u64,
}

/// Number of [`Counters`] fields.
pub const COUNTER_FIELDS: usize = 42;

static_assertions::const_assert_eq!(
    core::mem::size_of::<Counters>(),
    COUNTER_FIELDS * core::mem::size_of::<u64>()
);

/// The counters' names, their values in the same order, and the field-wise sum: generated
/// from one list of the fields (in declaration order), so that they cannot disagree.
macro_rules! counter_table {
    ($($f:ident),* $(,)?) => {
        /// Every counter's name, in declaration order (static: a report walks it with
        /// [`Counters::values`] without a table of pairs on its stack).
        pub const COUNTER_NAMES: [&str; COUNTER_FIELDS] = [$(stringify!($f)),*];

        impl Counters {
            /// Every counter's value, in the order of [`COUNTER_NAMES`].
            pub fn values(&self) -> [u64; COUNTER_FIELDS] {
                [$(self.$f),*]
            }

            /// `self + other`, field by field (saturating): totals over connections.
            #[must_use]
            pub fn add(&self, other: &Counters) -> Counters {
                Counters {
                    $($f: self.$f.saturating_add(other.$f),)*
                }
            }
        }
    };
}

counter_table!(
    messages_sent,
    messages_received,
    read_chunks,
    write_chunks,
    reply_chunks,
    inline_bytes_sent,
    inline_bytes_received,
    rdma_read_bytes,
    rdma_write_bytes,
    long_calls,
    long_replies,
    pullup_copies,
    pullup_bytes,
    ddp_payload_copied_bytes,
    registrations,
    local_invalidations,
    remote_invalidations,
    send_with_invalidate,
    bad_messages,
    err_vers_sent,
    err_chunk_sent,
    err_vers_received,
    err_chunk_received,
    credit_stalls,
    resource_stalls,
    connection_losses,
    calls_lost,
    closes,
    calls_dropped,
    ddp_budget_waits,
    shared_budget_waits,
    calls_abandoned,
    late_replies,
    abandon_quarantines,
    abandon_closes,
    bad_replies,
    contexts_reclaimed,
    reverse_calls,
    reverse_replies,
    reverse_overflows,
    reverse_replies_unexpected,
    reverse_dropped,
);

impl Counters {
    /// Every field by name, in declaration order (for reports: JSON, one-line summaries).
    pub fn fields(&self) -> [(&'static str, u64); COUNTER_FIELDS] {
        let mut out = [("", 0); COUNTER_FIELDS];
        for ((o, name), value) in out.iter_mut().zip(COUNTER_NAMES).zip(self.values()) {
            *o = (name, value);
        }
        out
    }
}

impl core::ops::AddAssign for Counters {
    /// Field by field, saturating (see [`Counters::add`]).
    fn add_assign(&mut self, other: Counters) {
        *self = self.add(&other);
    }
}

impl core::ops::Add for Counters {
    type Output = Counters;

    fn add(self, other: Counters) -> Counters {
        Counters::add(&self, &other)
    }
}
