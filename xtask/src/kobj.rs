//! `cargo xtask kobj`: the Rust half of the kernel module as one relocatable object that a
//! kernel's module loader can relocate.
//!
//! The kernel staticlib (`krpc-rdma-kmod` for `x86_64-unknown-none`) is linked with `ld -r` from
//! the entry points ([`EXPORTS`]) with `--gc-sections`, so only what they reach is kept, and
//! (for the module's object, [`Link::Entries`]) with a script that merges the per-function
//! sections by kind ([`MERGE_SCRIPT`]): a section header, a name and a relocation table per
//! function were a third of the module.
//! The precompiled `core`/`alloc`/`compiler_builtins` of that target, and our crates' calls
//! of `memcpy` & co, reach symbols through the GOT (`R_X86_64_GOTPCREL` and its `X` forms),
//! which neither Linux's module loader ("Unknown rela relocation: 9") nor FreeBSD's amd64 kld
//! relocator applies. [`relax`] rewrites every such reference as a static linker does:
//!
//! * `call *sym@GOTPCREL(%rip)` (`ff 15`) becomes `addr32 call sym` (`67 e8`, `PLT32`);
//! * `jmp *sym@GOTPCREL(%rip)` (`ff 25`) becomes `jmp sym; nop` (`e9 .. 90`, `PLT32`);
//! * `mov sym@GOTPCREL(%rip), %reg` (`8b`, RIP-relative) becomes `lea sym(%rip), %reg`
//!   (`8d`, `PC32`);
//! * any other form reads a real GOT slot: an 8-byte entry of a `.data.krpc_got` section
//!   holding `R_X86_64_64 sym`, reached `PC32`.
//!
//! Then every `PC32`/`PLT32` relocation whose symbol lies in the section it patches is
//! resolved in place, as a static linker does ([`resolve_local`]: after the merge, the calls
//! between our own functions), every defined global but the entry points is made local (the Rust runtime's
//! `memcpy`, `__rust_alloc`, ... must not clash with the kernel's), debug sections and the
//! embedded LLVM bitcode (`.llvmbc`, `.llvmcmd`) are dropped, and [`check`] proves that
//! allocated sections carry only `R_X86_64_NONE`, `64`,
//! `PC32`, `PLT32` and `32S` relocations. `ofed-shim/check.sh` checks the result again with
//! `readelf`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use object::build::elf::{Builder, Relocation, SectionData, SectionId, SymbolId};
use object::build::ByteString;
use object::build::Id;
use object::elf;

/// The C-facing entry points of the Rust half of the FreeBSD module: the roots of the link
/// and the only globals left defined. The verbs backend's ABI check, and every function the
/// krpc face's C (`ofed-shim/c/krpc_rdma_{clnt,svc}.c`) calls in `krpc-face` (a test in this
/// file compares the list with the face's `#[no_mangle]` functions).
pub const EXPORTS: &[&str] = &[
    "krpc_rdma_shim_abi_version",
    "krpc_clnt_abandon",
    "krpc_clnt_bc_drop",
    "krpc_clnt_bc_pending",
    "krpc_clnt_bc_recv",
    "krpc_clnt_bc_reply",
    "krpc_clnt_close",
    "krpc_clnt_dial",
    "krpc_clnt_dial_cb",
    "krpc_clnt_free",
    "krpc_clnt_get_cbslots",
    "krpc_clnt_get_stats",
    "krpc_clnt_get_stock",
    "krpc_clnt_link",
    "krpc_clnt_poll",
    "krpc_clnt_reap",
    "krpc_clnt_send",
    "krpc_clnt_set_bc",
    "krpc_clnt_set_cbslots",
    "krpc_clnt_set_stock",
    "krpc_clnt_set_upcall",
    "krpc_listen_accept",
    "krpc_listen_create",
    "krpc_listen_free",
    "krpc_listen_get_stats",
    "krpc_listen_set_upcall",
    "krpc_svc_addrs",
    "krpc_svc_bck_abandon",
    "krpc_svc_bck_handed",
    "krpc_svc_bck_poll",
    "krpc_svc_bck_send",
    "krpc_svc_drop",
    "krpc_svc_free",
    "krpc_svc_get_stats",
    "krpc_svc_get_stock",
    "krpc_svc_reap",
    "krpc_svc_recv",
    "krpc_svc_reply",
    "krpc_svc_set_cbslots",
    "krpc_svc_set_stock",
    "krpc_svc_set_upcall",
    "krpc_svc_stat",
];

