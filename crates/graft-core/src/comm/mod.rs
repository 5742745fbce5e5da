//! Communicators: what runs the collective primitives (`ops/collective.rs`)
//! when a named axis is spread over processes or threads instead of being a
//! vmap axis.
//!
//! A collective names an axis (`psum(x, "data")`). Under `vmap(..,
//! axis_name = "data")` the batching rule turns it into a reduction over the
//! batch dimension, and no communicator is involved. Otherwise the kernel
//! looks the name up here: a [`Communicator`] bound to it on the running
//! thread ([`bind_thread`]: the thread groups of tests and of in-process
//! data parallelism) or for the whole process ([`bind_process`]: the MPI
//! world of `graft-mpi`). An unbound name is an error that says how to bind
//! it.
//!
//! Why a trait in the core: the executor must not know MPI (the default
//! build has no MPI), and the same kernels serve every transport. A
//! transport moves [`Storage`]; the kernels do the layout (the gathered
//! axis's position, the scattered slice).
//!
//! Overlap: [`Communicator::all_reduce_start`] lets the executor start a
//! `psum`/`pmean` as soon as its operand is ready and wait for it at its
//! first reader, so gradient buckets travel while the backward pass goes on
//! (PyTorch DDP's overlap). A transport that cannot run in the background
//! keeps the default, which finishes the collective at once; [`Queued`]
//! gives any communicator a background thread that runs its collectives
//! one by one in the order they were started (the order is what keeps
//! ranks matched: every rank starts the same collectives in the same
//! order).
//!
//! Invariants every implementation keeps:
//! - every rank gets the same bits from `all_reduce` (parameters updated
//!   from all-reduced gradients stay identical on every rank);
//! - a rank that stops answering makes the others fail with
//!   [`CommError::Timeout`] instead of waiting forever;
//! - the first collective whose operand types differ across ranks fails on
//!   every rank with [`CommError::Mismatch`], naming the ranks and types.

mod queued;

pub use queued::Queued;

use crate::tensor::Storage;
use crate::types::TensorType;
use std::cell::RefCell;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};
use thiserror::Error;

/// How `all_reduce` combines the ranks' elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum (in rank order where the transport fixes the order).
    Sum,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
}

/// A failed collective.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum CommError {
    /// Some rank did not reach the collective in time.
    #[error("{op}: no answer from {who} within {seconds} s (a rank died, hangs, or runs a different program)")]
    Timeout {
        /// The collective.
        op: String,
        /// Which ranks were missing, as far as the transport knows.
        who: String,
        /// The limit that passed.
        seconds: f64,
    },
    /// Ranks called the collective with different operand types.
    #[error("{op}: the ranks disagree on the operand: {detail}")]
    Mismatch {
        /// The collective.
        op: String,
        /// Every rank whose type differs from rank 0's, with both types.
        detail: String,
    },
    /// The transport failed.
    #[error("{op}: {msg}")]
    Transport {
        /// The collective.
        op: String,
        /// What went wrong.
        msg: String,
    },
}

/// The ranks of one named axis and the collectives among them.
pub trait Communicator: Send + Sync {
    /// This process's (or thread's) position on the axis, `0..size`.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn size(&self) -> usize;
    /// What it is, for messages ("MPI world of 3 processes").
    fn describe(&self) -> String;
    /// Every rank's `x` (of type `ty` on every rank) combined elementwise by
    /// `op`; the same bits on every rank.
    fn all_reduce(&self, op: ReduceOp, ty: &TensorType, x: &Storage) -> Result<Storage, CommError>;
    /// Every rank's `x`, concatenated in rank order.
    fn all_gather(&self, ty: &TensorType, x: &Storage) -> Result<Storage, CommError>;
    /// Rank `dst` receives rank `src`'s `x` for every `(src, dst)` in `pairs`
    /// (each rank appears at most once as a source and once as a
    /// destination); a rank that is no destination receives zeros.
    fn permute(&self, ty: &TensorType, x: &Storage, pairs: &[(usize, usize)]) -> Result<Storage, CommError>;
    /// Starts [`Communicator::all_reduce`] and returns without waiting where
    /// the transport can run it in the background ([`Queued`]); the default
    /// runs it now. Collectives complete in the order they were started, so
    /// a rank may start several before it waits for any.
    fn all_reduce_start(&self, op: ReduceOp, ty: &TensorType, x: Storage) -> Pending {
        Pending::ready(self.all_reduce(op, ty, &x))
    }
}

