//! The NFSv4.1 client's callback service (RFC 8881 §20, the back channel): what the client
//! answers to the reverse-direction calls its server sends on the session's connection
//! (RFC 8167; the transport hands them up as `RequesterEvent::ReverseCall`). Sans-I/O: a
//! call's bytes in, the reply's bytes out.
//!
//! * CB_NULL (the server's probe of the back channel): an empty success.
//! * CB_COMPOUND, minor version 1: CB_SEQUENCE first (the session's back-channel slot table:
//!   a new request executes, a retransmission of the last one gets its cached reply, anything
//!   else is refused as RFC 8881 §2.10.6 says), then CB_RECALL (the delegation is queued for
//!   the client to return: [`CbService::take_recall`]); any other operation is
//!   NFS4ERR_OP_ILLEGAL. The compound stops at the first failure.
//! * Anything else: the RPC refusal ONC RPC prescribes (program, version, procedure), or no
//!   answer for what is not a call.

use std::collections::VecDeque;

use nfs_proto::nfs4::{
    CbCompound4Args, CbCompound4Res, CbRecall4Args, CbSequence4Args, CbSequence4ResOk, NfsCbArgop4,
    NfsCbResop4, Nfsstat4, Res4, Sessionid4, NFS4_MAX_OPS,
};
use onc_rpc::rpc::AcceptStat;
use onc_rpc::svc::{
    accept_call, header_bytes, refusal, success_encoder, AuthPolicy, Program, Refusal,
};

/// CB_NULL.
const CB_NULL: u32 = 0;

/// One back-channel slot: the last sequence id seen and the reply to it, if cached.
#[derive(Debug, Clone, Default)]
struct Slot {
    seq: u32,
    used: bool,
    cached: Option<Vec<u8>>,
}

/// The client's callback service for one session (see the module documentation).
#[derive(Debug)]
pub struct CbService {
    program: Program,
    session: Sessionid4,
    slots: Vec<Slot>,
    recalls: VecDeque<CbRecall4Args>,
    /// Calls answered (refusals included).
    pub answered: u64,
}

impl CbService {
    /// The service of `cb_program` (CREATE_SESSION's `csa_cb_program`) for `session`, with
    /// `slots` back-channel slots (the back channel's `ca_maxrequests`, at least one).
    pub fn new(cb_program: u32, session: Sessionid4, slots: u32) -> Self {
        CbService {
            program: Program {
                prog: cb_program,
                low: 1,
                high: 1,
                nprocs: 2,
                auth: AuthPolicy::AllowNone,
            },
            session,
            slots: vec![Slot::default(); slots.max(1) as usize],
            recalls: VecDeque::new(),
            answered: 0,
        }
    }

    /// The session is `session` now, with `slots` back-channel slots (the back channel's
    /// `ca_maxrequests` the server agreed to, at least one), all fresh. A client makes its
    /// service before CREATE_SESSION (so the server's first probe, CB_NULL, finds it) and
    /// names the session once the reply is in.
    pub fn set_session(&mut self, session: Sessionid4, slots: u32) {
        self.session = session;
        self.slots = vec![Slot::default(); slots.max(1) as usize];
    }

    /// The next delegation the server recalled (to return with DELEGRETURN), oldest first.
    pub fn take_recall(&mut self) -> Option<CbRecall4Args> {
        self.recalls.pop_front()
    }

    /// The reply to the RPC call `msg` (its bytes from the XID on), or `None` when it is not
    /// a call to answer.
    pub fn serve(&mut self, msg: &[u8]) -> Option<Vec<u8>> {
        let reply = self.answer(msg);
        self.answered += u64::from(reply.is_some());
        reply
    }