/// The `ld -r` script of [`Link::Entries`]: the per-function sections merged by kind.
const MERGE_SCRIPT: &str = "SECTIONS {
  .text : { *(.text .text.*) }
  .rodata : { *(.rodata .rodata.*) }
  .data.rel.ro : { *(.data.rel.ro .data.rel.ro.*) }
  .data : { *(.data .data.*) }
  .bss : { *(.bss .bss.*) }
}
";

/// Relocation types a kernel module loader applies in allocated sections.
pub const ALLOWED: &[(u32, &str)] = &[
    (elf::R_X86_64_NONE, "NONE"),
    (elf::R_X86_64_64, "64"),
    (elf::R_X86_64_PC32, "PC32"),
    (elf::R_X86_64_PLT32, "PLT32"),
    (elf::R_X86_64_32S, "32S"),
];

/// What [`relax`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Relaxed {
    /// `call *GOT` → direct call.
    pub calls: usize,
    /// `jmp *GOT` → direct jump.
    pub jumps: usize,
    /// `mov GOT, reg` → `lea`.
    pub movs: usize,
    /// Other forms, now through a GOT slot of our own.
    pub slots: usize,
    /// Distinct symbols given a GOT slot.
    pub slot_symbols: usize,
    /// Globals made local.
    pub localized: usize,
    /// PC-relative relocations resolved in place (target in the same section as the
    /// reference: a static linker's job, done once here instead of at every load).
    pub resolved: usize,
}

fn is_got(r_type: u32) -> bool {
    matches!(
        r_type,
        elf::R_X86_64_GOTPCREL | elf::R_X86_64_GOTPCRELX | elf::R_X86_64_REX_GOTPCRELX
    )
}

