//! The MPI world as a [`Communicator`] (the `mpi` feature).
//!
//! - No collective waits past the timeout: then the rank reports which
//!   collective stalled and calls `MPI_Abort`, which ends every process of
//!   the job (MPI cannot cancel a started collective, and returning would
//!   leave the job hung at its next one). `all_gather`, `permute` and the
//!   agreement check use MPI's non-blocking forms, polled; `all_reduce`
//!   (the gradients' path) uses the blocking ones, whose tuned algorithms
//!   were faster here (64 MiB of f32 over 2 processes: 94 against 130 ms),
//!   with a watchdog thread that aborts the job when one overruns.
//! - `all_reduce` is a reduction to rank 0 followed by a broadcast, not
//!   `MPI_Allreduce`: MPI does not promise that every rank of an allreduce
//!   gets the same bits, and data-parallel training needs identical
//!   parameters on every rank.
//! - The first collective of each (operation, dtype, shape) first gathers
//!   every rank's operation and type, so ranks that disagree fail with
//!   [`CommError::Mismatch`] on every rank instead of corrupting data or
//!   hanging.
//! - Calls are serialised by a mutex (MPI is initialised with
//!   `Threading::Serialized`), and all of them run on one background thread
//!   ([`Queued`]), in the order the program issues them, so an all-reduce
//!   started by the executor overlaps with the work after it.

