//! Provider middleware: a wrapper around another [`Provider`] (fault injection, tracing,
//! counting) that overrides the methods it cares about and forwards the rest. The forwarding
//! is written once, here, as the trait's default methods; [`forward_provider!`] turns a
//! [`Middleware`] into a [`Provider`].
//!
//! ```ignore
//! struct Counting<P> { inner: P, sends: u64 }
//! impl<P: Provider> Middleware for Counting<P> {
//!     fn wrapped(&self) -> &impl Provider { &self.inner }
//!     fn wrapped_mut(&mut self) -> &mut impl Provider { &mut self.inner }
//!     fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), ProviderError> {
//!         self.sends += wrs.len() as u64;
//!         self.inner.post_send(wrs)
//!     }
//! }
//! krpc_rdma::forward_provider!(middleware [P: Provider] Counting<P>);
//! ```
//!
//! [`forward_provider!`]: crate::forward_provider

use super::{
    Access, CmEvent, Completion, LocalFragment, Provider, ProviderError, RecvBufId, RegId,
    Registration, Resources, Revoked, SendBufId, SendWr,
};

/// A [`Provider`] wrapper: every method forwards to [`wrapped`](Self::wrapped) /
/// [`wrapped_mut`](Self::wrapped_mut) unless the implementation overrides it. The methods
/// are those of [`Provider`], with its contract.
pub trait Middleware {
    /// The provider this one wraps.
    fn wrapped(&self) -> &impl Provider;
    /// The provider this one wraps, mutably.
    fn wrapped_mut(&mut self) -> &mut impl Provider;

    /// [`Provider::resources`].
    fn resources(&self) -> Resources {
        self.wrapped().resources()
    }
    /// [`Provider::send_buf`].
    ///
    /// # Errors
    /// As [`Provider::send_buf`].
    fn send_buf(&mut self, buf: SendBufId) -> Result<&mut [u8], ProviderError> {
        self.wrapped_mut().send_buf(buf)
    }
    /// [`Provider::recv_buf`].
    ///
    /// # Errors
    /// As [`Provider::recv_buf`].
    fn recv_buf(&self, buf: RecvBufId) -> Result<&[u8], ProviderError> {
        self.wrapped().recv_buf(buf)
    }
    /// [`Provider::post_send`].
    ///
    /// # Errors
    /// As [`Provider::post_send`].
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), ProviderError> {
        self.wrapped_mut().post_send(wrs)
    }
    /// [`Provider::post_recv`].
    ///
    /// # Errors
    /// As [`Provider::post_recv`].
    fn post_recv(&mut self, bufs: &[RecvBufId]) -> Result<(), ProviderError> {
        self.wrapped_mut().post_recv(bufs)
    }
    /// [`Provider::poll_cq`].
    fn poll_cq(&mut self, out: &mut [Completion]) -> usize {
        self.wrapped_mut().poll_cq(out)
    }
    /// [`Provider::register`].
    ///
    /// # Errors
    /// As [`Provider::register`].
    fn register(
        &mut self,
        frags: &[LocalFragment],
        access: Access,
    ) -> Result<Registration, ProviderError> {
        self.wrapped_mut().register(frags, access)
    }
    /// [`Provider::release`].
    ///
    /// # Errors
    /// As [`Provider::release`].
    fn release(&mut self, reg: RegId) -> Result<(), ProviderError> {
        self.wrapped_mut().release(reg)
    }
    /// [`Provider::revoke`].
    ///
    /// # Errors
    /// As [`Provider::revoke`].
    fn revoke(&mut self, reg: RegId) -> Result<Revoked, ProviderError> {
        self.wrapped_mut().revoke(reg)
    }
    /// [`Provider::poll_event`].
    fn poll_event(&mut self) -> Option<CmEvent> {
        self.wrapped_mut().poll_event()
    }
    /// [`Provider::disconnect`].
    fn disconnect(&mut self) {
        self.wrapped_mut().disconnect();
    }
}

