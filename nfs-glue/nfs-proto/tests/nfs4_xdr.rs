//! NFSv4.1 XDR (RFC 5662): golden vectors written by hand from the RFC's XDR, round trips
//! of the COMPOUND and CB_COMPOUND arguments and results, hostile input (huge counts,
//! truncation, unknown operations, oversize opaques), the typed attributes, and the RFC 8267
//! DDP of WRITE and READ data inside a COMPOUND.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use core::fmt::Debug;

use mbuf::testing::{arena, pattern};
use mbuf::Chain;
use nfs_proto::chain::{data_pages_from_bytes, ddp_data};
use nfs_proto::ddp::nfs4_op;
use nfs_proto::nfs4::*;
use onc_rpc::rpc::{Auth, AuthSys, CallHeader, ReplyHeader};
use onc_rpc::xdr::{Decoder, Encoder, XdrError};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------
// helpers

/// Big-endian bytes of XDR words.
fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_be_bytes()).collect()
}

/// Decode all of `b` as `T`, requiring every byte consumed.
fn decode_all<T: Xdr>(b: &[u8]) -> T {
    let mut d = Decoder::new(b);
    let v = T::decode(&mut d).unwrap();
    assert_eq!(d.remaining(), 0, "trailing bytes");
    v
}

/// The decode error of `b` as `T`.
fn decode_err<T: Xdr + Debug>(b: &[u8]) -> XdrError {
    T::decode(&mut Decoder::new(b)).unwrap_err()
}

/// `v` encodes to `want` and `want` decodes to `v`.
fn golden<T: Xdr + PartialEq + Debug>(v: &T, want: &[u8]) {
    assert_eq!(v.to_bytes().unwrap(), want, "encoding differs");
    assert_eq!(&decode_all::<T>(want), v, "decoding differs");
}

/// Encode, decode back equal with every byte consumed; every strict prefix is an error.
fn check_round_trip<T: Xdr + PartialEq + Debug>(v: &T) -> Result<(), TestCaseError> {
    let b = v.to_bytes().unwrap();
    prop_assert_eq!(b.len() % 4, 0);
    let mut d = Decoder::new(&b);
    let back = T::decode(&mut d).unwrap();
    prop_assert_eq!(&back, v);
    prop_assert_eq!(d.remaining(), 0);
    for n in 0..b.len() {
        prop_assert!(
            T::decode(&mut Decoder::new(&b[..n])).is_err(),
            "prefix of {} of {} bytes decoded",
            n,
            b.len()
        );
    }
    Ok(())
}

fn seq_bytes(first: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| first.wrapping_add(i as u8)).collect()
}

fn sid(first: u8) -> Sessionid4 {
    Sessionid4(seq_bytes(first, 16).try_into().unwrap())
}

fn stateid(seqid: u32, first: u8) -> Stateid4 {
    Stateid4 {
        seqid,
        other: seq_bytes(first, 12).try_into().unwrap(),
    }
}

/// The words of 16 bytes counting up from `first`.
fn seq_words(first: u8, n: usize) -> Vec<u32> {
    seq_bytes(first, n)
        .chunks(4)
        .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
        .collect()
}

// ---------------------------------------------------------------------------------------
// golden vectors

#[test]
fn golden_sequence_putrootfh_getattr_call() {
    let args = Compound4Args {
        tag: Utf8Str::new(b"ls"),
        minorversion: 1,
        argarray: vec![
            NfsArgop4::Sequence(Sequence4Args {
                sa_sessionid: sid(0x01),
                sa_sequenceid: 7,
                sa_slotid: 0,
                sa_highest_slotid: 0,
                sa_cachethis: false,
            }),
            NfsArgop4::Putrootfh,
            NfsArgop4::Getattr(Getattr4Args {
                attr_request: Attrs4::request(),
            }),
        ],
    };
    let mut w = vec![
        2,           // tag: utf8str_cs length 2
        0x6c73_0000, // "ls" + 2 pad bytes
        1,           // minorversion
        3,           // argarray<> count
        53,          // argop OP_SEQUENCE
    ];
    w.extend(seq_words(0x01, 16)); // sa_sessionid (16 bytes, no length word)
    w.extend([
        7,  // sa_sequenceid
        0,  // sa_slotid
        0,  // sa_highest_slotid
        0,  // sa_cachethis FALSE
        24, // argop OP_PUTROOTFH (void)
        9,  // argop OP_GETATTR
        2,  // attr_request: bitmap4 of 2 words
        // word 0: TYPE (1), CHANGE (3), SIZE (4), FILEID (20)
        (1 << 1) | (1 << 3) | (1 << 4) | (1 << 20),
        // word 1: MODE (33), NUMLINKS (35), OWNER (36), OWNER_GROUP (37), TIME_MODIFY (53)
        (1 << 1) | (1 << 3) | (1 << 4) | (1 << 5) | (1 << 21),
    ]);
    golden(&args, &words(&w));
    assert_eq!(w[w.len() - 2], 0x0010_001a);
    assert_eq!(w[w.len() - 1], 0x0020_003a);

    // Behind an RPC call header of program 100003, version 4, procedure 1.
    let mut e = compound_encoder(0x1234, Auth::None);
    args.encode(&mut e);
    let b = e.finish().unwrap();
    let mut d = Decoder::new(&b);
    let h = CallHeader::decode(&mut d).unwrap();
    assert_eq!((h.prog, h.vers, h.proc_), (100_003, 4, 1));
    assert_eq!(Compound4Args::decode(&mut d).unwrap(), args);
}

#[test]
fn golden_exchange_id_args() {
    let args = ExchangeId4Args {
        eia_clientowner: ClientOwner4 {
            co_verifier: Verifier4(seq_bytes(0x11, 8).try_into().unwrap()),
            co_ownerid: Opaque4::new(b"client1"),
        },
        eia_flags: EXCHGID4_FLAG_SUPP_MOVED_REFER
            | EXCHGID4_FLAG_SUPP_MOVED_MIGR
            | EXCHGID4_FLAG_BIND_PRINC_STATEID,
        eia_state_protect: StateProtect4::None,
        eia_client_impl_id: Some(NfsImplId4 {
            nii_domain: Utf8Str::new(b"kernel.org"),
            nii_name: Utf8Str::new(b"krpc"),
            nii_date: Nfstime4 {
                seconds: 1_600_000_000,
                nseconds: 5,
            },
        }),
    };
    let w = [
        0x1112_1314, // co_verifier (8 bytes)
        0x1516_1718,
        7,           // co_ownerid length
        0x636c_6965, // "clie"
        0x6e74_3100, // "nt1" + pad
        0x0000_0103, // eia_flags: SUPP_MOVED_REFER | SUPP_MOVED_MIGR | BIND_PRINC_STATEID
        0,           // eia_state_protect: SP4_NONE (void)
        1,           // eia_client_impl_id<1>: one
        10,          // nii_domain length
        0x6b65_726e, // "kern"
        0x656c_2e6f, // "el.o"
        0x7267_0000, // "rg" + pad
        4,           // nii_name length
        0x6b72_7063, // "krpc"
        0,           // nii_date.seconds (int64: high word)
        0x5f5e_1000, //   low word: 1600000000
        5,           // nii_date.nseconds
    ];
    golden(&args, &words(&w));
    // As an operation: the opnum in front.
    let mut op = vec![42u32];
    op.extend(w);
    golden(&NfsArgop4::ExchangeId(args), &words(&op));
}