    fn answer(&mut self, msg: &[u8]) -> Option<Vec<u8>> {
        let mut accepted = match accept_call(msg, &self.program) {
            Ok(a) => a,
            Err(Refusal::Drop) => return None,
            Err(Refusal::Reply(h)) => return header_bytes(&h).ok(),
        };
        let xid = accepted.header.xid;
        if accepted.header.proc_ == CB_NULL {
            return success_encoder(xid).finish().ok();
        }
        match CbCompound4Args::decode(&mut accepted.args) {
            Ok(args) => self.compound(xid, &args),
            Err(_) => header_bytes(&refusal(xid, AcceptStat::GarbageArgs)).ok(),
        }
    }

    /// A CB_COMPOUND's reply (RPC header included).
    fn compound(&mut self, xid: u32, args: &CbCompound4Args) -> Option<Vec<u8>> {
        let mut res = CbCompound4Res {
            status: Nfsstat4::OK,
            tag: args.tag.clone(),
            resarray: Vec::new(),
        };
        let mut slot = None;
        if args.minorversion != 1 {
            res.status = Nfsstat4::ERR_MINOR_VERS_MISMATCH;
        } else {
            for (i, op) in args.argarray.iter().take(NFS4_MAX_OPS).enumerate() {
                let r = match op {
                    NfsCbArgop4::Sequence(s) if i == 0 => match self.sequence(s) {
                        Sequenced::New(ok, idx) => {
                            slot = Some(idx);
                            NfsCbResop4::Sequence(Res4::Ok(ok))
                        }
                        // A retransmission of the slot's last request: its cached reply.
                        Sequenced::Replay(Some(cached)) => {
                            let mut e = success_encoder(xid);
                            e.opaque_fixed(&cached);
                            return e.finish().ok();
                        }
                        Sequenced::Replay(None) => {
                            NfsCbResop4::Sequence(Res4::Err(Nfsstat4::ERR_RETRY_UNCACHED_REP))
                        }
                        Sequenced::Refused(st) => NfsCbResop4::Sequence(Res4::Err(st)),
                    },
                    NfsCbArgop4::Sequence(_) => {
                        NfsCbResop4::Sequence(Res4::Err(Nfsstat4::ERR_SEQUENCE_POS))
                    }
                    _ if i == 0 => {
                        let st = Nfsstat4::ERR_OP_NOT_IN_SESSION;
                        match op {
                            NfsCbArgop4::Recall(_) => NfsCbResop4::Recall(st),
                            _ => NfsCbResop4::Illegal(st),
                        }
                    }
                    NfsCbArgop4::Recall(r) => {
                        self.recalls.push_back(r.clone());
                        NfsCbResop4::Recall(Nfsstat4::OK)
                    }
                    NfsCbArgop4::Illegal => NfsCbResop4::Illegal(Nfsstat4::ERR_OP_ILLEGAL),
                };
                let st = r.status();
                res.resarray.push(r);
                if st != Nfsstat4::OK {
                    res.status = st;
                    break;
                }
            }
        }
        let body = res.to_bytes().ok()?;
        if let Some(s) = slot.and_then(|i| self.slots.get_mut(i)) {
            s.cached = Some(body.clone());
        }
        let mut e = success_encoder(xid);
        e.opaque_fixed(&body);
        e.finish().ok()
    }

    /// CB_SEQUENCE against the slot table (RFC 8881 §2.10.6.1).
    fn sequence(&mut self, s: &CbSequence4Args) -> Sequenced {
        if s.csa_sessionid != self.session {
            return Sequenced::Refused(Nfsstat4::ERR_BADSESSION);
        }
        let highest = self.slots.len().saturating_sub(1) as u32;
        let Some(slot) = self.slots.get_mut(s.csa_slotid as usize) else {
            return Sequenced::Refused(Nfsstat4::ERR_BADSLOT);
        };
        if slot.used && s.csa_sequenceid == slot.seq {
            return Sequenced::Replay(slot.cached.clone());
        }
        // A slot's first request may start anywhere (the server's choice, 1 by RFC 8881).
        if slot.used && s.csa_sequenceid != slot.seq.wrapping_add(1) {
            return Sequenced::Refused(Nfsstat4::ERR_SEQ_MISORDERED);
        }
        slot.used = true;
        slot.seq = s.csa_sequenceid;
        slot.cached = None;
        Sequenced::New(
            CbSequence4ResOk {
                csr_sessionid: self.session,
                csr_sequenceid: s.csa_sequenceid,
                csr_slotid: s.csa_slotid,
                csr_highest_slotid: highest,
                csr_target_highest_slotid: highest,
            },
            s.csa_slotid as usize,
        )
    }
}

