//! RFC 5662's basic data types: status codes, stateids, file handles, session ids,
//! verifiers, strings, `bitmap4` / `fattr4`, times, owners, implementation ids, state
//! protection, channel attributes, callback security parameters, ACEs.

use alloc::vec::Vec;
use core::fmt;

use super::{
    get_array, get_fixed, put_array, to_vec, Xdr, NFS4_MAX_ATTRLIST, NFS4_MAX_BITMAP_WORDS,
    NFS4_OTHER_SIZE, NFS4_SESSIONID_SIZE, NFS4_VERIFIER_SIZE,
};
use onc_rpc::rpc::{AuthSys, AUTH_NONE, AUTH_SYS, MAX_GIDS, MAX_MACHINE_NAME};
use onc_rpc::xdr::{Decoder, Encoder, XdrError};

/// Define [`Nfsstat4`]'s named constants, its `ALL` list and `name`.
macro_rules! nfsstat4 {
    ($( $(#[$m:meta])* $c:ident = $n:literal => $s:literal, )*) => {
        impl Nfsstat4 {
            $( $(#[$m])* pub const $c: Nfsstat4 = Nfsstat4($n); )*

            /// Every status RFC 8881 defines, in numeric order.
            pub const ALL: &'static [Nfsstat4] = &[$( Nfsstat4::$c, )*];

            /// The RFC 8881 name ("NFS4_OK", "NFS4ERR_NOENT", …), or "NFS4ERR_(unknown)"
            /// for a code it does not define (the [`fmt::Display`] form then shows the
            /// number).
            pub fn name(&self) -> &'static str {
                match self.0 {
                    $( $n => $s, )*
                    _ => UNKNOWN_STATUS,
                }
            }
        }
    };
}

/// `nfsstat4`: the status of an operation or of a COMPOUND. Codes RFC 8881 does not define
/// are kept as they are (decoding never rejects a status), so they can be printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Nfsstat4(pub u32);

nfsstat4! {
    /// `NFS4_OK`.
    OK = 0 => "NFS4_OK",
    /// `NFS4ERR_PERM`: caller not privileged.
    ERR_PERM = 1 => "NFS4ERR_PERM",
    /// `NFS4ERR_NOENT`: no such file or directory.
    ERR_NOENT = 2 => "NFS4ERR_NOENT",
    /// `NFS4ERR_IO`: I/O error.
    ERR_IO = 5 => "NFS4ERR_IO",
    /// `NFS4ERR_NXIO`: no such device.
    ERR_NXIO = 6 => "NFS4ERR_NXIO",
    /// `NFS4ERR_ACCESS`: access denied.
    ERR_ACCESS = 13 => "NFS4ERR_ACCESS",
    /// `NFS4ERR_EXIST`: the file exists.
    ERR_EXIST = 17 => "NFS4ERR_EXIST",
    /// `NFS4ERR_XDEV`: different file systems.
    ERR_XDEV = 18 => "NFS4ERR_XDEV",
    /// `NFS4ERR_NOTDIR`: not a directory.
    ERR_NOTDIR = 20 => "NFS4ERR_NOTDIR",
    /// `NFS4ERR_ISDIR`: is a directory.
    ERR_ISDIR = 21 => "NFS4ERR_ISDIR",
    /// `NFS4ERR_INVAL`: invalid argument.
    ERR_INVAL = 22 => "NFS4ERR_INVAL",
    /// `NFS4ERR_FBIG`: file too large.
    ERR_FBIG = 27 => "NFS4ERR_FBIG",
    /// `NFS4ERR_NOSPC`: out of space.
    ERR_NOSPC = 28 => "NFS4ERR_NOSPC",
    /// `NFS4ERR_ROFS`: read-only file system.
    ERR_ROFS = 30 => "NFS4ERR_ROFS",
    /// `NFS4ERR_MLINK`: too many hard links.
    ERR_MLINK = 31 => "NFS4ERR_MLINK",
    /// `NFS4ERR_NAMETOOLONG`: name too long.
    ERR_NAMETOOLONG = 63 => "NFS4ERR_NAMETOOLONG",
    /// `NFS4ERR_NOTEMPTY`: directory not empty.
    ERR_NOTEMPTY = 66 => "NFS4ERR_NOTEMPTY",
    /// `NFS4ERR_DQUOT`: quota exceeded.
    ERR_DQUOT = 69 => "NFS4ERR_DQUOT",
    /// `NFS4ERR_STALE`: stale file handle.
    ERR_STALE = 70 => "NFS4ERR_STALE",
    /// `NFS4ERR_BADHANDLE`: illegal file handle.
    ERR_BADHANDLE = 10001 => "NFS4ERR_BADHANDLE",
    /// `NFS4ERR_BAD_COOKIE`: READDIR cookie is stale.
    ERR_BAD_COOKIE = 10003 => "NFS4ERR_BAD_COOKIE",
    /// `NFS4ERR_NOTSUPP`: operation not supported.
    ERR_NOTSUPP = 10004 => "NFS4ERR_NOTSUPP",
    /// `NFS4ERR_TOOSMALL`: response limit exceeded.
    ERR_TOOSMALL = 10005 => "NFS4ERR_TOOSMALL",
    /// `NFS4ERR_SERVERFAULT`: undefined server error.
    ERR_SERVERFAULT = 10006 => "NFS4ERR_SERVERFAULT",
    /// `NFS4ERR_BADTYPE`: type invalid for CREATE.
    ERR_BADTYPE = 10007 => "NFS4ERR_BADTYPE",
    /// `NFS4ERR_DELAY`: file "busy", retry.
    ERR_DELAY = 10008 => "NFS4ERR_DELAY",
    /// `NFS4ERR_SAME`: NVERIFY: the attributes are the same.
    ERR_SAME = 10009 => "NFS4ERR_SAME",
    /// `NFS4ERR_DENIED`: lock unavailable.
    ERR_DENIED = 10010 => "NFS4ERR_DENIED",
    /// `NFS4ERR_EXPIRED`: lock lease expired.
    ERR_EXPIRED = 10011 => "NFS4ERR_EXPIRED",
    /// `NFS4ERR_LOCKED`: I/O failed due to a lock.
    ERR_LOCKED = 10012 => "NFS4ERR_LOCKED",
    /// `NFS4ERR_GRACE`: in grace period.
    ERR_GRACE = 10013 => "NFS4ERR_GRACE",
    /// `NFS4ERR_FHEXPIRED`: file handle expired.
    ERR_FHEXPIRED = 10014 => "NFS4ERR_FHEXPIRED",
    /// `NFS4ERR_SHARE_DENIED`: share reservation denied.
    ERR_SHARE_DENIED = 10015 => "NFS4ERR_SHARE_DENIED",
    /// `NFS4ERR_WRONGSEC`: wrong security flavor.
    ERR_WRONGSEC = 10016 => "NFS4ERR_WRONGSEC",
    /// `NFS4ERR_CLID_INUSE`: client id in use.
    ERR_CLID_INUSE = 10017 => "NFS4ERR_CLID_INUSE",
    /// `NFS4ERR_RESOURCE`: resource exhaustion (NFSv4.0 only).
    ERR_RESOURCE = 10018 => "NFS4ERR_RESOURCE",
    /// `NFS4ERR_MOVED`: file system relocated.
    ERR_MOVED = 10019 => "NFS4ERR_MOVED",
    /// `NFS4ERR_NOFILEHANDLE`: current file handle not set.
    ERR_NOFILEHANDLE = 10020 => "NFS4ERR_NOFILEHANDLE",
    /// `NFS4ERR_MINOR_VERS_MISMATCH`: minor version not supported.
    ERR_MINOR_VERS_MISMATCH = 10021 => "NFS4ERR_MINOR_VERS_MISMATCH",
    /// `NFS4ERR_STALE_CLIENTID`: server has rebooted.
    ERR_STALE_CLIENTID = 10022 => "NFS4ERR_STALE_CLIENTID",
    /// `NFS4ERR_STALE_STATEID`: server has rebooted.
    ERR_STALE_STATEID = 10023 => "NFS4ERR_STALE_STATEID",
    /// `NFS4ERR_OLD_STATEID`: state is out of sync.
    ERR_OLD_STATEID = 10024 => "NFS4ERR_OLD_STATEID",
    /// `NFS4ERR_BAD_STATEID`: incorrect stateid.
    ERR_BAD_STATEID = 10025 => "NFS4ERR_BAD_STATEID",
    /// `NFS4ERR_BAD_SEQID`: request is out of sequence.
    ERR_BAD_SEQID = 10026 => "NFS4ERR_BAD_SEQID",
    /// `NFS4ERR_NOT_SAME`: VERIFY: the attributes differ.
    ERR_NOT_SAME = 10027 => "NFS4ERR_NOT_SAME",
    /// `NFS4ERR_LOCK_RANGE`: overlapping lock range.
    ERR_LOCK_RANGE = 10028 => "NFS4ERR_LOCK_RANGE",
    /// `NFS4ERR_SYMLINK`: should be a file or directory.
    ERR_SYMLINK = 10029 => "NFS4ERR_SYMLINK",
    /// `NFS4ERR_RESTOREFH`: no saved file handle.
    ERR_RESTOREFH = 10030 => "NFS4ERR_RESTOREFH",
    /// `NFS4ERR_LEASE_MOVED`: some file system moved.
    ERR_LEASE_MOVED = 10031 => "NFS4ERR_LEASE_MOVED",
    /// `NFS4ERR_ATTRNOTSUPP`: recommended attribute not supported.
    ERR_ATTRNOTSUPP = 10032 => "NFS4ERR_ATTRNOTSUPP",
    /// `NFS4ERR_NO_GRACE`: reclaim outside of grace.
    ERR_NO_GRACE = 10033 => "NFS4ERR_NO_GRACE",
    /// `NFS4ERR_RECLAIM_BAD`: reclaim error at server.
    ERR_RECLAIM_BAD = 10034 => "NFS4ERR_RECLAIM_BAD",
    /// `NFS4ERR_RECLAIM_CONFLICT`: conflict on reclaim.
    ERR_RECLAIM_CONFLICT = 10035 => "NFS4ERR_RECLAIM_CONFLICT",
    /// `NFS4ERR_BADXDR`: XDR decode failed.
    ERR_BADXDR = 10036 => "NFS4ERR_BADXDR",
    /// `NFS4ERR_LOCKS_HELD`: file locks held at CLOSE.
    ERR_LOCKS_HELD = 10037 => "NFS4ERR_LOCKS_HELD",
    /// `NFS4ERR_OPENMODE`: conflict in OPEN and I/O.
    ERR_OPENMODE = 10038 => "NFS4ERR_OPENMODE",
    /// `NFS4ERR_BADOWNER`: owner translation bad.
    ERR_BADOWNER = 10039 => "NFS4ERR_BADOWNER",
    /// `NFS4ERR_BADCHAR`: UTF-8 character not supported.
    ERR_BADCHAR = 10040 => "NFS4ERR_BADCHAR",
    /// `NFS4ERR_BADNAME`: name not supported.
    ERR_BADNAME = 10041 => "NFS4ERR_BADNAME",
    /// `NFS4ERR_BAD_RANGE`: lock range not supported.
    ERR_BAD_RANGE = 10042 => "NFS4ERR_BAD_RANGE",
    /// `NFS4ERR_LOCK_NOTSUPP`: no atomic upgrade or downgrade.
    ERR_LOCK_NOTSUPP = 10043 => "NFS4ERR_LOCK_NOTSUPP",
    /// `NFS4ERR_OP_ILLEGAL`: undefined operation.
    ERR_OP_ILLEGAL = 10044 => "NFS4ERR_OP_ILLEGAL",
    /// `NFS4ERR_DEADLOCK`: file locking deadlock.
    ERR_DEADLOCK = 10045 => "NFS4ERR_DEADLOCK",
    /// `NFS4ERR_FILE_OPEN`: open file blocks the operation.
    ERR_FILE_OPEN = 10046 => "NFS4ERR_FILE_OPEN",
    /// `NFS4ERR_ADMIN_REVOKED`: lock-owner state revoked.
    ERR_ADMIN_REVOKED = 10047 => "NFS4ERR_ADMIN_REVOKED",
    /// `NFS4ERR_CB_PATH_DOWN`: callback path down.
    ERR_CB_PATH_DOWN = 10048 => "NFS4ERR_CB_PATH_DOWN",
    /// `NFS4ERR_BADIOMODE`.
    ERR_BADIOMODE = 10049 => "NFS4ERR_BADIOMODE",
    /// `NFS4ERR_BADLAYOUT`.
    ERR_BADLAYOUT = 10050 => "NFS4ERR_BADLAYOUT",
    /// `NFS4ERR_BAD_SESSION_DIGEST`.
    ERR_BAD_SESSION_DIGEST = 10051 => "NFS4ERR_BAD_SESSION_DIGEST",
    /// `NFS4ERR_BADSESSION`: unknown session id.
    ERR_BADSESSION = 10052 => "NFS4ERR_BADSESSION",
    /// `NFS4ERR_BADSLOT`: slot id outside the table.
    ERR_BADSLOT = 10053 => "NFS4ERR_BADSLOT",
    /// `NFS4ERR_COMPLETE_ALREADY`: RECLAIM_COMPLETE already done.
    ERR_COMPLETE_ALREADY = 10054 => "NFS4ERR_COMPLETE_ALREADY",
    /// `NFS4ERR_CONN_NOT_BOUND_TO_SESSION`.
    ERR_CONN_NOT_BOUND_TO_SESSION = 10055 => "NFS4ERR_CONN_NOT_BOUND_TO_SESSION",
    /// `NFS4ERR_DELEG_ALREADY_WANTED`.
    ERR_DELEG_ALREADY_WANTED = 10056 => "NFS4ERR_DELEG_ALREADY_WANTED",
    /// `NFS4ERR_BACK_CHAN_BUSY`.
    ERR_BACK_CHAN_BUSY = 10057 => "NFS4ERR_BACK_CHAN_BUSY",
    /// `NFS4ERR_LAYOUTTRYLATER`.
    ERR_LAYOUTTRYLATER = 10058 => "NFS4ERR_LAYOUTTRYLATER",
    /// `NFS4ERR_LAYOUTUNAVAILABLE`.
    ERR_LAYOUTUNAVAILABLE = 10059 => "NFS4ERR_LAYOUTUNAVAILABLE",
    /// `NFS4ERR_NOMATCHING_LAYOUT`.
    ERR_NOMATCHING_LAYOUT = 10060 => "NFS4ERR_NOMATCHING_LAYOUT",
    /// `NFS4ERR_RECALLCONFLICT`.
    ERR_RECALLCONFLICT = 10061 => "NFS4ERR_RECALLCONFLICT",
    /// `NFS4ERR_UNKNOWN_LAYOUTTYPE`.
    ERR_UNKNOWN_LAYOUTTYPE = 10062 => "NFS4ERR_UNKNOWN_LAYOUTTYPE",
    /// `NFS4ERR_SEQ_MISORDERED`: slot sequence id out of order.
    ERR_SEQ_MISORDERED = 10063 => "NFS4ERR_SEQ_MISORDERED",
    /// `NFS4ERR_SEQUENCE_POS`: SEQUENCE not first.
    ERR_SEQUENCE_POS = 10064 => "NFS4ERR_SEQUENCE_POS",
    /// `NFS4ERR_REQ_TOO_BIG`: request exceeds the channel's limit.
    ERR_REQ_TOO_BIG = 10065 => "NFS4ERR_REQ_TOO_BIG",
    /// `NFS4ERR_REP_TOO_BIG`: reply exceeds the channel's limit.
    ERR_REP_TOO_BIG = 10066 => "NFS4ERR_REP_TOO_BIG",
    /// `NFS4ERR_REP_TOO_BIG_TO_CACHE`.
    ERR_REP_TOO_BIG_TO_CACHE = 10067 => "NFS4ERR_REP_TOO_BIG_TO_CACHE",
    /// `NFS4ERR_RETRY_UNCACHED_REP`.
    ERR_RETRY_UNCACHED_REP = 10068 => "NFS4ERR_RETRY_UNCACHED_REP",
    /// `NFS4ERR_UNSAFE_COMPOUND`.
    ERR_UNSAFE_COMPOUND = 10069 => "NFS4ERR_UNSAFE_COMPOUND",
    /// `NFS4ERR_TOO_MANY_OPS`: more operations than `ca_maxoperations`.
    ERR_TOO_MANY_OPS = 10070 => "NFS4ERR_TOO_MANY_OPS",
    /// `NFS4ERR_OP_NOT_IN_SESSION`: a session operation outside a session.
    ERR_OP_NOT_IN_SESSION = 10071 => "NFS4ERR_OP_NOT_IN_SESSION",
    /// `NFS4ERR_HASH_ALG_UNSUPP`.
    ERR_HASH_ALG_UNSUPP = 10072 => "NFS4ERR_HASH_ALG_UNSUPP",
    /// `NFS4ERR_CLIENTID_BUSY` (10073 is unused).
    ERR_CLIENTID_BUSY = 10074 => "NFS4ERR_CLIENTID_BUSY",
    /// `NFS4ERR_PNFS_IO_HOLE`.
    ERR_PNFS_IO_HOLE = 10075 => "NFS4ERR_PNFS_IO_HOLE",
    /// `NFS4ERR_SEQ_FALSE_RETRY`.
    ERR_SEQ_FALSE_RETRY = 10076 => "NFS4ERR_SEQ_FALSE_RETRY",
    /// `NFS4ERR_BAD_HIGH_SLOT`.
    ERR_BAD_HIGH_SLOT = 10077 => "NFS4ERR_BAD_HIGH_SLOT",
    /// `NFS4ERR_DEADSESSION`: the session is being destroyed.
    ERR_DEADSESSION = 10078 => "NFS4ERR_DEADSESSION",
    /// `NFS4ERR_ENCR_ALG_UNSUPP`.
    ERR_ENCR_ALG_UNSUPP = 10079 => "NFS4ERR_ENCR_ALG_UNSUPP",
    /// `NFS4ERR_PNFS_NO_LAYOUT`.
    ERR_PNFS_NO_LAYOUT = 10080 => "NFS4ERR_PNFS_NO_LAYOUT",
    /// `NFS4ERR_NOT_ONLY_OP`: the operation must be the only one.
    ERR_NOT_ONLY_OP = 10081 => "NFS4ERR_NOT_ONLY_OP",
    /// `NFS4ERR_WRONG_CRED`.
    ERR_WRONG_CRED = 10082 => "NFS4ERR_WRONG_CRED",
    /// `NFS4ERR_WRONG_TYPE`.
    ERR_WRONG_TYPE = 10083 => "NFS4ERR_WRONG_TYPE",
    /// `NFS4ERR_DIRDELEG_UNAVAIL`.
    ERR_DIRDELEG_UNAVAIL = 10084 => "NFS4ERR_DIRDELEG_UNAVAIL",
    /// `NFS4ERR_REJECT_DELEG`.
    ERR_REJECT_DELEG = 10085 => "NFS4ERR_REJECT_DELEG",
    /// `NFS4ERR_RETURNCONFLICT`.
    ERR_RETURNCONFLICT = 10086 => "NFS4ERR_RETURNCONFLICT",
    /// `NFS4ERR_DELEG_REVOKED`.
    ERR_DELEG_REVOKED = 10087 => "NFS4ERR_DELEG_REVOKED",
}

const UNKNOWN_STATUS: &str = "NFS4ERR_(unknown)";

impl Nfsstat4 {
    /// Whether this is `NFS4_OK`.
    pub fn is_ok(self) -> bool {
        self == Self::OK
    }

    /// Whether RFC 8881 defines this code.
    pub fn is_known(self) -> bool {
        self.name() != UNKNOWN_STATUS
    }
}

/// The name, e.g. `NFS4ERR_NOENT`; an unknown code as `nfsstat4 12345`.
impl fmt::Display for Nfsstat4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_known() {
            f.write_str(self.name())
        } else {
            write!(f, "nfsstat4 {}", self.0)
        }
    }
}

impl Xdr for Nfsstat4 {
    fn encode(&self, e: &mut Encoder) {
        e.u32(self.0);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        d.u32().map(Nfsstat4)
    }
}

xdr4_enum! {
    /// `nfs_ftype4`: the type of a file.
    pub enum NfsFtype4 ("nfs_ftype4") {
        /// `NF4REG`: regular file.
        Reg = 1,
        /// `NF4DIR`: directory.
        Dir = 2,
        /// `NF4BLK`: block special device.
        Blk = 3,
        /// `NF4CHR`: character special device.
        Chr = 4,
        /// `NF4LNK`: symbolic link.
        Lnk = 5,
        /// `NF4SOCK`: socket.
        Sock = 6,
        /// `NF4FIFO`: named pipe.
        Fifo = 7,
        /// `NF4ATTRDIR`: named attribute directory.
        AttrDir = 8,
        /// `NF4NAMEDATTR`: named attribute.
        NamedAttr = 9,
    }
}

xdr4_enum! {
    /// `stable_how4`: how far WRITE data must be committed before the reply.
    pub enum StableHow4 ("stable_how4") {
        /// `UNSTABLE4`.
        Unstable = 0,
        /// `DATA_SYNC4`.
        DataSync = 1,
        /// `FILE_SYNC4`.
        FileSync = 2,
    }
}

/// Generate a fixed-length opaque newtype of `$n` bytes.
macro_rules! fixed_opaque {
    ($(#[$m:meta])* $name:ident, $n:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
        pub struct $name(pub [u8; $n]);

        impl Xdr for $name {
            fn encode(&self, e: &mut Encoder) {
                e.opaque_fixed(&self.0);
            }
            fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
                get_fixed::<{ $n }>(d).map($name)
            }
        }

        inherent_xdr4!($name);
    };
}

fixed_opaque! {
    /// `verifier4`: a client's boot verifier, an exclusive-create verifier, a write
    /// verifier ([`NFS4_VERIFIER_SIZE`] bytes).
    Verifier4, NFS4_VERIFIER_SIZE
}

fixed_opaque! {
    /// `sessionid4` ([`NFS4_SESSIONID_SIZE`] bytes).
    Sessionid4, NFS4_SESSIONID_SIZE
}

/// `stateid4`: a sequence number and the server's opaque `other` part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Stateid4 {
    /// `seqid`.
    pub seqid: u32,
    /// `other` ([`NFS4_OTHER_SIZE`] bytes).
    pub other: [u8; NFS4_OTHER_SIZE],
}

