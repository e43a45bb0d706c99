//! Build script: with the `emu` feature on a host target, compile the production C of
//! `../c/` (the verbs wrapper and the krpc face) unchanged over the userspace OFED/krpc KPI
//! emulation (`emu/`, whose `include/` directory supplies FreeBSD's header names) and link
//! libibverbs/librdmacm, so the tests run the shim over a real device (rxe0). The kernel
//! staticlib (`x86_64-unknown-none`) compiles no C here: the FreeBSD module build
//! (`../kmod/Makefile`) compiles the same C files against the real KPI.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "emu")]
    emu::build();
}

#[cfg(feature = "emu")]
mod emu {
    pub fn build() {
        let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
        if os == "none" {
            return;
        }
        for f in [
            "../c/krpc_rdma_ofed.c",
            "../c/krpc_rdma_bsd.c",
            "../c/krpc_rdma_ofed.h",
            "../c/krpc_ofed_kpi.h",
            "../c/krpc_rdma_mbuf.c",
            "../c/krpc_rdma_mbuf.h",
            "emu/kpi_emu_mbuf.h",
            "emu/kpi_emu_mbuf.c",
            "../c/krpc_rdma_clnt.c",
            "../c/krpc_rdma_clnt.h",
            "emu/kpi_emu_rpc.h",
            "emu/kpi_emu_rpc.c",
            "../c/krpc_rdma_svc.c",
            "../c/krpc_rdma_svc.h",
            "emu/kpi_emu_svc.h",
            "emu/kpi_emu_svc.c",
            "emu/kpi_emu.h",
            "emu/kpi_emu.c",
            "emu/cm_glue.h",
            "emu/cm_glue.c",
            "emu/include",
        ] {
            println!("cargo:rerun-if-changed={f}");
        }
        // The production C (../c/*.c, the kernel module's files) as it is: FreeBSD's header
        // names resolve to emu/include first, whose headers bring in the emulation; no define
        // selects anything in c/.
        let kernel_c = common()
            .include("emu/include")
            .include("../c")
            .file("../c/krpc_rdma_ofed.c")
            // FreeBSD's memory, page and panic hooks (over the emulated malloc/vm_page).
            .file("../c/krpc_rdma_bsd.c")
            // The mbuf bridge over the emulated struct mbuf (M_EXTPG included).
            .file("../c/krpc_rdma_mbuf.c")
            // The RPC client transport (CLIENT, clnt_ops) over the emulated sys/rpc.
            .file("../c/krpc_rdma_clnt.c")
            // The RPC server transport (SVCXPRT, xp_ops) over the emulated svc.c pieces.
            .file("../c/krpc_rdma_svc.c")
            .compile_intermediates();
        // The emulation itself, on the host's headers (emu/include is not on its path: the
        // libibverbs/librdmacm headers must see the host's sys/*), and one archive of both.
        common()
            .include("emu")
            .include("../c")
            .file("emu/kpi_emu.c")
            .file("emu/kpi_emu_mbuf.c")
            .file("emu/kpi_emu_rpc.c")
            .file("emu/kpi_emu_svc.c")
            // librdmacm's API and the kernel rdma_cm KPI share names: separate file.
            .file("emu/cm_glue.c")
            .objects(kernel_c)
            .compile("krpc_ofed_emu");
        println!("cargo:rustc-link-lib=ibverbs");
        println!("cargo:rustc-link-lib=rdmacm");
        println!("cargo:rustc-link-lib=pthread");
    }

    fn common() -> cc::Build {
        let mut b = cc::Build::new();
        b.flag("-std=gnu11")
            .flag("-Wall")
            .flag("-Wextra")
            .flag("-Werror")
            .flag("-Wno-unused-parameter");
        b
    }
}
