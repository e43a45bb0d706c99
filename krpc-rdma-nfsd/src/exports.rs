//! The one export of `nfsd --export DIR`: who may use it and how ([`Clients`], the client
//! list of an exports(5) line), and what MOUNT v3 sees of it ([`OneExport`]).
//!
//! # The client list
//!
//! `--clients` takes the part of an exports(5) line after the path:
//! `CLIENT(OPTIONS) CLIENT(OPTIONS) …`, each `CLIENT` one of `*` (everyone), an address
//! (`192.0.2.7`, `2001:db8::7`) or a network (`192.0.2.0/24`, `192.0.2.0/255.255.255.0`,
//! `2001:db8::/32`). Host names, wildcards and netgroups are refused (the server resolves no
//! names). The first entry that matches a client's address applies; a client no entry
//! matches is refused: MOUNT answers `MNT3ERR_ACCES` and its RDMA connection is closed.
//!
//! Options, with exports(5)'s defaults for what an entry leaves out: `ro` (default) / `rw`;
//! `root_squash` (default: uid 0 becomes `anonuid`, gid 0 `anongid`) / `no_root_squash`;
//! `all_squash` (every caller becomes `anonuid`/`anongid`) / `no_all_squash` (default);
//! `anonuid=N`, `anongid=N` (default 65534); `insecure` and `no_subtree_check`, which
//! describe what this server does anyway (it checks no source port, and no subtree: see
//! [`crate::handle`]). Anything else (`sync`, `secure`, `crossmnt`, …) is refused by name
//! rather than ignored. The command's default is `*(rw,root_squash)`.

use std::net::IpAddr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex};

use nfs_proto::mount::Mountstat3;
use nfs_proto::nfs3::NfsFh3;
use nfs_service::mount::{ExportVisitor, Exports};
use onc_rpc::svc::{Access, Cred, Squash, NOBODY};

use crate::localfs::LocalFs;

/// The options this server implements, for error messages.
const KNOWN: &str = "rw, ro, root_squash, no_root_squash, all_squash, no_all_squash, \
                     anonuid=N, anongid=N, insecure, no_subtree_check";

/// Whom one entry of the list is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// `*`.
    Anyone,
    /// An address with the leading `prefix` bits significant (a host: all of them).
    Net {
        /// The network's address.
        addr: IpAddr,
        /// Significant leading bits.
        prefix: u8,
    },
}

impl Who {
    fn parse(s: &str) -> Result<Who, String> {
        if s == "*" {
            return Ok(Who::Anyone);
        }
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a.parse().map_err(|_| {
            format!(
                "client {s:?}: not an address or a network (host names, wildcards and \
                 netgroups are not supported)"
            )
        })?;
        let bits: u8 = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            None => bits,
            Some(p) => match (p.parse::<u8>(), p.parse::<IpAddr>()) {
                (Ok(n), _) if n <= bits => n,
                (_, Ok(IpAddr::V4(m))) if addr.is_ipv4() => {
                    let m = u32::from(m);
                    if m.leading_ones() + m.trailing_zeros() != 32 {
                        return Err(format!("client {s:?}: {p} is not a contiguous netmask"));
                    }
                    m.leading_ones() as u8
                }
                _ => return Err(format!("client {s:?}: bad prefix length {p:?}")),
            },
        };
        Ok(Who::Net {
            addr: addr.to_canonical(),
            prefix,
        })
    }

    /// Whether `ip` is one of these clients.
    pub fn matches(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        match *self {
            Who::Anyone => true,
            Who::Net { addr, prefix } => {
                let p = u32::from(prefix);
                match (addr, ip) {
                    (IpAddr::V4(n), IpAddr::V4(a)) => {
                        let mask = u32::MAX.checked_shl(32 - p).unwrap_or(0);
                        u32::from(n) & mask == u32::from(a) & mask
                    }
                    (IpAddr::V6(n), IpAddr::V6(a)) => {
                        let mask = u128::MAX.checked_shl(128 - p).unwrap_or(0);
                        u128::from(n) & mask == u128::from(a) & mask
                    }
                    _ => false,
                }
            }
        }
    }
}

/// One `CLIENT(OPTIONS)` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Whom it is for.
    pub who: Who,
    /// What they get.
    pub access: Access,
    /// The entry as written (for MOUNT's EXPORT list and messages).
    pub text: String,
}

fn options(who: &str, opts: &str) -> Result<Access, String> {
    let (mut ro, mut root_squash, mut all_squash) = (true, true, false);
    let (mut uid, mut gid) = (NOBODY, NOBODY);
    for o in opts.split(',').filter(|o| !o.is_empty()) {
        let id = |v: &str| {
            v.parse::<u32>()
                .ok()
                .filter(|n| *n != u32::MAX)
                .ok_or_else(|| format!("client {who:?}: {o:?}: not an id"))
        };
        match o.split_once('=') {
            Some(("anonuid", v)) => uid = id(v)?,
            Some(("anongid", v)) => gid = id(v)?,
            _ => match o {
                "ro" => ro = true,
                "rw" => ro = false,
                "root_squash" => root_squash = true,
                "no_root_squash" => root_squash = false,
                "all_squash" => all_squash = true,
                "no_all_squash" => all_squash = false,
                "insecure" | "no_subtree_check" => {}
                _ => {
                    return Err(format!(
                        "client {who:?}: option {o:?} is not supported (supported: {KNOWN})"
                    ))
                }
            },
        }
    }
    let squash = if all_squash {
        Squash::All { uid, gid }
    } else if root_squash {
        Squash::Root { uid, gid }
    } else {
        Squash::None
    };
    Ok(Access {
        squash,
        read_only: ro,
    })
}