impl Stateid4 {
    /// The anonymous stateid (all zeros): I/O without open state.
    pub const ANONYMOUS: Stateid4 = Stateid4 {
        seqid: 0,
        other: [0; NFS4_OTHER_SIZE],
    };
    /// The READ bypass stateid (all ones).
    pub const READ_BYPASS: Stateid4 = Stateid4 {
        seqid: u32::MAX,
        other: [0xff; NFS4_OTHER_SIZE],
    };
    /// The current stateid (`seqid` 1, `other` zero): the stateid of the COMPOUND's
    /// previous operation (RFC 8881 section 16.2.3.1.2).
    pub const CURRENT: Stateid4 = Stateid4 {
        seqid: 1,
        other: [0; NFS4_OTHER_SIZE],
    };
}

impl Xdr for Stateid4 {
    fn encode(&self, e: &mut Encoder) {
        e.u32(self.seqid);
        e.opaque_fixed(&self.other);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(Stateid4 {
            seqid: d.u32()?,
            other: get_fixed::<NFS4_OTHER_SIZE>(d)?,
        })
    }
}

inherent_xdr4!(Stateid4);

bounded_opaque! {
    /// `nfs_fh4`: a file handle of at most [`NFS4_FHSIZE`](super::NFS4_FHSIZE) bytes.
    NfsFh4, "nfs_fh4", super::NFS4_FHSIZE
}

