//! One provider-conformance scenario suite for krpc-rdma, generic over a [`Fixture`] (the
//! pattern of rustls's one-suite-per-provider tests and quinn's `Pair`).
//!
//! A scenario is a plain function `fn(&mut F) -> Outcome` over a fixture `F`: it connects
//! one or more [`Pair`]s (a `Requester` and a `Responder`) or raw [`Link`]s, drives them to
//! completion in a bounded number of steps (no progress within the fixture's idle limit is
//! a [`Failure`] naming the step, never a hang), checks real behaviour, and ends with leak
//! checks: no live registration, every page back, the fixture's audit clean. No scenario
//! panics; the crate is `no_std` and free of test-framework types, so the same functions can
//! run inside a kernel module.
//!
//! Instantiating the suite for a provider takes a fixture and one line:
//!
//! ```ignore
//! krpc_rdma_scenarios::scenario_tests!(Some(SoftFixture::default()));
//! ```
//!
//! which expands to one `#[test]` per scenario (a fixture expression evaluating to `None`
//! skips, e.g. without an RDMA device). [`all`] lists the same scenarios as a table.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

mod bad_reply;
mod cancel;
pub mod check;
mod contract;
pub mod data;
pub mod fixture;
pub mod heap;
mod hostile;
mod late_invalidate;
mod liveness;
mod loss;
pub mod pair;
pub mod raw;
mod reconnect;
mod reverse;
mod transport;
pub mod wr;

pub use check::{Failure, Outcome};
pub use fixture::{Connect, Feature, Fixture, Limits, PagePair, Setup};
pub use pair::{Link, Pair, Side};

/// The scenario functions, by name.
pub mod scenarios {
    pub use crate::bad_reply::a_malformed_reply_fails_its_call_and_returns_its_credit;
    pub use crate::cancel::{
        abandon_revokes_at_once_and_drops_the_late_reply,
        close_fails_every_pending_call_and_hands_the_pages_back,
    };
    pub use crate::contract::*;
    pub use crate::hostile::{
        a_dropped_incoming_returns_its_context, drop_call_returns_the_context_and_the_credit,
        hostile_calls_beyond_the_grant, hostile_junk_after_a_valid_header,
        hostile_long_call_without_bytes_is_refused,
        hostile_one_handle_reused_within_the_ddp_budget,
        hostile_read_chunks_beyond_the_call_budget, hostile_segment_offsets_near_2_64,
        rfc8166_s4_3_2_3_empty_write_chunk_returns_the_item_inline,
    };
    pub use crate::late_invalidate::late_send_with_invalidate_after_abandon_keeps_the_connection;
    pub use crate::liveness::{
        a_read_stalled_on_a_full_send_queue_resumes_when_a_send_completes,
        a_reply_built_while_reads_stall_leaves_the_reads_alone,
    };
    pub use crate::loss::{
        loss_after_hand_up, loss_before_send, loss_during_rdma_read, loss_during_reply,
    };
    pub use crate::reconnect::{
        reconnect_after_loss_after_hand_up, reconnect_after_loss_during_local_invalidate,
        reconnect_after_loss_during_rdma_read, reconnect_after_loss_during_reply_writes,
        reconnect_resends_owed_calls_but_not_abandoned_ones,
        soak_mixed_calls_across_connection_losses,
    };
    pub use crate::reverse::{
        hostile_reverse_call_beyond_the_slots_closes_the_connection,
        hostile_reverse_reply_nobody_asked_for_is_dropped, loss_with_reverse_calls_outstanding,
        reverse_calls_interleave_with_forward_calls_at_full_credit,
    };
    pub use crate::transport::{
        credits_128_in_flight, credits_32_in_flight, ddp_read_padding_sizes,
        ddp_write_padding_sizes, err_vers_and_err_chunk, long_call_and_long_reply,
        send_with_invalidate, send_with_invalidate_refused, small_calls,
        stale_handles_refused_after_rpc,
    };
}

