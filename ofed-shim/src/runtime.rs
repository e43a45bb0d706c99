//! Kernel runtime of the staticlib: global allocator over malloc(9) and the panic handler.
//! Both exist only in the kernel build (`target_os = "none"`, not under test), so std builds
//! of this crate (tests, tools) keep std's allocator and panic machinery.

#[cfg(all(not(test), target_os = "none"))]
mod kernel {
    use core::alloc::{GlobalAlloc, Layout};
    use core::ffi::c_void;
    use core::fmt::Write;
    use core::ptr;

    use crate::ffi::{krpc_ofed_free, krpc_ofed_malloc, krpc_ofed_panic, M_NOWAIT};

    /// malloc(9) returns memory aligned for any scalar type; UMA zones give at least 16
    /// bytes. Larger alignments over-allocate and keep the original pointer just below the
    /// aligned block.
    const MALLOC_ALIGN: usize = 16;

    struct KernelAlloc;

    // SAFETY: `alloc` returns blocks of at least `layout.size()` bytes aligned to
    // `layout.align()` (or null), `dealloc` frees exactly what `alloc` returned; malloc(9)
    // is thread-safe.
    unsafe impl GlobalAlloc for KernelAlloc {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            if layout.align() <= MALLOC_ALIGN {
                // SAFETY: plain malloc(9) call with M_NOWAIT (never sleeps).
                return unsafe { krpc_ofed_malloc(layout.size().max(1), M_NOWAIT) }.cast();
            }
            let Some(total) = layout.size().checked_add(layout.align() + MALLOC_ALIGN) else {
                return ptr::null_mut();
            };
            // SAFETY: as above.
            let raw = unsafe { krpc_ofed_malloc(total, M_NOWAIT) }.cast::<u8>();
            if raw.is_null() {
                return raw;
            }
            let start = raw as usize + MALLOC_ALIGN;
            let aligned = (start + layout.align() - 1) & !(layout.align() - 1);
            let p = aligned as *mut u8;
            // SAFETY: `aligned - MALLOC_ALIGN >= raw`, so the slot just below `p` lies
            // inside the block and is 8-aligned (`p` is at least 32-aligned here).
            unsafe { p.cast::<*mut u8>().sub(1).write(raw) };
            p
        }

        unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
            if layout.align() <= MALLOC_ALIGN {
                // SAFETY: `p` came from `krpc_ofed_malloc` in `alloc`.
                unsafe { krpc_ofed_free(p.cast::<c_void>()) };
                return;
            }
            // SAFETY: `alloc` stored the original block pointer just below `p`.
            let raw = unsafe { p.cast::<*mut u8>().sub(1).read() };
            // SAFETY: `raw` came from `krpc_ofed_malloc`.
            unsafe { krpc_ofed_free(raw.cast::<c_void>()) };
        }
    }

    #[global_allocator]
    static ALLOC: KernelAlloc = KernelAlloc;

    /// A fixed buffer the panic message is formatted into (no allocation while panicking).
    struct Msg {
        buf: [u8; 256],
        len: usize,
    }

    impl Write for Msg {
        fn write_str(&mut self, s: &str) -> core::fmt::Result {
            for &b in s.as_bytes() {
                if let Some(slot) = self.buf.get_mut(self.len) {
                    *slot = b;
                    self.len += 1;
                }
            }
            Ok(())
        }
    }

    #[panic_handler]
    fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
        let mut m = Msg {
            buf: [0; 256],
            len: 0,
        };
        let _ = write!(m, "krpc-rdma: {}", info.message());
        if let Some(loc) = info.location() {
            let _ = write!(m, " at {}:{}", loc.file(), loc.line());
        }
        // SAFETY: `m.buf[..m.len]` is initialised; the hook calls panic(9) and never returns.
        unsafe { krpc_ofed_panic(m.buf.as_ptr(), m.len) }
    }
}
