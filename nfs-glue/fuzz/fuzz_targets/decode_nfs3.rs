//! Fuzzes onc-rpc's and nfs-proto's decoders of peer data: ONC RPC call and reply headers,
//! every NFSv3 argument and result type, the RFC 8267 head decoders, the requester's `locate`
//! functions, and `ddp_data` on a chain holding the input.
//!
//! Properties checked on every input:
//! * no decoder panics (the build has overflow checks and debug assertions on);
//! * whatever decodes re-encodes, and decoding that encoding gives the same value back;
//! * a `locate` answer lies inside the chain.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mbuf::Chain;
use nfs_proto::nfs3::*;
use onc_rpc::rpc::{CallHeader, ReplyHeader};
use onc_rpc::xdr::{Decoder, Encoder};

macro_rules! round_trip {
    ($data:expr, $($t:ty),* $(,)?) => {$(
        let mut d = Decoder::new($data);
        if let Ok(v) = <$t as Xdr>::decode(&mut d) {
            assert!(d.pos() <= $data.len());
            let mut e = Encoder::new();
            v.encode(&mut e);
            let bytes = e.finish().expect(concat!(stringify!($t), ": decoded value must encode"));
            let back = <$t as Xdr>::decode(&mut Decoder::new(&bytes))
                .expect(concat!(stringify!($t), ": its own encoding must decode"));
            assert_eq!(back, v, concat!(stringify!($t), ": round trip differs"));
        }
    )*};
}

fuzz_target!(|data: &[u8]| {
    // RPC headers, then (as a server / client would) the NFS body behind them.
    let mut d = Decoder::new(data);
    if let Ok(h) = CallHeader::decode(&mut d) {
        let body = &data[d.pos()..];
        let _ = WriteArgs::decode_head(&mut Decoder::new(body));
        let _ = SymlinkArgs::decode_head(&mut Decoder::new(body));
        let mut e = Encoder::new();
        h.encode(&mut e);
        let bytes = e.finish().expect("call header encodes");
        assert_eq!(CallHeader::decode(&mut Decoder::new(&bytes)).ok(), Some(h));
    }
    let mut d = Decoder::new(data);
    if let Ok(h) = ReplyHeader::decode(&mut d) {
        let body = &data[d.pos()..];
        let _ = ReadRes::decode_head(&mut Decoder::new(body));
        let _ = ReadlinkRes::decode_head(&mut Decoder::new(body));
        let mut e = Encoder::new();
        h.encode(&mut e);
        let bytes = e.finish().expect("reply header encodes");
        assert_eq!(ReplyHeader::decode(&mut Decoder::new(&bytes)).ok(), Some(h));
    }
    round_trip!(
        data, NullArgs, GetattrArgs, SetattrArgs, LookupArgs, AccessArgs, ReadlinkArgs, ReadArgs,
        WriteArgs, CreateArgs, MkdirArgs, SymlinkArgs, MknodArgs, RemoveArgs, RmdirArgs,
        RenameArgs, LinkArgs, ReaddirArgs, ReaddirplusArgs, FsstatArgs, FsinfoArgs, PathconfArgs,
        CommitArgs, GetattrRes, SetattrRes, LookupRes, AccessRes, ReadlinkRes, ReadRes, WriteRes,
        CreateRes, MkdirRes, SymlinkRes, MknodRes, RemoveRes, RmdirRes, RenameRes, LinkRes,
        ReaddirRes, ReaddirplusRes, FsstatRes, FsinfoRes, PathconfRes, CommitRes,
    );
    if let Ok(c) = Chain::from_bytes(data) {
        for at in [locate_read_data(&c), locate_readlink_data(&c)].into_iter().flatten() {
            assert!(at <= c.len());
        }
        let _ = nfs_proto::chain::ddp_data(&c);
    }
});