/// The client list of an export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clients {
    rules: Vec<Rule>,
}

impl Clients {
    /// The default of `nfsd --clients`.
    pub const DEFAULT: &'static str = "*(rw,root_squash)";

    /// Parse `CLIENT(OPTIONS) …` (exports(5) syntax, see the module documentation).
    ///
    /// # Errors
    /// One line saying which entry or option is wrong.
    pub fn parse(spec: &str) -> Result<Clients, String> {
        let mut rules = Vec::new();
        for entry in spec.split_whitespace() {
            let (who, opts) = match entry.split_once('(') {
                Some((w, rest)) => {
                    let o = rest
                        .strip_suffix(')')
                        .filter(|o| !o.contains(['(', ')']))
                        .ok_or_else(|| format!("client entry {entry:?}: unbalanced ( )"))?;
                    (w, o)
                }
                None => (entry, ""),
            };
            if who.is_empty() {
                return Err(format!(
                    "client entry {entry:?}: no client before the options (write *({opts}) \
                     for everyone)"
                ));
            }
            rules.push(Rule {
                who: Who::parse(who)?,
                access: options(who, opts)?,
                text: entry.to_string(),
            });
        }
        if rules.is_empty() {
            return Err("no client given (e.g. '*(rw)' or '192.0.2.0/24(rw)')".into());
        }
        Ok(Clients { rules })
    }

    /// What `ip` may do, if it is a client at all: the first entry that matches.
    pub fn access_for(&self, ip: IpAddr) -> Option<Access> {
        self.rules
            .iter()
            .find(|r| r.who.matches(ip))
            .map(|r| r.access)
    }

    /// The entries.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }
}

impl std::str::FromStr for Clients {
    type Err = String;
    fn from_str(s: &str) -> Result<Clients, String> {
        Clients::parse(s)
    }
}

/// The mounts a MOUNT server records (client, path), for DUMP; UMNT and UMNTALL forget them.
#[derive(Debug, Default)]
pub struct MountTable(Mutex<Vec<(Vec<u8>, Vec<u8>)>>);

impl MountTable {
    fn list(&self) -> std::sync::MutexGuard<'_, Vec<(Vec<u8>, Vec<u8>)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Record `client`'s mount of `path` (once).
    pub fn record(&self, client: &[u8], path: &[u8]) {
        let mut m = self.list();
        if !m.iter().any(|(c, p)| c == client && p == path) {
            m.push((client.to_vec(), path.to_vec()));
        }
    }

    /// UMNT: forget `client`'s mount of `path`.
    pub fn umnt(&self, client: &[u8], path: &[u8]) {
        self.list().retain(|(c, p)| !(c == client && p == path));
    }

    /// UMNTALL: forget every mount of `client`.
    pub fn umntall(&self, client: &[u8]) {
        self.list().retain(|(c, _)| c != client);
    }

    /// DUMP: `f(client, path)` for each mount.
    pub fn dump(&self, f: &mut dyn FnMut(&[u8], &[u8])) {
        for (c, p) in self.list().iter() {
            f(c, p);
        }
    }
}

/// One exported directory, its clients, and the mounts recorded (for DUMP).
#[derive(Debug)]
pub struct OneExport {
    fs: Arc<LocalFs>,
    /// The path clients mount: the directory as given on the command line.
    path: Vec<u8>,
    clients: Clients,
    mounts: MountTable,
}

impl OneExport {
    /// Export `fs` as `path` (the name clients mount; its canonical form is accepted too) to
    /// `clients`.
    pub fn new(fs: Arc<LocalFs>, path: &[u8], clients: Clients) -> OneExport {
        OneExport {
            fs,
            path: path.to_vec(),
            clients,
            mounts: MountTable::default(),
        }
    }

    fn is_ours(&self, path: &[u8]) -> bool {
        let trim = |p: &[u8]| -> Vec<u8> {
            let mut v = p.to_vec();
            while v.len() > 1 && v.last() == Some(&b'/') {
                v.pop();
            }
            v
        };
        let p = trim(path);
        p == trim(&self.path) || p == self.fs.root_path().as_os_str().as_bytes()
    }
}

impl Exports for OneExport {
    /// `client` is the caller's address as text (mountd's peer): a client the list does not
    /// name, or a caller with no address, gets `MNT3ERR_ACCES`.
    fn mnt(&self, _cred: &Cred<'_>, client: &[u8], path: &[u8]) -> Result<NfsFh3, Mountstat3> {
        if !self.is_ours(path) {
            return Err(Mountstat3::ERR_ACCES);
        }
        let ip = std::str::from_utf8(client)
            .ok()
            .and_then(|c| c.parse::<IpAddr>().ok());
        if ip.and_then(|ip| self.clients.access_for(ip)).is_none() {
            return Err(Mountstat3::ERR_ACCES);
        }
        self.mounts.record(client, path);
        Ok(self.fs.root_fh())
    }

