//! The Network Status Monitor protocol, version 1 (program 100024; X/Open XNFS chapter 11),
//! and the monitor's state: [`Monitor`].
//!
//! NSM tells lock managers that a peer restarted: a host's NSM keeps a state number (odd
//! while up, incremented at every restart) and, after a restart, sends `SM_NOTIFY` with the
//! new number to every host it was asked to monitor; the receiving NSM calls back the local
//! services that asked to monitor the restarted host (`SM_MON`'s `my_id`: program, version,
//! procedure on `my_name`) with the `status` (mon_name, state, the 16 private bytes).
//!
//! [`Monitor`] is that bookkeeping without I/O: the state number, the `SM_MON` registrations
//! (bounded), what `SM_NOTIFY` must call back. Persistence and the network are the caller's.

use alloc::vec::Vec;

use onc_rpc::xdr::{Decoder, Encoder, XdrError};

/// The NSM program number.
pub const SM_PROG: u32 = 100_024;
/// NSM version 1.
pub const SM_VERS: u32 = 1;
/// The longest host name (`SM_MAXSTRLEN`).
pub const SM_MAXSTRLEN: usize = 1024;
/// Bytes of `priv` in `SM_MON` and the callback.
pub const SM_PRIV_SIZE: usize = 16;

/// `SM_NULL`.
pub const SM_NULL: u32 = 0;
/// `SM_STAT`.
pub const SM_STAT: u32 = 1;
/// `SM_MON`.
pub const SM_MON: u32 = 2;
/// `SM_UNMON`.
pub const SM_UNMON: u32 = 3;
/// `SM_UNMON_ALL`.
pub const SM_UNMON_ALL: u32 = 4;
/// `SM_SIMU_CRASH`.
pub const SM_SIMU_CRASH: u32 = 5;
/// `SM_NOTIFY`.
pub const SM_NOTIFY: u32 = 6;

/// `res`: `STAT_SUCC`.
pub const STAT_SUCC: u32 = 0;
/// `res`: `STAT_FAIL`.
pub const STAT_FAIL: u32 = 1;

fn name(d: &mut Decoder<'_>, what: &'static str) -> Result<Vec<u8>, XdrError> {
    let b = d.opaque(what, SM_MAXSTRLEN)?;
    let mut v = Vec::new();
    v.try_reserve_exact(b.len()).map_err(|_| XdrError::Alloc)?;
    v.extend_from_slice(b);
    Ok(v)
}

fn priv_bytes(d: &mut Decoder<'_>) -> Result<[u8; SM_PRIV_SIZE], XdrError> {
    let at = d.pos();
    d.opaque_fixed(SM_PRIV_SIZE)?
        .try_into()
        .map_err(|_| XdrError::Short {
            at,
            need: SM_PRIV_SIZE,
        })
}

fn put(e: &mut Encoder, b: &[u8]) {
    if b.len() > SM_MAXSTRLEN {
        e.fail();
    } else {
        e.opaque(b);
    }
}

/// `my_id`: whom to call back (a program, version and procedure on `my_name`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MyId {
    /// `my_name`.
    pub my_name: Vec<u8>,
    /// `my_prog`.
    pub my_prog: u32,
    /// `my_vers`.
    pub my_vers: u32,
    /// `my_proc`.
    pub my_proc: u32,
}

impl MyId {
    /// Append the XDR encoding.
    pub fn encode(&self, e: &mut Encoder) {
        put(e, &self.my_name);
        e.u32(self.my_prog);
        e.u32(self.my_vers);
        e.u32(self.my_proc);
    }

    /// Decode.
    ///
    /// # Errors
    /// Truncated input, an over-long name.
    pub fn decode(d: &mut Decoder<'_>) -> Result<MyId, XdrError> {
        Ok(MyId {
            my_name: name(d, "my_name")?,
            my_prog: d.u32()?,
            my_vers: d.u32()?,
            my_proc: d.u32()?,
        })
    }
}

/// `mon_id`: monitor `mon_name` for `my_id`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MonId {
    /// `mon_name`: the host to monitor.
    pub mon_name: Vec<u8>,
    /// `my_id`.
    pub my_id: MyId,
}

impl MonId {
    /// Append the XDR encoding.
    pub fn encode(&self, e: &mut Encoder) {
        put(e, &self.mon_name);
        self.my_id.encode(e);
    }

    /// Decode.
    ///
    /// # Errors
    /// Truncated input, over-long names.
    pub fn decode(d: &mut Decoder<'_>) -> Result<MonId, XdrError> {
        Ok(MonId {
            mon_name: name(d, "mon_name")?,
            my_id: MyId::decode(d)?,
        })
    }
}

/// `mon`: `SM_MON`'s arguments.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mon {
    /// `mon_id`.
    pub mon_id: MonId,
    /// `priv`: returned in the callback.
    pub priv_: [u8; SM_PRIV_SIZE],
}

impl Mon {
    /// Append the XDR encoding.
    pub fn encode(&self, e: &mut Encoder) {
        self.mon_id.encode(e);
        e.opaque_fixed(&self.priv_);
    }

    /// Decode.
    ///
    /// # Errors
    /// Truncated input, over-long names.
    pub fn decode(d: &mut Decoder<'_>) -> Result<Mon, XdrError> {
        let mon_id = MonId::decode(d)?;
        let priv_ = priv_bytes(d)?;
        Ok(Mon { mon_id, priv_ })
    }
}

/// `stat_chge`: `SM_NOTIFY`'s arguments (also `sm_name` + state).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StatChge {
    /// `mon_name`: the host that restarted.
    pub mon_name: Vec<u8>,
    /// `state`: its new state number.
    pub state: i32,
}

