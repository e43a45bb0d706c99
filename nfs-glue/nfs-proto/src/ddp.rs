//! Which NFS data items may use Direct Data Placement (DDP), after the NFS Upper-Layer Binding
//! to RPC-over-RDMA version 1 ([RFC 8267]), as data the transport and the NFS client and
//! server consult.
//!
//! RPC-over-RDMA (RFC 8166) leaves it to an Upper-Layer Binding to say which XDR data items
//! may travel in chunks. For NFS the list is short:
//!
//! * **NFS versions 2 and 3** (program [`NFS_PROGRAM`]): the opaque file data argument of
//!   WRITE and the pathname argument of SYMLINK (calls: a *read chunk*, the responder pulls
//!   the data), the opaque file data result of READ and the pathname result of READLINK
//!   (replies: a *write chunk*, the responder pushes the data into the requester's memory).
//!   Tables [`NFS2_DDP`] and [`NFS3_DDP`].
//! * **NFS version 4.0, 4.1 and 4.2** (the COMPOUND procedure, classified per operation): the
//!   data of WRITE4args, the `linkdata` of the `NF4LNK` arm of `createtype4` (CREATE of a
//!   symbolic link), the data of READ4resok and the `linkdata` of READLINK4resok. Table
//!   [`NFS4_DDP`]. The NFSv4.2 READ_PLUS result is explicitly *not* DDP-eligible.
//! * Everything else — every other NFS argument and result, the MOUNT, NLM, NSM and NFSACL
//!   programs, and the NFSv4 callback programs — is not DDP-eligible.
//!
//! Independently of DDP, a requester must provision room for the whole reply before it sends
//! the call. When the largest possible reply does not fit the inline threshold and is not a
//! DDP-eligible result, the requester provides a *reply chunk* (Long Reply). [`ReplyHint`]
//! models this per procedure: [`nfs3_reply_hint`], [`nfs2_reply_hint`],
//! [`nfs4_op_reply_hint`], [`nfsacl_reply_hint`], and [`reply_hint`] by program and version.
//!
//! Sources: the eligibility lists above were checked against the text of the NFS ULB for
//! RPC-over-RDMA version 2 (draft-ietf-nfsv4-nfs-ulb-v2), which repeats RFC 8267's lists for
//! both NFS families and adds the READ_PLUS exclusion; RFC 8267's own section text was not
//! available here, so no section numbers are cited. Which procedures are classed "reply may
//! be long" is this crate's reading of the ULB's reply-size-estimation rules (see
//! [`ReplyHint::ReplyChunk`]), not a list taken from the RFC.
//!
//! [RFC 8267]: https://www.rfc-editor.org/rfc/rfc8267

/// The NFS RPC program number.
pub const NFS_PROGRAM: u32 = 100_003;
/// The MOUNT RPC program number (no DDP-eligible items; usually carried over TCP).
pub const MOUNT_PROGRAM: u32 = 100_005;
/// The NLM (lock manager) RPC program number (no DDP-eligible items).
pub const NLM_PROGRAM: u32 = 100_021;
/// The NSM (status monitor) RPC program number (no DDP-eligible items).
pub const NSM_PROGRAM: u32 = 100_024;
/// The NFSACL RPC program number (no DDP-eligible items; ACL replies may be long).
pub const NFSACL_PROGRAM: u32 = 100_227;

/// NFSv2 procedure numbers (RFC 1094) that matter here.
pub mod nfs2_proc {
    /// READLINK.
    pub const READLINK: u32 = 5;
    /// READ.
    pub const READ: u32 = 6;
    /// WRITE.
    pub const WRITE: u32 = 8;
    /// SYMLINK.
    pub const SYMLINK: u32 = 13;
    /// READDIR.
    pub const READDIR: u32 = 16;
    /// The last procedure (STATFS).
    pub const LAST: u32 = 17;
}

/// NFSv3 procedure numbers (RFC 1813) that matter here.
pub mod nfs3_proc {
    /// READLINK.
    pub const READLINK: u32 = 5;
    /// READ.
    pub const READ: u32 = 6;
    /// WRITE.
    pub const WRITE: u32 = 7;
    /// SYMLINK.
    pub const SYMLINK: u32 = 10;
    /// READDIR.
    pub const READDIR: u32 = 16;
    /// READDIRPLUS.
    pub const READDIRPLUS: u32 = 17;
    /// The last procedure (COMMIT).
    pub const LAST: u32 = 21;
}

