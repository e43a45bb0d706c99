//! Binding of the krpc-rdma core to a kernel's OFED verbs KPI (FreeBSD `sys/ofed`).
//!
//! Nothing is implemented here yet: this crate only reserves its place in the workspace.
//! It deliberately exports no API, so nothing can mistake it for a working provider.
#![no_std]