bounded_opaque! {
    /// `component4`: a name in a directory, at most
    /// [`NFS4_MAXNAMLEN`](super::NFS4_MAXNAMLEN) bytes (UTF-8 not checked).
    Component4, "component4", super::NFS4_MAXNAMLEN
}

bounded_opaque! {
    /// `utf8str_cs` / `utf8str_cis` / `utf8str_mixed` other than a component: a COMPOUND
    /// tag, an owner or group name, an ACE's `who`, an implementation id's domain or name;
    /// at most [`NFS4_MAX_UTF8`](super::NFS4_MAX_UTF8) bytes (UTF-8 not checked).
    Utf8Str, "utf8str", super::NFS4_MAX_UTF8
}

bounded_opaque! {
    /// `opaque<NFS4_OPAQUE_LIMIT>`: a `co_ownerid`, a state owner's `owner`, a
    /// `so_major_id`, an `eir_server_scope`; at most
    /// [`NFS4_OPAQUE_LIMIT`](super::NFS4_OPAQUE_LIMIT) bytes.
    Opaque4, "opaque<NFS4_OPAQUE_LIMIT>", super::NFS4_OPAQUE_LIMIT
}

/// `bitmap4`: a set of attribute (or operation) numbers, bit `n` in word `n / 32`; at most
/// [`NFS4_MAX_BITMAP_WORDS`] words. The words are kept as sent (trailing zero words too), so
/// what decodes re-encodes the same.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Bitmap4(pub Vec<u32>);