/// A collective that was started and not yet waited for
/// ([`Communicator::all_reduce_start`]).
pub struct Pending(PendingState);

enum PendingState {
    Ready(Result<Storage, CommError>),
    Queued { op: String, rx: std::sync::mpsc::Receiver<Result<Storage, CommError>> },
}

impl Pending {
    /// A collective that has already finished.
    pub fn ready(result: Result<Storage, CommError>) -> Pending {
        Pending(PendingState::Ready(result))
    }

    /// Whether the result is there without waiting.
    pub fn is_ready(&self) -> bool {
        matches!(self.0, PendingState::Ready(_))
    }

    /// Waits for the result. The transport enforces the timeout (a rank that
    /// stops answering fails the collective), so this does not hang on its
    /// own.
    pub fn wait(self) -> Result<Storage, CommError> {
        match self.0 {
            PendingState::Ready(r) => r,
            PendingState::Queued { op, rx } => rx.recv().unwrap_or_else(|_| {
                Err(CommError::Transport { op, msg: "the communication thread ended before answering".into() })
            }),
        }
    }
}

type Bound = (String, Arc<dyn Communicator>);

thread_local! {
    static THREAD: RefCell<Vec<Bound>> = const { RefCell::new(Vec::new()) };
}
static PROCESS: RwLock<Vec<Bound>> = RwLock::new(Vec::new());

/// Binds `name` to `comm` on this thread until the guard drops (the
/// innermost binding of a name wins; thread bindings shadow process ones).
pub fn bind_thread(name: &str, comm: Arc<dyn Communicator>) -> ThreadBinding {
    THREAD.with(|t| t.borrow_mut().push((name.to_string(), comm)));
    ThreadBinding { _not_send: std::marker::PhantomData }
}

