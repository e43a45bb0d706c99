//! The provider-conformance scenario suite (`krpc-rdma-scenarios`) over the software RC
//! provider (`krpc_rdma::soft`), one `#[test]` per scenario.

use std::sync::Arc;

use krpc_rdma::provider::Resources;
use krpc_rdma::soft::{pair, SoftConfig, SoftQp};
use krpc_rdma_scenarios::{Fixture, Limits, PagePair};
use mbuf::HeapPageArena;

/// Soft queue pairs over two heap arenas (at distinct bases, so a page address of one side
/// is never valid at the other).
#[derive(Default)]
struct Soft {
    arenas: Vec<Arc<HeapPageArena>>,
}

fn config(l: &Limits) -> SoftConfig {
    let d = SoftConfig::default();
    SoftConfig {
        send_bufs: l.send_bufs.unwrap_or(d.send_bufs),
        recv_bufs: l.recv_bufs.unwrap_or(d.recv_bufs),
        max_send_wr: l.max_send_wr.unwrap_or(d.max_send_wr),
        max_registrations: l.max_registrations.unwrap_or(d.max_registrations),
        ..d
    }
}

impl Fixture for Soft {
    type Qp = SoftQp;

    fn page_providers(&mut self) -> Result<PagePair, String> {
        let a = Arc::new(HeapPageArena::new(4096).map_err(|e| format!("{e:?}"))?);
        let b =
            Arc::new(HeapPageArena::with_base(4096, 0x10_0000_0000).map_err(|e| format!("{e:?}"))?);
        self.arenas = vec![a.clone(), b.clone()];
        Ok((a, b))
    }

    fn resources(&self, limits: &Limits) -> Resources {
        config(limits).resources()
    }

    fn connect(
        &mut self,
        limits: &Limits,
        a_private: &[u8],
        b_private: &[u8],
        before_accept: &mut (dyn FnMut(&mut SoftQp) + Send),
    ) -> Result<(SoftQp, SoftQp), String> {
        let [pa, pb]: [Arc<dyn mbuf::PageProvider>; 2] = match self.arenas.as_slice() {
            [a, b] => [a.clone(), b.clone()],
            _ => return Err("no page providers".into()),
        };
        let side = |pd: &[u8]| SoftConfig {
            private_data: heapless::Vec::from_slice(pd).unwrap_or_default(),
            ..config(limits)
        };
        let (a, mut b) =
            pair(side(a_private), pa, side(b_private), pb).map_err(|e| e.to_string())?;
        before_accept(&mut b);
        Ok((a, b))
    }

    fn wait(&mut self, _: &mut SoftQp, _: &mut SoftQp) {}

    fn idle_limit(&self) -> u32 {
        8
    }

    fn live_registrations(&self, q: &SoftQp) -> u32 {
        q.live_registrations()
    }

    fn sq_outstanding(&self, q: &SoftQp) -> usize {
        q.send_queue_used() as usize
    }

    fn is_connected(&self, q: &SoftQp) -> bool {
        q.is_connected()
    }

    fn pages_in_use(&self) -> usize {
        self.arenas.iter().map(|a| a.in_use()).sum()
    }

    fn audit(&mut self) -> Result<(), String> {
        let bad: u64 = self.arenas.iter().map(|a| a.bad_unrefs()).sum();
        (bad == 0)
            .then_some(())
            .ok_or(format!("{bad} bad page unrefs"))
    }
}

krpc_rdma_scenarios::scenario_tests!(Some(Soft::default()));