/// NFSv4 operation numbers (RFC 7530, RFC 8881, RFC 7862) that matter here.
pub mod nfs4_op {
    /// CREATE (DDP-eligible only for `NF4LNK`).
    pub const CREATE: u32 = 6;
    /// GETATTR.
    pub const GETATTR: u32 = 9;
    /// READ.
    pub const READ: u32 = 25;
    /// READDIR.
    pub const READDIR: u32 = 26;
    /// READLINK.
    pub const READLINK: u32 = 27;
    /// WRITE.
    pub const WRITE: u32 = 38;
    /// GETDEVICEINFO (NFSv4.1).
    pub const GETDEVICEINFO: u32 = 47;
    /// GETDEVICELIST (NFSv4.1).
    pub const GETDEVICELIST: u32 = 48;
    /// LAYOUTGET (NFSv4.1).
    pub const LAYOUTGET: u32 = 50;
    /// READ_PLUS (NFSv4.2): not DDP-eligible.
    pub const READ_PLUS: u32 = 68;
}

/// `nfs_ftype4` value `NF4LNK` (a symbolic link), the `createtype4` arm of CREATE whose
/// `linkdata` is DDP-eligible.
pub const NF4LNK: u32 = 5;

/// Which message of the RPC carries a DDP-eligible item, and hence which chunk moves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// An argument: in the call, moved through a *read chunk* (the responder RDMA-Reads it).
    Call,
    /// A result: in the reply, moved through a *write chunk* (the responder RDMA-Writes it
    /// into memory the requester registered).
    Reply,
}

/// A DDP-eligible data item of one procedure or operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DdpItem {
    /// Call argument or reply result.
    pub direction: Direction,
    /// What the item is (for logs and documentation).
    pub what: &'static str,
}

/// One row of an eligibility table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DdpEntry {
    /// Procedure number (NFSv2/v3) or operation number (NFSv4).
    pub number: u32,
    /// Procedure or operation name.
    pub name: &'static str,
    /// The eligible item.
    pub item: DdpItem,
}

const fn entry(
    number: u32,
    name: &'static str,
    direction: Direction,
    what: &'static str,
) -> DdpEntry {
    DdpEntry {
        number,
        name,
        item: DdpItem { direction, what },
    }
}

/// The DDP-eligible items of NFS version 2. Every procedure not listed has none.
pub static NFS2_DDP: [DdpEntry; 4] = [
    entry(
        nfs2_proc::READLINK,
        "READLINK",
        Direction::Reply,
        "pathname result",
    ),
    entry(
        nfs2_proc::READ,
        "READ",
        Direction::Reply,
        "opaque file data result",
    ),
    entry(
        nfs2_proc::WRITE,
        "WRITE",
        Direction::Call,
        "opaque file data argument",
    ),
    entry(
        nfs2_proc::SYMLINK,
        "SYMLINK",
        Direction::Call,
        "pathname argument",
    ),
];

/// The DDP-eligible items of NFS version 3. Every procedure not listed has none.
pub static NFS3_DDP: [DdpEntry; 4] = [
    entry(
        nfs3_proc::READLINK,
        "READLINK",
        Direction::Reply,
        "pathname result",
    ),
    entry(
        nfs3_proc::READ,
        "READ",
        Direction::Reply,
        "opaque file data result",
    ),
    entry(
        nfs3_proc::WRITE,
        "WRITE",
        Direction::Call,
        "opaque file data argument",
    ),
    entry(
        nfs3_proc::SYMLINK,
        "SYMLINK",
        Direction::Call,
        "pathname argument",
    ),
];

/// The DDP-eligible items of the NFSv4 COMPOUND procedure (all minor versions), by operation.
/// The CREATE row applies only to the `NF4LNK` arm (see [`nfs4_op_ddp_item`]). Every operation
/// not listed (READ_PLUS included) has none.
pub static NFS4_DDP: [DdpEntry; 4] = [
    entry(
        nfs4_op::CREATE,
        "CREATE",
        Direction::Call,
        "linkdata of the NF4LNK createtype4 arm",
    ),
    entry(
        nfs4_op::READ,
        "READ",
        Direction::Reply,
        "data of READ4resok",
    ),
    entry(
        nfs4_op::READLINK,
        "READLINK",
        Direction::Reply,
        "linkdata of READLINK4resok",
    ),
    entry(
        nfs4_op::WRITE,
        "WRITE",
        Direction::Call,
        "data of WRITE4args",
    ),
];

