//! The device context and protection domain shared by an arena and its queue pairs.

use std::ffi::CStr;
use std::ptr;
use std::sync::Arc;

use rdma_sys::{
    ibv_alloc_pd, ibv_context, ibv_dealloc_pd, ibv_device_attr, ibv_get_device_name, ibv_pd,
    ibv_query_device, rdma_free_devices, rdma_get_devices,
};

use super::{sys, VerbsError};

/// One RDMA device opened through librdmacm's device list (so its context is the one
/// `rdma_cm` ids on that device carry) with one protection domain.
#[derive(Debug)]
pub struct Device {
    list: *mut *mut ibv_context,
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    name: String,
    attr: DeviceLimits,
}

/// The device limits the provider uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    /// `max_sge`.
    pub max_sge: u32,
    /// `max_qp_wr`.
    pub max_qp_wr: u32,
    /// `max_cqe`.
    pub max_cqe: u32,
    /// `max_qp_rd_atom`.
    pub max_qp_rd_atom: u32,
    /// `max_qp_init_rd_atom`.
    pub max_qp_init_rd_atom: u32,
    /// `max_mw`.
    pub max_mw: u32,
}

// SAFETY: the context and PD pointers are only used through libibverbs calls, which are
// thread-safe for these objects; `Device` holds no Rust-side mutable state.
unsafe impl Send for Device {}
// SAFETY: as above: shared use only passes the pointers to thread-safe library calls.
unsafe impl Sync for Device {}

fn clamp(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

impl Device {
    /// Open the device named `name`, or `$RXE_DEV`, or the first device.
    ///
    /// # Errors
    /// [`VerbsError::NoDevice`], [`VerbsError::DeviceNotFound`], or a failing library call.
    pub fn open(name: Option<&str>) -> Result<Arc<Device>, VerbsError> {
        let want = name
            .map(str::to_owned)
            .or_else(|| std::env::var("RXE_DEV").ok().filter(|s| !s.is_empty()));
        let mut n = 0i32;
        // SAFETY: `n` is a valid out-pointer; the returned list is freed in `Drop` (or below).
        let list = unsafe { rdma_get_devices(&mut n) };
        if list.is_null() || n <= 0 {
            if !list.is_null() {
                // SAFETY: `list` came from `rdma_get_devices` and is not used after this.
                unsafe { rdma_free_devices(list) };
            }
            return Err(VerbsError::NoDevice);
        }
        let mut chosen = None;
        let mut first = None;
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the list holds `n` valid context pointers (NULL-terminated after them).
            let ctx = unsafe { *list.add(i) };
            if ctx.is_null() {
                break;
            }
            // SAFETY: `ctx` is a live context; its `device` and the name string live as long
            // as the list.
            let dev_name = unsafe {
                let p = ibv_get_device_name((*ctx).device);
                if p.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(p).to_string_lossy().into_owned()
                }
            };
            if first.is_none() {
                first = Some((ctx, dev_name.clone()));
            }
            if want.as_deref() == Some(dev_name.as_str()) {
                chosen = Some((ctx, dev_name));
                break;
            }
        }
        let picked = match (&want, chosen, first) {
            (_, Some(c), _) => c,
            (None, None, Some(f)) => f,
            (Some(w), None, _) => {
                // SAFETY: not used after this.
                unsafe { rdma_free_devices(list) };
                return Err(VerbsError::DeviceNotFound(w.clone()));
            }
            (None, None, None) => {
                // SAFETY: not used after this.
                unsafe { rdma_free_devices(list) };
                return Err(VerbsError::NoDevice);
            }
        };
        let (ctx, name) = picked;
        // SAFETY: zeroed `ibv_device_attr` is a valid out-buffer (plain integers).
        let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `ctx` is live, `attr` is a valid out-pointer.
        let rc = unsafe { ibv_query_device(ctx, &mut attr) };
        if rc != 0 {
            // SAFETY: not used after this.
            unsafe { rdma_free_devices(list) };
            return Err(VerbsError::Sys {
                what: "ibv_query_device",
                errno: rc,
            });
        }
        // SAFETY: `ctx` is live.
        let pd = unsafe { ibv_alloc_pd(ctx) };
        if pd.is_null() {
            let e = sys("ibv_alloc_pd");
            // SAFETY: not used after this.
            unsafe { rdma_free_devices(list) };
            return Err(e);
        }
        Ok(Arc::new(Device {
            list,
            ctx,
            pd,
            name,
            attr: DeviceLimits {
                max_sge: clamp(attr.max_sge),
                max_qp_wr: clamp(attr.max_qp_wr),
                max_cqe: clamp(attr.max_cqe),
                max_qp_rd_atom: clamp(attr.max_qp_rd_atom),
                max_qp_init_rd_atom: clamp(attr.max_qp_init_rd_atom),
                max_mw: clamp(attr.max_mw),
            },
        }))
    }

    /// The device name (`rxe0`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device limits.
    pub fn limits(&self) -> DeviceLimits {
        self.attr
    }

    pub(crate) fn ctx(&self) -> *mut ibv_context {
        self.ctx
    }

    pub(crate) fn pd(&self) -> *mut ibv_pd {
        self.pd
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // Every arena and queue pair holds an `Arc<Device>`: nothing uses the PD any more.
        // SAFETY: `pd` came from `ibv_alloc_pd` and every object in it is gone.
        unsafe { ibv_dealloc_pd(self.pd) };
        self.pd = ptr::null_mut();
        // SAFETY: `list` came from `rdma_get_devices`; contexts are not used after this.
        unsafe { rdma_free_devices(self.list) };
    }
}