#[test]
fn golden_create_session_with_back_channel() {
    let args = CreateSession4Args {
        csa_clientid: 0x0102_0304_0506_0708,
        csa_sequence: 1,
        csa_flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
        csa_fore_chan_attrs: ChannelAttrs4 {
            ca_headerpadsize: 0,
            ca_maxrequestsize: 1_049_620,
            ca_maxresponsesize: 1_049_480,
            ca_maxresponsesize_cached: 7584,
            ca_maxoperations: 8,
            ca_maxrequests: 64,
            ca_rdma_ird: None,
        },
        csa_back_chan_attrs: ChannelAttrs4 {
            ca_headerpadsize: 0,
            ca_maxrequestsize: 4096,
            ca_maxresponsesize: 4096,
            ca_maxresponsesize_cached: 0,
            ca_maxoperations: 2,
            ca_maxrequests: 1,
            ca_rdma_ird: Some(16),
        },
        csa_cb_program: 0x4000_0000,
        csa_sec_parms: vec![
            CallbackSecParms4::None,
            CallbackSecParms4::Sys(AuthSys::new(0x1234_5678, b"host", 0, 0, &[10])),
        ],
    };
    let w = [
        0x0102_0304, // csa_clientid (hyper)
        0x0506_0708,
        1,           // csa_sequence
        2,           // csa_flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN
        0,           // fore: ca_headerpadsize
        0x0010_0414, // fore: ca_maxrequestsize 1049620
        0x0010_0388, // fore: ca_maxresponsesize 1049480
        7584,        // fore: ca_maxresponsesize_cached
        8,           // fore: ca_maxoperations
        64,          // fore: ca_maxrequests
        0,           // fore: ca_rdma_ird<1>: none
        0,           // back: ca_headerpadsize
        4096,        // back: ca_maxrequestsize
        4096,        // back: ca_maxresponsesize
        0,           // back: ca_maxresponsesize_cached
        2,           // back: ca_maxoperations
        1,           // back: ca_maxrequests
        1,           // back: ca_rdma_ird<1>: one
        16,          //   its value
        0x4000_0000, // csa_cb_program
        2,           // csa_sec_parms<>: two
        0,           // cb_secflavor AUTH_NONE (void)
        1,           // cb_secflavor AUTH_SYS
        0x1234_5678, //   stamp
        4,           //   machinename length
        0x686f_7374, //   "host"
        0,           //   uid
        0,           //   gid
        1,           //   gids<16>: one
        10,          //   gid 10
    ];
    golden(&args, &words(&w));
}

#[test]
fn golden_cb_compound_sequence_recall() {
    let args = CbCompound4Args {
        tag: Utf8Str::default(),
        minorversion: 1,
        callback_ident: 0,
        argarray: vec![
            NfsCbArgop4::Sequence(CbSequence4Args {
                csa_sessionid: sid(0xa0),
                csa_sequenceid: 1,
                csa_slotid: 0,
                csa_highest_slotid: 0,
                csa_cachethis: false,
                csa_referring_call_lists: vec![ReferringCallList4 {
                    rcl_sessionid: sid(0x01),
                    rcl_referring_calls: vec![ReferringCall4 {
                        rc_sequenceid: 7,
                        rc_slotid: 0,
                    }],
                }],
            }),
            NfsCbArgop4::Recall(CbRecall4Args {
                stateid: stateid(1, 0xc0),
                truncate: false,
                fh: NfsFh4::new(&[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1]),
            }),
        ],
    };
    let mut w = vec![
        0,  // tag: empty
        1,  // minorversion
        0,  // callback_ident
        2,  // argarray<>: two
        11, // OP_CB_SEQUENCE
    ];
    w.extend(seq_words(0xa0, 16)); // csa_sessionid
    w.extend([
        1, // csa_sequenceid
        0, // csa_slotid
        0, // csa_highest_slotid
        0, // csa_cachethis FALSE
        1, // csa_referring_call_lists<>: one
    ]);
    w.extend(seq_words(0x01, 16)); // rcl_sessionid
    w.extend([
        1, // rcl_referring_calls<>: one
        7, // rc_sequenceid
        0, // rc_slotid
        4, // OP_CB_RECALL
        1, // stateid.seqid
    ]);
    w.extend(seq_words(0xc0, 12)); // stateid.other (12 bytes)
    w.extend([
        0,           // truncate FALSE
        8,           // fh length
        0xdead_beef, // fh
        0x0000_0001,
    ]);
    golden(&args, &words(&w));

    // The service's answer.
    let res = CbCompound4Res {
        status: Nfsstat4::OK,
        tag: Utf8Str::default(),
        resarray: vec![
            NfsCbResop4::Sequence(Res4::Ok(CbSequence4ResOk {
                csr_sessionid: sid(0xa0),
                csr_sequenceid: 1,
                csr_slotid: 0,
                csr_highest_slotid: 0,
                csr_target_highest_slotid: 0,
            })),
            NfsCbResop4::Recall(Nfsstat4::OK),
        ],
    };
    let mut w = vec![0, 0, 2, 11, 0]; // status, tag, count, OP_CB_SEQUENCE, NFS4_OK
    w.extend(seq_words(0xa0, 16));
    w.extend([1, 0, 0, 0, 4, 0]); // ids, OP_CB_RECALL, NFS4_OK
    golden(&res, &words(&w));
}

#[test]
fn golden_open_result_with_read_delegation() {
    let res = NfsResop4::Open(Res4::Ok(Open4ResOk {
        stateid: stateid(1, 0xe0),
        cinfo: ChangeInfo4 {
            atomic: true,
            before: 0x10,
            after: 0x11,
        },
        rflags: OPEN4_RESULT_LOCKTYPE_POSIX,
        attrset: Bitmap4(vec![0, 1 << 1]),
        delegation: OpenDelegation4::Read(OpenReadDelegation4 {
            stateid: stateid(1, 0xf0),
            recall: false,
            permissions: Nfsace4 {
                type_: 0,
                flag: 0,
                access_mask: 1,
                who: Utf8Str::new(b"EVERYONE@"),
            },
        }),
    }));
    let mut w = vec![
        18, // resop OP_OPEN
        0,  // status NFS4_OK
        1,  // stateid.seqid
    ];
    w.extend(seq_words(0xe0, 12)); // stateid.other
    w.extend([
        1,    // cinfo.atomic TRUE
        0,    // cinfo.before (hyper)
        0x10, //
        0,    // cinfo.after
        0x11, //
        4,    // rflags: OPEN4_RESULT_LOCKTYPE_POSIX
        2,    // attrset: bitmap4 of 2 words
        0,    //   word 0
        2,    //   word 1: MODE (33)
        1,    // delegation_type OPEN_DELEGATE_READ
        1,    // read.stateid.seqid
    ]);
    w.extend(seq_words(0xf0, 12)); // read.stateid.other
    w.extend([
        0,           // recall FALSE
        0,           // permissions.type ACE4_ACCESS_ALLOWED_ACE_TYPE
        0,           // permissions.flag
        1,           // permissions.access_mask
        9,           // who length
        0x4556_4552, // "EVER"
        0x594f_4e45, // "YONE"
        0x4000_0000, // "@" + pad
    ]);
    golden(&res, &words(&w));

    // The other delegation arms.
    let write = Open4ResOk {
        stateid: stateid(2, 0),
        cinfo: ChangeInfo4::default(),
        rflags: 0,
        attrset: Bitmap4::new(),
        delegation: OpenDelegation4::Write(OpenWriteDelegation4 {
            stateid: stateid(3, 0),
            recall: true,
            space_limit: SpaceLimit4::Blocks {
                num_blocks: 10,
                bytes_per_block: 512,
            },
            permissions: Nfsace4::default(),
        }),
    };
    let b = write.to_bytes().unwrap();
    // stateid 16, cinfo 20, rflags 4, attrset 4, type 4, stateid 16, recall 4, then limitby.
    let at = 16 + 20 + 4 + 4 + 4 + 16 + 4;
    assert_eq!(&b[at..at + 12], &words(&[2, 10, 512])[..]);
    assert_eq!(decode_all::<Open4ResOk>(&b), write);
    let none_ext = OpenDelegation4::NoneExt(OpenNoneDelegation4::Contention(true));
    golden(&none_ext, &words(&[3, WND4_CONTENTION, 1]));
    let none_ext = OpenDelegation4::NoneExt(OpenNoneDelegation4::Other(WND4_NOT_WANTED));
    golden(&none_ext, &words(&[3, 0]));
    golden(&OpenDelegation4::None, &words(&[0]));
}

#[test]
fn golden_open_args_create_unchecked() {
    let attrs = Attrs4 {
        mode: Some(0o644),
        ..Attrs4::default()
    };
    let args = Open4Args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_ACCESS_WANT_NO_DELEG,
        share_deny: OPEN4_SHARE_DENY_NONE,
        owner: StateOwner4 {
            clientid: 5,
            owner: Opaque4::new(b"ow"),
        },
        openhow: Openflag4::Create(Createhow4::Unchecked(attrs.to_fattr4().unwrap())),
        claim: OpenClaim4::Null(Component4::new(b"file")),
    };
    let w = [
        0,           // seqid
        0x0403,      // share_access: BOTH | WANT_NO_DELEG
        0,           // share_deny: NONE
        0,           // owner.clientid (hyper)
        5,           //
        2,           // owner.owner length
        0x6f77_0000, // "ow" + pad
        1,           // opentype OPEN4_CREATE
        0,           // createmode UNCHECKED4
        2,           // createattrs.attrmask: 2 words
        0,           //   word 0
        2,           //   word 1: MODE (33)
        4,           // createattrs.attr_vals length
        0o644,       //   mode4
        0,           // claim CLAIM_NULL
        4,           // file length
        0x6669_6c65, // "file"
    ];
    golden(&args, &words(&w));
    // CLAIM_FH: the claim is the discriminant alone.
    let fh = Open4Args {
        openhow: Openflag4::NoCreate,
        claim: OpenClaim4::Fh,
        ..args
    };
    let b = fh.to_bytes().unwrap();
    assert_eq!(&b[b.len() - 8..], &words(&[0, 4])[..]); // OPEN4_NOCREATE, CLAIM_FH
}