fn lookup(table: &'static [DdpEntry], number: u32) -> Option<DdpItem> {
    table.iter().find(|e| e.number == number).map(|e| e.item)
}

/// The DDP-eligible item of NFSv2 procedure `proc_`, if it has one.
pub fn nfs2_ddp_item(proc_: u32) -> Option<DdpItem> {
    lookup(&NFS2_DDP, proc_)
}

/// The DDP-eligible item of NFSv3 procedure `proc_`, if it has one (READ and READLINK
/// results, WRITE and SYMLINK arguments).
pub fn nfs3_ddp_item(proc_: u32) -> Option<DdpItem> {
    lookup(&NFS3_DDP, proc_)
}

/// The DDP-eligible item of NFSv4 operation `op` inside a COMPOUND, if it has one.
///
/// `create_type` is the `nfs_ftype4` of a CREATE's `objtype` (ignored for other operations):
/// CREATE is eligible only when it is [`NF4LNK`]; `None` (type not known) is treated as not
/// eligible.
pub fn nfs4_op_ddp_item(op: u32, create_type: Option<u32>) -> Option<DdpItem> {
    if op == nfs4_op::CREATE && create_type != Some(NF4LNK) {
        return None;
    }
    lookup(&NFS4_DDP, op)
}

/// The DDP-eligible item of a procedure of `program` version `vers`, for the programs
/// classified per procedure: NFS versions 2 and 3. Everything else gives `None`: NFSv4
/// (classify each COMPOUND operation with [`nfs4_op_ddp_item`]) and the MOUNT, NLM, NSM and
/// NFSACL programs, which have no DDP-eligible items.
pub fn ddp_item(program: u32, vers: u32, proc_: u32) -> Option<DdpItem> {
    match (program, vers) {
        (NFS_PROGRAM, 2) => nfs2_ddp_item(proc_),
        (NFS_PROGRAM, 3) => nfs3_ddp_item(proc_),
        _ => None,
    }
}

/// How a requester should provision for a procedure's reply.
///
/// The transport makes the final choice from sizes (krpc-rdma's requester: no chunk when the
/// largest reply fits inline, a write chunk for a DDP result when the rest then fits, else a
/// reply chunk); this hint says what the procedure's reply is *like*.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplyHint {
    /// The reply's size is bounded by its XDR definition and small: no chunk needed with the
    /// usual 1 KiB or larger inline thresholds.
    Inline,
    /// The reply carries a DDP-eligible result: provision a write chunk in the caller's
    /// pages (page mbufs), of the requested size; the rest of the reply is small.
    WriteChunk,
    /// The reply may exceed the inline threshold and has no DDP-eligible item (directory
    /// listings, ACLs, NFSv4 attribute lists and layouts, READ_PLUS): size the reply from the
    /// request (e.g. READDIR's `count`) and provision a reply chunk when that exceeds the
    /// inline receive size.
    ReplyChunk,
}

/// Reply provisioning for NFSv3 procedure `proc_`: READ and READLINK ⇒
/// [`ReplyHint::WriteChunk`]; READDIR and READDIRPLUS (their size is the caller's
/// `count`/`maxcount`) ⇒ [`ReplyHint::ReplyChunk`]; everything else (unknown procedures too:
/// their reply is a short PROC_UNAVAIL) ⇒ [`ReplyHint::Inline`].
pub fn nfs3_reply_hint(proc_: u32) -> ReplyHint {
    match proc_ {
        nfs3_proc::READ | nfs3_proc::READLINK => ReplyHint::WriteChunk,
        nfs3_proc::READDIR | nfs3_proc::READDIRPLUS => ReplyHint::ReplyChunk,
        _ => ReplyHint::Inline,
    }
}