impl Bitmap4 {
    /// The empty set (no words).
    pub fn new() -> Self {
        Bitmap4(Vec::new())
    }

    /// The set of `bits`, in as few words as hold them. A bit at or beyond
    /// 32 × [`NFS4_MAX_BITMAP_WORDS`] is left out (such a set could not be encoded).
    pub fn from_bits(bits: &[u32]) -> Self {
        let mut b = Bitmap4::new();
        for &n in bits {
            b.set(n);
        }
        b
    }

    /// Whether bit `n` is set.
    pub fn contains(&self, n: u32) -> bool {
        self.0
            .get((n / 32) as usize)
            .is_some_and(|w| w & (1 << (n % 32)) != 0)
    }

    /// Set bit `n`, growing the words as needed; a bit at or beyond 32 ×
    /// [`NFS4_MAX_BITMAP_WORDS`] (or an allocation failure) leaves the set unchanged and
    /// returns false.
    pub fn set(&mut self, n: u32) -> bool {
        let w = (n / 32) as usize;
        if w >= NFS4_MAX_BITMAP_WORDS {
            return false;
        }
        if self.0.len() <= w {
            if self.0.try_reserve(w + 1 - self.0.len()).is_err() {
                return false;
            }
            self.0.resize(w + 1, 0);
        }
        match self.0.get_mut(w) {
            Some(word) => {
                *word |= 1 << (n % 32);
                true
            }
            None => false,
        }
    }