/// Undoes a [`bind_thread`] when dropped.
#[must_use = "the binding ends when this guard drops"]
pub struct ThreadBinding {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for ThreadBinding {
    fn drop(&mut self) {
        THREAD.with(|t| {
            t.borrow_mut().pop();
        });
    }
}

/// Binds `name` to `comm` for every thread of the process (replacing an
/// earlier process binding of the name).
pub fn bind_process(name: &str, comm: Arc<dyn Communicator>) {
    let mut p = PROCESS.write().unwrap_or_else(|e| e.into_inner());
    p.retain(|(n, _)| n != name);
    p.push((name.to_string(), comm));
}

/// Removes the process binding of `name`, if any.
pub fn unbind_process(name: &str) {
    PROCESS.write().unwrap_or_else(|e| e.into_inner()).retain(|(n, _)| n != name);
}

/// The communicator bound to `name` on this thread or process.
pub fn lookup(name: &str) -> Option<Arc<dyn Communicator>> {
    let local = THREAD.with(|t| t.borrow().iter().rev().find(|(n, _)| n == name).map(|(_, c)| c.clone()));
    local.or_else(|| {
        PROCESS.read().unwrap_or_else(|e| e.into_inner()).iter().rev().find(|(n, _)| n == name).map(|(_, c)| c.clone())
    })
}

/// How long a collective waits for the other ranks: `GRAFT_COLLECTIVE_TIMEOUT`
/// seconds, else 300.
pub fn default_timeout() -> Duration {
    let secs = std::env::var("GRAFT_COLLECTIVE_TIMEOUT").ok().and_then(|s| s.parse::<f64>().ok());
    Duration::from_secs_f64(secs.filter(|s| s.is_finite() && *s > 0.0).unwrap_or(300.0))
}

/// Combines `x` into `acc` elementwise (same dtype and length, checked by
/// the caller); integer sums wrap, as the `add` kernel's do.
pub fn combine(op: ReduceOp, acc: &mut Storage, x: &Storage) -> Result<(), String> {
    macro_rules! float {
        ($a:expr, $b:expr) => {
            for (a, &b) in $a.iter_mut().zip($b) {
                *a = match op {
                    ReduceOp::Sum => *a + b,
                    // NaN wins, as in the `max`/`min` kernels.
                    ReduceOp::Max => {
                        if a.is_nan() || b.is_nan() {
                            *a + b
                        } else {
                            a.max(b)
                        }
                    }
                    ReduceOp::Min => {
                        if a.is_nan() || b.is_nan() {
                            *a + b
                        } else {
                            a.min(b)
                        }
                    }
                }
            }
        };
    }
    macro_rules! int {
        ($a:expr, $b:expr) => {
            for (a, &b) in $a.iter_mut().zip($b) {
                *a = match op {
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Max => (*a).max(b),
                    ReduceOp::Min => (*a).min(b),
                }
            }
        };
    }
    if acc.len() != x.len() {
        return Err(format!("lengths differ ({} and {})", acc.len(), x.len()));
    }
    match (acc, x) {
        (Storage::F32(a), Storage::F32(b)) => float!(a, b),
        (Storage::F64(a), Storage::F64(b)) => float!(a, b),
        (Storage::I32(a), Storage::I32(b)) => int!(a, b),
        (Storage::I64(a), Storage::I64(b)) => int!(a, b),
        (Storage::U32(a), Storage::U32(b)) => int!(a, b),
        (a, b) => return Err(format!("cannot reduce {} with {}", a.dtype(), b.dtype())),
    }
    Ok(())
}

/// Copies `len` elements at `from` of `src` to `to` of `dst` (same dtype).
pub(crate) fn copy_run(src: &Storage, from: usize, dst: &mut Storage, to: usize, len: usize) -> Result<(), String> {
    macro_rules! run {
        ($($v:ident),*) => {
            match (src, dst) {
                $( (Storage::$v(s), Storage::$v(d)) => d[to..to + len].copy_from_slice(&s[from..from + len]), )*
                (s, d) => return Err(format!("cannot copy {} into {}", s.dtype(), d.dtype())),
            }
        };
    }
    run!(F16, F32, F64, I32, I64, U32, Bool);
    Ok(())
}

/// `n` ranks as threads of one process, for tests and in-process data
/// parallelism: [`LocalGroup::ranks`] returns one communicator per rank, each
/// to be used (bound) on its own thread. Every collective is an exchange of
/// all ranks' operands, combined on each rank in rank order, so results are
/// bitwise reproducible and equal on every rank.
pub struct LocalGroup;

struct Shared {
    n: usize,
    timeout: Duration,
    state: Mutex<Round>,
    cv: Condvar,
}

type Item = (String, TensorType, Storage);

struct Round {
    /// Completed rounds.
    generation: u64,
    slots: Vec<Option<Item>>,
    arrived: usize,
    /// The last completed round's items, in rank order.
    result: Arc<Vec<Item>>,
}

/// One rank of a [`LocalGroup`].
pub struct LocalComm {
    rank: usize,
    shared: Arc<Shared>,
}

impl LocalGroup {
    /// `n` communicators (ranks `0..n`) that wait at most `timeout` for each other.
    pub fn ranks(n: usize, timeout: Duration) -> Vec<Arc<LocalComm>> {
        let shared = Arc::new(Shared {
            n,
            timeout,
            state: Mutex::new(Round { generation: 0, slots: vec![None; n], arrived: 0, result: Arc::new(Vec::new()) }),
            cv: Condvar::new(),
        });
        (0..n).map(|rank| Arc::new(LocalComm { rank, shared: shared.clone() })).collect()
    }
}

impl LocalComm {
    /// Every rank's item, in rank order, once all have arrived; the
    /// operation names and types are checked to agree.
    fn exchange(&self, op: &str, ty: &TensorType, x: &Storage) -> Result<Arc<Vec<Item>>, CommError> {
        let s = &self.shared;
        let mut st = s.state.lock().unwrap_or_else(|e| e.into_inner());
        st.slots[self.rank] = Some((op.to_string(), ty.clone(), x.clone()));
        st.arrived += 1;
        let result = if st.arrived == s.n {
            let items: Vec<Item> = st.slots.iter_mut().filter_map(Option::take).collect();
            st.result = Arc::new(items);
            st.arrived = 0;
            st.generation += 1;
            s.cv.notify_all();
            st.result.clone()
        } else {
            let mine = st.generation;
            let deadline = Instant::now() + s.timeout;
            while st.generation == mine {
                let now = Instant::now();
                if now >= deadline {
                    let missing: Vec<String> =
                        st.slots.iter().enumerate().filter(|(_, x)| x.is_none()).map(|(r, _)| r.to_string()).collect();
                    // Withdraw, so a late rank does not complete a round
                    // this one has left.
                    st.slots[self.rank] = None;
                    st.arrived -= 1;
                    return Err(CommError::Timeout {
                        op: op.to_string(),
                        who: format!("rank {} of the thread group", missing.join(", ")),
                        seconds: s.timeout.as_secs_f64(),
                    });
                }
                st = s.cv.wait_timeout(st, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
            }
            st.result.clone()
        };
        drop(st);
        check_agree(op, &result.iter().map(|(o, t, _)| (o.as_str(), t)).collect::<Vec<_>>())?;
        Ok(result)
    }
}

/// The [`CommError::Mismatch`] when the ranks' `(operation, type)` differ
/// from rank 0's.
pub fn check_agree(op: &str, per_rank: &[(&str, &TensorType)]) -> Result<(), CommError> {
    let Some(&(op0, ty0)) = per_rank.first() else { return Ok(()) };
    let bad: Vec<String> = per_rank
        .iter()
        .enumerate()
        .filter(|(_, (o, t))| *o != op0 || *t != ty0)
        .map(|(r, (o, t))| format!("rank {r} calls {o} on {t}"))
        .collect();
    if bad.is_empty() {
        return Ok(());
    }
    Err(CommError::Mismatch { op: op.to_string(), detail: format!("rank 0 calls {op0} on {ty0}, {}", bad.join(", ")) })
}

impl Communicator for LocalComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.n
    }

