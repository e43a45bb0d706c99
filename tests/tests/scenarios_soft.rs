//! The provider-conformance scenario suite (`krpc-rdma-scenarios`) over the software RC
//! provider (`krpc_rdma::soft`), one `#[test]` per scenario.

use std::sync::Arc;

use krpc_rdma::provider::Resources;
use krpc_rdma::soft::{pair, SoftConfig, SoftQp};
use krpc_rdma_scenarios::{Connect, Fixture, Limits, PagePair};
use mbuf::HeapPageArena;

/// Soft queue pairs over two heap arenas (at distinct bases, so a page address of one side
/// is never valid at the other).
#[derive(Default)]
struct Soft {
    arenas: Vec<Arc<HeapPageArena>>,
}

fn config(l: &Limits) -> SoftConfig {
    let mut c = SoftConfig::default();
    krpc_rdma_scenarios::apply_limits!(l, c.resources);
    c
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

    fn connect(&mut self, c: Connect<'_, SoftQp>) -> Result<(SoftQp, SoftQp), String> {
        let [pa, pb]: [Arc<dyn mbuf::PageProvider>; 2] = match self.arenas.as_slice() {
            [a, b] => [a.clone(), b.clone()],
            _ => return Err("no page providers".into()),
        };
        let side = |pd: &[u8]| SoftConfig {
            private_data: heapless::Vec::from_slice(pd).unwrap_or_default(),
            ..config(c.limits)
        };
        let (a, mut b) =
            pair(side(c.a_private), pa, side(c.b_private), pb).map_err(|e| e.to_string())?;
        (c.before_accept)(&mut b);
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

    /// Connections cost nothing here: a long soak (the fault-injected one is
    /// `transport_soak`).
    fn soak_calls(&self) -> u32 {
        if cfg!(debug_assertions) {
            400
        } else {
            3000
        }
    }

    fn log(&mut self, line: &str) {
        println!("{line}");
    }

    krpc_rdma_scenarios::arena_probes!();
}

krpc_rdma_scenarios::scenario_tests!(Some(Soft::default()));