    /// The bits set, in increasing order.
    pub fn bits(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &w)| {
            let base = u32::try_from(i).ok().and_then(|i| i.checked_mul(32));
            (0..32u32)
                .filter(move |b| w & (1 << b) != 0)
                .filter_map(move |b| base?.checked_add(b))
        })
    }

    /// Whether no bit is set.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }
}

impl Xdr for Bitmap4 {
    fn encode(&self, e: &mut Encoder) {
        put_array(e, &self.0, NFS4_MAX_BITMAP_WORDS);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        get_array(d, "bitmap4", NFS4_MAX_BITMAP_WORDS).map(Bitmap4)
    }
}

inherent_xdr4!(Bitmap4);

/// `fattr4`: which attributes (`attrmask`) and their values (`attr_vals`, the `attrlist4`:
/// each attribute's XDR, in increasing attribute number, at most [`NFS4_MAX_ATTRLIST`]
/// bytes). See [`Attrs4`](super::Attrs4) for the typed form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Fattr4 {
    /// `attrmask`.
    pub attrmask: Bitmap4,
    /// `attr_vals`.
    pub attr_vals: Vec<u8>,
}

impl Xdr for Fattr4 {
    fn encode(&self, e: &mut Encoder) {
        self.attrmask.encode(e);
        super::put_bounded(e, &self.attr_vals, NFS4_MAX_ATTRLIST);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(Fattr4 {
            attrmask: Bitmap4::decode(d)?,
            attr_vals: to_vec(d.opaque("attrlist4", NFS4_MAX_ATTRLIST)?)?,
        })
    }
}