/// Implement [`Provider`](crate::provider::Provider) for a wrapper type.
///
/// * `forward_provider!(middleware [GENERICS] TYPE)`: `TYPE` implements
///   [`Middleware`](crate::provider::Middleware) (overriding what it intercepts); every
///   `Provider` method calls the `Middleware` one. `GENERICS` are the impl's generic
///   parameters with their bounds (may be empty: `[]`).
/// * `forward_provider!(TYPE => field)`: every method forwards to `field` (a binding's public
///   queue-pair type around its [`Binding`](crate::provider::binding::Binding), a wrapper
///   that intercepts nothing).
/// * `forward_provider!(TYPE => field as TARGET)`: the same, and `TYPE` dereferences to the
///   field (a binding's queue-pair type exposes its `Binding`'s counters and state that way).
/// * `forward_provider!(deref [GENERICS] TYPE)`: `TYPE` is a pointer to a provider (it
///   dereferences, mutably, to one: `Box<P>`, `&mut P`, a kernel's fallible box); every
///   method goes to the pointee.
///
/// ```ignore
/// krpc_rdma::forward_provider!(OfedQp => inner as Binding<OfedConn>);
/// krpc_rdma::forward_provider!(middleware [P: FaultTarget] FaultInjector<P>);
/// ```
#[macro_export]
macro_rules! forward_provider {
    (deref [$($gen:tt)*] $ty:ty) => {
        impl<$($gen)*> $crate::provider::Provider for $ty {
            fn resources(&self) -> $crate::provider::Resources {
                (**self).resources()
            }
            fn send_buf(
                &mut self,
                buf: $crate::provider::SendBufId,
            ) -> Result<&mut [u8], $crate::provider::ProviderError> {
                (**self).send_buf(buf)
            }
            fn recv_buf(
                &self,
                buf: $crate::provider::RecvBufId,
            ) -> Result<&[u8], $crate::provider::ProviderError> {
                (**self).recv_buf(buf)
            }
            fn post_send(
                &mut self,
                wrs: &[$crate::provider::SendWr<'_>],
            ) -> Result<(), $crate::provider::ProviderError> {
                (**self).post_send(wrs)
            }
            fn post_recv(
                &mut self,
                bufs: &[$crate::provider::RecvBufId],
            ) -> Result<(), $crate::provider::ProviderError> {
                (**self).post_recv(bufs)
            }
            fn poll_cq(&mut self, out: &mut [$crate::provider::Completion]) -> usize {
                (**self).poll_cq(out)
            }
            fn register(
                &mut self,
                frags: &[$crate::provider::LocalFragment],
                access: $crate::provider::Access,
            ) -> Result<$crate::provider::Registration, $crate::provider::ProviderError> {
                (**self).register(frags, access)
            }
            fn release(
                &mut self,
                reg: $crate::provider::RegId,
            ) -> Result<(), $crate::provider::ProviderError> {
                (**self).release(reg)
            }
            fn revoke(
                &mut self,
                reg: $crate::provider::RegId,
            ) -> Result<$crate::provider::Revoked, $crate::provider::ProviderError> {
                (**self).revoke(reg)
            }
            fn poll_event(&mut self) -> Option<$crate::provider::CmEvent> {
                (**self).poll_event()
            }
            fn disconnect(&mut self) {
                (**self).disconnect();
            }
        }
    };
    (middleware [$($gen:tt)*] $ty:ty) => {
        impl<$($gen)*> $crate::provider::Provider for $ty {
            fn resources(&self) -> $crate::provider::Resources {
                $crate::provider::Middleware::resources(self)
            }
            fn send_buf(
                &mut self,
                buf: $crate::provider::SendBufId,
            ) -> Result<&mut [u8], $crate::provider::ProviderError> {
                $crate::provider::Middleware::send_buf(self, buf)
            }
            fn recv_buf(
                &self,
                buf: $crate::provider::RecvBufId,
            ) -> Result<&[u8], $crate::provider::ProviderError> {
                $crate::provider::Middleware::recv_buf(self, buf)
            }
            fn post_send(
                &mut self,
                wrs: &[$crate::provider::SendWr<'_>],
            ) -> Result<(), $crate::provider::ProviderError> {
                $crate::provider::Middleware::post_send(self, wrs)
            }
            fn post_recv(
                &mut self,
                bufs: &[$crate::provider::RecvBufId],
            ) -> Result<(), $crate::provider::ProviderError> {
                $crate::provider::Middleware::post_recv(self, bufs)
            }
            fn poll_cq(&mut self, out: &mut [$crate::provider::Completion]) -> usize {
                $crate::provider::Middleware::poll_cq(self, out)
            }
            fn register(
                &mut self,
                frags: &[$crate::provider::LocalFragment],
                access: $crate::provider::Access,
            ) -> Result<$crate::provider::Registration, $crate::provider::ProviderError> {
                $crate::provider::Middleware::register(self, frags, access)
            }
            fn release(
                &mut self,
                reg: $crate::provider::RegId,
            ) -> Result<(), $crate::provider::ProviderError> {
                $crate::provider::Middleware::release(self, reg)
            }
            fn revoke(
                &mut self,
                reg: $crate::provider::RegId,
            ) -> Result<$crate::provider::Revoked, $crate::provider::ProviderError> {
                $crate::provider::Middleware::revoke(self, reg)
            }
            fn poll_event(&mut self) -> Option<$crate::provider::CmEvent> {
                $crate::provider::Middleware::poll_event(self)
            }
            fn disconnect(&mut self) {
                $crate::provider::Middleware::disconnect(self)
            }
        }
    };
    ($ty:ty => $field:ident as $target:ty) => {
        $crate::forward_provider!($ty => $field);
        impl core::ops::Deref for $ty {
            type Target = $target;
            fn deref(&self) -> &$target {
                &self.$field
            }
        }
        impl core::ops::DerefMut for $ty {
            fn deref_mut(&mut self) -> &mut $target {
                &mut self.$field
            }
        }
    };
    ($ty:ty => $field:ident) => {
        impl $crate::provider::Middleware for $ty {
            fn wrapped(&self) -> &impl $crate::provider::Provider {
                &self.$field
            }
            fn wrapped_mut(&mut self) -> &mut impl $crate::provider::Provider {
                &mut self.$field
            }
        }
        $crate::forward_provider!(middleware [] $ty);
    };
}

#[cfg(all(test, feature = "soft"))]
mod tests {
    use alloc::sync::Arc;

    use mbuf::{HeapPageArena, PageProvider};

    use super::*;
    use crate::provider::SendOp;
    use crate::soft::{pair, SoftConfig, SoftQp};

    /// Counts Sends, forwards everything else.
    struct CountingSends {
        inner: SoftQp,
        sends: usize,
    }

    impl Middleware for CountingSends {
        fn wrapped(&self) -> &impl Provider {
            &self.inner
        }
        fn wrapped_mut(&mut self) -> &mut impl Provider {
            &mut self.inner
        }
        fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), ProviderError> {
            self.sends += wrs.len();
            self.inner.post_send(wrs)
        }
    }

    crate::forward_provider!(middleware [] CountingSends);

    #[test]
    fn an_override_intercepts_and_the_rest_is_forwarded() {
        let pages: Arc<dyn PageProvider> = Arc::new(HeapPageArena::new(16).unwrap());
        let cfg = SoftConfig::default();
        let (a, mut b) = pair(cfg.clone(), pages.clone(), cfg, pages).unwrap();
        let mut a = CountingSends { inner: a, sends: 0 };
        // Forwarded: resources, buffers, receives, events, completions.
        assert_eq!(Provider::resources(&a), a.inner.resources());
        assert!(matches!(
            Provider::poll_event(&mut a),
            Some(CmEvent::Established { .. })
        ));
        b.post_recv(&[0]).unwrap();
        Provider::send_buf(&mut a, 0).unwrap()[..4].copy_from_slice(b"ping");
        let send = SendWr {
            wr_id: 7,
            op: SendOp::Send {
                buf: 0,
                len: 4,
                invalidate: None,
            },
            signaled: true,
        };
        // Intercepted, then forwarded by the override.
        Provider::post_send(&mut a, &[send]).unwrap();
        assert_eq!(a.sends, 1);
        let mut wcs = [Completion::EMPTY; 4];
        assert_eq!(Provider::poll_cq(&mut a, &mut wcs), 1);
        assert_eq!(wcs[0].wr_id, 7);
        let n = b.poll_cq(&mut wcs);
        assert_eq!(n, 1);
        assert_eq!(&b.recv_buf(0).unwrap()[..4], b"ping");
        Provider::disconnect(&mut a);
        assert!(matches!(
            Provider::poll_event(&mut a),
            Some(CmEvent::Disconnected)
        ));
    }
}
