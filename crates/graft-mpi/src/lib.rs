//! graft's distributed runtime: the processes started by `mpirun` as one
//! named axis for the collective primitives (`graft_core::ops::collective`).
//!
//! [`World::start`] initialises MPI (with the `mpi` feature) and gives the
//! world as a [`graft_core::comm::Communicator`]; [`World::bind`] binds it
//! to an axis name for the whole process, so a compiled function's `psum`
//! over that name runs as an MPI collective. A data-parallel training step
//! (`graft::optim::Trainer::data_parallel`, `mpirun -np N graft train`)
//! averages its gradients this way.
//!
//! Without `mpirun` the world has one process and every collective is the
//! identity (a `psum` of one rank is its operand): the same program runs
//! unchanged and [`World::note`] says so. Without the `mpi` feature the
//! crate builds with no MPI on the machine; starting under `mpirun` with
//! more than one process is then [`MpiError::NotBuilt`].
//!
//! Failure (see `mpi_world.rs`): a collective waits at most
//! `GRAFT_COLLECTIVE_TIMEOUT` seconds (default 300); past that the rank
//! prints which collective stalled and aborts the MPI job, since MPI cannot
//! cancel a collective and the job would otherwise hang. Operand types that
//! differ across ranks are found at the first collective of each type and
//! reported on every rank, naming the ranks and their types.

#[cfg(feature = "mpi")]
mod mpi_world;

use graft_core::comm::{CommError, Communicator, ReduceOp};
use graft_core::tensor::Storage;
use graft_core::types::TensorType;
use std::sync::Arc;
use thiserror::Error;

/// Why the distributed runtime could not start.
#[derive(Debug, Error)]
pub enum MpiError {
    /// Started by `mpirun` with several processes, but built without MPI.
    #[error(
        "started by mpirun as one of {size} processes, but this graft was built without MPI; rebuild with `cargo build --release -p graft-cli --features mpi` (needs an MPI implementation such as OpenMPI, and libclang)"
    )]
    NotBuilt {
        /// The world size the launcher announced.
        size: usize,
    },
    /// MPI could not be initialised.
    #[error("MPI could not be initialised: {0}")]
    Init(String),
}

/// The number of processes the MPI launcher announced to this one
/// (OpenMPI's `OMPI_COMM_WORLD_SIZE`, MPICH/Hydra's `PMI_SIZE`), or `None`
/// when it was not started by a launcher.
pub fn launcher_size() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"].iter().find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
}

/// Whether this build can run on several processes (the `mpi` feature).
pub const MPI_BUILT: bool = cfg!(feature = "mpi");

/// Whether collectives should run on a background thread that overlaps
/// them with computation, for a process sharing its machine with `local`
/// ranks: `GRAFT_OVERLAP=1` or `0` decides; otherwise (`auto`) only when
/// the process has at least two cores of its own (the cores it may run on,
/// which `mpirun`'s binding limits, shared among the local ranks when they
/// are not bound), since the communication thread needs a core.
pub fn overlap_wanted(local: usize) -> bool {
    match std::env::var("GRAFT_OVERLAP").ok().as_deref().map(str::trim) {
        Some("1") => return true,
        Some("0") => return false,
        _ => {}
    }
    let mine = std::thread::available_parallelism().map_or(1, usize::from);
    let online = online_cores().unwrap_or(mine);
    // Bound by the launcher to fewer cores than the machine has: those are
    // this process's own; unbound: the machine's, shared by the local ranks.
    let per_rank = if mine < online { mine } else { online / local.max(1) };
    per_rank >= 2
}