inherent_xdr4!(Fattr4);

xdr4_struct! {
    /// `nfstime4`: seconds (signed) and nanoseconds since the epoch.
    #[derive(Copy, Hash, Default)]
    pub struct Nfstime4 {
        /// `seconds`.
        pub seconds: i64,
        /// `nseconds`.
        pub nseconds: u32,
    }
}

xdr4_struct! {
    /// `change_info4`: a directory's change attribute before and after an operation.
    #[derive(Copy, Hash, Default)]
    pub struct ChangeInfo4 {
        /// `atomic`: `before` and `after` were taken atomically with the operation.
        pub atomic: bool,
        /// `before`.
        pub before: u64,
        /// `after`.
        pub after: u64,
    }
}

xdr4_struct! {
    /// `client_owner4`: who the client is (EXCHANGE_ID).
    #[derive(Hash, Default)]
    pub struct ClientOwner4 {
        /// `co_verifier`: changes when the client reboots.
        pub co_verifier: Verifier4,
        /// `co_ownerid`: the client's long-lived identity.
        pub co_ownerid: Opaque4,
    }
}

xdr4_struct! {
    /// `state_owner4` (`open_owner4`, `lock_owner4`): a client id and the client's name for
    /// the owner.
    #[derive(Hash, Default)]
    pub struct StateOwner4 {
        /// `clientid`.
        pub clientid: u64,
        /// `owner`.
        pub owner: Opaque4,
    }
}