/// What CB_SEQUENCE decided.
enum Sequenced {
    /// A new request on this slot: its result, the slot.
    New(CbSequence4ResOk, usize),
    /// The slot's last request again: its cached reply body, if any.
    Replay(Option<Vec<u8>>),
    /// Refused with this status.
    Refused(Nfsstat4),
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfs_proto::nfs4::{NfsFh4, Stateid4, Utf8Str};
    use onc_rpc::rpc::{Auth, CallHeader, ReplyHeader};
    use onc_rpc::xdr::{Decoder, Encoder};

    const PROG: u32 = 0x4000_0000;

    fn sid(b: u8) -> Sessionid4 {
        Sessionid4([b; 16])
    }

    fn call(xid: u32, proc_: u32, body: &[u8]) -> Vec<u8> {
        let mut e = Encoder::new();
        CallHeader {
            xid,
            prog: PROG,
            vers: 1,
            proc_,
            cred: Auth::None,
            verf: Auth::None,
        }
        .encode(&mut e);
        e.opaque_fixed(body);
        e.finish().unwrap()
    }

    fn compound(ops: Vec<NfsCbArgop4>) -> Vec<u8> {
        CbCompound4Args {
            tag: Utf8Str::new(b"cb"),
            minorversion: 1,
            callback_ident: 0,
            argarray: ops,
        }
        .to_bytes()
        .unwrap()
    }

    fn seq(session: Sessionid4, seqid: u32, slot: u32) -> NfsCbArgop4 {
        NfsCbArgop4::Sequence(CbSequence4Args {
            csa_sessionid: session,
            csa_sequenceid: seqid,
            csa_slotid: slot,
            csa_highest_slotid: 0,
            csa_cachethis: false,
            csa_referring_call_lists: Vec::new(),
        })
    }

    fn recall(b: u8) -> CbRecall4Args {
        CbRecall4Args {
            stateid: Stateid4 {
                seqid: 1,
                other: [b; 12],
            },
            truncate: false,
            fh: NfsFh4::new(&[b; 8]),
        }
    }

    /// The reply's RPC header and CB_COMPOUND result.
    fn result(reply: &[u8]) -> (u32, CbCompound4Res) {
        let mut d = Decoder::new(reply);
        let h = ReplyHeader::decode(&mut d).unwrap();
        assert!(h.is_success(), "{h:?}");
        (h.xid(), CbCompound4Res::decode(&mut d).unwrap())
    }

    #[test]
    fn cb_null_is_an_empty_success() {
        let mut s = CbService::new(PROG, sid(1), 1);
        let reply = s.serve(&call(7, 0, &[])).unwrap();
        let mut d = Decoder::new(&reply);
        let h = ReplyHeader::decode(&mut d).unwrap();
        assert!(h.is_success());
        assert_eq!(
            (h.xid(), d.pos(), reply.len()),
            (7, reply.len(), reply.len())
        );
    }