/// Rewrite one GOT reference in `code` at `off` (the 4-byte displacement) in place; the new
/// relocation (offset, type), or `None` when the form needs a GOT slot.
fn relax_insn(code: &mut [u8], off: usize, addend: i64) -> Option<(u64, u32, Kind)> {
    if addend != -4 {
        return None;
    }
    // The two bytes before the displacement (opcode, ModRM) and the displacement.
    let w: &mut [u8; 6] = code
        .get_mut(off.checked_sub(2)?..off + 4)?
        .try_into()
        .ok()?;
    match (w[0], w[1]) {
        (0xff, 0x15) => {
            w[0] = 0x67; // addr32 prefix keeps the length
            w[1] = 0xe8;
            Some((off as u64, elf::R_X86_64_PLT32, Kind::Call))
        }
        (0xff, 0x25) => {
            // jmp rel32 is one byte shorter: the displacement moves one byte back and a
            // nop fills the freed last byte.
            *w = [0xe9, w[2], w[3], w[4], w[5], 0x90];
            Some(((off - 1) as u64, elf::R_X86_64_PLT32, Kind::Jump))
        }
        (0x8b, m) if m & 0xc7 == 0x05 => {
            w[0] = 0x8d;
            Some((off as u64, elf::R_X86_64_PC32, Kind::Mov))
        }
        _ => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Call,
    Jump,
    Mov,
}

/// Rewrite every GOT reference of the relocatable object `data` (see the module docs), make
/// every defined global but `exports` local, drop debug sections; the new object.
///
/// # Errors
/// Not an ELF relocatable object, or a GOT reference outside an allocated section's data.
pub fn relax(data: &[u8], exports: &[&str]) -> Result<(Vec<u8>, Relaxed), String> {
    let mut b = Builder::read(data).map_err(|e| format!("reading the object: {e}"))?;
    if b.header.e_type != elf::ET_REL {
        return Err("not a relocatable object".into());
    }
    let mut done = Relaxed::default();
    // Drop debug sections, the LLVM bitcode rustc embeds in rlib members (`.llvmbc`,
    // `.llvmcmd`: most of the object's bytes, and sections modpost warns about), and their
    // relocations.
    let mut dropped: Vec<SectionId> = Vec::new();
    for s in &mut b.sections {
        let name = s.name.as_slice();
        if !s.is_alloc()
            && (name.starts_with(b".debug") || name == b".llvmbc" || name == b".llvmcmd")
        {
            s.delete = true;
            dropped.push(s.id());
        }
    }
    for s in &mut b.sections {
        if matches!(s.data, SectionData::Relocation(_))
            && s.sh_info_section.is_some_and(|t| dropped.contains(&t))
        {
            s.delete = true;
        }
    }
    // Relocation sections of allocated sections, with their targets.
    let rel_sections: Vec<(SectionId, SectionId)> = b
        .sections
        .iter()
        .filter(|s| !s.delete && matches!(s.data, SectionData::Relocation(_)))
        .filter_map(|s| Some((s.id(), s.sh_info_section?)))
        .filter(|&(_, t)| b.sections.get(t).is_alloc())
        .collect();
    // GOT slot offset by symbol index.
    let mut slots: HashMap<usize, u64> = HashMap::new();
    let mut slot_relocs: Vec<Relocation> = Vec::new();
    let mut pending: Vec<(SectionId, usize, SymbolId, i64)> = Vec::new();
    for &(rel_id, target) in &rel_sections {
        let mut relocs = match &b.sections.get(rel_id).data {
            SectionData::Relocation(r) => r.clone(),
            _ => continue,
        };
        let name = String::from_utf8_lossy(b.sections.get(target).name.as_slice()).into_owned();
        let code = match &mut b.sections.get_mut(target).data {
            SectionData::Data(d) => d.to_mut(),
            _ => {
                if relocs.iter().any(|r| is_got(r.r_type)) {
                    return Err(format!("GOT reference in {name}, which has no data"));
                }
                continue;
            }
        };
        for (i, r) in relocs.iter_mut().enumerate() {
            if !is_got(r.r_type) {
                continue;
            }
            let sym = r
                .symbol
                .ok_or_else(|| format!("GOT reference without a symbol in {name}"))?;
            let off = usize::try_from(r.r_offset).map_err(|e| e.to_string())?;
            match relax_insn(code, off, r.r_addend) {
                Some((new_off, ty, kind)) => {
                    r.r_offset = new_off;
                    r.r_type = ty;
                    match kind {
                        Kind::Call => done.calls += 1,
                        Kind::Jump => done.jumps += 1,
                        Kind::Mov => done.movs += 1,
                    }
                }
                None => {
                    let next = slots.len() as u64 * 8;
                    let slot = *slots.entry(sym.index()).or_insert_with(|| {
                        slot_relocs.push(Relocation {
                            r_offset: next,
                            symbol: Some(sym),
                            r_type: elf::R_X86_64_64,
                            r_addend: 0,
                        });
                        next
                    });
                    pending.push((rel_id, i, sym, r.r_addend + slot as i64));
                    done.slots += 1;
                }
            }
        }
        if let SectionData::Relocation(r) = &mut b.sections.get_mut(rel_id).data {
            *r = relocs;
        }
    }
    if !slots.is_empty() {
        // The GOT of our own: one 8-byte slot per symbol, filled by R_X86_64_64 at load.
        let symtab = b
            .sections
            .iter()
            .find(|s| matches!(s.data, SectionData::Symbol))
            .map(|s| s.id())
            .ok_or("no symbol table")?;
        let got = b.sections.add();
        got.name = ByteString::from(&b".data.krpc_got"[..]);
        got.sh_type = elf::SHT_PROGBITS;
        got.sh_flags = u64::from(elf::SHF_ALLOC | elf::SHF_WRITE);
        got.sh_addralign = 8;
        got.data = SectionData::Data(vec![0u8; slots.len() * 8].into());
        let got_id = got.id();
        let rela = b.sections.add();
        rela.name = ByteString::from(&b".rela.data.krpc_got"[..]);
        rela.sh_type = elf::SHT_RELA;
        rela.sh_flags = u64::from(elf::SHF_INFO_LINK);
        rela.sh_addralign = 8;
        rela.sh_entsize = 24;
        rela.sh_link_section = Some(symtab);
        rela.sh_info_section = Some(got_id);
        rela.data = SectionData::Relocation(slot_relocs);
        let gsym = b.symbols.add();
        gsym.name = ByteString::from(&b".data.krpc_got"[..]);
        gsym.section = Some(got_id);
        gsym.set_st_info(elf::STB_LOCAL, elf::STT_SECTION);
        let gsym = gsym.id();
        for (rel_id, i, _sym, addend) in pending {
            if let SectionData::Relocation(r) = &mut b.sections.get_mut(rel_id).data {
                if let Some(r) = r.get_mut(i) {
                    r.symbol = Some(gsym);
                    r.r_type = elf::R_X86_64_PC32;
                    r.r_addend = addend;
                }
            }
        }
        done.slot_symbols = slots.len();
    }
    // Only the entry points stay global among the defined symbols.
    for s in &mut b.symbols {
        let name = s.name.as_slice();
        if s.section.is_some()
            && s.st_bind() != elf::STB_LOCAL
            && !exports.iter().any(|e| e.as_bytes() == name)
        {
            let ty = s.st_type();
            s.set_st_info(elf::STB_LOCAL, ty);
            done.localized += 1;
        }
    }
    done.resolved = resolve_local(&mut b, &rel_sections)?;
    b.delete_orphans();
    let mut out = Vec::new();
    b.write(&mut out)
        .map_err(|e| format!("writing the object: {e}"))?;
    Ok((out, done))
}

/// Resolve every `PC32`/`PLT32` relocation whose symbol is defined in the section it
/// patches (after the link step merged `.text.*` into one `.text`: most calls between our
/// own functions): the displacement `S + A - P` does not depend on where the loader puts
/// the section, so it is written into the code and the relocation dropped, as a static
/// linker does. The number resolved.
///
/// # Errors
/// A displacement that does not fit 32 bits, or a relocation outside its section.
fn resolve_local(
    b: &mut Builder<'_>,
    rel_sections: &[(SectionId, SectionId)],
) -> Result<usize, String> {
    let mut resolved = 0;
    for &(rel_id, target) in rel_sections {
        let relocs = match &b.sections.get(rel_id).data {
            SectionData::Relocation(r) => r.clone(),
            _ => continue,
        };
        let mut kept = Vec::with_capacity(relocs.len());
        let mut writes: Vec<(usize, i32)> = Vec::new();
        for r in relocs {
            let local = matches!(r.r_type, elf::R_X86_64_PC32 | elf::R_X86_64_PLT32)
                && r.symbol
                    .is_some_and(|sym| b.symbols.get(sym).section == Some(target));
            let Some(sym) = r.symbol.filter(|_| local) else {
                kept.push(r);
                continue;
            };
            let s_value = b.symbols.get(sym).st_value as i64;
            let value = s_value + r.r_addend - r.r_offset as i64;
            let value = i32::try_from(value).map_err(|_| {
                format!(
                    "displacement {value} at {:#x} does not fit 32 bits",
                    r.r_offset
                )
            })?;
            let off = usize::try_from(r.r_offset).map_err(|e| e.to_string())?;
            writes.push((off, value));
        }
        if writes.is_empty() {
            continue;
        }
        let name = String::from_utf8_lossy(b.sections.get(target).name.as_slice()).into_owned();
        let SectionData::Data(d) = &mut b.sections.get_mut(target).data else {
            return Err(format!("relocations in {name}, which has no data"));
        };
        let code = d.to_mut();
        for (off, value) in writes {
            let at = code
                .get_mut(off..off + 4)
                .ok_or_else(|| format!("relocation at {off:#x} outside {name}"))?;
            at.copy_from_slice(&value.to_le_bytes());
            resolved += 1;
        }
        if let SectionData::Relocation(r) = &mut b.sections.get_mut(rel_id).data {
            *r = kept;
        }
    }
    Ok(resolved)
}

/// One relocation a module loader would refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The section it patches.
    pub section: String,
    /// Its type.
    pub r_type: u32,
}

