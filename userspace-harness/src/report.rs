//! The report of a client run: human-readable, or one JSON line (`--json`):
//! `{"workload","size","depth","ops","secs","ops_per_s","mb_per_s",
//! "lat_us":{"p50","p90","p99","max"},"errors","counters":{...every Counters field...}}`.

use krpc_rdma::transport::Counters;
use serde_json::{json, Map, Value};

use crate::rpc::Workload;

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Latency {
    /// Percentiles (nearest rank) of `samples_ns` (sorted here).
    pub fn of(samples_ns: &mut [u64]) -> Latency {
        samples_ns.sort_unstable();
        let n = samples_ns.len();
        let at = |q: f64| -> f64 {
            if n == 0 {
                return 0.0;
            }
            let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
            samples_ns.get(rank - 1).copied().unwrap_or(0) as f64 / 1000.0
        };
        Latency {
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: samples_ns.last().copied().unwrap_or(0) as f64 / 1000.0,
        }
    }
}

/// What a client run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The workload.
    pub workload: Workload,
    /// Bytes per WRITE / READ (0 for NULL).
    pub size: usize,
    /// Calls in flight.
    pub depth: u32,
    /// Calls completed (replies received and verified or counted as errors).
    pub ops: u64,
    /// Seconds of the measured run.
    pub secs: f64,
    /// Latencies.
    pub lat: Latency,
    /// Failed calls, verification failures and server-reported mismatches.
    pub errors: u64,
    /// The requester's transport counters.
    pub counters: Counters,
}

impl Report {
    /// Calls per second.
    pub fn ops_per_s(&self) -> f64 {
        if self.secs > 0.0 {
            self.ops as f64 / self.secs
        } else {
            0.0
        }
    }

    /// Payload megabytes (10^6 bytes) per second.
    pub fn mb_per_s(&self) -> f64 {
        let bytes = match self.workload {
            Workload::Null => 0.0,
            _ => self.ops as f64 * self.size as f64,
        };
        if self.secs > 0.0 {
            bytes / self.secs / 1e6
        } else {
            0.0
        }
    }

    /// The `--json` object.
    pub fn to_json(&self) -> Value {
        let r2 = |x: f64| (x * 100.0).round() / 100.0;
        json!({
            "workload": self.workload.name(),
            "size": self.size,
            "depth": self.depth,
            "ops": self.ops,
            "secs": r2(self.secs * 10.0) / 10.0,
            "ops_per_s": r2(self.ops_per_s()),
            "mb_per_s": r2(self.mb_per_s()),
            "lat_us": {
                "p50": r2(self.lat.p50),
                "p90": r2(self.lat.p90),
                "p99": r2(self.lat.p99),
                "max": r2(self.lat.max),
            },
            "errors": self.errors,
            "counters": counters_json(&self.counters),
        })
    }

    /// The human-readable report.
    pub fn human(&self) -> String {
        let mut s = format!(
            "{} x {} B, depth {}: {} ops in {:.2} s = {:.0} ops/s, {:.2} MB/s, {} errors\n\
             latency us: p50 {:.1}  p90 {:.1}  p99 {:.1}  max {:.1}\n",
            self.workload.name(),
            self.size,
            self.depth,
            self.ops,
            self.secs,
            self.ops_per_s(),
            self.mb_per_s(),
            self.errors,
            self.lat.p50,
            self.lat.p90,
            self.lat.p99,
            self.lat.max
        );
        s.push_str(&counters_human("client transport", &self.counters));
        s
    }
}

/// The counters as a JSON object.
pub fn counters_json(c: &Counters) -> Value {
    let mut m = Map::new();
    for (k, v) in c.fields() {
        m.insert(k.into(), json!(v));
    }
    Value::Object(m)
}

/// A stage profile as a flat JSON object (`StageProfile::fields`) with its one-line summary
/// under `"line"`.
pub fn profile_json(p: &krpc_rdma::provider::profile::StageProfile) -> Value {
    let mut m = Map::new();
    for (k, v) in p.fields() {
        m.insert(k.into(), json!(v));
    }
    m.insert("line".into(), json!(p.to_string()));
    Value::Object(m)
}

/// The counters as `name value` pairs, several per line, under a title.
pub fn counters_human(title: &str, c: &Counters) -> String {
    let mut s = format!("{title} counters:\n");
    for row in c.fields().chunks(4) {
        let line: Vec<String> = row.iter().map(|(k, v)| format!("{k} {v}")).collect();
        s.push_str("  ");
        s.push_str(&line.join(", "));
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let mut v: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        let l = Latency::of(&mut v);
        assert_eq!((l.p50, l.p90, l.p99, l.max), (50.0, 90.0, 99.0, 100.0));
        assert_eq!(Latency::of(&mut []), Latency::default());
    }

    #[test]
    fn json_has_the_interface_keys_and_every_counter() {
        let c = Counters {
            calls_lost: 3,
            ..Counters::default()
        };
        let r = Report {
            workload: Workload::Write,
            size: 1 << 20,
            depth: 4,
            ops: 10,
            secs: 2.0,
            lat: Latency::default(),
            errors: 0,
            counters: c,
        };
        let v = r.to_json();
        for k in [
            "workload",
            "size",
            "depth",
            "ops",
            "secs",
            "ops_per_s",
            "mb_per_s",
            "lat_us",
            "errors",
            "counters",
        ] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert_eq!(v["workload"], "write");
        assert_eq!(v["ops_per_s"], 5.0);
        assert_eq!(v["mb_per_s"], 5.24);
        for k in ["p50", "p90", "p99", "max"] {
            assert!(v["lat_us"][k].is_number());
        }
        assert_eq!(
            v["counters"].as_object().unwrap().len(),
            krpc_rdma::transport::COUNTER_FIELDS
        );
        assert_eq!(v["counters"]["calls_lost"], 3);
        let line = serde_json::to_string(&v).unwrap();
        assert!(!line.contains('\n'));
    }
}