    #[test]
    fn cb_recall_after_cb_sequence_queues_the_delegation() {
        let mut s = CbService::new(PROG, sid(1), 1);
        let body = compound(vec![seq(sid(1), 1, 0), NfsCbArgop4::Recall(recall(9))]);
        let (xid, res) = result(&s.serve(&call(8, 1, &body)).unwrap());
        assert_eq!((xid, res.status), (8, Nfsstat4::OK));
        assert_eq!(res.resarray.len(), 2);
        assert!(
            matches!(&res.resarray[0], NfsCbResop4::Sequence(Res4::Ok(ok)) if ok.csr_sequenceid == 1 && ok.csr_sessionid == sid(1))
        );
        assert_eq!(res.resarray[1], NfsCbResop4::Recall(Nfsstat4::OK));
        assert_eq!(s.take_recall(), Some(recall(9)));
        assert_eq!(s.take_recall(), None);
        // The retransmission gets the cached reply and recalls nothing twice.
        let again = s.serve(&call(8, 1, &body)).unwrap();
        assert_eq!(result(&again).1, res);
        assert_eq!(s.take_recall(), None);
        // The next sequence id is a new request; one further ahead is misordered.
        let next = compound(vec![seq(sid(1), 2, 0)]);
        assert_eq!(
            result(&s.serve(&call(9, 1, &next)).unwrap()).1.status,
            Nfsstat4::OK
        );
        let skip = compound(vec![seq(sid(1), 5, 0)]);
        assert_eq!(
            result(&s.serve(&call(10, 1, &skip)).unwrap()).1.status,
            Nfsstat4::ERR_SEQ_MISORDERED
        );
    }

    #[test]
    fn session_rules_refuse_what_rfc_8881_refuses() {
        let mut s = CbService::new(PROG, sid(1), 2);
        let status = |s: &mut CbService, ops| {
            result(&s.serve(&call(1, 1, &compound(ops))).unwrap())
                .1
                .status
        };
        assert_eq!(
            status(&mut s, vec![seq(sid(2), 1, 0)]),
            Nfsstat4::ERR_BADSESSION
        );
        assert_eq!(
            status(&mut s, vec![seq(sid(1), 1, 2)]),
            Nfsstat4::ERR_BADSLOT
        );
        assert_eq!(
            status(&mut s, vec![NfsCbArgop4::Recall(recall(1))]),
            Nfsstat4::ERR_OP_NOT_IN_SESSION
        );
        assert_eq!(s.take_recall(), None, "nothing recalled outside a session");
        assert_eq!(
            status(&mut s, vec![seq(sid(1), 1, 1), seq(sid(1), 2, 1)]),
            Nfsstat4::ERR_SEQUENCE_POS
        );
        assert_eq!(
            status(&mut s, vec![seq(sid(1), 1, 0), NfsCbArgop4::Illegal]),
            Nfsstat4::ERR_OP_ILLEGAL
        );
        let mut v0 = CbCompound4Args::decode(&mut Decoder::new(&compound(vec![]))).unwrap();
        v0.minorversion = 0;
        let r = result(&s.serve(&call(2, 1, &v0.to_bytes().unwrap())).unwrap()).1;
        assert_eq!(
            (r.status, r.resarray.len()),
            (Nfsstat4::ERR_MINOR_VERS_MISMATCH, 0)
        );
    }

    #[test]
    fn what_is_not_a_callback_gets_the_rpc_refusal_or_nothing() {
        let mut s = CbService::new(PROG, sid(1), 1);
        // Another program: PROG_UNAVAIL; another procedure: PROC_UNAVAIL.
        let mut other = call(3, 0, &[]);
        other[12..16].copy_from_slice(&100_003u32.to_be_bytes());
        let h = ReplyHeader::decode(&mut Decoder::new(&s.serve(&other).unwrap())).unwrap();
        assert!(!h.is_success());
        let h =
            ReplyHeader::decode(&mut Decoder::new(&s.serve(&call(4, 9, &[])).unwrap())).unwrap();
        assert!(!h.is_success());
        // Garbage arguments: GARBAGE_ARGS; a reply (not a call): no answer.
        let h = ReplyHeader::decode(&mut Decoder::new(&s.serve(&call(5, 1, &[0, 0])).unwrap()))
            .unwrap();
        assert!(!h.is_success());
        assert_eq!(s.serve(&[0, 0, 0, 6, 0, 0, 0, 1]), None);
        assert_eq!(s.answered, 3);
    }
}