#[test]
fn golden_getattr_result_typed() {
    let attrs = Attrs4 {
        type_: Some(NfsFtype4::Reg),
        change: Some(0x1_0000_0002),
        size: Some(4096),
        fileid: Some(77),
        mode: Some(0o100_644 & 0o7777),
        numlinks: Some(1),
        owner: Some(Utf8Str::new(b"0")),
        owner_group: Some(Utf8Str::new(b"0")),
        time_modify: Some(Nfstime4 {
            seconds: -1,
            nseconds: 999_999_999,
        }),
    };
    let f = attrs.to_fattr4().unwrap();
    let vals = [
        1,           // type NF4REG
        1,           // change (hyper)
        2,           //
        0,           // size
        4096,        //
        0,           // fileid
        77,          //
        0o644,       // mode
        1,           // numlinks
        1,           // owner length
        0x3000_0000, // "0" + pad
        1,           // owner_group length
        0x3000_0000, // "0" + pad
        0xffff_ffff, // time_modify.seconds = -1 (int64)
        0xffff_ffff, //
        999_999_999, // time_modify.nseconds
    ];
    assert_eq!(f.attr_vals, words(&vals));
    assert_eq!(f.attrmask, Attrs4::request());
    assert_eq!(Attrs4::from_fattr4(&f).unwrap(), attrs);
    // In a GETATTR result.
    let r = NfsResop4::Getattr(Res4::Ok(Getattr4ResOk {
        obj_attributes: f.clone(),
    }));
    let mut w = vec![9, 0, 2, 0x0010_001a, 0x0020_003a, 64];
    w.extend(vals);
    golden(&r, &words(&w));
}

#[test]
fn golden_failed_results_are_their_status() {
    golden(
        &NfsResop4::Sequence(Res4::Err(Nfsstat4::ERR_BADSESSION)),
        &words(&[53, 10052]),
    );
    golden(&NfsResop4::Putfh(Nfsstat4::ERR_STALE), &words(&[22, 70]));
    golden(
        &NfsResop4::Read(Res4::Err(Nfsstat4::ERR_OPENMODE)),
        &words(&[25, 10038]),
    );
    golden(
        &NfsResop4::Close(Res4::Ok(Stateid4 {
            seqid: 2,
            other: [0; 12],
        })),
        &words(&[4, 0, 2, 0, 0, 0]),
    );
    golden(
        &NfsResop4::Illegal(Nfsstat4::ERR_OP_ILLEGAL),
        &words(&[10044, 10044]),
    );
    let w = Write4ResOk {
        count: 5,
        committed: StableHow4::FileSync,
        writeverf: Verifier4([1, 2, 3, 4, 5, 6, 7, 8]),
    };
    golden(
        &NfsResop4::Write(Res4::Ok(w)),
        &words(&[38, 0, 5, 2, 0x0102_0304, 0x0506_0708]),
    );
    assert_eq!(Nfsstat4::ERR_BADSESSION.to_string(), "NFS4ERR_BADSESSION");
    assert_eq!(Nfsstat4(10073).to_string(), "nfsstat4 10073");
}

#[test]
fn golden_write_and_read() {
    let w = NfsArgop4::Write(Write4Args {
        stateid: Stateid4::ANONYMOUS,
        offset: 0x1_0000_0000,
        stable: StableHow4::Unstable,
        data: b"hello".to_vec(),
    });
    let mut v = vec![38, 0, 0, 0, 0, 1, 0, 0, 5]; // op, stateid (4 words), offset, stable, len
    v.extend([0x6865_6c6c, 0x6f00_0000]); // "hello" + pad
    golden(&w, &words(&v));
    let r = NfsResop4::Read(Res4::Ok(Read4ResOk {
        eof: true,
        data: b"abc".to_vec(),
    }));
    golden(&r, &words(&[25, 0, 1, 3, 0x6162_6300]));
}

#[test]
fn op_numbers_agree_with_the_ddp_table() {
    assert_eq!(OP_READ, nfs4_op::READ);
    assert_eq!(OP_WRITE, nfs4_op::WRITE);
    assert_eq!(OP_GETATTR, nfs4_op::GETATTR);
    assert_eq!(OP_CREATE, nfs4_op::CREATE);
    assert_eq!(OP_READLINK, nfs4_op::READLINK);
    assert_eq!(OP_LAYOUTGET, nfs4_op::LAYOUTGET);
    assert_eq!(op_name(OP_SEQUENCE), Some("SEQUENCE"));
    assert_eq!(op_name(2), None);
    assert_eq!(cb_op_name(OP_CB_RECALL), Some("CB_RECALL"));
    // Status names: sorted, unique, and every name round-trips.
    assert!(Nfsstat4::ALL.windows(2).all(|w| w[0] < w[1]));
    for s in Nfsstat4::ALL {
        assert!(s.is_known());
        assert!(s.name().starts_with("NFS4"));
    }
    assert!(!Nfsstat4(10073).is_known());
}

// ---------------------------------------------------------------------------------------
// hostile input

#[test]
fn huge_and_excess_counts_are_refused() {
    // COMPOUND: tag "", minorversion 1, a count of 2^32-1 operations.
    for n in [u32::MAX, NFS4_MAX_OPS as u32 + 1] {
        assert_eq!(
            decode_err::<Compound4Args>(&words(&[0, 1, n])),
            XdrError::TooManyEntries {
                what: "COMPOUND4args argarray",
                max: NFS4_MAX_OPS
            }
        );
        assert_eq!(
            decode_err::<Compound4Res>(&words(&[0, 0, n])),
            XdrError::TooManyEntries {
                what: "COMPOUND4res resarray",
                max: NFS4_MAX_OPS
            }
        );
        assert!(matches!(
            decode_err::<CbCompound4Args>(&words(&[0, 1, 0, n])),
            XdrError::TooManyEntries { .. }
        ));
        assert!(matches!(
            decode_err::<CbCompound4Res>(&words(&[0, 0, n])),
            XdrError::TooManyEntries { .. }
        ));
    }
    // A count the input does not hold: short, not an allocation of the count.
    assert!(matches!(
        decode_err::<Compound4Args>(&words(&[0, 1, 100, 24])),
        XdrError::Short { .. }
    ));
    // bitmap4, csa_sec_parms, referring calls, gids, <1> arrays.
    assert_eq!(
        decode_err::<Bitmap4>(&words(&[u32::MAX])),
        XdrError::TooManyEntries {
            what: "bitmap4",
            max: NFS4_MAX_BITMAP_WORDS
        }
    );
    let mut cs = CreateSession4Args {
        csa_clientid: 1,
        csa_sequence: 1,
        csa_flags: 0,
        csa_fore_chan_attrs: ChannelAttrs4::default(),
        csa_back_chan_attrs: ChannelAttrs4::default(),
        csa_cb_program: 1,
        csa_sec_parms: vec![],
    }
    .to_bytes()
    .unwrap();
    let n = cs.len();
    cs[n - 4..].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(
        decode_err::<CreateSession4Args>(&cs),
        XdrError::TooManyEntries {
            what: "csa_sec_parms",
            ..
        }
    ));
    let mut rcl = words(&seq_words(0, 16));
    rcl.extend(words(&[u32::MAX]));
    assert!(matches!(
        decode_err::<ReferringCallList4>(&rcl),
        XdrError::TooManyEntries {
            what: "rcl_referring_calls",
            ..
        }
    ));
    assert!(matches!(
        decode_err::<ChannelAttrs4>(&words(&[0, 0, 0, 0, 0, 0, 2, 1, 1])),
        XdrError::TooManyEntries { max: 1, .. }
    ));
    // AUTH_SYS: stamp, empty machine name, uid, gid, then 17 groups.
    let sys = words(&[1, 0, 0, 0, 0, 17]);
    assert!(matches!(
        decode_err::<CallbackSecParms4>(&sys),
        XdrError::TooManyEntries {
            what: "authsys gids",
            max: 16
        }
    ));
}

