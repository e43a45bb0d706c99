//! Mbuf flags (`m_flags`).

bitflags::bitflags! {
    /// Per-mbuf flags, a subset of FreeBSD's `m_flags`.
    ///
    /// The bit values are those of FreeBSD 13+ `sys/sys/mbuf.h` so a translation layer can
    /// copy them, but nothing in this crate depends on that.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct MbufFlags: u32 {
        /// `M_PKTHDR`: first mbuf of a packet/record. Chain operations keep it on the first
        /// mbuf only (see the crate docs, "Packet header").
        const PKTHDR = 0x0000_0002;
        /// `M_EOR`: end of record. [`Chain::split`](crate::Chain::split) moves it to the right
        /// piece of a cut mbuf; no other operation moves it.
        const EOR = 0x0000_0004;
        /// `M_RDONLY`: the data must not be written. Write operations return
        /// [`MbufError::ReadOnly`](crate::MbufError::ReadOnly); prepend/append/pullup never use
        /// the spare space of such an mbuf.
        const RDONLY = 0x0000_0008;
        /// `M_EXTPG`: the mbuf is a page mbuf. Derived from the mbuf kind: always reported
        /// for page mbufs, never stored, ignored by the flag setters.
        const EXTPG = 0x0000_0100;
        /// `M_PROTO1`: protocol specific; in this project it marks the start of a DDP region
        /// (see [`MbufFlags::DDP_START`]).
        const PROTO1 = 0x0000_2000;
    }
}

impl MbufFlags {
    /// "Start of DDP" marker flag, the documented alias of [`MbufFlags::PROTO1`]
    /// (Macklem's plan: XDR mbufs, then a zero-length marker mbuf with `M_PROTO1`, then the
    /// page mbufs carrying the data, then trailing XDR).
    pub const DDP_START: MbufFlags = MbufFlags::PROTO1;
}