/// Every relocation of an allocated section whose type is not in [`ALLOWED`], and the
/// number of relocations checked.
///
/// # Errors
/// Not a readable ELF object.
pub fn check(data: &[u8]) -> Result<(Vec<Refused>, usize), String> {
    let b = Builder::read(data).map_err(|e| format!("reading the object: {e}"))?;
    let mut bad = Vec::new();
    let mut n = 0;
    for s in &b.sections {
        let SectionData::Relocation(relocs) = &s.data else {
            continue;
        };
        let Some(t) = s.sh_info_section else { continue };
        let target = b.sections.get(t);
        if !target.is_alloc() {
            continue;
        }
        for r in relocs {
            n += 1;
            if !ALLOWED.iter().any(|&(ty, _)| ty == r.r_type) {
                bad.push(Refused {
                    section: String::from_utf8_lossy(target.name.as_slice()).into_owned(),
                    r_type: r.r_type,
                });
            }
        }
    }
    Ok((bad, n))
}

/// Which members of the staticlib go into the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// What the entry points reach (`-u` each, `--gc-sections`): the module's object.
    Entries,
    /// Every member (`--whole-archive`, no garbage collection): not for loading (it holds
    /// compiler-rt's unreferenced hard-float objects), but it proves the rewrite on every
    /// GOT reference the toolchain's precompiled libraries and our crates contain.
    Whole,
}