#[test]
fn unknown_and_unimplemented_operations_are_errors() {
    // tag "", minorversion 1, one operation numbered 9999 (undefined).
    assert_eq!(
        decode_err::<Compound4Args>(&words(&[0, 1, 1, 9999, 0, 0, 0])),
        XdrError::BadEnum {
            what: "nfs_opnum4",
            value: 9999
        }
    );
    // OP_ACCESS (3): defined by RFC 8881, not implemented here.
    assert_eq!(
        decode_err::<Compound4Args>(&words(&[0, 1, 1, OP_ACCESS, 0x1f])),
        XdrError::BadEnum {
            what: "nfs_opnum4 (operation not implemented by this codec)",
            value: OP_ACCESS
        }
    );
    assert!(matches!(
        decode_err::<Compound4Res>(&words(&[0, 0, 1, 0, 0])),
        XdrError::BadEnum { value: 0, .. }
    ));
    assert_eq!(
        decode_err::<CbCompound4Args>(&words(&[0, 1, 0, 1, OP_CB_GETATTR])),
        XdrError::BadEnum {
            what: "nfs_cb_opnum4 (operation not implemented by this codec)",
            value: OP_CB_GETATTR
        }
    );
    assert!(matches!(
        decode_err::<CbCompound4Res>(&words(&[0, 0, 1, 77, 0])),
        XdrError::BadEnum {
            what: "nfs_cb_opnum4",
            value: 77
        }
    ));
    // Unions with arms we refuse.
    assert!(matches!(
        decode_err::<StateProtect4>(&words(&[SP4_SSV])),
        XdrError::BadEnum { value: 2, .. }
    ));
    assert!(matches!(
        decode_err::<CallbackSecParms4>(&words(&[RPCSEC_GSS, 0, 0, 0])),
        XdrError::BadEnum { value: 6, .. }
    ));
    assert!(matches!(
        decode_err::<OpenClaim4>(&words(&[7])),
        XdrError::BadEnum { value: 7, .. }
    ));
    assert!(matches!(
        decode_err::<OpenDelegation4>(&words(&[3, 9])),
        XdrError::BadEnum {
            what: "why_no_delegation4",
            value: 9
        }
    ));
    assert!(matches!(
        decode_err::<SpaceLimit4>(&words(&[3, 0, 0])),
        XdrError::BadEnum { value: 3, .. }
    ));
}

#[test]
fn oversize_opaques_are_refused() {
    // PUTFH with a 129-byte handle.
    let mut b = words(&[0, 1, 1, OP_PUTFH, 129]);
    b.extend([0u8; 132]);
    assert_eq!(
        decode_err::<Compound4Args>(&b),
        XdrError::TooLong {
            what: "nfs_fh4",
            len: 129,
            max: NFS4_FHSIZE
        }
    );
    assert!(matches!(
        decode_err::<NfsFh4>(&words(&[u32::MAX])),
        XdrError::TooLong { .. }
    ));
    assert!(matches!(
        decode_err::<Utf8Str>(&words(&[NFS4_MAX_UTF8 as u32 + 1])),
        XdrError::TooLong {
            what: "utf8str",
            ..
        }
    ));
    assert!(matches!(
        decode_err::<Component4>(&words(&[256])),
        XdrError::TooLong {
            what: "component4",
            ..
        }
    ));
    assert!(matches!(
        decode_err::<Opaque4>(&words(&[1025])),
        XdrError::TooLong { max: 1024, .. }
    ));
    assert!(matches!(
        decode_err::<Fattr4>(&words(&[0, NFS4_MAX_ATTRLIST as u32 + 1])),
        XdrError::TooLong {
            what: "attrlist4",
            ..
        }
    ));
    // WRITE data above the bound, and within a caller's larger bound but not present.
    let w = words(&[0, 0, 0, 0, 0, 0, 0, 0x7fff_ffff]);
    assert!(matches!(
        decode_err::<Write4Args>(&w),
        XdrError::TooLong {
            what: "WRITE4args data",
            ..
        }
    ));
    assert!(matches!(
        Write4Args::decode_with_max(&mut Decoder::new(&w), usize::MAX),
        Err(XdrError::Short { .. })
    ));
    assert!(matches!(
        decode_err::<Read4Res>(&words(&[0, 0, NFS4_MAX_DATA as u32 + 1])),
        XdrError::TooLong { .. }
    ));
}

#[test]
fn what_cannot_be_encoded_fails_the_encoder() {
    let long_fh = NfsArgop4::Putfh(Putfh4Args {
        object: NfsFh4(vec![0; NFS4_FHSIZE + 1]),
    });
    assert_eq!(long_fh.to_bytes(), Err(XdrError::Alloc));
    assert_eq!(
        Res4::<Sequence4ResOk>::Err(Nfsstat4::OK).to_bytes(),
        Err(XdrError::Alloc)
    );
    let many = Compound4Args {
        tag: Utf8Str::default(),
        minorversion: 1,
        argarray: vec![NfsArgop4::Getfh; NFS4_MAX_OPS + 1],
    };
    assert_eq!(many.to_bytes(), Err(XdrError::Alloc));
    assert_eq!(
        OpenNoneDelegation4::Other(WND4_RESOURCE).to_bytes(),
        Err(XdrError::Alloc)
    );
    assert_eq!(
        Bitmap4(vec![0; NFS4_MAX_BITMAP_WORDS + 1]).to_bytes(),
        Err(XdrError::Alloc)
    );
}

#[test]
fn attributes_outside_the_typed_set_are_refused() {
    // supported_attrs (bit 0) has a known encoding but is not in the typed set.
    let f = Fattr4 {
        attrmask: Bitmap4::from_bits(&[FATTR4_SUPPORTED_ATTRS, FATTR4_TYPE]),
        attr_vals: words(&[1, 1, 1]),
    };
    assert_eq!(
        Attrs4::from_fattr4(&f),
        Err(XdrError::BadEnum {
            what: "fattr4 attribute outside the typed set",
            value: 0
        })
    );
    // Values missing, or left over.
    let f = Fattr4 {
        attrmask: Bitmap4::from_bits(&[FATTR4_SIZE]),
        attr_vals: words(&[1]),
    };
    assert!(matches!(
        Attrs4::from_fattr4(&f),
        Err(XdrError::Short { .. })
    ));
    let f = Fattr4 {
        attrmask: Bitmap4::from_bits(&[FATTR4_MODE]),
        attr_vals: words(&[1, 2]),
    };
    assert!(matches!(
        Attrs4::from_fattr4(&f),
        Err(XdrError::TooLong { .. })
    ));
    // A bad file type.
    let f = Fattr4 {
        attrmask: Bitmap4::from_bits(&[FATTR4_TYPE]),
        attr_vals: words(&[10]),
    };
    assert!(matches!(
        Attrs4::from_fattr4(&f),
        Err(XdrError::BadEnum {
            what: "nfs_ftype4",
            ..
        })
    ));
    // Trailing zero bitmap words are kept (round trip), and mean nothing.
    let f = Fattr4 {
        attrmask: Bitmap4(vec![0, 0, 0]),
        attr_vals: vec![],
    };
    assert_eq!(Attrs4::from_fattr4(&f).unwrap(), Attrs4::default());
    assert_eq!(decode_all::<Fattr4>(&f.to_bytes().unwrap()), f);
}

#[test]
fn bitmap_operations() {
    let mut b = Bitmap4::new();
    assert!(b.is_empty());
    assert!(b.set(53));
    assert!(b.set(1));
    assert!(!b.set(32 * NFS4_MAX_BITMAP_WORDS as u32));
    assert_eq!(b.0, vec![2, 1 << 21]);
    assert!(b.contains(53) && b.contains(1) && !b.contains(2) && !b.contains(9999));
    assert_eq!(b.bits().collect::<Vec<_>>(), vec![1, 53]);
}

// ---------------------------------------------------------------------------------------
// RFC 8267: DDP of READ and WRITE data inside a COMPOUND

