//! A writer for the `newc` cpio format, the one the Linux kernel unpacks as an initramfs.
//!
//! The archive is built in memory from explicit entries (no staging directory, no `cpio`
//! tool): every entry is owned by root with mtime 0, so the same inputs give the same bytes.

/// `S_IFDIR`, `S_IFREG`, `S_IFLNK`, `S_IFCHR` of `st_mode`.
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

/// An uncompressed `newc` archive under construction.
pub(crate) struct Cpio {
    buf: Vec<u8>,
    next_ino: u32,
}

impl Cpio {
    pub(crate) fn new() -> Self {
        Cpio {
            buf: Vec::new(),
            next_ino: 1,
        }
    }

    /// A directory; parents must have been added before.
    pub(crate) fn dir(&mut self, path: &str, perm: u32) -> Result<(), String> {
        self.entry(path, S_IFDIR | perm, 2, (0, 0), &[])
    }

    /// A regular file with the given contents.
    pub(crate) fn file(&mut self, path: &str, perm: u32, data: &[u8]) -> Result<(), String> {
        self.entry(path, S_IFREG | perm, 1, (0, 0), data)
    }

    /// A symbolic link to `target`.
    pub(crate) fn symlink(&mut self, path: &str, target: &str) -> Result<(), String> {
        self.entry(path, S_IFLNK | 0o777, 1, (0, 0), target.as_bytes())
    }

    /// A character device node.
    pub(crate) fn char_dev(
        &mut self,
        path: &str,
        perm: u32,
        major: u32,
        minor: u32,
    ) -> Result<(), String> {
        self.entry(path, S_IFCHR | perm, 1, (major, minor), &[])
    }

    /// The finished archive, with its `TRAILER!!!` entry.
    pub(crate) fn finish(mut self) -> Result<Vec<u8>, String> {
        self.next_ino = 0;
        self.entry("TRAILER!!!", 0, 1, (0, 0), &[])?;
        Ok(self.buf)
    }

    fn entry(
        &mut self,
        name: &str,
        mode: u32,
        nlink: u32,
        rdev: (u32, u32),
        data: &[u8],
    ) -> Result<(), String> {
        let too_big = |what: &str| format!("initramfs: {what} of {name:?} too large for cpio");
        let filesize = u32::try_from(data.len()).map_err(|_| too_big("contents"))?;
        // The name is stored with its terminating NUL.
        let namesize = u32::try_from(name.len() + 1).map_err(|_| too_big("name"))?;
        let ino = self.next_ino;
        self.next_ino = self.next_ino.wrapping_add(1);
        let fields = [
            ino, mode, 0, 0, nlink, 0, filesize, 0, 0, rdev.0, rdev.1, namesize, 0,
        ];
        self.buf.extend_from_slice(b"070701");
        for field in fields {
            self.buf
                .extend_from_slice(format!("{field:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
        Ok(())
    }

    /// Header+name and data are each padded to a multiple of four bytes.
    fn pad(&mut self) {
        while self.buf.len() % 4 != 0 {
            self.buf.push(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `newc` entries back: (name, mode, rdev major, rdev minor, data).
    fn parse(mut b: &[u8]) -> Vec<(String, u32, u32, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut pos = 0usize;
        loop {
            assert_eq!(&b[..6], b"070701", "magic at offset {pos}");
            let field = |i: usize| {
                let s = std::str::from_utf8(&b[6 + 8 * i..14 + 8 * i]).unwrap();
                u32::from_str_radix(s, 16).unwrap()
            };
            let (mode, size, major, minor, namesize) =
                (field(1), field(6), field(9), field(10), field(11));
            let name_end = 110 + namesize as usize;
            let name = std::str::from_utf8(&b[110..name_end - 1])
                .unwrap()
                .to_string();
            assert_eq!(b[name_end - 1], 0);
            let data_start = name_end.next_multiple_of(4);
            let data_end = data_start + size as usize;
            let data = b[data_start..data_end].to_vec();
            let next = data_end.next_multiple_of(4);
            pos += next;
            b = &b[next..];
            if name == "TRAILER!!!" {
                assert!(b.is_empty());
                return out;
            }
            out.push((name, mode, major, minor, data));
        }
    }

    #[test]
    fn round_trips_every_entry_kind() {
        let mut c = Cpio::new();
        c.dir("bin", 0o755).unwrap();
        c.file("bin/busybox", 0o755, b"\x7fELF12345").unwrap();
        c.symlink("bin/sh", "busybox").unwrap();
        c.dir("dev", 0o755).unwrap();
        c.char_dev("dev/console", 0o600, 5, 1).unwrap();
        c.file("init", 0o755, b"#!/bin/sh\n").unwrap();
        let bytes = c.finish().unwrap();
        assert_eq!(bytes.len() % 4, 0);
        let entries = parse(&bytes);
        let names: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(
            names,
            ["bin", "bin/busybox", "bin/sh", "dev", "dev/console", "init"]
        );
        assert_eq!(entries[0].1, 0o040755);
        assert_eq!(entries[1].1, 0o100755);
        assert_eq!(entries[1].4, b"\x7fELF12345");
        assert_eq!(entries[2].1, 0o120777);
        assert_eq!(entries[2].4, b"busybox");
        assert_eq!((entries[4].1, entries[4].2, entries[4].3), (0o020600, 5, 1));
    }
}
