//! Fuzzes the RPC-over-RDMA header decoder and the RFC 8797 private-data decoder.
//!
//! Properties checked on every input:
//! * neither decoder panics, and neither does any accessor of an unchecked view;
//! * when `HeaderRepr::parse` accepts the input, `emit` reproduces exactly the header prefix of
//!   the input, parsing that again gives the same repr, and the checked view agrees;
//! * private data that decodes re-encodes to the same bytes (reserved flag bits cleared).
#![no_main]

use krpc_rdma::wire::{CmPrivateData, Header, HeaderRepr, MAX_HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let view = Header::new_unchecked(data);
    let _ = (view.xid(), view.vers(), view.credit(), view.proc_());
    let _ = (view.read_list().count(), view.read_chunks().count());
    let _ = view.write_list().map(|c| c.total_length()).sum::<u64>();
    let _ = (view.reply_chunk(), view.error_body(), view.payload().len());
    assert!(view.header_len() <= data.len());

    match HeaderRepr::parse(data) {
        Ok(repr) => {
            let len = repr.buffer_len();
            assert!(len <= data.len() && len <= MAX_HEADER_LEN);
            let mut out = vec![0u8; len];
            assert_eq!(repr.emit(&mut out), Ok(len));
            assert_eq!(&out[..], &data[..len], "re-encoding differs from the input");
            let again = HeaderRepr::parse(&out).expect("re-encoded header must parse");
            assert_eq!(again, repr);
            let checked = Header::new_checked(data).expect("view must accept what parse accepts");
            assert_eq!(checked.header_len(), len);
        }
        Err(e) => {
            assert!(Header::new_checked(data).is_err());
            assert_eq!(e.xid().is_some(), data.len() >= 4);
            let _ = (e.to_string(), e.reply_error(), e.error_reply(1));
        }
    }

    if let Some(pd) = CmPrivateData::parse(data) {
        let mut expected = [0u8; 8];
        expected.copy_from_slice(&data[..8]);
        expected[5] &= 1;
        assert_eq!(pd.to_bytes(), expected);
        assert_eq!(CmPrivateData::parse(&pd.to_bytes()), Some(pd));
    } else {
        assert_eq!(CmPrivateData::from_peer(data), CmPrivateData::DEFAULT);
    }
});
