//! Cross-crate tests of krpc-rdma live in `tests/tests/`; this library is empty on purpose.
