//! Fuzzes nfs-proto's NFSv4.1 decoders of peer data: COMPOUND arguments and results,
//! CB_COMPOUND arguments and results (what a callback service decodes), the typed
//! attributes, the RFC 8267 head decoders and locate functions, behind RPC headers or not.
//!
//! Properties checked on every input:
//! * no decoder panics (the build has overflow checks and debug assertions on);
//! * whatever decodes re-encodes, and decoding that encoding gives the same value back;
//! * a `locate` answer lies inside the chain.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mbuf::Chain;
use nfs_proto::nfs4::*;
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
    // Behind RPC headers, as a server / client / callback service would.
    let mut d = Decoder::new(data);
    if CallHeader::decode(&mut d).is_ok() {
        let body = &data[d.pos()..];
        let _ = Compound4Args::decode_write_head(&mut Decoder::new(body));
        round_trip!(body, Compound4Args, CbCompound4Args);
    }
    let mut d = Decoder::new(data);
    if ReplyHeader::decode(&mut d).is_ok() {
        let body = &data[d.pos()..];
        let _ = Compound4Res::decode_read_head(&mut Decoder::new(body));
        round_trip!(body, Compound4Res, CbCompound4Res);
    }
    round_trip!(
        data,
        Compound4Args,
        Compound4Res,
        CbCompound4Args,
        CbCompound4Res,
        NfsArgop4,
        NfsResop4,
        NfsCbArgop4,
        NfsCbResop4,
        Fattr4,
        Open4Args,
        Open4ResOk,
        ExchangeId4Args,
        ExchangeId4ResOk,
        CreateSession4Args,
        CreateSession4ResOk,
        CbSequence4Args,
    );
    // The typed attributes: whatever converts converts back to the same set.
    if let Ok(f) = Fattr4::decode(&mut Decoder::new(data)) {
        if let Ok(a) = Attrs4::from_fattr4(&f) {
            let again = a.to_fattr4().expect("typed attributes must encode");
            assert_eq!(Attrs4::from_fattr4(&again), Ok(a));
        }
    }
    if let Ok(c) = Chain::from_bytes(data) {
        for at in [locate_read_data(&c), locate_write_data(&c)]
            .into_iter()
            .flatten()
        {
            assert!(at <= c.len());
        }
        if let Some((off, len)) = locate_read_item(&c) {
            assert!(off + len <= c.len());
        }
    }
});