/// A reply: accepted-success header, COMPOUND4res of SEQUENCE, PUTFH, READ (`data`, or its
/// length word only when `inline_data` is false), GETATTR.
fn read_reply(data: &[u8], inline_data: bool) -> Vec<u8> {
    let mut e = Encoder::new();
    ReplyHeader::success(9).encode(&mut e);
    Nfsstat4::OK.encode(&mut e);
    Utf8Str::default().encode(&mut e);
    e.u32(4);
    NfsResop4::Sequence(Res4::Ok(Sequence4ResOk {
        sr_sessionid: sid(1),
        sr_sequenceid: 3,
        sr_slotid: 0,
        sr_highest_slotid: 0,
        sr_target_highest_slotid: 0,
        sr_status_flags: 0,
    }))
    .encode(&mut e);
    NfsResop4::Putfh(Nfsstat4::OK).encode(&mut e);
    let read = Read4ResOk {
        eof: true,
        data: data.to_vec(),
    };
    e.u32(OP_READ);
    Nfsstat4::OK.encode(&mut e);
    if inline_data {
        read.encode(&mut e);
    } else {
        read.encode_head(&mut e);
    }
    let attrs = Attrs4 {
        size: Some(data.len() as u64),
        ..Attrs4::default()
    };
    NfsResop4::Getattr(Res4::Ok(Getattr4ResOk {
        obj_attributes: attrs.to_fattr4().unwrap(),
    }))
    .encode(&mut e);
    e.finish().unwrap()
}

#[test]
fn locate_read_data_behind_sequence_and_putfh() {
    let data = pattern(3, 4099);
    // The inline part as the responder's reduction leaves it: the data absent.
    let r = read_reply(&data, false);
    // 24 reply header + 12 (status, tag, count) + 44 SEQUENCE + 8 PUTFH + 16 READ head.
    assert_eq!(locate_read_data_in(&r), Some(104));
    let c = Chain::from_bytes(&r).unwrap();
    assert_eq!(locate_read_data(&c), Some(104));
    assert_eq!(&r[100..104], &4099u32.to_be_bytes());

    // The whole reply (data in place): the item's offset and length, and the data there.
    let whole = read_reply(&data, true);
    let c = Chain::from_bytes(&whole).unwrap();
    assert_eq!(locate_read_item(&c), Some((104, 4099)));
    assert_eq!(&whole[104..104 + 4099], &data[..]);
    // The reply decodes whole, the GETATTR after the data too.
    let mut d = Decoder::new(&whole);
    ReplyHeader::decode(&mut d).unwrap();
    let res = Compound4Res::decode(&mut d).unwrap();
    assert_eq!(d.remaining(), 0);
    assert_eq!(res.resarray.len(), 4);
    assert_eq!(res.resarray[3].opnum(), OP_GETATTR);
    // Without the data, the inline part does not satisfy the item check.
    assert_eq!(locate_read_item(&Chain::from_bytes(&r).unwrap()), None);

    // The head decoder gives what precedes.
    let mut d = Decoder::new(&r);
    ReplyHeader::decode(&mut d).unwrap();
    let h = Compound4Res::decode_read_head(&mut d).unwrap().unwrap();
    assert_eq!((h.count, h.before.len(), d.pos()), (4, 2, 104));
    assert_eq!(
        h.read,
        Read4Head {
            status: Nfsstat4::OK,
            eof: true,
            data_len: 4099
        }
    );
}

#[test]
fn locate_read_data_refuses_what_it_cannot_place() {
    let r = read_reply(b"abc", false);
    // Every truncation: no answer, no panic.
    for n in 0..104 {
        assert_eq!(locate_read_data_in(&r[..n]), None, "prefix {n}");
    }
    assert_eq!(locate_read_data_in(&r[..104]), Some(104));
    // A failed READ.
    let mut e = Encoder::new();
    ReplyHeader::success(1).encode(&mut e);
    Compound4Res {
        status: Nfsstat4::ERR_OPENMODE,
        tag: Utf8Str::default(),
        resarray: vec![
            NfsResop4::Putfh(Nfsstat4::OK),
            NfsResop4::Read(Res4::Err(Nfsstat4::ERR_OPENMODE)),
        ],
    }
    .encode(&mut e);
    assert_eq!(locate_read_data_in(&e.finish().unwrap()), None);
    // No READ at all; an unknown result before the READ.
    let mut e = Encoder::new();
    ReplyHeader::success(1).encode(&mut e);
    e.u32(0);
    e.u32(0);
    e.u32(2);
    e.u32(OP_ACCESS);
    e.u32(0);
    e.u32(OP_READ);
    assert_eq!(locate_read_data_in(&e.finish().unwrap()), None);
    let mut e = Encoder::new();
    ReplyHeader::success(1).encode(&mut e);
    Compound4Res {
        status: Nfsstat4::OK,
        tag: Utf8Str::default(),
        resarray: vec![NfsResop4::Putrootfh(Nfsstat4::OK)],
    }
    .encode(&mut e);
    assert_eq!(locate_read_data_in(&e.finish().unwrap()), None);
}

#[test]
fn locate_reads_a_bounded_prefix() {
    // A GETATTR result of 9000 bytes in front of the READ: beyond NFS4_LOCATE_PREFIX_MAX.
    let big = |n: usize| {
        let mut e = Encoder::new();
        ReplyHeader::success(1).encode(&mut e);
        Compound4Res {
            status: Nfsstat4::OK,
            tag: Utf8Str::default(),
            resarray: vec![
                NfsResop4::Getattr(Res4::Ok(Getattr4ResOk {
                    obj_attributes: Fattr4 {
                        attrmask: Bitmap4::new(),
                        attr_vals: vec![0; n],
                    },
                })),
                NfsResop4::Read(Res4::Ok(Read4ResOk {
                    eof: true,
                    data: b"x".to_vec(),
                })),
            ],
        }
        .encode(&mut e);
        Chain::from_bytes(&e.finish().unwrap()).unwrap()
    };
    // 24 + 12 + (4 op + 4 status + 4 bitmap + 4 length + n) + 16.
    assert_eq!(locate_read_data(&big(8000)), Some(24 + 12 + 16 + 8000 + 16));
    assert_eq!(locate_read_data(&big(9000)), None);
}

/// The WRITE of the DDP tests: SEQUENCE, PUTFH, WRITE, GETATTR.
fn write_call() -> WriteDdpCompound {
    WriteDdpCompound {
        tag: Utf8Str::new(b"write"),
        minorversion: 1,
        before: vec![
            NfsArgop4::Sequence(Sequence4Args {
                sa_sessionid: sid(7),
                sa_sequenceid: 2,
                sa_slotid: 1,
                sa_highest_slotid: 1,
                sa_cachethis: false,
            }),
            NfsArgop4::Putfh(Putfh4Args {
                object: NfsFh4::new(&[9; 28]),
            }),
        ],
        write: Write4Head {
            stateid: stateid(1, 0x30),
            offset: 8192,
            stable: StableHow4::FileSync,
        },
        after: vec![NfsArgop4::Getattr(Getattr4Args {
            attr_request: Bitmap4::from_bits(&[FATTR4_CHANGE, FATTR4_SIZE]),
        })],
    }
}

#[test]
fn write_ddp_chain_puts_the_data_where_the_read_chunk_says() {
    let (a, p) = arena(64);
    for len in [0usize, 1, 3, 4, 4097, 65_536 + 2] {
        let data = pattern(len as u8, len);
        let call = write_call();
        let pages = data_pages_from_bytes(&p, &data).unwrap();
        let chain = call
            .ddp_call(compound_encoder(0x77, Auth::None), pages)
            .unwrap();
        chain.check_invariants().unwrap();

        // The DDP region (what becomes the read chunk) ...
        let items = ddp_data(&chain).unwrap();
        assert_eq!(items.len(), 1);
        // ... is where a responder's decoder finds the WRITE data.
        assert_eq!(locate_write_data(&chain), Some(items[0].offset));
        assert_eq!(items[0].len, len);
        let bytes = chain.to_vec().unwrap();
        assert_eq!(&bytes[items[0].offset..items[0].offset + len], &data[..]);

        // The whole chain is the inline COMPOUND with the data in it.
        let mut d = Decoder::new(&bytes);
        let h = CallHeader::decode(&mut d).unwrap();
        assert_eq!((h.xid, h.prog, h.vers, h.proc_), (0x77, 100_003, 4, 1));
        let args = Compound4Args::decode(&mut d).unwrap();
        assert_eq!(d.remaining(), 0);
        assert_eq!(args, call.with_data(data.clone()).unwrap());
        let mut inline = compound_encoder(0x77, Auth::None);
        args.encode(&mut inline);
        assert_eq!(inline.finish().unwrap(), bytes);

        // The head decoder stops at the data.
        let mut d = Decoder::new(&bytes);
        CallHeader::decode(&mut d).unwrap();
        let wh = Compound4Args::decode_write_head(&mut d).unwrap().unwrap();
        assert_eq!(d.pos(), items[0].offset);
        assert_eq!(wh.count, 4);
        assert_eq!(wh.before, call.before);
        assert_eq!(wh.write, call.write);
        assert_eq!(wh.data_len as usize, len);
        drop(chain);
        assert_eq!(a.in_use(), 0, "pages leaked at {len}");
    }
}