use crate::MpiError;
use graft_core::comm::{default_timeout, CommError, Communicator, Queued, ReduceOp};
use graft_core::tensor::Storage;
use graft_core::types::TensorType;
use mpi::collective::SystemOperation;
use mpi::datatype::Equivalence;
use mpi::environment::{Threading, Universe};
use mpi::request::{scope, Request, Scope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator as _;
use mpi::traits::*;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Initialises MPI and returns it with the world as a communicator.
/// The communicator is `Queued` (collectives on a background thread)
/// when the flag is true.
pub(crate) fn start() -> Result<(Universe, Arc<dyn Communicator>, bool), MpiError> {
    let (universe, level) = mpi::initialize_with_threading(Threading::Serialized)
        .ok_or_else(|| MpiError::Init("MPI is already initialised in this process".into()))?;
    let w = universe.world();
    let comm = Arc::new(MpiWorld {
        rank: w.rank() as usize,
        size: w.size() as usize,
        timeout: default_timeout(),
        checked: Mutex::new(HashSet::new()),
    });
    // Collectives run on one background thread (`Queued`), so an
    // all-reduce overlaps with the computation after it. That needs an MPI
    // that may be called from a thread other than the one that initialised
    // it (with less, every collective runs on the caller's thread), and it
    // only pays with a core to spare per process: MPI's shared-memory
    // transport spins while it waits, so on a core of its own the
    // communication thread slows the computation down (measured in
    // docs/PERFORMANCE.md). `GRAFT_OVERLAP` = auto (default), 1 or 0.
    let local = w.split_shared(w.rank()).size().max(1) as usize;
    if level >= Threading::Serialized && crate::overlap_wanted(local) {
        let queued = Queued::new(comm).map_err(|e| MpiError::Init(e.to_string()))?;
        return Ok((universe, Arc::new(queued), true));
    }
    Ok((universe, comm, false))
}

/// The blocking collective in progress: its deadline, name, rank, world size and limit.
static WATCH: Mutex<Option<(Instant, String, usize, usize, Duration)>> = Mutex::new(None);
static WATCHDOG: std::sync::Once = std::sync::Once::new();

struct MpiWorld {
    rank: usize,
    size: usize,
    timeout: Duration,
    /// The (operation, type) pairs already checked to agree across ranks;
    /// its lock also serialises the MPI calls.
    checked: Mutex<HashSet<(String, TensorType)>>,
}

/// Header words per rank in the agreement check: operation code, dtype,
/// rank, the first 8 dims, a hash of all dims.
const HEADER: usize = 12;

fn op_code(op: &str) -> i64 {
    op.bytes().fold(7i64, |h, b| h.wrapping_mul(31).wrapping_add(i64::from(b)))
}

fn header(op: &str, ty: &TensorType) -> [i64; HEADER] {
    let mut h = [-1i64; HEADER];
    h[0] = op_code(op);
    h[1] = ty.dtype as i64;
    h[2] = ty.rank() as i64;
    for (k, &d) in ty.shape.iter().take(8).enumerate() {
        h[3 + k] = d as i64;
    }
    h[11] = ty.shape.iter().fold(17i64, |a, &d| a.wrapping_mul(1_000_003).wrapping_add(d as i64));
    h
}

fn describe(h: &[i64]) -> (String, String) {
    let rank = h[2].clamp(0, 64) as usize;
    let dims: Vec<String> = (0..rank.min(8)).map(|k| h[3 + k].to_string()).collect();
    let dtype = [
        graft_core::DType::F16,
        graft_core::DType::F32,
        graft_core::DType::F64,
        graft_core::DType::I32,
        graft_core::DType::I64,
        graft_core::DType::Bool,
        graft_core::DType::U32,
    ]
    .into_iter()
    .find(|d| *d as i64 == h[1])
    .map_or("?".to_string(), |d| d.to_string());
    (
        format!("op#{:x}", h[0] as u64 & 0xffff),
        format!("{dtype}[{}]{}", dims.join(","), if rank > 8 { "..." } else { "" }),
    )
}

impl MpiWorld {
    /// Runs a blocking collective under the watchdog: past the timeout the
    /// watchdog thread reports it and aborts the job.
    fn guarded(&self, op: &str, f: impl FnOnce()) {
        {
            let mut slot = WATCH.lock().unwrap_or_else(|e| e.into_inner());
            *slot = Some((Instant::now() + self.timeout, op.to_string(), self.rank, self.size, self.timeout));
        }
        WATCHDOG.call_once(|| {
            std::thread::spawn(|| loop {
                std::thread::sleep(Duration::from_millis(50));
                let slot = WATCH.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if let Some((deadline, op, rank, size, timeout)) = slot {
                    if Instant::now() >= deadline {
                        let e = CommError::Timeout {
                            op,
                            who: format!("the other ranks of the MPI world of {size} (this is rank {rank})"),
                            seconds: timeout.as_secs_f64(),
                        };
                        eprintln!("error: {e}; aborting the MPI job (GRAFT_COLLECTIVE_TIMEOUT sets the limit)");
                        SimpleCommunicator::world().abort(1);
                    }
                }
            });
        });
        f();
        *WATCH.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Polls `req` until it completes; past the timeout, reports and aborts
    /// the job.
    fn finish<'a, D: ?Sized, S: Scope<'a>>(&self, op: &str, mut req: Request<'a, D, S>) {
        // MPI progresses a non-blocking collective only inside MPI calls
        // (no progress thread), so the loop keeps testing; it yields the
        // core between tests, since the other ranks may share it.
        let deadline = Instant::now() + self.timeout;
        let mut polls = 0u32;
        loop {
            match req.test() {
                Ok(_) => return,
                Err(r) => req = r,
            }
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(1024) && Instant::now() >= deadline {
                let e = CommError::Timeout {
                    op: op.to_string(),
                    who: format!("the other ranks of the MPI world of {} (this is rank {})", self.size, self.rank),
                    seconds: self.timeout.as_secs_f64(),
                };
                eprintln!("error: {e}; aborting the MPI job (GRAFT_COLLECTIVE_TIMEOUT sets the limit)");
                SimpleCommunicator::world().abort(1);
            }
            if polls > 256 {
                std::thread::yield_now();
            }
        }
    }

    /// The agreement check at the first collective of each (operation, type).
    fn agree(&self, checked: &mut HashSet<(String, TensorType)>, op: &str, ty: &TensorType) -> Result<(), CommError> {
        let key = (op.to_string(), ty.clone());
        if checked.contains(&key) {
            return Ok(());
        }
        let mine = header(op, ty);
        let mut all = vec![0i64; HEADER * self.size];
        let w = SimpleCommunicator::world();
        scope(|sc| {
            let req = w.immediate_all_gather_into(sc, &mine[..], &mut all[..]);
            self.finish(op, req);
        });
        let mut names: Vec<(String, String)> = all.chunks(HEADER).map(describe).collect();
        // Ranks that call the same operation print its name, not its code.
        for (r, h) in all.chunks(HEADER).enumerate() {
            if h[0] == mine[0] {
                names[r].0 = op.to_string();
            }
        }
        let per_rank: Vec<(&str, String)> = names.iter().map(|(o, t)| (o.as_str(), t.clone())).collect();
        if all.chunks(HEADER).any(|h| h != mine) {
            let detail: Vec<String> =
                per_rank.iter().enumerate().map(|(r, (o, t))| format!("rank {r} calls {o} on {t}")).collect();
            return Err(CommError::Mismatch { op: op.to_string(), detail: detail.join(", ") });
        }
        checked.insert(key);
        Ok(())
    }
}

/// Dispatches on the storage's dtype with `$s` (source) and `$d`
/// (destination) as typed slices.
macro_rules! typed {
    ($x:expr, $out:expr, |$s:ident, $d:ident| $body:expr) => {
        match ($x, $out) {
            (Storage::F32($s), Storage::F32($d)) => $body,
            (Storage::F64($s), Storage::F64($d)) => $body,
            (Storage::I32($s), Storage::I32($d)) => $body,
            (Storage::I64($s), Storage::I64($d)) => $body,
            (Storage::Bool($s), Storage::Bool($d)) => $body,
            _ => unreachable!("the output storage is made with the operand's dtype"),
        }
    };
}

impl MpiWorld {
    fn reduce_bcast<T: Equivalence>(&self, op: &str, red: ReduceOp, send: &[T], recv: &mut [T]) {
        let w = SimpleCommunicator::world();
        let root = w.process_at_rank(0);
        let mop = match red {
            ReduceOp::Sum => SystemOperation::sum(),
            ReduceOp::Max => SystemOperation::max(),
            ReduceOp::Min => SystemOperation::min(),
        };
        self.guarded(op, || {
            if self.rank == 0 {
                root.reduce_into_root(send, &mut *recv, mop);
            } else {
                root.reduce_into(send, mop);
            }
            root.broadcast_into(&mut *recv);
        });
    }

    fn gather<T: Equivalence>(&self, op: &str, send: &[T], recv: &mut [T]) {
        let w = SimpleCommunicator::world();
        scope(|sc| {
            let req = w.immediate_all_gather_into(sc, send, recv);
            self.finish(op, req);
        });
    }

    fn exchange<T: Equivalence>(&self, op: &str, pairs: &[(usize, usize)], send: &[T], recv: &mut [T]) {
        let w = SimpleCommunicator::world();
        let to = pairs.iter().find(|p| p.0 == self.rank).map(|p| p.1);
        let from = pairs.iter().find(|p| p.1 == self.rank).map(|p| p.0);
        scope(|sc| {
            let sent = to.map(|d| w.process_at_rank(d as i32).immediate_send(sc, send));
            if let Some(s) = from {
                let req = w.process_at_rank(s as i32).immediate_receive_into(sc, recv);
                self.finish(op, req);
            }
            if let Some(req) = sent {
                self.finish(op, req);
            }
        });
    }
}

impl Communicator for MpiWorld {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn describe(&self) -> String {
        format!("MPI world of {} process{}", self.size, if self.size == 1 { "" } else { "es" })
    }

    fn all_reduce(&self, op: ReduceOp, ty: &TensorType, x: &Storage) -> Result<Storage, CommError> {
        let name = match op {
            ReduceOp::Sum => "all_reduce(sum)",
            ReduceOp::Max => "all_reduce(max)",
            ReduceOp::Min => "all_reduce(min)",
        };
        let mut checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
        self.agree(&mut checked, name, ty)?;
        if matches!(x, Storage::Bool(_)) {
            return Err(CommError::Transport { op: name.into(), msg: "bool values cannot be reduced".into() });
        }
        let mut out = Storage::zeros(x.dtype(), x.len());
        typed!(x, &mut out, |s, d| self.reduce_bcast(name, op, s, d));
        Ok(out)
    }

    fn all_gather(&self, ty: &TensorType, x: &Storage) -> Result<Storage, CommError> {
        let mut checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
        self.agree(&mut checked, "all_gather", ty)?;
        let mut out = Storage::zeros(x.dtype(), x.len() * self.size);
        typed!(x, &mut out, |s, d| self.gather("all_gather", s, d));
        Ok(out)
    }

    fn permute(&self, ty: &TensorType, x: &Storage, pairs: &[(usize, usize)]) -> Result<Storage, CommError> {
        let mut checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
        self.agree(&mut checked, "ppermute", ty)?;
        let mut out = Storage::zeros(x.dtype(), x.len());
        typed!(x, &mut out, |s, d| self.exchange("ppermute", pairs, s, d));
        Ok(out)
    }
}