/// `open_owner4`.
pub type OpenOwner4 = StateOwner4;

xdr4_struct! {
    /// `nfs_impl_id4`: an implementation's domain, name and build date (informational).
    #[derive(Hash, Default)]
    pub struct NfsImplId4 {
        /// `nii_domain`: e.g. "kernel.org".
        pub nii_domain: Utf8Str,
        /// `nii_name`: product name and version.
        pub nii_name: Utf8Str,
        /// `nii_date`.
        pub nii_date: Nfstime4,
    }
}

xdr4_struct! {
    /// `server_owner4`: which servers share state (`so_major_id`) and sessions
    /// (`so_minor_id`).
    #[derive(Hash, Default)]
    pub struct ServerOwner4 {
        /// `so_minor_id`.
        pub so_minor_id: u64,
        /// `so_major_id`.
        pub so_major_id: Opaque4,
    }
}

xdr4_struct! {
    /// `state_protect_ops4`: the operations SP4_MACH_CRED protects.
    #[derive(Hash, Default)]
    pub struct StateProtectOps4 {
        /// `spo_must_enforce`.
        pub spo_must_enforce: Bitmap4,
        /// `spo_must_allow`.
        pub spo_must_allow: Bitmap4,
    }
}

/// `state_protect_how4` SP4_NONE.
pub const SP4_NONE: u32 = 0;
/// `state_protect_how4` SP4_MACH_CRED.
pub const SP4_MACH_CRED: u32 = 1;
/// `state_protect_how4` SP4_SSV (not implemented: decoding it is an error).
pub const SP4_SSV: u32 = 2;

/// `state_protect4_a` (EXCHANGE_ID's argument) and `state_protect4_r` (its result): the two
/// unions have the same SP4_NONE and SP4_MACH_CRED arms. SP4_SSV (its GSS mechanism lists,
/// SSV parameters and handles) is not implemented: decoding it is
/// [`XdrError::BadEnum`] with `what` "state_protect_how4 (SP4_SSV not supported)".
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum StateProtect4 {
    /// `SP4_NONE`.
    #[default]
    None,
    /// `SP4_MACH_CRED` with the operations protected.
    MachCred(StateProtectOps4),
}