#[test]
fn write_ddp_errors() {
    let (_a, p) = arena(4);
    let mut call = write_call();
    call.after = vec![NfsArgop4::Getfh; NFS4_MAX_OPS];
    let pages = data_pages_from_bytes(&p, b"data").unwrap();
    assert_eq!(
        call.ddp_call(compound_encoder(1, Auth::None), pages)
            .unwrap_err(),
        WriteDdpError::Xdr(XdrError::Alloc)
    );
    // Data that are not page mbufs.
    let call = write_call();
    let not_pages = Chain::from_bytes(b"data").unwrap();
    assert!(matches!(
        call.ddp_call(compound_encoder(1, Auth::None), not_pages),
        Err(WriteDdpError::Chain(_))
    ));
    // A call without a WRITE, or a truncated one: no answer.
    let mut e = compound_encoder(1, Auth::None);
    Compound4Args {
        tag: Utf8Str::default(),
        minorversion: 1,
        argarray: vec![NfsArgop4::Putrootfh, NfsArgop4::Getfh],
    }
    .encode(&mut e);
    let b = e.finish().unwrap();
    assert_eq!(locate_write_data_in(&b), None);
    let mut e = Encoder::new();
    call.encode_head(&mut e, 10);
    let body = e.finish().unwrap();
    let mut e = compound_encoder(1, Auth::None);
    e.raw(&body);
    let b = e.finish().unwrap();
    assert_eq!(locate_write_data_in(&b), Some(b.len()));
    for n in 0..b.len() {
        assert_eq!(locate_write_data_in(&b[..n]), None);
    }
}

// ---------------------------------------------------------------------------------------
// round trips

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..=max)
}

fn utf8() -> impl Strategy<Value = Utf8Str> {
    bytes(24).prop_map(Utf8Str)
}

fn fh() -> impl Strategy<Value = NfsFh4> {
    bytes(NFS4_FHSIZE).prop_map(NfsFh4)
}

fn arb_sid() -> impl Strategy<Value = Sessionid4> {
    any::<[u8; 16]>().prop_map(Sessionid4)
}

fn arb_stateid() -> impl Strategy<Value = Stateid4> {
    (any::<u32>(), any::<[u8; 12]>()).prop_map(|(seqid, other)| Stateid4 { seqid, other })
}

fn bitmap() -> impl Strategy<Value = Bitmap4> {
    vec(any::<u32>(), 0..=3).prop_map(Bitmap4)
}

fn fattr() -> impl Strategy<Value = Fattr4> {
    (bitmap(), bytes(40)).prop_map(|(attrmask, attr_vals)| Fattr4 {
        attrmask,
        attr_vals,
    })
}

fn time() -> impl Strategy<Value = Nfstime4> {
    (any::<i64>(), any::<u32>()).prop_map(|(seconds, nseconds)| Nfstime4 { seconds, nseconds })
}

fn impl_id() -> impl Strategy<Value = NfsImplId4> {
    (utf8(), utf8(), time()).prop_map(|(nii_domain, nii_name, nii_date)| NfsImplId4 {
        nii_domain,
        nii_name,
        nii_date,
    })
}

fn state_protect() -> impl Strategy<Value = StateProtect4> {
    prop_oneof![
        Just(StateProtect4::None),
        (bitmap(), bitmap()).prop_map(|(spo_must_enforce, spo_must_allow)| {
            StateProtect4::MachCred(StateProtectOps4 {
                spo_must_enforce,
                spo_must_allow,
            })
        }),
    ]
}

fn channel() -> impl Strategy<Value = ChannelAttrs4> {
    (any::<[u32; 6]>(), option::of(any::<u32>())).prop_map(|(v, ca_rdma_ird)| ChannelAttrs4 {
        ca_headerpadsize: v[0],
        ca_maxrequestsize: v[1],
        ca_maxresponsesize: v[2],
        ca_maxresponsesize_cached: v[3],
        ca_maxoperations: v[4],
        ca_maxrequests: v[5],
        ca_rdma_ird,
    })
}

fn sec_parms() -> impl Strategy<Value = CallbackSecParms4> {
    prop_oneof![
        Just(CallbackSecParms4::None),
        (
            any::<u32>(),
            bytes(255),
            any::<u32>(),
            any::<u32>(),
            vec(any::<u32>(), 0..=16)
        )
            .prop_map(|(stamp, m, uid, gid, gids)| {
                CallbackSecParms4::Sys(AuthSys::new(stamp, &m, uid, gid, &gids))
            }),
    ]
}

fn stable() -> impl Strategy<Value = StableHow4> {
    (0u32..3).prop_map(|v| StableHow4::from_u32(v).unwrap())
}

fn verifier() -> impl Strategy<Value = Verifier4> {
    any::<[u8; 8]>().prop_map(Verifier4)
}

fn ace() -> impl Strategy<Value = Nfsace4> {
    (any::<u32>(), any::<u32>(), any::<u32>(), utf8()).prop_map(
        |(type_, flag, access_mask, who)| Nfsace4 {
            type_,
            flag,
            access_mask,
            who,
        },
    )
}

fn component() -> impl Strategy<Value = Component4> {
    bytes(40).prop_map(Component4)
}

fn open_args() -> impl Strategy<Value = Open4Args> {
    let createhow = prop_oneof![
        fattr().prop_map(Createhow4::Unchecked),
        fattr().prop_map(Createhow4::Guarded),
        verifier().prop_map(Createhow4::Exclusive),
        (verifier(), fattr()).prop_map(|(cva_verf, cva_attrs)| Createhow4::Exclusive41(
            Creatverfattr {
                cva_verf,
                cva_attrs
            }
        )),
    ];
    let openhow = prop_oneof![
        Just(Openflag4::NoCreate),
        createhow.prop_map(Openflag4::Create),
    ];
    let claim = prop_oneof![
        component().prop_map(OpenClaim4::Null),
        (0u32..4).prop_map(|t| OpenClaim4::Previous(OpenDelegationType4::from_u32(t).unwrap())),
        (arb_stateid(), component()).prop_map(|(s, c)| OpenClaim4::DelegateCur(s, c)),
        component().prop_map(OpenClaim4::DelegatePrev),
        Just(OpenClaim4::Fh),
        arb_stateid().prop_map(OpenClaim4::DelegCurFh),
        Just(OpenClaim4::DelegPrevFh),
    ];
    (any::<[u32; 3]>(), any::<u64>(), bytes(40), openhow, claim).prop_map(
        |(v, clientid, owner, openhow, claim)| Open4Args {
            seqid: v[0],
            share_access: v[1],
            share_deny: v[2],
            owner: StateOwner4 {
                clientid,
                owner: Opaque4(owner),
            },
            openhow,
            claim,
        },
    )
}

fn argop() -> impl Strategy<Value = NfsArgop4> {
    prop_oneof![
        (any::<u32>(), arb_stateid()).prop_map(|(seqid, open_stateid)| NfsArgop4::Close(
            Close4Args {
                seqid,
                open_stateid
            }
        )),
        arb_stateid()
            .prop_map(|deleg_stateid| NfsArgop4::Delegreturn(Delegreturn4Args { deleg_stateid })),
        bitmap().prop_map(|attr_request| NfsArgop4::Getattr(Getattr4Args { attr_request })),
        Just(NfsArgop4::Getfh),
        component().prop_map(|objname| NfsArgop4::Lookup(Lookup4Args { objname })),
        open_args().prop_map(NfsArgop4::Open),
        fh().prop_map(|object| NfsArgop4::Putfh(Putfh4Args { object })),
        Just(NfsArgop4::Putrootfh),
        (arb_stateid(), any::<u64>(), any::<u32>()).prop_map(|(stateid, offset, count)| {
            NfsArgop4::Read(Read4Args {
                stateid,
                offset,
                count,
            })
        }),
        (arb_stateid(), any::<u64>(), stable(), bytes(64)).prop_map(
            |(stateid, offset, stable, data)| NfsArgop4::Write(Write4Args {
                stateid,
                offset,
                stable,
                data
            })
        ),
        (
            verifier(),
            bytes(64),
            any::<u32>(),
            state_protect(),
            option::of(impl_id())
        )
            .prop_map(
                |(v, id, eia_flags, eia_state_protect, eia_client_impl_id)| {
                    NfsArgop4::ExchangeId(ExchangeId4Args {
                        eia_clientowner: ClientOwner4 {
                            co_verifier: v,
                            co_ownerid: Opaque4(id),
                        },
                        eia_flags,
                        eia_state_protect,
                        eia_client_impl_id,
                    })
                }
            ),
        (
            any::<(u64, u32, u32, u32)>(),
            channel(),
            channel(),
            vec(sec_parms(), 0..=3)
        )
            .prop_map(|((clientid, seq, flags, prog), fore, back, sec)| {
                NfsArgop4::CreateSession(CreateSession4Args {
                    csa_clientid: clientid,
                    csa_sequence: seq,
                    csa_flags: flags,
                    csa_fore_chan_attrs: fore,
                    csa_back_chan_attrs: back,
                    csa_cb_program: prog,
                    csa_sec_parms: sec,
                })
            }),
        arb_sid().prop_map(
            |dsa_sessionid| NfsArgop4::DestroySession(DestroySession4Args { dsa_sessionid })
        ),
        (arb_sid(), any::<[u32; 3]>(), any::<bool>()).prop_map(|(s, v, c)| {
            NfsArgop4::Sequence(Sequence4Args {
                sa_sessionid: s,
                sa_sequenceid: v[0],
                sa_slotid: v[1],
                sa_highest_slotid: v[2],
                sa_cachethis: c,
            })
        }),
        any::<u64>().prop_map(
            |dca_clientid| NfsArgop4::DestroyClientid(DestroyClientid4Args { dca_clientid })
        ),
        any::<bool>()
            .prop_map(|rca_one_fs| NfsArgop4::ReclaimComplete(ReclaimComplete4Args { rca_one_fs })),
        Just(NfsArgop4::Illegal),
    ]
}