/// Reply provisioning for NFSv2 procedure `proc_`: READ and READLINK ⇒
/// [`ReplyHint::WriteChunk`]; READDIR ⇒ [`ReplyHint::ReplyChunk`]; others ⇒
/// [`ReplyHint::Inline`].
pub fn nfs2_reply_hint(proc_: u32) -> ReplyHint {
    match proc_ {
        nfs2_proc::READ | nfs2_proc::READLINK => ReplyHint::WriteChunk,
        nfs2_proc::READDIR => ReplyHint::ReplyChunk,
        _ => ReplyHint::Inline,
    }
}

/// Reply provisioning for one NFSv4 operation of a COMPOUND: READ and READLINK ⇒
/// [`ReplyHint::WriteChunk`]; operations whose results have no protocol bound — GETATTR and
/// READDIR (`attrlist4`, ACLs, `fs_locations`), LAYOUTGET, GETDEVICEINFO and GETDEVICELIST
/// (layout and device bodies) — and READ_PLUS (large, not DDP-eligible) ⇒
/// [`ReplyHint::ReplyChunk`]; others ⇒ [`ReplyHint::Inline`].
///
/// A COMPOUND needs one write chunk per [`ReplyHint::WriteChunk`] operation (the *n*-th
/// write chunk goes to the *n*-th such operation) and a reply chunk if any operation says
/// [`ReplyHint::ReplyChunk`]. NFSv4.1 clients can bound a reply by the session's
/// `ca_maxresponsesize`.
pub fn nfs4_op_reply_hint(op: u32) -> ReplyHint {
    match op {
        nfs4_op::READ | nfs4_op::READLINK => ReplyHint::WriteChunk,
        nfs4_op::GETATTR
        | nfs4_op::READDIR
        | nfs4_op::GETDEVICEINFO
        | nfs4_op::GETDEVICELIST
        | nfs4_op::LAYOUTGET
        | nfs4_op::READ_PLUS => ReplyHint::ReplyChunk,
        _ => ReplyHint::Inline,
    }
}

/// NFSACL procedure GETACL (procedure 1 in versions 2 and 3 of [`NFSACL_PROGRAM`]).
pub const NFSACL_GETACL: u32 = 1;

/// Reply provisioning for the NFSACL program: GETACL ⇒ [`ReplyHint::ReplyChunk`] (ACLs have
/// no DDP-eligible item and no protocol bound), others ⇒ [`ReplyHint::Inline`].
pub fn nfsacl_reply_hint(proc_: u32) -> ReplyHint {
    if proc_ == NFSACL_GETACL {
        ReplyHint::ReplyChunk
    } else {
        ReplyHint::Inline
    }
}

/// MOUNT procedure DUMP (versions 1 to 3): the list of mounts, unbounded.
pub const MOUNT_DUMP: u32 = 2;
/// MOUNT procedure EXPORT (versions 1 to 3): the export list, unbounded.
pub const MOUNT_EXPORT: u32 = 5;

/// Reply provisioning for the MOUNT program: DUMP and EXPORT (lists without a protocol
/// bound) ⇒ [`ReplyHint::ReplyChunk`], others ⇒ [`ReplyHint::Inline`]. (MOUNT is usually
/// carried over TCP even when NFS runs over RDMA.)
pub fn mount_reply_hint(proc_: u32) -> ReplyHint {
    match proc_ {
        MOUNT_DUMP | MOUNT_EXPORT => ReplyHint::ReplyChunk,
        _ => ReplyHint::Inline,
    }
}

/// Reply provisioning by program, version and procedure: NFS versions 2 and 3, NFSACL
/// versions 2 and 3 and MOUNT versions 1 to 3 per procedure; NLM and NSM ⇒
/// [`ReplyHint::Inline`]. `None` for NFSv4 (classify each COMPOUND operation with
/// [`nfs4_op_reply_hint`]) and for programs or versions not known here.
pub fn reply_hint(program: u32, vers: u32, proc_: u32) -> Option<ReplyHint> {
    match (program, vers) {
        (NFS_PROGRAM, 2) => Some(nfs2_reply_hint(proc_)),
        (NFS_PROGRAM, 3) => Some(nfs3_reply_hint(proc_)),
        (NFSACL_PROGRAM, 2 | 3) => Some(nfsacl_reply_hint(proc_)),
        (MOUNT_PROGRAM, 1..=3) => Some(mount_reply_hint(proc_)),
        (NLM_PROGRAM | NSM_PROGRAM, _) => Some(ReplyHint::Inline),
        _ => None,
    }
}