impl Xdr for StateProtect4 {
    fn encode(&self, e: &mut Encoder) {
        match self {
            StateProtect4::None => e.u32(SP4_NONE),
            StateProtect4::MachCred(ops) => {
                e.u32(SP4_MACH_CRED);
                ops.encode(e);
            }
        }
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        match d.u32()? {
            SP4_NONE => Ok(StateProtect4::None),
            SP4_MACH_CRED => Ok(StateProtect4::MachCred(StateProtectOps4::decode(d)?)),
            SP4_SSV => Err(XdrError::BadEnum {
                what: "state_protect_how4 (SP4_SSV not supported)",
                value: SP4_SSV,
            }),
            value => Err(XdrError::BadEnum {
                what: "state_protect_how4",
                value,
            }),
        }
    }
}

inherent_xdr4!(StateProtect4);

xdr4_struct! {
    /// `channel_attrs4`: a fore or back channel's limits (CREATE_SESSION).
    #[derive(Copy, Hash, Default)]
    pub struct ChannelAttrs4 {
        /// `ca_headerpadsize`.
        pub ca_headerpadsize: u32,
        /// `ca_maxrequestsize`.
        pub ca_maxrequestsize: u32,
        /// `ca_maxresponsesize`.
        pub ca_maxresponsesize: u32,
        /// `ca_maxresponsesize_cached`.
        pub ca_maxresponsesize_cached: u32,
        /// `ca_maxoperations`.
        pub ca_maxoperations: u32,
        /// `ca_maxrequests`: slots.
        pub ca_maxrequests: u32,
        /// `ca_rdma_ird<1>`: the RDMA inbound read depth, if any.
        pub ca_rdma_ird: Option<u32>,
    }
}

/// `RPCSEC_GSS`, the flavor of `callback_sec_parms4`'s third arm (not implemented).
pub const RPCSEC_GSS: u32 = 6;

/// `authsys_parms` (`AUTH_SYS` credentials, RFC 5531) as carried in `callback_sec_parms4`:
/// the same fields as onc-rpc's [`AuthSys`], a machine name of at most 255 bytes and at most
/// 16 groups.
impl Xdr for AuthSys {
    fn encode(&self, e: &mut Encoder) {
        e.u32(self.stamp);
        super::put_bounded(e, &self.machine_name, MAX_MACHINE_NAME);
        e.u32(self.uid);
        e.u32(self.gid);
        put_array(e, &self.gids, MAX_GIDS);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(AuthSys {
            stamp: d.u32()?,
            machine_name: to_vec(d.opaque("authsys machinename", MAX_MACHINE_NAME)?)?,
            uid: d.u32()?,
            gid: d.u32()?,
            gids: get_array(d, "authsys gids", MAX_GIDS)?,
        })
    }
}

/// `callback_sec_parms4`: how the server authenticates its callbacks. `RPCSEC_GSS` (its
/// `gss_cb_handles4`) is not implemented: decoding it is [`XdrError::BadEnum`] with `what`
/// "callback_sec_parms4 flavor (RPCSEC_GSS not supported)"; so is any other flavor.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CallbackSecParms4 {
    /// `AUTH_NONE`.
    #[default]
    None,
    /// `AUTH_SYS` with the credentials to use.
    Sys(AuthSys),
}

impl Xdr for CallbackSecParms4 {
    fn encode(&self, e: &mut Encoder) {
        match self {
            CallbackSecParms4::None => e.u32(AUTH_NONE),
            CallbackSecParms4::Sys(s) => {
                e.u32(AUTH_SYS);
                s.encode(e);
            }
        }
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        match d.u32()? {
            AUTH_NONE => Ok(CallbackSecParms4::None),
            AUTH_SYS => Ok(CallbackSecParms4::Sys(AuthSys::decode(d)?)),
            RPCSEC_GSS => Err(XdrError::BadEnum {
                what: "callback_sec_parms4 flavor (RPCSEC_GSS not supported)",
                value: RPCSEC_GSS,
            }),
            value => Err(XdrError::BadEnum {
                what: "callback_sec_parms4 flavor",
                value,
            }),
        }
    }
}

inherent_xdr4!(CallbackSecParms4);

xdr4_struct! {
    /// `nfsace4`: an access control entry (in delegations, the permissions the client may
    /// grant locally).
    #[derive(Hash, Default)]
    pub struct Nfsace4 {
        /// `type` (`acetype4`: ALLOW 0, DENY 1, AUDIT 2, ALARM 3).
        pub type_: u32,
        /// `flag` (`aceflag4` bits).
        pub flag: u32,
        /// `access_mask` (`acemask4` bits).
        pub access_mask: u32,
        /// `who`: e.g. "OWNER@", "EVERYONE@", "user@domain".
        pub who: Utf8Str,
    }
}