/// Build the kernel staticlib's object (see the module docs): `target/kmod/krpc_rdma_rs.o`
/// (or `krpc_rdma_whole.o` for [`Link::Whole`]), from the entry points [`EXPORTS`].
///
/// # Errors
/// A failing step, or a relocation a module loader would refuse.
pub fn build(root: &Path, staticlib: &Path, link: Link) -> Result<PathBuf, String> {
    let name = match link {
        Link::Entries => "krpc_rdma_rs",
        Link::Whole => "krpc_rdma_whole",
    };
    build_named(root, staticlib, link, EXPORTS, name)
}

/// [`build`] with other entry points (the roots of the link and the only globals left), into
/// `target/kmod/NAME.o`.
///
/// # Errors
/// As [`build`].
pub fn build_named(
    root: &Path,
    staticlib: &Path,
    link: Link,
    exports: &[&str],
    name: &str,
) -> Result<PathBuf, String> {
    let dir = root.join("target").join("kmod");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let partial = dir.join(format!("{name}.partial.o"));
    let mut ld = Command::new("ld");
    ld.arg("-r").arg("-o").arg(&partial);
    match link {
        Link::Entries => {
            // One output section per kind instead of one per function (the section header
            // table, section names and per-section relocation tables were a third of the
            // module); what the entry points do not reach is dropped first.
            let script = dir.join("kobj-merge.ld");
            std::fs::write(&script, MERGE_SCRIPT)
                .map_err(|e| format!("{}: {e}", script.display()))?;
            ld.arg("-T").arg(&script);
            ld.arg("--gc-sections");
            for e in exports {
                ld.args(["-u", e]);
            }
            ld.arg(staticlib);
        }
        Link::Whole => {
            ld.arg("--whole-archive").arg(staticlib);
        }
    }
    let out = ld.output().map_err(|e| format!("ld: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ld -r failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let data = std::fs::read(&partial).map_err(|e| format!("{}: {e}", partial.display()))?;
    let (before_bad, _) = check(&data)?;
    let (obj, done) = relax(&data, exports)?;
    let _ = std::fs::remove_file(&partial);
    let (bad, n) = check(&obj)?;
    if let Some(r) = bad.first() {
        return Err(format!(
            "{} relocations a module loader refuses remain (first: type {} in {})",
            bad.len(),
            r.r_type,
            r.section
        ));
    }
    let path = dir.join(format!("{name}.o"));
    std::fs::write(&path, &obj).map_err(|e| format!("{}: {e}", path.display()))?;
    println!(
        "kernel object {}: {} bytes; {} GOT references rewritten ({} call, {} jmp, {} mov→lea, \
         {} through {} GOT slots), {} globals made local, {} PC-relative relocations within \
         a section resolved; {n} relocations in allocated sections, all {}",
        path.display(),
        obj.len(),
        before_bad.len(),
        done.calls,
        done.jumps,
        done.movs,
        done.slots,
        done.slot_symbols,
        done.localized,
        done.resolved,
        ALLOWED
            .iter()
            .map(|&(_, n)| n)
            .collect::<Vec<_>>()
            .join("/")
    );
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `#[no_mangle]` function of the verbs backend and the krpc face is an entry point
    /// of the FreeBSD object (the C calls them; `--gc-sections` would drop a missing one and
    /// kldload would refuse the module), and nothing else is.
    #[test]
    fn exports_are_the_no_mangle_functions_of_the_verbs_backend_and_the_face() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut found = Vec::new();
        for dir in ["ofed-shim/src", "ofed-shim/krpc-face/src"] {
            for e in std::fs::read_dir(root.join(dir)).unwrap() {
                let path = e.unwrap().path();
                if path.extension().is_none_or(|x| x != "rs") {
                    continue;
                }
                let text = std::fs::read_to_string(path).unwrap();
                let mut lines = text.lines();
                while let Some(l) = lines.next() {
                    if l.trim() == "#[no_mangle]" {
                        let f = lines.next().unwrap();
                        let name = f.split("fn ").nth(1).unwrap().split('(').next().unwrap();
                        found.push(name.to_string());
                    }
                }
            }
        }
        found.sort();
        let mut want: Vec<String> = EXPORTS.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(found, want);
    }

    #[test]
    fn call_jmp_and_mov_relax_like_a_static_linker() {
        // call *0(%rip) ; the displacement at 2.
        let mut c = vec![0xff, 0x15, 0, 0, 0, 0];
        assert_eq!(
            relax_insn(&mut c, 2, -4),
            Some((2, elf::R_X86_64_PLT32, Kind::Call))
        );
        assert_eq!(c, [0x67, 0xe8, 0, 0, 0, 0]);
        // jmp *0(%rip): e9 + displacement one byte earlier + nop.
        let mut c = vec![0xff, 0x25, 1, 2, 3, 4];
        assert_eq!(
            relax_insn(&mut c, 2, -4),
            Some((1, elf::R_X86_64_PLT32, Kind::Jump))
        );
        assert_eq!(c, [0xe9, 1, 2, 3, 4, 0x90]);
        // mov 0(%rip), %rax (48 8b 05) -> lea.
        let mut c = vec![0x48, 0x8b, 0x05, 0, 0, 0, 0];
        assert_eq!(
            relax_insn(&mut c, 3, -4),
            Some((3, elf::R_X86_64_PC32, Kind::Mov))
        );
        assert_eq!(c, [0x48, 0x8d, 0x05, 0, 0, 0, 0]);
        // add 0(%rip), %rax (48 03 05): needs a GOT slot.
        let mut c = vec![0x48, 0x03, 0x05, 0, 0, 0, 0];
        assert_eq!(relax_insn(&mut c, 3, -4), None);
        // An unusual addend is never relaxed.
        let mut c = vec![0xff, 0x15, 0, 0, 0, 0];
        assert_eq!(relax_insn(&mut c, 2, 0), None);
    }
}