/// Any status but `NFS4_OK`.
fn err_status() -> impl Strategy<Value = Nfsstat4> {
    (1u32..20_000).prop_map(Nfsstat4)
}

fn any_status() -> impl Strategy<Value = Nfsstat4> {
    prop_oneof![Just(Nfsstat4::OK), err_status()]
}

fn res<T: Debug + Clone + 'static>(ok: impl Strategy<Value = T>) -> impl Strategy<Value = Res4<T>> {
    prop_oneof![ok.prop_map(Res4::Ok), err_status().prop_map(Res4::Err)]
}

fn delegation() -> impl Strategy<Value = OpenDelegation4> {
    let limit = prop_oneof![
        any::<u64>().prop_map(SpaceLimit4::Size),
        any::<(u32, u32)>().prop_map(|(num_blocks, bytes_per_block)| SpaceLimit4::Blocks {
            num_blocks,
            bytes_per_block
        }),
    ];
    let none = prop_oneof![
        any::<bool>().prop_map(OpenNoneDelegation4::Contention),
        any::<bool>().prop_map(OpenNoneDelegation4::Resource),
        prop_oneof![Just(0u32), 3u32..=8].prop_map(OpenNoneDelegation4::Other),
    ];
    prop_oneof![
        Just(OpenDelegation4::None),
        (arb_stateid(), any::<bool>(), ace()).prop_map(|(stateid, recall, permissions)| {
            OpenDelegation4::Read(OpenReadDelegation4 {
                stateid,
                recall,
                permissions,
            })
        }),
        (arb_stateid(), any::<bool>(), limit, ace()).prop_map(
            |(stateid, recall, space_limit, permissions)| {
                OpenDelegation4::Write(OpenWriteDelegation4 {
                    stateid,
                    recall,
                    space_limit,
                    permissions,
                })
            }
        ),
        none.prop_map(OpenDelegation4::NoneExt),
    ]
}

fn resop() -> impl Strategy<Value = NfsResop4> {
    let open_ok = (
        arb_stateid(),
        any::<(bool, u64, u64, u32)>(),
        bitmap(),
        delegation(),
    )
        .prop_map(
            |(stateid, (atomic, before, after, rflags), attrset, delegation)| Open4ResOk {
                stateid,
                cinfo: ChangeInfo4 {
                    atomic,
                    before,
                    after,
                },
                rflags,
                attrset,
                delegation,
            },
        );
    let eid_ok = (
        any::<(u64, u32, u32, u64)>(),
        state_protect(),
        bytes(40),
        bytes(40),
        option::of(impl_id()),
    )
        .prop_map(
            |((clientid, seq, flags, minor), sp, major, scope, impl_id)| ExchangeId4ResOk {
                eir_clientid: clientid,
                eir_sequenceid: seq,
                eir_flags: flags,
                eir_state_protect: sp,
                eir_server_owner: ServerOwner4 {
                    so_minor_id: minor,
                    so_major_id: Opaque4(major),
                },
                eir_server_scope: Opaque4(scope),
                eir_server_impl_id: impl_id,
            },
        );
    let cs_ok = (arb_sid(), any::<(u32, u32)>(), channel(), channel()).prop_map(
        |(s, (seq, flags), fore, back)| CreateSession4ResOk {
            csr_sessionid: s,
            csr_sequence: seq,
            csr_flags: flags,
            csr_fore_chan_attrs: fore,
            csr_back_chan_attrs: back,
        },
    );
    let seq_ok = (arb_sid(), any::<[u32; 5]>()).prop_map(|(s, v)| Sequence4ResOk {
        sr_sessionid: s,
        sr_sequenceid: v[0],
        sr_slotid: v[1],
        sr_highest_slotid: v[2],
        sr_target_highest_slotid: v[3],
        sr_status_flags: v[4],
    });
    prop_oneof![
        res(arb_stateid()).prop_map(NfsResop4::Close),
        any_status().prop_map(NfsResop4::Delegreturn),
        res(fattr().prop_map(|obj_attributes| Getattr4ResOk { obj_attributes }))
            .prop_map(NfsResop4::Getattr),
        res(fh().prop_map(|object| Getfh4ResOk { object })).prop_map(NfsResop4::Getfh),
        any_status().prop_map(NfsResop4::Lookup),
        res(open_ok).prop_map(NfsResop4::Open),
        any_status().prop_map(NfsResop4::Putfh),
        any_status().prop_map(NfsResop4::Putrootfh),
        res((any::<bool>(), bytes(64)).prop_map(|(eof, data)| Read4ResOk { eof, data }))
            .prop_map(NfsResop4::Read),
        res(
            (any::<u32>(), stable(), verifier()).prop_map(|(count, committed, writeverf)| {
                Write4ResOk {
                    count,
                    committed,
                    writeverf,
                }
            })
        )
        .prop_map(NfsResop4::Write),
        res(eid_ok).prop_map(NfsResop4::ExchangeId),
        res(cs_ok).prop_map(NfsResop4::CreateSession),
        any_status().prop_map(NfsResop4::DestroySession),
        res(seq_ok).prop_map(NfsResop4::Sequence),
        any_status().prop_map(NfsResop4::DestroyClientid),
        any_status().prop_map(NfsResop4::ReclaimComplete),
        any_status().prop_map(NfsResop4::Illegal),
    ]
}

fn cb_argop() -> impl Strategy<Value = NfsCbArgop4> {
    let rcl = (
        arb_sid(),
        vec(
            any::<(u32, u32)>().prop_map(|(rc_sequenceid, rc_slotid)| ReferringCall4 {
                rc_sequenceid,
                rc_slotid,
            }),
            0..4,
        ),
    )
        .prop_map(|(rcl_sessionid, rcl_referring_calls)| ReferringCallList4 {
            rcl_sessionid,
            rcl_referring_calls,
        });
    prop_oneof![
        (arb_sid(), any::<[u32; 3]>(), any::<bool>(), vec(rcl, 0..3)).prop_map(
            |(s, v, c, lists)| NfsCbArgop4::Sequence(CbSequence4Args {
                csa_sessionid: s,
                csa_sequenceid: v[0],
                csa_slotid: v[1],
                csa_highest_slotid: v[2],
                csa_cachethis: c,
                csa_referring_call_lists: lists,
            })
        ),
        (arb_stateid(), any::<bool>(), fh()).prop_map(|(stateid, truncate, fh)| {
            NfsCbArgop4::Recall(CbRecall4Args {
                stateid,
                truncate,
                fh,
            })
        }),
        Just(NfsCbArgop4::Illegal),
    ]
}

fn cb_resop() -> impl Strategy<Value = NfsCbResop4> {
    prop_oneof![
        res(
            (arb_sid(), any::<[u32; 4]>()).prop_map(|(s, v)| CbSequence4ResOk {
                csr_sessionid: s,
                csr_sequenceid: v[0],
                csr_slotid: v[1],
                csr_highest_slotid: v[2],
                csr_target_highest_slotid: v[3],
            })
        )
        .prop_map(NfsCbResop4::Sequence),
        any_status().prop_map(NfsCbResop4::Recall),
        any_status().prop_map(NfsCbResop4::Illegal),
    ]
}