    fn describe(&self) -> String {
        format!("thread group of {}", self.shared.n)
    }

    fn all_reduce(&self, op: ReduceOp, ty: &TensorType, x: &Storage) -> Result<Storage, CommError> {
        let name = format!("all_reduce({op:?})");
        let all = self.exchange(&name, ty, x)?;
        let mut acc = all[0].2.clone();
        for (_, _, y) in &all[1..] {
            combine(op, &mut acc, y).map_err(|msg| CommError::Transport { op: name.clone(), msg })?;
        }
        Ok(acc)
    }

    fn all_gather(&self, ty: &TensorType, x: &Storage) -> Result<Storage, CommError> {
        let all = self.exchange("all_gather", ty, x)?;
        let n = x.len();
        let mut out = Storage::zeros(x.dtype(), n * all.len());
        for (r, (_, _, y)) in all.iter().enumerate() {
            copy_run(y, 0, &mut out, r * n, n).map_err(|msg| CommError::Transport { op: "all_gather".into(), msg })?;
        }
        Ok(out)
    }

    fn permute(&self, ty: &TensorType, x: &Storage, pairs: &[(usize, usize)]) -> Result<Storage, CommError> {
        let all = self.exchange("ppermute", ty, x)?;
        match pairs.iter().find(|&&(_, d)| d == self.rank) {
            Some(&(src, _)) => Ok(all[src].2.clone()),
            None => Ok(Storage::zeros(x.dtype(), x.len())),
        }
    }
}
