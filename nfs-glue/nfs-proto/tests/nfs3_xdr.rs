//! NFSv3 XDR (RFC 1813): golden vectors written by hand from the RFC's XDR, round trips of
//! every procedure's arguments and results, truncation, arbitrary input, bounds, and the
//! READ / READLINK locate functions.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use core::fmt::Debug;

use mbuf::Chain;
use nfs_proto::nfs3::*;
use onc_rpc::rpc::{AcceptStat, Auth, Rejected, ReplyHeader};
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

/// What `f` encodes.
fn encoded(f: impl FnOnce(&mut Encoder)) -> Vec<u8> {
    let mut e = Encoder::new();
    f(&mut e);
    e.finish().unwrap()
}

/// A head's `data_len` is the length of `want`, which stands at `at` in `b`.
fn check_data_at(b: &[u8], at: usize, data_len: u32, want: &[u8]) -> Result<(), TestCaseError> {
    prop_assert_eq!(data_len as usize, want.len());
    prop_assert_eq!(&b[at..at + want.len()], want);
    Ok(())
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

fn fh(bytes: &[u8]) -> NfsFh3 {
    NfsFh3 {
        data: bytes.to_vec(),
    }
}

/// The fattr3 of the golden vectors and its words.
fn golden_fattr(type_: Ftype3) -> (Fattr3, Vec<u32>) {
    let a = Fattr3 {
        type_,
        mode: 0o644,
        nlink: 1,
        uid: 1000,
        gid: 100,
        size: 5,
        used: 4096,
        rdev: Specdata3 {
            specdata1: 0,
            specdata2: 0,
        },
        fsid: 0x0000_0001_0000_002a,
        fileid: 0x1234,
        atime: Nfstime3 {
            seconds: 0x5f00_0000,
            nseconds: 1,
        },
        mtime: Nfstime3 {
            seconds: 0x5f00_0001,
            nseconds: 2,
        },
        ctime: Nfstime3 {
            seconds: 0x5f00_0002,
            nseconds: 3,
        },
    };
    let w = vec![
        type_ as u32, // type
        0x1a4,        // mode 0644
        1,            // nlink
        1000,         // uid
        100,          // gid
        0,
        5, // size
        0,
        0x1000, // used
        0,
        0, // rdev
        1,
        0x2a, // fsid
        0,
        0x1234, // fileid
        0x5f00_0000,
        1, // atime
        0x5f00_0001,
        2, // mtime
        0x5f00_0002,
        3, // ctime
    ];
    assert_eq!(w.len() * 4, 84);
    (a, w)
}

// ---------------------------------------------------------------------------------------
// golden vectors

#[test]
fn golden_write_args_head_and_full() {
    let args = WriteArgs {
        file: fh(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
        offset: 0x0000_0001_0000_0200,
        count: 5,
        stable: StableHow::FileSync,
        data: b"hello".to_vec(),
    };
    let head = words(&[
        10, // nfs_fh3 length
        0x0102_0304,
        0x0506_0708,
        0x090a_0000, // handle + 2 bytes pad
        1,
        0x200, // offset
        5,     // count
        2,     // stable = FILE_SYNC
        5,     // data length
    ]);
    assert_eq!(encoded(|e| args.encode_head(e)), head);
    assert_eq!(encoded(|e| args.head().encode_head(e, 5)), head);

    let mut full = head.clone();
    full.extend_from_slice(b"hello\0\0\0");
    assert_eq!(args.to_bytes().unwrap(), full);
    assert_eq!(decode_all::<WriteArgs>(&full), args);

    // The server's zero-copy decode: head, data length, decoder at the data.
    let mut d = Decoder::new(&full);
    let (h, len) = WriteArgs::decode_head(&mut d).unwrap();
    assert_eq!(h, args.head());
    assert_eq!(len, 5);
    assert_eq!(d.pos(), head.len());
    assert_eq!(&full[d.pos()..d.pos() + len as usize], b"hello");
    // The head decodes without the data present (it travelled as a read chunk).
    let mut d = Decoder::new(&head);
    assert_eq!(WriteArgs::decode_head(&mut d).unwrap(), (args.head(), 5));
    assert_eq!(d.remaining(), 0);
}

#[test]
fn golden_read_res_ok() {
    let (attrs, aw) = golden_fattr(Ftype3::Reg);
    let mut w = vec![0, 1]; // NFS3_OK, attributes_follow
    w.extend_from_slice(&aw);
    w.extend_from_slice(&[5, 1, 5]); // count, eof TRUE, data length
    let head = words(&w);
    let mut b = head.clone();
    b.extend_from_slice(b"hello\0\0\0");

    let want = ReadRes::Ok(ReadResOk {
        file_attributes: Some(attrs.clone()),
        count: 5,
        eof: true,
        data: b"hello".to_vec(),
    });
    assert_eq!(want.to_bytes().unwrap(), b);
    assert_eq!(decode_all::<ReadRes>(&b), want);
    assert_eq!(
        ReadRes::decode_with_max(&mut Decoder::new(&b), 5).unwrap(),
        want
    );
    assert!(matches!(
        ReadRes::decode_with_max(&mut Decoder::new(&b), 4),
        Err(XdrError::TooLong { len: 5, max: 4, .. })
    ));

    // The head decoder, on the reply as RDMA placement leaves it (data absent) and whole.
    let rh = ReadHead {
        status: Nfsstat3::OK,
        file_attributes: Some(attrs),
        count: 5,
        eof: true,
        data_len: 5,
    };
    for buf in [&head, &b] {
        let mut d = Decoder::new(buf);
        assert_eq!(ReadRes::decode_head(&mut d).unwrap(), rh);
        assert_eq!(d.pos(), 4 + 4 + 84 + 12);
    }
    assert_eq!(encoded(|e| rh.encode(e)), head);
}

#[test]
fn golden_lookup_res_fail() {
    // NFS3ERR_NOENT, dir_attributes absent.
    let b = words(&[2, 0]);
    let want = LookupRes::Fail {
        status: Nfsstat3::ERR_NOENT,
        resfail: LookupResFail {
            dir_attributes: None,
        },
    };
    assert_eq!(want.to_bytes().unwrap(), b);
    assert_eq!(decode_all::<LookupRes>(&b), want);
    assert_eq!(want.status().name(), "NFS3ERR_NOENT");

    // NFS3ERR_ACCES with the directory's attributes.
    let (attrs, aw) = golden_fattr(Ftype3::Dir);
    let mut w = vec![13, 1];
    w.extend_from_slice(&aw);
    let b = words(&w);
    let want = LookupRes::Fail {
        status: Nfsstat3::ERR_ACCES,
        resfail: LookupResFail {
            dir_attributes: Some(attrs),
        },
    };
    assert_eq!(want.to_bytes().unwrap(), b);
    assert_eq!(decode_all::<LookupRes>(&b), want);
}

#[test]
fn golden_readdir_res_two_entries() {
    let b = words(&[
        0, // NFS3_OK
        0, // dir_attributes: none
        0x0102_0304,
        0x0506_0708, // cookieverf
        1,           // value follows
        0,
        2, // fileid
        1,
        0x2e00_0000, // name "." + pad
        0,
        1, // cookie
        1, // value follows
        0,
        3, // fileid
        4,
        0x6669_6c65, // name "file"
        0,
        2, // cookie
        0, // no more entries
        1, // eof
    ]);
    let want = ReaddirRes::Ok(ReaddirResOk {
        dir_attributes: None,
        cookieverf: Cookieverf3([1, 2, 3, 4, 5, 6, 7, 8]),
        reply: Dirlist3 {
            entries: vec![
                Entry3 {
                    fileid: 2,
                    name: Filename3(b".".to_vec()),
                    cookie: 1,
                },
                Entry3 {
                    fileid: 3,
                    name: Filename3(b"file".to_vec()),
                    cookie: 2,
                },
            ],
            eof: true,
        },
    });
    assert_eq!(want.to_bytes().unwrap(), b);
    assert_eq!(decode_all::<ReaddirRes>(&b), want);
}

#[test]
fn golden_fsinfo_resok() {
    let b = words(&[
        0,           // NFS3_OK
        0,           // obj_attributes: none
        0x0010_0000, // rtmax 1 MiB
        0x0010_0000, // rtpref
        4096,        // rtmult
        0x0008_0000, // wtmax 512 KiB
        0x0008_0000, // wtpref
        4096,        // wtmult
        8192,        // dtpref
        0x7fff_ffff,
        0xffff_ffff, // maxfilesize
        0,
        1,    // time_delta 1 ns
        0x1b, // LINK | SYMLINK | HOMOGENEOUS | CANSETTIME
    ]);
    let ok = FsinfoResOk {
        obj_attributes: None,
        rtmax: 1 << 20,
        rtpref: 1 << 20,
        rtmult: 4096,
        wtmax: 512 << 10,
        wtpref: 512 << 10,
        wtmult: 4096,
        dtpref: 8192,
        maxfilesize: i64::MAX as u64,
        time_delta: Nfstime3 {
            seconds: 0,
            nseconds: 1,
        },
        properties: FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME,
    };
    let want = FsinfoRes::Ok(ok.clone());
    assert_eq!(want.to_bytes().unwrap(), b);
    let got = decode_all::<FsinfoRes>(&b);
    assert_eq!(got, want);
    assert_eq!(got.ok().unwrap().wtmax, 512 << 10);
    // The resok arm alone.
    assert_eq!(decode_all::<FsinfoResOk>(&b[4..]), ok);
}

#[test]
fn golden_symlink_args_head_and_readlink() {
    // SYMLINK3args: where = (fh 4 bytes, "ln"), attributes: mode 0777, rest unset, "/tmp".
    let head = words(&[
        4,
        0xdead_beef, // dir
        2,
        0x6c6e_0000, // name "ln"
        1,
        0o777, // set_mode3
        0,     // uid
        0,     // gid
        0,     // size
        0,     // atime DONT_CHANGE
        0,     // mtime DONT_CHANGE
        4,     // symlink_data length
    ]);
    let args = SymlinkArgs {
        where_: Diropargs3 {
            dir: fh(&[0xde, 0xad, 0xbe, 0xef]),
            name: Filename3(b"ln".to_vec()),
        },
        symlink: Symlinkdata3 {
            symlink_attributes: Sattr3 {
                mode: Some(0o777),
                ..Sattr3::default()
            },
            symlink_data: Nfspath3(b"/tmp".to_vec()),
        },
    };
    assert_eq!(encoded(|e| args.encode_head(e)), head);
    let mut full = head.clone();
    full.extend_from_slice(b"/tmp");
    assert_eq!(args.to_bytes().unwrap(), full);
    let mut d = Decoder::new(&full);
    let (h, len) = SymlinkArgs::decode_head(&mut d).unwrap();
    assert_eq!((h.where_.clone(), len), (args.where_.clone(), 4));
    assert_eq!(d.pos(), head.len());
    assert_eq!(encoded(|e| h.encode_head(e, 4)), head);

    // READLINK3res ok without attributes: status, FALSE, "/tmp".
    let b = words(&[0, 0, 4, 0x2f74_6d70]);
    let want = ReadlinkRes::Ok(ReadlinkResOk {
        symlink_attributes: None,
        data: Nfspath3(b"/tmp".to_vec()),
    });
    assert_eq!(want.to_bytes().unwrap(), b);
    assert_eq!(decode_all::<ReadlinkRes>(&b), want);
    let mut d = Decoder::new(&b[..12]);
    let rh = ReadlinkRes::decode_head(&mut d).unwrap();
    assert_eq!(
        rh,
        ReadlinkHead {
            status: Nfsstat3::OK,
            symlink_attributes: None,
            data_len: 4
        }
    );
    assert_eq!(d.remaining(), 0);
    assert_eq!(encoded(|e| rh.encode(e)), &b[..12]);
}

#[test]
fn golden_sattr3_and_createhow() {
    // CREATE3args GUARDED with every set_* arm set, then EXCLUSIVE.
    let where_ = Diropargs3 {
        dir: fh(&[]),
        name: Filename3(b"f".to_vec()),
    };
    let a = CreateArgs {
        where_: where_.clone(),
        how: Createhow3::Guarded(Sattr3 {
            mode: Some(0o600),
            uid: Some(7),
            gid: Some(8),
            size: Some(0x1_0000_0001),
            atime: SetTime::ServerTime,
            mtime: SetTime::ClientTime(Nfstime3 {
                seconds: 9,
                nseconds: 10,
            }),
        }),
    };
    let b = words(&[
        0, // empty handle
        1,
        0x6600_0000, // "f"
        1,           // GUARDED
        1,
        0o600, // mode
        1,
        7, // uid
        1,
        8, // gid
        1,
        1,
        1, // size
        1, // atime SET_TO_SERVER_TIME
        2,
        9,
        10, // mtime SET_TO_CLIENT_TIME
    ]);
    assert_eq!(a.to_bytes().unwrap(), b);
    assert_eq!(decode_all::<CreateArgs>(&b), a);

    let a = CreateArgs {
        where_,
        how: Createhow3::Exclusive(Createverf3(*b"verifier")),
    };
    let mut b = words(&[0, 1, 0x6600_0000, 2]);
    b.extend_from_slice(b"verifier");
    assert_eq!(a.to_bytes().unwrap(), b);
    assert_eq!(decode_all::<CreateArgs>(&b), a);
}

// ---------------------------------------------------------------------------------------
// status names, bounds, encoder failures

#[test]
fn nfsstat3_names_and_unknown_codes() {
    assert_eq!(Nfsstat3::ALL.len(), 29);
    for s in Nfsstat3::ALL {
        assert!(s.is_known());
        assert!(s.name().starts_with("NFS3"), "{}", s.name());
    }
    assert_eq!(Nfsstat3::OK.name(), "NFS3_OK");
    assert_eq!(Nfsstat3::ERR_NOENT.name(), "NFS3ERR_NOENT");
    assert_eq!(Nfsstat3(10008).name(), "NFS3ERR_JUKEBOX");
    assert_eq!(Nfsstat3(63).to_string(), "NFS3ERR_NAMETOOLONG");
    assert_eq!(Nfsstat3::ERR_BADHANDLE.0, 10001);
    // An unknown code decodes (kept) and prints with its number.
    let b = words(&[12345]);
    let r = decode_all::<GetattrRes>(&b);
    assert_eq!(r.status(), Nfsstat3(12345));
    assert!(!r.status().is_known());
    assert_eq!(r.status().to_string(), "nfsstat3 12345");
    assert_eq!(r.to_bytes().unwrap(), b);
    assert_eq!(proc_name(NFSPROC3_READDIRPLUS), Some("READDIRPLUS"));
    assert_eq!(proc_name(22), None);
}

#[test]
fn bounds_on_decode() {
    // File handle: 64 bytes ok, 65 not.
    let mut b = words(&[64]);
    b.extend_from_slice(&[7; 64]);
    assert_eq!(decode_all::<NfsFh3>(&b).data.len(), 64);
    let mut b = words(&[65]);
    b.extend_from_slice(&[7; 68]);
    assert!(matches!(
        NfsFh3::decode(&mut Decoder::new(&b)),
        Err(XdrError::TooLong {
            len: 65,
            max: 64,
            ..
        })
    ));
    // Names: 255 / 256. Paths: NFS3_MAXPATHLEN / + 1.
    for (max, is_path) in [(NFS3_MAXNAMLEN, false), (NFS3_MAXPATHLEN, true)] {
        for len in [max, max + 1] {
            let mut b = words(&[len as u32]);
            b.resize(4 + len.div_ceil(4) * 4, b'a');
            let r = if is_path {
                Nfspath3::decode(&mut Decoder::new(&b)).map(|p| p.0.len())
            } else {
                Filename3::decode(&mut Decoder::new(&b)).map(|p| p.0.len())
            };
            if len == max {
                assert_eq!(r, Ok(max));
            } else {
                assert!(matches!(r, Err(XdrError::TooLong { .. })));
            }
        }
    }
    // A hostile length in a symlink head is refused before anything else.
    // (empty handle, empty name, six unset sattr3 arms, then the path length)
    let b = words(&[0, 0, 0, 0, 0, 0, 0, 0, 0xffff_ffff]);
    assert!(matches!(
        SymlinkArgs::decode_head(&mut Decoder::new(&b)),
        Err(XdrError::TooLong { .. })
    ));
    // WRITE data above the caller's bound, and above the default bound.
    let mut b = WriteArgs {
        file: fh(&[1]),
        offset: 0,
        count: 8,
        stable: StableHow::Unstable,
        data: vec![0; 8],
    }
    .to_bytes()
    .unwrap();
    assert!(matches!(
        WriteArgs::decode_with_max(&mut Decoder::new(&b), 7),
        Err(XdrError::TooLong { len: 8, max: 7, .. })
    ));
    let at = b.len() - 12;
    b[at..at + 4].copy_from_slice(&((NFS3_MAX_DATA as u32) + 1).to_be_bytes());
    assert!(matches!(
        WriteArgs::decode(&mut Decoder::new(&b)),
        Err(XdrError::TooLong { .. })
    ));
    // Unknown enumerations are errors.
    assert!(matches!(
        Ftype3::decode(&mut Decoder::new(&words(&[8]))),
        Err(XdrError::BadEnum { what: "ftype3", .. })
    ));
    assert!(matches!(
        StableHow::decode(&mut Decoder::new(&words(&[3]))),
        Err(XdrError::BadEnum { .. })
    ));
    assert!(matches!(
        SetTime::decode(&mut Decoder::new(&words(&[3]))),
        Err(XdrError::BadEnum { .. })
    ));
    assert!(matches!(
        Createhow3::decode(&mut Decoder::new(&words(&[3]))),
        Err(XdrError::BadEnum { .. })
    ));
    // Optional-data discriminants are booleans.
    assert_eq!(
        <PostOpAttr as Xdr>::decode(&mut Decoder::new(&words(&[2]))),
        Err(XdrError::BadBool(2))
    );
}

#[test]
fn readdir_entry_list_is_capped() {
    // 65536 empty-named entries decode, 65537 are TooManyEntries.
    let entry = [1u32, 0, 1, 0, 0, 1]; // follows, fileid, name "", cookie
    for (n, ok) in [
        (NFS3_MAX_DIR_ENTRIES, true),
        (NFS3_MAX_DIR_ENTRIES + 1, false),
    ] {
        let mut w = vec![0u32, 0, 0, 0];
        for _ in 0..n {
            w.extend_from_slice(&entry);
        }
        w.extend_from_slice(&[0, 1]);
        let b = words(&w);
        let r = ReaddirRes::decode(&mut Decoder::new(&b));
        if ok {
            assert_eq!(r.unwrap().ok().unwrap().reply.entries.len(), n);
        } else {
            assert_eq!(
                r,
                Err(XdrError::TooManyEntries {
                    what: "dirlist3",
                    max: NFS3_MAX_DIR_ENTRIES
                })
            );
        }
    }
    // The encoder refuses to produce what the decoder would refuse.
    let too_many = Dirlist3 {
        entries: vec![
            Entry3 {
                fileid: 1,
                name: Filename3(Vec::new()),
                cookie: 1
            };
            NFS3_MAX_DIR_ENTRIES + 1
        ],
        eof: true,
    };
    assert_eq!(too_many.to_bytes(), Err(XdrError::Alloc));
}

#[test]
fn encoder_refuses_unencodable_values() {
    assert_eq!(fh(&[0; 65]).to_bytes(), Err(XdrError::Alloc));
    assert_eq!(Filename3(vec![b'a'; 256]).to_bytes(), Err(XdrError::Alloc));
    assert_eq!(
        Nfspath3(vec![b'a'; NFS3_MAXPATHLEN + 1]).to_bytes(),
        Err(XdrError::Alloc)
    );
    // A failure arm carrying NFS3_OK would decode as the success arm.
    let bad: GetattrRes = Nfs3Res::Fail {
        status: Nfsstat3::OK,
        resfail: (),
    };
    assert_eq!(bad.to_bytes(), Err(XdrError::Alloc));
    // MKNOD's void arm cannot carry a type that has an arm.
    assert_eq!(
        Mknoddata3::Other(Ftype3::Chr).to_bytes(),
        Err(XdrError::Alloc)
    );
    let mut e = Encoder::new();
    ReadlinkHead {
        status: Nfsstat3::OK,
        symlink_attributes: None,
        data_len: NFS3_MAXPATHLEN as u32 + 1,
    }
    .encode(&mut e);
    assert_eq!(e.finish(), Err(XdrError::Alloc));
}

// ---------------------------------------------------------------------------------------
// locate

fn reply_bytes(h: &ReplyHeader, body: &[u8]) -> Vec<u8> {
    let mut e = Encoder::new();
    h.encode(&mut e);
    let mut b = e.finish().unwrap();
    b.extend_from_slice(body);
    b
}

fn read_head(status: Nfsstat3, attrs: bool, data_len: u32) -> Vec<u8> {
    let mut e = Encoder::new();
    ReadHead {
        status,
        file_attributes: attrs.then(|| golden_fattr(Ftype3::Reg).0),
        count: data_len,
        eof: false,
        data_len,
    }
    .encode(&mut e);
    e.finish().unwrap()
}

fn readlink_head(status: Nfsstat3, attrs: bool, data_len: u32) -> Vec<u8> {
    let mut e = Encoder::new();
    ReadlinkHead {
        status,
        symlink_attributes: attrs.then(|| golden_fattr(Ftype3::Lnk).0),
        data_len,
    }
    .encode(&mut e);
    e.finish().unwrap()
}

/// A chain of `b` split over several mbufs.
fn split_chain(b: &[u8]) -> Chain {
    let mut c = Chain::new();
    for piece in b.chunks(7) {
        c.cat(Chain::from_bytes(piece).unwrap()).unwrap();
    }
    assert_eq!(c.len(), b.len());
    c
}

#[test]
fn locate_read_offsets() {
    let ok = ReplyHeader::success(0x77);
    // Without post_op_attr: 24 (reply header) + status + FALSE + count + eof + length.
    let b = reply_bytes(&ok, &read_head(Nfsstat3::OK, false, 4096));
    assert_eq!(b.len(), 44);
    assert_eq!(locate_read_data(&Chain::from_bytes(&b).unwrap()), Some(44));
    assert_eq!(locate_read_data(&split_chain(&b)), Some(44));
    // With post_op_attr: + 84 bytes of fattr3.
    let b = reply_bytes(&ok, &read_head(Nfsstat3::OK, true, 4096));
    assert_eq!(b.len(), 128);
    assert_eq!(locate_read_data(&Chain::from_bytes(&b).unwrap()), Some(128));
    // Whatever follows (data inline, or a trailing pad) does not move the offset.
    let mut more = b.clone();
    more.extend_from_slice(&[0xab; 600]);
    assert_eq!(locate_read_data(&split_chain(&more)), Some(128));
    // The largest verifier (400 bytes) still fits the bounded prefix.
    let big = ReplyHeader::Accepted {
        xid: 1,
        verf: Auth::Other {
            flavor: 6,
            body: vec![0x5a; 400],
        },
        stat: AcceptStat::Success,
    };
    let b = reply_bytes(&big, &read_head(Nfsstat3::OK, true, 1));
    assert_eq!(b.len(), LOCATE_PREFIX_MAX);
    assert_eq!(
        locate_read_data(&Chain::from_bytes(&b).unwrap()),
        Some(LOCATE_PREFIX_MAX)
    );
    // A zero-length read is still located.
    let b = reply_bytes(&ok, &read_head(Nfsstat3::OK, false, 0));
    assert_eq!(locate_read_data(&Chain::from_bytes(&b).unwrap()), Some(44));
}

#[test]
fn locate_read_none() {
    let ok = ReplyHeader::success(0x77);
    // NFS errors, with and without attributes.
    for attrs in [false, true] {
        for s in [Nfsstat3::ERR_IO, Nfsstat3::ERR_STALE, Nfsstat3(99_999)] {
            let b = reply_bytes(&ok, &read_head(s, attrs, 0));
            assert_eq!(locate_read_data(&Chain::from_bytes(&b).unwrap()), None);
        }
    }
    // RPC replies that are not an accepted SUCCESS, even with an OK-looking body behind.
    let body = read_head(Nfsstat3::OK, false, 4);
    for h in [
        ReplyHeader::Accepted {
            xid: 1,
            verf: Auth::None,
            stat: AcceptStat::ProcUnavail,
        },
        ReplyHeader::Accepted {
            xid: 1,
            verf: Auth::None,
            stat: AcceptStat::GarbageArgs,
        },
        ReplyHeader::Accepted {
            xid: 1,
            verf: Auth::None,
            stat: AcceptStat::ProgMismatch { low: 2, high: 4 },
        },
        ReplyHeader::Denied {
            xid: 1,
            why: Rejected::AuthError(1),
        },
    ] {
        let b = reply_bytes(&h, &body);
        assert_eq!(locate_read_data(&Chain::from_bytes(&b).unwrap()), None);
        assert_eq!(locate_readlink_data(&Chain::from_bytes(&b).unwrap()), None);
    }
    // A call is not a reply.
    let b = words(&[1, 0, 2, 100_003, 3, 6, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(locate_read_data(&Chain::from_bytes(&b).unwrap()), None);
    // Every truncation of a good reply.
    for attrs in [false, true] {
        let b = reply_bytes(&ok, &read_head(Nfsstat3::OK, attrs, 8));
        for n in 0..b.len() {
            assert_eq!(
                locate_read_data(&Chain::from_bytes(&b[..n]).unwrap()),
                None,
                "{n}"
            );
        }
    }
    assert_eq!(locate_read_data(&Chain::new()), None);
}

#[test]
fn locate_readlink_offsets_and_none() {
    let ok = ReplyHeader::success(5);
    let b = reply_bytes(&ok, &readlink_head(Nfsstat3::OK, false, 10));
    assert_eq!(b.len(), 24 + 12);
    assert_eq!(
        locate_readlink_data(&Chain::from_bytes(&b).unwrap()),
        Some(36)
    );
    let b = reply_bytes(&ok, &readlink_head(Nfsstat3::OK, true, 10));
    assert_eq!(b.len(), 24 + 12 + 84);
    assert_eq!(locate_readlink_data(&split_chain(&b)), Some(120));
    for n in 0..b.len() {
        assert_eq!(
            locate_readlink_data(&Chain::from_bytes(&b[..n]).unwrap()),
            None
        );
    }
    let b = reply_bytes(&ok, &readlink_head(Nfsstat3::ERR_INVAL, true, 0));
    assert_eq!(locate_readlink_data(&Chain::from_bytes(&b).unwrap()), None);
    // A path length beyond NFS3_MAXPATHLEN is not located.
    let mut b = reply_bytes(&ok, &readlink_head(Nfsstat3::OK, false, 0));
    let at = b.len() - 4;
    b[at..].copy_from_slice(&(NFS3_MAXPATHLEN as u32 + 1).to_be_bytes());
    assert_eq!(locate_readlink_data(&Chain::from_bytes(&b).unwrap()), None);
}

// ---------------------------------------------------------------------------------------
// strategies

fn s_fh() -> impl Strategy<Value = NfsFh3> {
    vec(any::<u8>(), 0..=NFS3_FHSIZE).prop_map(|data| NfsFh3 { data })
}

fn s_name() -> impl Strategy<Value = Filename3> {
    prop_oneof![
        4 => vec(any::<u8>(), 0..=12),
        1 => vec(any::<u8>(), NFS3_MAXNAMLEN - 3..=NFS3_MAXNAMLEN),
    ]
    .prop_map(Filename3)
}

fn s_path() -> impl Strategy<Value = Nfspath3> {
    vec(any::<u8>(), 0..=40).prop_map(Nfspath3)
}

fn s_data() -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..=40)
}

fn s_time() -> impl Strategy<Value = Nfstime3> {
    (any::<u32>(), any::<u32>()).prop_map(|(seconds, nseconds)| Nfstime3 { seconds, nseconds })
}

fn s_ftype() -> impl Strategy<Value = Ftype3> {
    prop::sample::select(vec![
        Ftype3::Reg,
        Ftype3::Dir,
        Ftype3::Blk,
        Ftype3::Chr,
        Ftype3::Lnk,
        Ftype3::Sock,
        Ftype3::Fifo,
    ])
}

fn s_stable() -> impl Strategy<Value = StableHow> {
    prop::sample::select(vec![
        StableHow::Unstable,
        StableHow::DataSync,
        StableHow::FileSync,
    ])
}

fn s_spec() -> impl Strategy<Value = Specdata3> {
    (any::<u32>(), any::<u32>()).prop_map(|(specdata1, specdata2)| Specdata3 {
        specdata1,
        specdata2,
    })
}

fn s_fattr() -> impl Strategy<Value = Fattr3> {
    (
        (
            s_ftype(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
        ),
        (
            any::<u64>(),
            any::<u64>(),
            s_spec(),
            any::<u64>(),
            any::<u64>(),
        ),
        (s_time(), s_time(), s_time()),
    )
        .prop_map(
            |(
                (type_, mode, nlink, uid, gid),
                (size, used, rdev, fsid, fileid),
                (atime, mtime, ctime),
            )| Fattr3 {
                type_,
                mode,
                nlink,
                uid,
                gid,
                size,
                used,
                rdev,
                fsid,
                fileid,
                atime,
                mtime,
                ctime,
            },
        )
}

fn s_post_op_attr() -> impl Strategy<Value = PostOpAttr> {
    option::of(s_fattr())
}

fn s_wcc() -> impl Strategy<Value = WccData> {
    (
        option::of(
            (any::<u64>(), s_time(), s_time()).prop_map(|(size, mtime, ctime)| WccAttr {
                size,
                mtime,
                ctime,
            }),
        ),
        s_post_op_attr(),
    )
        .prop_map(|(before, after)| WccData { before, after })
}

fn s_set_time() -> impl Strategy<Value = SetTime> {
    prop_oneof![
        Just(SetTime::DontChange),
        Just(SetTime::ServerTime),
        s_time().prop_map(SetTime::ClientTime),
    ]
}

fn s_sattr() -> impl Strategy<Value = Sattr3> {
    (
        option::of(any::<u32>()),
        option::of(any::<u32>()),
        option::of(any::<u32>()),
        option::of(any::<u64>()),
        s_set_time(),
        s_set_time(),
    )
        .prop_map(|(mode, uid, gid, size, atime, mtime)| Sattr3 {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        })
}

fn s_dirop() -> impl Strategy<Value = Diropargs3> {
    (s_fh(), s_name()).prop_map(|(dir, name)| Diropargs3 { dir, name })
}

fn s_verf() -> impl Strategy<Value = [u8; 8]> {
    any::<[u8; 8]>()
}

fn s_fail_status() -> impl Strategy<Value = Nfsstat3> {
    prop_oneof![
        prop::sample::select(Nfsstat3::ALL[1..].to_vec()),
        (1u32..).prop_map(Nfsstat3),
    ]
}

fn s_res<T: Debug + Clone, F: Debug + Clone>(
    ok: impl Strategy<Value = T>,
    fail: impl Strategy<Value = F>,
) -> impl Strategy<Value = Nfs3Res<T, F>> {
    prop_oneof![
        ok.prop_map(Nfs3Res::Ok),
        (s_fail_status(), fail).prop_map(|(status, resfail)| Nfs3Res::Fail { status, resfail }),
    ]
}

fn s_dirop_ok() -> impl Strategy<Value = (PostOpFh3, PostOpAttr, WccData)> {
    (option::of(s_fh()), s_post_op_attr(), s_wcc())
}

fn s_createhow() -> impl Strategy<Value = Createhow3> {
    prop_oneof![
        s_sattr().prop_map(Createhow3::Unchecked),
        s_sattr().prop_map(Createhow3::Guarded),
        s_verf().prop_map(|v| Createhow3::Exclusive(Createverf3(v))),
    ]
}

fn s_dev() -> impl Strategy<Value = Devicedata3> {
    (s_sattr(), s_spec()).prop_map(|(dev_attributes, spec)| Devicedata3 {
        dev_attributes,
        spec,
    })
}

fn s_mknod() -> impl Strategy<Value = Mknoddata3> {
    prop_oneof![
        s_dev().prop_map(Mknoddata3::Chr),
        s_dev().prop_map(Mknoddata3::Blk),
        s_sattr().prop_map(Mknoddata3::Sock),
        s_sattr().prop_map(Mknoddata3::Fifo),
        prop::sample::select(vec![Ftype3::Reg, Ftype3::Dir, Ftype3::Lnk])
            .prop_map(Mknoddata3::Other),
    ]
}

// ---------------------------------------------------------------------------------------
// round trips: every procedure's arguments and results

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn rt_null(_x in 0u8..1) {
        check_round_trip(&NullArgs)?;
        check_round_trip(&NullRes)?;
        prop_assert!(NullArgs.to_bytes().unwrap().is_empty());
    }

    #[test]
    fn rt_getattr(object in s_fh(),
                  res in s_res(s_fattr().prop_map(|obj_attributes| GetattrResOk { obj_attributes }), Just(()))) {
        check_round_trip(&GetattrArgs { object })?;
        check_round_trip(&res)?;
    }

    #[test]
    fn rt_setattr(object in s_fh(), new_attributes in s_sattr(), guard in option::of(s_time()),
                  ok in s_wcc(), fail in s_wcc(), status in s_fail_status()) {
        check_round_trip(&SetattrArgs { object, new_attributes, guard })?;
        check_round_trip(&SetattrRes::Ok(SetattrResOk { obj_wcc: ok }))?;
        check_round_trip(&SetattrRes::Fail { status, resfail: SetattrResFail { obj_wcc: fail } })?;
    }

    #[test]
    fn rt_lookup(what in s_dirop(),
                 res in s_res((s_fh(), s_post_op_attr(), s_post_op_attr()).prop_map(|(object, obj_attributes, dir_attributes)| LookupResOk { object, obj_attributes, dir_attributes }),
                              s_post_op_attr().prop_map(|dir_attributes| LookupResFail { dir_attributes }))) {
        check_round_trip(&LookupArgs { what })?;
        check_round_trip(&res)?;
    }

    #[test]
    fn rt_access(object in s_fh(), access in any::<u32>(),
                 res in s_res((s_post_op_attr(), any::<u32>()).prop_map(|(obj_attributes, access)| AccessResOk { obj_attributes, access }),
                              s_post_op_attr().prop_map(|obj_attributes| AccessResFail { obj_attributes }))) {
        check_round_trip(&AccessArgs { object, access })?;
        check_round_trip(&res)?;
    }

    #[test]
    fn rt_readlink(symlink in s_fh(),
                   res in s_res((s_post_op_attr(), s_path()).prop_map(|(symlink_attributes, data)| ReadlinkResOk { symlink_attributes, data }),
                                s_post_op_attr().prop_map(|symlink_attributes| ReadlinkResFail { symlink_attributes }))) {
        check_round_trip(&ReadlinkArgs { symlink })?;
        check_round_trip(&res)?;
        // The head decoder agrees with the full decoder and stops at the path.
        let b = res.to_bytes().unwrap();
        let mut d = Decoder::new(&b);
        let h = ReadlinkRes::decode_head(&mut d).unwrap();
        prop_assert_eq!(h.status, res.status());
        match &res {
            Nfs3Res::Ok(ok) => {
                prop_assert_eq!(&h.symlink_attributes, &ok.symlink_attributes);
                check_data_at(&b, d.pos(), h.data_len, &ok.data.0)?;
            }
            Nfs3Res::Fail { resfail, .. } => {
                prop_assert_eq!(&h.symlink_attributes, &resfail.symlink_attributes);
                prop_assert_eq!(d.remaining(), 0);
            }
        }
        prop_assert_eq!(&encoded(|e| h.encode(e))[..], &b[..d.pos()]);
    }

    #[test]
    fn rt_read(file in s_fh(), offset in any::<u64>(), count in any::<u32>(),
               res in s_res((s_post_op_attr(), any::<u32>(), any::<bool>(), s_data()).prop_map(|(file_attributes, count, eof, data)| ReadResOk { file_attributes, count, eof, data }),
                            s_post_op_attr().prop_map(|file_attributes| ReadResFail { file_attributes }))) {
        check_round_trip(&ReadArgs { file, offset, count })?;
        check_round_trip(&res)?;
        let b = res.to_bytes().unwrap();
        let mut d = Decoder::new(&b);
        let h = ReadRes::decode_head(&mut d).unwrap();
        prop_assert_eq!(h.status, res.status());
        match &res {
            Nfs3Res::Ok(ok) => {
                prop_assert_eq!((&h.file_attributes, h.count, h.eof), (&ok.file_attributes, ok.count, ok.eof));
                check_data_at(&b, d.pos(), h.data_len, &ok.data)?;
                prop_assert_eq!(&encoded(|e| ok.encode_head(e))[..], &b[4..d.pos()]);
            }
            Nfs3Res::Fail { resfail, .. } => {
                prop_assert_eq!(&h.file_attributes, &resfail.file_attributes);
                prop_assert_eq!(d.remaining(), 0);
            }
        }
        prop_assert_eq!(&encoded(|e| h.encode(e))[..], &b[..d.pos()]);
    }

    #[test]
    fn rt_write(file in s_fh(), offset in any::<u64>(), count in any::<u32>(), stable in s_stable(), data in s_data(),
                res in s_res((s_wcc(), any::<u32>(), s_stable(), s_verf()).prop_map(|(file_wcc, count, committed, v)| WriteResOk { file_wcc, count, committed, verf: Writeverf3(v) }),
                             s_wcc().prop_map(|file_wcc| WriteResFail { file_wcc }))) {
        let args = WriteArgs { file, offset, count, stable, data };
        check_round_trip(&args)?;
        check_round_trip(&res)?;
        // Head + data + pad is the full encoding; the head decoder finds the data.
        let full = args.to_bytes().unwrap();
        let head = encoded(|e| args.encode_head(e));
        prop_assert_eq!(&full[..head.len()], &head[..]);
        prop_assert_eq!(full.len(), head.len() + args.data.len().div_ceil(4) * 4);
        let mut d = Decoder::new(&full);
        let (h, len) = WriteArgs::decode_head(&mut d).unwrap();
        prop_assert_eq!(h, args.head());
        prop_assert_eq!(len as usize, args.data.len());
        prop_assert_eq!(d.pos(), head.len());
        for n in 0..head.len() {
            prop_assert!(WriteArgs::decode_head(&mut Decoder::new(&head[..n])).is_err());
        }
    }

    #[test]
    fn rt_create(where_ in s_dirop(), how in s_createhow(),
                 res in s_res(s_dirop_ok().prop_map(|(obj, obj_attributes, dir_wcc)| CreateResOk { obj, obj_attributes, dir_wcc }),
                              s_wcc().prop_map(|dir_wcc| CreateResFail { dir_wcc }))) {
        check_round_trip(&CreateArgs { where_, how })?;
        check_round_trip(&res)?;
    }

    #[test]
    fn rt_mkdir(where_ in s_dirop(), attributes in s_sattr(),
                res in s_res(s_dirop_ok().prop_map(|(obj, obj_attributes, dir_wcc)| MkdirResOk { obj, obj_attributes, dir_wcc }),
                             s_wcc().prop_map(|dir_wcc| MkdirResFail { dir_wcc }))) {
        check_round_trip(&MkdirArgs { where_, attributes })?;
        check_round_trip(&res)?;
    }

    #[test]
    fn rt_symlink(where_ in s_dirop(), symlink_attributes in s_sattr(), symlink_data in s_path(),
                  res in s_res(s_dirop_ok().prop_map(|(obj, obj_attributes, dir_wcc)| SymlinkResOk { obj, obj_attributes, dir_wcc }),
                               s_wcc().prop_map(|dir_wcc| SymlinkResFail { dir_wcc }))) {
        let args = SymlinkArgs { where_, symlink: Symlinkdata3 { symlink_attributes, symlink_data } };
        check_round_trip(&args)?;
        check_round_trip(&res)?;
        let full = args.to_bytes().unwrap();
        let head = encoded(|e| args.encode_head(e));
        prop_assert_eq!(&full[..head.len()], &head[..]);
        let mut d = Decoder::new(&full);
        let (h, len) = SymlinkArgs::decode_head(&mut d).unwrap();
        prop_assert_eq!(&h.where_, &args.where_);
        prop_assert_eq!(&h.symlink_attributes, &args.symlink.symlink_attributes);
        prop_assert_eq!(len as usize, args.symlink.symlink_data.0.len());
        prop_assert_eq!(d.pos(), head.len());
        prop_assert_eq!(encoded(|e| h.encode_head(e, len)), head);
    }

    #[test]
    fn rt_mknod(where_ in s_dirop(), what in s_mknod(),
                res in s_res(s_dirop_ok().prop_map(|(obj, obj_attributes, dir_wcc)| MknodResOk { obj, obj_attributes, dir_wcc }),
                             s_wcc().prop_map(|dir_wcc| MknodResFail { dir_wcc }))) {
        check_round_trip(&MknodArgs { where_, what })?;
        check_round_trip(&res)?;
    }

    #[test]
    fn rt_remove_rmdir(object in s_dirop(), a in s_wcc(), status in s_fail_status()) {
        check_round_trip(&RemoveArgs { object: object.clone() })?;
        check_round_trip(&RmdirArgs { object })?;
        check_round_trip(&RemoveRes::Ok(RemoveResOk { dir_wcc: a.clone() }))?;
        check_round_trip(&RemoveRes::Fail { status, resfail: RemoveResFail { dir_wcc: a.clone() } })?;
        check_round_trip(&RmdirRes::Ok(RmdirResOk { dir_wcc: a.clone() }))?;
        check_round_trip(&RmdirRes::Fail { status, resfail: RmdirResFail { dir_wcc: a } })?;
    }

    #[test]
    fn rt_rename(from in s_dirop(), to in s_dirop(),
                 res in s_res((s_wcc(), s_wcc()).prop_map(|(fromdir_wcc, todir_wcc)| RenameResOk { fromdir_wcc, todir_wcc }),
                              (s_wcc(), s_wcc()).prop_map(|(fromdir_wcc, todir_wcc)| RenameResFail { fromdir_wcc, todir_wcc }))) {
        check_round_trip(&RenameArgs { from, to })?;
        check_round_trip(&res)?;
    }

    #[test]
    fn rt_link(file in s_fh(), link in s_dirop(),
               res in s_res((s_post_op_attr(), s_wcc()).prop_map(|(file_attributes, linkdir_wcc)| LinkResOk { file_attributes, linkdir_wcc }),
                            (s_post_op_attr(), s_wcc()).prop_map(|(file_attributes, linkdir_wcc)| LinkResFail { file_attributes, linkdir_wcc }))) {
        check_round_trip(&LinkArgs { file, link })?;
        check_round_trip(&res)?;
    }

    #[test]
    fn rt_readdir(dir in s_fh(), cookie in any::<u64>(), cv in s_verf(), count in any::<u32>(),
                  res in s_res((s_post_op_attr(), s_verf(),
                                vec((any::<u64>(), s_name(), any::<u64>()).prop_map(|(fileid, name, cookie)| Entry3 { fileid, name, cookie }), 0..6),
                                any::<bool>())
                                   .prop_map(|(dir_attributes, v, entries, eof)| ReaddirResOk { dir_attributes, cookieverf: Cookieverf3(v), reply: Dirlist3 { entries, eof } }),
                               s_post_op_attr().prop_map(|dir_attributes| ReaddirResFail { dir_attributes }))) {
        check_round_trip(&ReaddirArgs { dir, cookie, cookieverf: Cookieverf3(cv), count })?;
        check_round_trip(&res)?;
    }

    #[test]
    fn rt_readdirplus(dir in s_fh(), cookie in any::<u64>(), cv in s_verf(), dircount in any::<u32>(), maxcount in any::<u32>(),
                      res in s_res((s_post_op_attr(), s_verf(),
                                    vec((any::<u64>(), s_name(), any::<u64>(), s_post_op_attr(), option::of(s_fh()))
                                            .prop_map(|(fileid, name, cookie, name_attributes, name_handle)| Entryplus3 { fileid, name, cookie, name_attributes, name_handle }), 0..4),
                                    any::<bool>())
                                       .prop_map(|(dir_attributes, v, entries, eof)| ReaddirplusResOk { dir_attributes, cookieverf: Cookieverf3(v), reply: Dirlistplus3 { entries, eof } }),
                                   s_post_op_attr().prop_map(|dir_attributes| ReaddirplusResFail { dir_attributes }))) {
        check_round_trip(&ReaddirplusArgs { dir, cookie, cookieverf: Cookieverf3(cv), dircount, maxcount })?;
        check_round_trip(&res)?;
    }

    #[test]
    fn rt_fsstat(fsroot in s_fh(), attrs in s_post_op_attr(), n in any::<[u64; 6]>(), invarsec in any::<u32>(), status in s_fail_status()) {
        check_round_trip(&FsstatArgs { fsroot })?;
        check_round_trip(&FsstatRes::Ok(FsstatResOk {
            obj_attributes: attrs.clone(), tbytes: n[0], fbytes: n[1], abytes: n[2], tfiles: n[3], ffiles: n[4], afiles: n[5], invarsec,
        }))?;
        check_round_trip(&FsstatRes::Fail { status, resfail: FsstatResFail { obj_attributes: attrs } })?;
    }

    #[test]
    fn rt_fsinfo(fsroot in s_fh(), attrs in s_post_op_attr(), w in any::<[u32; 8]>(), maxfilesize in any::<u64>(), time_delta in s_time(), status in s_fail_status()) {
        check_round_trip(&FsinfoArgs { fsroot })?;
        check_round_trip(&FsinfoRes::Ok(FsinfoResOk {
            obj_attributes: attrs.clone(), rtmax: w[0], rtpref: w[1], rtmult: w[2], wtmax: w[3], wtpref: w[4], wtmult: w[5], dtpref: w[6],
            maxfilesize, time_delta, properties: w[7],
        }))?;
        check_round_trip(&FsinfoRes::Fail { status, resfail: FsinfoResFail { obj_attributes: attrs } })?;
    }

    #[test]
    fn rt_pathconf(object in s_fh(), attrs in s_post_op_attr(), linkmax in any::<u32>(), name_max in any::<u32>(), b in any::<[bool; 4]>(), status in s_fail_status()) {
        check_round_trip(&PathconfArgs { object })?;
        check_round_trip(&PathconfRes::Ok(PathconfResOk {
            obj_attributes: attrs.clone(), linkmax, name_max, no_trunc: b[0], chown_restricted: b[1], case_insensitive: b[2], case_preserving: b[3],
        }))?;
        check_round_trip(&PathconfRes::Fail { status, resfail: PathconfResFail { obj_attributes: attrs } })?;
    }

    #[test]
    fn rt_commit(file in s_fh(), offset in any::<u64>(), count in any::<u32>(),
                 res in s_res((s_wcc(), s_verf()).prop_map(|(file_wcc, v)| CommitResOk { file_wcc, verf: Writeverf3(v) }),
                              s_wcc().prop_map(|file_wcc| CommitResFail { file_wcc }))) {
        check_round_trip(&CommitArgs { file, offset, count })?;
        check_round_trip(&res)?;
    }

    /// Locate agrees with the head decoder for any READ / READLINK head behind any reply
    /// header.
    #[test]
    fn locate_matches_head_decoder(attrs in s_post_op_attr(), len in any::<u32>(), status in prop_oneof![Just(Nfsstat3::OK), s_fail_status()],
                                   verf in vec(any::<u8>(), 0..=400), stat in 0u32..6, tail in vec(any::<u8>(), 0..64)) {
        let stat = match stat {
            0 => AcceptStat::Success,
            1 => AcceptStat::ProgUnavail,
            2 => AcceptStat::ProgMismatch { low: 1, high: 2 },
            3 => AcceptStat::ProcUnavail,
            4 => AcceptStat::GarbageArgs,
            _ => AcceptStat::SystemErr,
        };
        let h = ReplyHeader::Accepted { xid: 3, verf: Auth::Other { flavor: 9, body: verf }, stat };
        let mut e = Encoder::new();
        ReadHead { status, file_attributes: attrs.clone(), count: len, eof: true, data_len: len }.encode(&mut e);
        let mut b = reply_bytes(&h, &e.finish().unwrap());
        let head_len = b.len();
        b.extend_from_slice(&tail);
        let want = (stat == AcceptStat::Success && status.is_ok()).then_some(head_len);
        prop_assert_eq!(locate_read_data(&split_chain(&b)), want);

        let len = len % (NFS3_MAXPATHLEN as u32 + 1);
        let mut e = Encoder::new();
        ReadlinkHead { status, symlink_attributes: attrs, data_len: len }.encode(&mut e);
        let mut b = reply_bytes(&h, &e.finish().unwrap());
        let head_len = b.len();
        b.extend_from_slice(&tail);
        let want = (stat == AcceptStat::Success && status.is_ok()).then_some(head_len);
        prop_assert_eq!(locate_readlink_data(&Chain::from_bytes(&b).unwrap()), want);
    }
}

// ---------------------------------------------------------------------------------------
// arbitrary input never panics

/// Run every decoder (and the locate functions) over `b`; only the absence of a panic is
/// checked, and that a successful decode consumed no more than the input.
fn decode_everything(b: &[u8]) {
    fn one<T: Xdr>(b: &[u8]) {
        let mut d = Decoder::new(b);
        if T::decode(&mut d).is_ok() {
            assert!(d.pos() <= b.len());
        }
    }
    one::<NullArgs>(b);
    one::<NullRes>(b);
    one::<GetattrArgs>(b);
    one::<GetattrRes>(b);
    one::<SetattrArgs>(b);
    one::<SetattrRes>(b);
    one::<LookupArgs>(b);
    one::<LookupRes>(b);
    one::<AccessArgs>(b);
    one::<AccessRes>(b);
    one::<ReadlinkArgs>(b);
    one::<ReadlinkRes>(b);
    one::<ReadArgs>(b);
    one::<ReadRes>(b);
    one::<WriteArgs>(b);
    one::<WriteRes>(b);
    one::<CreateArgs>(b);
    one::<CreateRes>(b);
    one::<MkdirArgs>(b);
    one::<MkdirRes>(b);
    one::<SymlinkArgs>(b);
    one::<SymlinkRes>(b);
    one::<MknodArgs>(b);
    one::<MknodRes>(b);
    one::<RemoveArgs>(b);
    one::<RemoveRes>(b);
    one::<RmdirArgs>(b);
    one::<RmdirRes>(b);
    one::<RenameArgs>(b);
    one::<RenameRes>(b);
    one::<LinkArgs>(b);
    one::<LinkRes>(b);
    one::<ReaddirArgs>(b);
    one::<ReaddirRes>(b);
    one::<ReaddirplusArgs>(b);
    one::<ReaddirplusRes>(b);
    one::<FsstatArgs>(b);
    one::<FsstatRes>(b);
    one::<FsinfoArgs>(b);
    one::<FsinfoRes>(b);
    one::<PathconfArgs>(b);
    one::<PathconfRes>(b);
    one::<CommitArgs>(b);
    one::<CommitRes>(b);
    let _ = WriteArgs::decode_head(&mut Decoder::new(b));
    let _ = WriteArgs::decode_with_max(&mut Decoder::new(b), 16);
    let _ = SymlinkArgs::decode_head(&mut Decoder::new(b));
    let _ = ReadRes::decode_head(&mut Decoder::new(b));
    let _ = ReadRes::decode_with_max(&mut Decoder::new(b), 16);
    let _ = ReadlinkRes::decode_head(&mut Decoder::new(b));
    let c = Chain::from_bytes(b).unwrap();
    if let Some(at) = locate_read_data(&c) {
        assert!(at <= b.len());
    }
    if let Some(at) = locate_readlink_data(&c) {
        assert!(at <= b.len());
    }
}

/// XDR-looking words: mostly small values (booleans, discriminants, short lengths).
fn s_wordy() -> impl Strategy<Value = Vec<u8>> {
    vec(
        prop_oneof![
            4 => 0u32..3,
            2 => 0u32..80,
            1 => Just(1u32).prop_map(|_| 0xffff_ffff),
            1 => any::<u32>(),
        ],
        0..160,
    )
    .prop_map(|w| words(&w))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(b in vec(any::<u8>(), 0..700)) {
        decode_everything(&b);
    }

    #[test]
    fn arbitrary_words_never_panic(b in s_wordy(), cut in any::<prop::sample::Index>()) {
        decode_everything(&b);
        // And an unaligned truncation of it.
        let n = cut.index(b.len() + 1);
        decode_everything(&b[..n]);
    }

    #[test]
    fn arbitrary_reply_bodies_never_panic(body in s_wordy(), stat in 0u32..2) {
        // Behind a valid success header, so the locate functions reach the NFS part.
        let h = if stat == 0 { ReplyHeader::success(1) } else {
            ReplyHeader::Accepted { xid: 1, verf: Auth::None, stat: AcceptStat::SystemErr }
        };
        decode_everything(&reply_bytes(&h, &body));
    }
}