/// The machine's online cores (Linux: `/sys/devices/system/cpu/online`,
/// ranges such as `0-3,8-11`), or `None` where that cannot be read.
fn online_cores() -> Option<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").ok()?;
    let mut n = 0;
    for part in text.trim().split(',') {
        n += match part.split_once('-') {
            Some((a, b)) => b.parse::<usize>().ok()?.checked_sub(a.parse::<usize>().ok()?)? + 1,
            None => {
                part.parse::<usize>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

/// The processes of this job, as a communicator.
pub struct World {
    comm: Arc<dyn Communicator>,
    launched: bool,
    /// Collectives run on a background thread (`comm::Queued`).
    queued: bool,
    /// Keeps MPI initialised while the world lives (finalised on drop).
    #[cfg(feature = "mpi")]
    _universe: Option<mpi::environment::Universe>,
}

impl World {
    /// Starts the runtime: MPI's world when built with MPI (also for a
    /// process started without `mpirun`: a world of one), else a
    /// one-process world, refused when a launcher announced more.
    pub fn start() -> Result<World, MpiError> {
        let launched = launcher_size().is_some();
        #[cfg(feature = "mpi")]
        {
            let (universe, comm, queued) = mpi_world::start()?;
            Ok(World { comm, launched, queued, _universe: Some(universe) })
        }
        #[cfg(not(feature = "mpi"))]
        {
            match launcher_size() {
                Some(size) if size > 1 => Err(MpiError::NotBuilt { size }),
                _ => Ok(World { comm: Arc::new(SingleProcess), launched, queued: false }),
            }
        }
    }

    /// A world of this process alone (no MPI involved).
    pub fn single() -> World {
        World {
            comm: Arc::new(SingleProcess),
            launched: false,
            queued: false,
            #[cfg(feature = "mpi")]
            _universe: None,
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// The number of processes.
    pub fn size(&self) -> usize {
        self.comm.size()
    }

    /// Whether collectives run on a background thread, so that the
    /// executor's all-reduces overlap with computation (see
    /// [`overlap_wanted`]).
    pub fn overlaps(&self) -> bool {
        self.queued
    }

    /// The world as a communicator.
    pub fn communicator(&self) -> Arc<dyn Communicator> {
        self.comm.clone()
    }

    /// Binds the axis `name` to this world for the whole process.
    pub fn bind(&self, name: &str) {
        graft_core::comm::bind_process(name, self.comm.clone());
    }

    /// A line for the user when the job is not what `mpirun` would make:
    /// a single process (not started by a launcher).
    pub fn note(&self) -> Option<String> {
        (!self.launched && self.size() == 1)
            .then(|| "note: not started by mpirun: running as a single process (world size 1)".to_string())
    }

    /// Checks that every rank holds the same `values` (bit for bit): a
    /// checksum of them gathered from all ranks. The error names each rank
    /// whose checksum differs from rank 0's.
    pub fn check_replicas(&self, what: &str, values: &[&Storage]) -> Result<(), String> {
        let sum = checksum(values);
        let ty = TensorType::new(graft_core::DType::I64, vec![1]);
        let all = self.comm.all_gather(&ty, &Storage::I64(vec![sum as i64])).map_err(|e| e.to_string())?;
        let Storage::I64(sums) = all else {
            return Err("internal error: the checksums came back with another dtype".into());
        };
        let bad: Vec<String> = sums
            .iter()
            .enumerate()
            .filter(|(_, &s)| s != sums[0])
            .map(|(r, s)| format!("rank {r} has checksum {:016x}", *s as u64))
            .collect();
        if bad.is_empty() {
            return Ok(());
        }
        Err(format!("{what} differ across ranks: rank 0 has checksum {:016x}, {}", sums[0] as u64, bad.join(", ")))
    }
}

/// FNV-1a over the values' bits, in order.
pub fn checksum(values: &[&Storage]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for v in values {
        match v {
            Storage::F16(x) => x.iter().for_each(|e| eat(&e.to_bits().to_le_bytes())),
            Storage::F32(x) => x.iter().for_each(|e| eat(&e.to_bits().to_le_bytes())),
            Storage::F64(x) => x.iter().for_each(|e| eat(&e.to_bits().to_le_bytes())),
            Storage::I32(x) => x.iter().for_each(|e| eat(&e.to_le_bytes())),
            Storage::I64(x) => x.iter().for_each(|e| eat(&e.to_le_bytes())),
            Storage::U32(x) => x.iter().for_each(|e| eat(&e.to_le_bytes())),
            Storage::Bool(x) => x.iter().for_each(|&e| eat(&[u8::from(e)])),
        }
    }
    h
}

/// The world of one process: every collective is what it is on one rank.
struct SingleProcess;

impl Communicator for SingleProcess {
    fn rank(&self) -> usize {
        0
    }

    fn size(&self) -> usize {
        1
    }

    fn describe(&self) -> String {
        "single process (world size 1)".into()
    }

    fn all_reduce(&self, _op: ReduceOp, _ty: &TensorType, x: &Storage) -> Result<Storage, CommError> {
        Ok(x.clone())
    }

    fn all_gather(&self, _ty: &TensorType, x: &Storage) -> Result<Storage, CommError> {
        Ok(x.clone())
    }

    fn permute(&self, _ty: &TensorType, x: &Storage, pairs: &[(usize, usize)]) -> Result<Storage, CommError> {
        Ok(if pairs.contains(&(0, 0)) { x.clone() } else { Storage::zeros(x.dtype(), x.len()) })
    }
}