fn attrs() -> impl Strategy<Value = Attrs4> {
    (
        option::of((1u32..=9).prop_map(|t| NfsFtype4::from_u32(t).unwrap())),
        option::of(any::<u64>()),
        option::of(any::<u64>()),
        option::of(any::<u64>()),
        option::of(any::<u32>()),
        option::of(any::<u32>()),
        option::of(utf8()),
        option::of(utf8()),
        option::of(time()),
    )
        .prop_map(
            |(type_, change, size, fileid, mode, numlinks, owner, owner_group, time_modify)| {
                Attrs4 {
                    type_,
                    change,
                    size,
                    fileid,
                    mode,
                    numlinks,
                    owner,
                    owner_group,
                    time_modify,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn compound_args_round_trip(tag in utf8(), mv in any::<u32>(), ops in vec(argop(), 0..6)) {
        check_round_trip(&Compound4Args { tag, minorversion: mv, argarray: ops })?;
    }

    #[test]
    fn compound_res_round_trip(
        status in any_status(),
        tag in utf8(),
        ops in vec(resop(), 0..6),
    ) {
        check_round_trip(&Compound4Res { status, tag, resarray: ops })?;
    }

    #[test]
    fn cb_compound_round_trip(
        tag in utf8(),
        v in any::<(u32, u32)>(),
        args in vec(cb_argop(), 0..4),
        status in any_status(),
        res in vec(cb_resop(), 0..4),
    ) {
        check_round_trip(&CbCompound4Args {
            tag: tag.clone(),
            minorversion: v.0,
            callback_ident: v.1,
            argarray: args,
        })?;
        check_round_trip(&CbCompound4Res { status, tag, resarray: res })?;
    }

    #[test]
    fn typed_attributes_round_trip(a in attrs()) {
        let f = a.to_fattr4().unwrap();
        prop_assert_eq!(Attrs4::from_fattr4(&f).unwrap(), a);
        check_round_trip(&f)?;
    }

    #[test]
    fn read_locate_finds_the_data(
        data in bytes(300),
        before in vec(prop_oneof![
            Just(NfsResop4::Putrootfh(Nfsstat4::OK)),
            Just(NfsResop4::Putfh(Nfsstat4::OK)),
            res(fh().prop_map(|object| Getfh4ResOk { object })).prop_map(NfsResop4::Getfh),
        ], 0..4),
        after in vec(resop(), 0..3),
    ) {
        let mut resarray = before.clone();
        resarray.push(NfsResop4::Read(Res4::Ok(Read4ResOk { eof: false, data: data.clone() })));
        resarray.extend(after);
        let mut e = Encoder::new();
        ReplyHeader::success(5).encode(&mut e);
        let start = e.len();
        Compound4Res { status: Nfsstat4::OK, tag: Utf8Str::default(), resarray }.encode(&mut e);
        let b = e.finish().unwrap();
        // Where the data are: after the header, status, tag, count, the results before,
        // and READ's opnum, status, eof and length word.
        let before_len: usize = before.iter().map(|r| r.to_bytes().unwrap().len()).sum();
        let want = start + 12 + before_len + 16;
        let c = Chain::from_bytes(&b).unwrap();
        prop_assert_eq!(locate_read_data(&c), Some(want));
        prop_assert_eq!(locate_read_item(&c), Some((want, data.len())));
        prop_assert_eq!(&b[want..want + data.len()], &data[..]);
    }

    #[test]
    fn mutated_messages_decode_to_values_that_round_trip(
        args in vec(argop(), 1..5),
        res in vec(resop(), 1..5),
        cb in vec(cb_argop(), 1..4),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        fn check<T: Xdr + PartialEq + Debug>(
            v: &T,
            flips: &[(prop::sample::Index, u8)],
        ) -> Result<(), TestCaseError> {
            let mut b = v.to_bytes().unwrap();
            for (at, byte) in flips {
                let i = at.index(b.len());
                b[i] = *byte;
            }
            if let Ok(m) = T::decode(&mut Decoder::new(&b)) {
                let again = m.to_bytes().unwrap();
                prop_assert_eq!(decode_all::<T>(&again), m);
            }
            Ok(())
        }
        let tag = Utf8Str::new(b"t");
        check(&Compound4Args { tag: tag.clone(), minorversion: 1, argarray: args }, &flips)?;
        check(&Compound4Res { status: Nfsstat4::OK, tag: tag.clone(), resarray: res }, &flips)?;
        check(&CbCompound4Args { tag, minorversion: 1, callback_ident: 0, argarray: cb }, &flips)?;
    }

    #[test]
    fn arbitrary_input_never_panics(b in bytes(512)) {
        let _ = Compound4Args::decode(&mut Decoder::new(&b));
        let _ = Compound4Res::decode(&mut Decoder::new(&b));
        let _ = CbCompound4Args::decode(&mut Decoder::new(&b));
        let _ = CbCompound4Res::decode(&mut Decoder::new(&b));
        let _ = locate_read_data_in(&b);
        let _ = locate_write_data_in(&b);
        if let Ok(f) = Fattr4::decode(&mut Decoder::new(&b)) {
            let _ = Attrs4::from_fattr4(&f);
        }
    }
}

// ---------------------------------------------------------------------------------------
// READDIR

/// READDIR's arguments and a result of two entries, from RFC 5662's XDR: the arguments in
/// field order; the result's `dirlist4` a linked list (`entry4 *entries`: a 1 before each
/// entry, 0 after the last) followed by `eof`.
#[test]
fn readdir_golden_and_entry_list() {
    let args = Readdir4Args {
        cookie: 0x0102_0304_0506_0708,
        cookieverf: Verifier4([9; 8]),
        dircount: 8192,
        maxcount: 32768,
        attr_request: Bitmap4::from_bits(&[1, 33]),
    };
    let mut want = words(&[0x0102_0304, 0x0506_0708]);
    want.extend([9u8; 8]);
    want.extend(words(&[8192, 32768, 2, 1 << 1, 1 << 1]));
    golden(&args, &want);

    let e = |cookie: u64, name: &[u8]| Entry4 {
        cookie,
        name: Component4::new(name),
        attrs: Fattr4 {
            attrmask: Bitmap4::from_bits(&[4]),
            attr_vals: 7u64.to_be_bytes().to_vec(),
        },
    };
    let ok = Readdir4ResOk {
        cookieverf: Verifier4([1; 8]),
        entries: vec![e(3, b"a"), e(4, b"bcde")],
        eof: true,
    };
    let mut want = vec![1u8; 8];
    // entry "a": present, cookie 3, name (1 byte + 3 pad), attrmask {size}, 8 bytes of value.
    want.extend(words(&[1, 0, 3, 1]));
    want.extend(b"a\0\0\0");
    want.extend(words(&[1, 1 << 4, 8, 0, 7]));
    want.extend(words(&[1, 0, 4, 4]));
    want.extend(b"bcde");
    want.extend(words(&[1, 1 << 4, 8, 0, 7]));
    // end of the list, eof.
    want.extend(words(&[0, 1]));
    golden(&ok, &want);
    // In a COMPOUND result, with its operation number and status.
    let res = NfsResop4::Readdir(Res4::Ok(ok.clone()));
    assert_eq!(res.opnum(), OP_READDIR);
    let mut e2 = Encoder::new();
    res.encode(&mut e2);
    let b = e2.finish().unwrap();
    assert_eq!(decode_all::<NfsResop4>(&b), res);
    assert_eq!(&b[..8], &words(&[OP_READDIR, 0])[..]);
    // A truncated list is an error, never a panic.
    for n in 0..want.len() {
        assert!(
            Readdir4ResOk::decode(&mut Decoder::new(&want[..n])).is_err(),
            "{n}"
        );
    }
}

/// A peer's list longer than NFS4_MAX_DIR_ENTRIES is refused while decoding (each entry
/// costs the peer 24 bytes at least: the bound holds memory to what arrived).
#[test]
fn readdir_entries_are_bounded() {
    let mut b = vec![0u8; 8];
    for i in 0..=NFS4_MAX_DIR_ENTRIES as u32 {
        b.extend(words(&[1, 0, i, 0, 0, 0]));
    }
    b.extend(words(&[0, 1]));
    assert!(matches!(
        decode_err::<Readdir4ResOk>(&b),
        XdrError::TooManyEntries { .. }
    ));
}