    fn umnt(&self, client: &[u8], path: &[u8]) {
        self.mounts.umnt(client, path);
    }

    fn umntall(&self, client: &[u8]) {
        self.mounts.umntall(client);
    }

    fn dump(&self, f: &mut dyn FnMut(&[u8], &[u8])) {
        self.mounts.dump(f);
    }

    fn exports(&self, f: &mut ExportVisitor<'_>) {
        let groups: Vec<&[u8]> = self
            .clients
            .rules()
            .iter()
            .filter(|r| r.who != Who::Anyone)
            .map(|r| r.text.split('(').next().unwrap_or_default().as_bytes())
            .collect();
        f(&self.path, &groups);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn exports5_client_lists_parse_and_match_first_entry_first() {
        let c = Clients::parse(
            "192.0.2.7(rw,no_root_squash) 192.0.2.0/24(rw,anonuid=1000,anongid=100) \
             10.0.0.0/255.0.0.0 2001:db8::/32(rw,all_squash) *(ro,insecure,no_subtree_check)",
        )
        .unwrap();
        let rw = |squash| Access {
            squash,
            read_only: false,
        };
        assert_eq!(c.access_for(ip("192.0.2.7")), Some(rw(Squash::None)));
        assert_eq!(
            c.access_for(ip("192.0.2.8")),
            Some(rw(Squash::Root {
                uid: 1000,
                gid: 100
            }))
        );
        // No options: exports(5)'s defaults, ro and root_squash.
        let ro_root = Access {
            squash: Squash::Root {
                uid: NOBODY,
                gid: NOBODY,
            },
            read_only: true,
        };
        assert_eq!(c.access_for(ip("10.200.0.1")), Some(ro_root));
        // An IPv4 client seen as an IPv4-mapped IPv6 address matches the IPv4 entries.
        assert_eq!(c.access_for(ip("::ffff:192.0.2.7")), Some(rw(Squash::None)));
        assert_eq!(
            c.access_for(ip("2001:db8:1::9")),
            Some(rw(Squash::All {
                uid: NOBODY,
                gid: NOBODY
            }))
        );
        assert!(c.access_for(ip("198.51.100.1")).unwrap().read_only);
        // Without `*`, a client no entry names is no client.
        let only = Clients::parse("192.0.2.0/24(rw)").unwrap();
        assert_eq!(only.access_for(ip("192.0.3.1")), None);
        assert_eq!(only.access_for(ip("2001:db8::1")), None);
        // The command's default: everyone, read-write, root squashed.
        let d = Clients::parse(Clients::DEFAULT).unwrap();
        assert_eq!(
            d.access_for(ip("203.0.113.5")),
            Some(rw(Squash::Root {
                uid: NOBODY,
                gid: NOBODY
            }))
        );
    }

    #[test]
    fn mnt_answers_only_the_clients_the_list_names() {
        let dir = std::env::temp_dir().join(format!("nfsd-exports-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fs = Arc::new(LocalFs::new(&dir).unwrap());
        let path = b"/srv/x";
        let e = OneExport::new(fs, path, Clients::parse("192.0.2.0/24(rw)").unwrap());
        let c = Cred::none();
        assert!(e.mnt(&c, b"192.0.2.9", path).is_ok());
        assert_eq!(e.mnt(&c, b"198.51.100.1", path), Err(Mountstat3::ERR_ACCES));
        assert_eq!(
            e.mnt(&c, b"not an address", path),
            Err(Mountstat3::ERR_ACCES)
        );
        assert_eq!(
            e.mnt(&c, b"192.0.2.9", b"/elsewhere"),
            Err(Mountstat3::ERR_ACCES)
        );
        let mut seen = Vec::new();
        e.exports(&mut |p, groups| {
            seen.push((
                p.to_vec(),
                groups.iter().map(|g| g.to_vec()).collect::<Vec<_>>(),
            ))
        });
        assert_eq!(seen, vec![(path.to_vec(), vec![b"192.0.2.0/24".to_vec()])]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_lists_are_refused_in_one_line_naming_the_fault() {
        for (spec, says) in [
            ("", "no client"),
            ("host.example(rw)", "not an address"),
            ("@netgroup(rw)", "not an address"),
            ("*.example.com(rw)", "not an address"),
            ("192.0.2.0/33(rw)", "bad prefix"),
            ("192.0.2.0/255.0.255.0(rw)", "contiguous"),
            ("*(rw,sync)", "\"sync\" is not supported"),
            ("*(rw,secure)", "\"secure\" is not supported"),
            ("*(rw,anonuid=x)", "not an id"),
            ("*(rw,anonuid=4294967295)", "not an id"),
            ("*(rw", "unbalanced"),
            ("(rw)", "no client"),
        ] {
            let e = Clients::parse(spec).unwrap_err();
            assert!(e.contains(says), "{spec:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