impl StatChge {
    /// Append the XDR encoding.
    pub fn encode(&self, e: &mut Encoder) {
        put(e, &self.mon_name);
        e.i32(self.state);
    }

    /// Decode.
    ///
    /// # Errors
    /// Truncated input, an over-long name.
    pub fn decode(d: &mut Decoder<'_>) -> Result<StatChge, XdrError> {
        Ok(StatChge {
            mon_name: name(d, "mon_name")?,
            state: d.i32()?,
        })
    }
}

/// `status`: the callback's arguments, to a `my_id` when a monitored host restarted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    /// `mon_name`.
    pub mon_name: Vec<u8>,
    /// `state`.
    pub state: i32,
    /// `priv` from `SM_MON`.
    pub priv_: [u8; SM_PRIV_SIZE],
}

impl Status {
    /// Append the XDR encoding.
    pub fn encode(&self, e: &mut Encoder) {
        put(e, &self.mon_name);
        e.i32(self.state);
        e.opaque_fixed(&self.priv_);
    }

    /// Decode.
    ///
    /// # Errors
    /// Truncated input, an over-long name.
    pub fn decode(d: &mut Decoder<'_>) -> Result<Status, XdrError> {
        let mon_name = name(d, "mon_name")?;
        let state = d.i32()?;
        let priv_ = priv_bytes(d)?;
        Ok(Status {
            mon_name,
            state,
            priv_,
        })
    }
}

/// A registration made by `SM_MON`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Monitored {
    /// The `SM_MON` arguments.
    pub mon: Mon,
    /// The last state number heard from the host (0: none yet).
    pub state: i32,
}

/// A callback to make after an `SM_NOTIFY`: call `my_id` with `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Callback {
    /// Whom to call.
    pub my_id: MyId,
    /// What to tell it.
    pub status: Status,
}

/// The monitor: this host's state number and the `SM_MON` registrations.
#[derive(Debug, Clone)]
pub struct Monitor {
    state: i32,
    list: Vec<Monitored>,
    max: usize,
}

/// The state number after a restart that found `prev` on disk: the next odd number (odd
/// means up; a host that went down and came back has moved by at least one).
pub fn next_state(prev: i32) -> i32 {
    let next = if prev % 2 == 0 {
        prev.wrapping_add(1)
    } else {
        prev.wrapping_add(2)
    };
    // Wrapped: start again at 1 (never 0 or negative).
    if next <= 0 {
        1
    } else {
        next
    }
}

impl Monitor {
    /// A monitor whose host is in state `state`, keeping at most `max` registrations.
    pub fn new(state: i32, max: usize) -> Self {
        Monitor {
            state,
            list: Vec::new(),
            max,
        }
    }

    /// This host's state number.
    pub fn state(&self) -> i32 {
        self.state
    }

    /// The registrations.
    pub fn monitored(&self) -> &[Monitored] {
        &self.list
    }

    /// `SM_STAT`: `(STAT_SUCC, state)` (any name may be monitored).
    pub fn stat(&self, _name: &[u8]) -> (u32, i32) {
        (STAT_SUCC, self.state)
    }

    /// `SM_MON` from `local` (a loopback caller: only local services may register, as
    /// Linux's statd requires): `(STAT_SUCC, state)`; the same registration twice is kept
    /// once; `STAT_FAIL` from a remote caller, for an empty name or when the list is full.
    pub fn mon(&mut self, m: &Mon, local: bool) -> (u32, i32) {
        if !local || m.mon_id.mon_name.is_empty() {
            return (STAT_FAIL, -1);
        }
        if self.list.iter().any(|e| e.mon == *m) {
            return (STAT_SUCC, self.state);
        }
        if self.list.len() >= self.max || self.list.try_reserve(1).is_err() {
            return (STAT_FAIL, -1);
        }
        self.list.push(Monitored {
            mon: m.clone(),
            state: 0,
        });
        (STAT_SUCC, self.state)
    }

    /// `SM_UNMON`: drop the registrations of `mon_name` for `my_id`; the state number.
    pub fn unmon(&mut self, id: &MonId, local: bool) -> i32 {
        if local {
            self.list.retain(|e| e.mon.mon_id != *id);
        }
        self.state
    }

    /// `SM_UNMON_ALL`: drop every registration of `my_id`; the state number.
    pub fn unmon_all(&mut self, my_id: &MyId, local: bool) -> i32 {
        if local {
            self.list.retain(|e| e.mon.mon_id.my_id != *my_id);
        }
        self.state
    }

    /// `SM_SIMU_CRASH`: this host "restarts": the state moves to the next odd number. The
    /// caller notifies its peers (and the lock manager forgets its locks).
    pub fn simu_crash(&mut self) -> i32 {
        self.state = next_state(self.state.wrapping_add(1));
        self.state
    }

    /// `SM_NOTIFY`: host `c.mon_name` (calling from the address whose text is `caller`)
    /// restarted into state `c.state`. Every registration for that host (by name or by
    /// address) whose last known state differs is updated and returned as a callback.
    pub fn notify(&mut self, c: &StatChge, caller: &[u8]) -> Vec<Callback> {
        let mut out = Vec::new();
        for e in &mut self.list {
            let n = &e.mon.mon_id.mon_name;
            if e.state == c.state || (n.as_slice() != c.mon_name && n.as_slice() != caller) {
                continue;
            }
            if out.try_reserve(1).is_err() {
                break;
            }
            e.state = c.state;
            out.push(Callback {
                my_id: e.mon.mon_id.my_id.clone(),
                status: Status {
                    mon_name: e.mon.mon_id.mon_name.clone(),
                    state: c.state,
                    priv_: e.mon.priv_,
                },
            });
        }
        out
    }
}