/// A scenario: its name and its function.
pub type Scenario<F> = (&'static str, fn(&mut F) -> Outcome);

/// Run one scenario; a failure is labelled with its name. For a scenario the fixture marks
/// as a known deviation, the failure is logged and expected.
///
/// # Errors
/// The scenario's failure, or the success of a scenario marked as a known deviation.
pub fn run<F: Fixture>(fx: &mut F, name: &'static str, f: fn(&mut F) -> Outcome) -> Outcome {
    let outcome = f(fx).map_err(|e| Failure {
        scenario: name,
        ..e
    });
    match (fx.known_deviation(name), outcome) {
        (None, outcome) => outcome,
        (Some(why), Err(e)) => {
            fx.log(&alloc::format!("known deviation ({why}): {e}"));
            Ok(())
        }
        (Some(why), Ok(())) => Err(Failure {
            scenario: name,
            ..check::fail(
                "known deviation",
                alloc::format!("the deviation ({why})"),
                "the scenario passed: remove the mark",
            )
        }),
    }
}

/// Calls `$cb!{ ($($pre)*) ; name, name, … }` with every scenario's name: the one list the
/// table and the test macro are made from.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_scenarios {
    ([$($cb:tt)*] $($pre:tt)*) => {
        $($cb)*! { ($($pre)*) ;
            small_calls,
            ddp_write_padding_sizes,
            ddp_read_padding_sizes,
            long_call_and_long_reply,
            credits_32_in_flight,
            credits_128_in_flight,
            err_vers_and_err_chunk,
            hostile_calls_beyond_the_grant,
            hostile_read_chunks_beyond_the_call_budget,
            hostile_segment_offsets_near_2_64,
            hostile_one_handle_reused_within_the_ddp_budget,
            rfc8166_s4_3_2_3_empty_write_chunk_returns_the_item_inline,
            hostile_junk_after_a_valid_header,
            drop_call_returns_the_context_and_the_credit,
            a_dropped_incoming_returns_its_context,
            hostile_long_call_without_bytes_is_refused,
            a_malformed_reply_fails_its_call_and_returns_its_credit,
            a_read_stalled_on_a_full_send_queue_resumes_when_a_send_completes,
            a_reply_built_while_reads_stall_leaves_the_reads_alone,
            abandon_revokes_at_once_and_drops_the_late_reply,
            close_fails_every_pending_call_and_hands_the_pages_back,
            late_send_with_invalidate_after_abandon_keeps_the_connection,
            stale_handles_refused_after_rpc,
            send_with_invalidate,
            send_with_invalidate_refused,
            loss_before_send,
            loss_during_rdma_read,
            loss_after_hand_up,
            loss_during_reply,
            reconnect_after_loss_during_rdma_read,
            reconnect_after_loss_after_hand_up,
            reconnect_after_loss_during_reply_writes,
            reconnect_after_loss_during_local_invalidate,
            reconnect_resends_owed_calls_but_not_abandoned_ones,
            soak_mixed_calls_across_connection_losses,
            reverse_calls_interleave_with_forward_calls_at_full_credit,
            hostile_reverse_call_beyond_the_slots_closes_the_connection,
            hostile_reverse_reply_nobody_asked_for_is_dropped,
            loss_with_reverse_calls_outstanding,
            established_carries_private_data,
            sends_consume_receives_in_order,
            receive_buffers_belong_to_the_nic_while_posted,
            sends_are_checked_at_post,
            gathered_send_appends_page_fragments,
            rdma_write_and_read_are_byte_exact,
            rdma_past_the_end_of_a_registration_is_refused,
            read_only_registration_refuses_write,
            write_only_registration_refuses_read,
            unknown_handle_is_refused,
            local_invalidate_makes_the_handle_stale,
            release_makes_the_handle_stale_and_the_id_unknown,
            release_of_a_live_registration_revokes,
            send_with_invalidate_revokes_the_receivers_handle,
            invalid_fragments_are_refused,
            max_registrations_is_busy,
            registrations_keep_their_pages_alive,
            send_queue_depth_is_busy_until_completions_are_polled,
            a_malformed_request_refuses_the_whole_chain,
            an_error_mid_chain_flushes_the_rest,
            disconnect_flushes_both_sides_and_refuses_posts,
            dropping_a_queue_pair_disconnects_the_peer,
            pages_are_all_returned_after_a_busy_session,
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __table {
    (() ; $($name:ident),* $(,)?) => {
        alloc::vec![$((stringify!($name), scenarios::$name::<F> as fn(&mut F) -> Outcome)),*]
    };
}

/// Every scenario, in order.
pub fn all<F: Fixture>() -> alloc::vec::Vec<Scenario<F>> {
    __with_scenarios!([__table])
}

/// One `#[test]` per scenario over the fixture `$make` (an expression of type
/// `Option<impl Fixture>`, evaluated once per test; `None` skips the test).
#[macro_export]
macro_rules! scenario_tests {
    ($make:expr) => {
        $crate::__with_scenarios! { [$crate::__scenario_tests] $make }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __scenario_tests {
    (($make:expr) ; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() -> ::core::result::Result<(), $crate::Failure> {
                match $make {
                    ::core::option::Option::Some(mut fx) => {
                        $crate::run(&mut fx, stringify!($name), $crate::scenarios::$name)
                    }
                    ::core::option::Option::None => Ok(()),
                }
            }
        )*
    };
}
