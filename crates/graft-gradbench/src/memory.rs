//! The memory budget of a GradBench session: a message whose sizes would
//! need more memory than the budget is answered `success: false` before
//! anything of that size is allocated, so one hostile input (`llsq` with
//! `n` = 1e12, a `kmeans` input whose distance matrix would take 32 GB)
//! cannot abort the tool process.
//!
//! The budget and the estimate are `graft_core::memory`'s (shared with
//! `graft run --max-memory`): `GRAFT_MAX_MEMORY`, else half of physical
//! memory. Two checks use it: a structural integer's carrier (`llsq`'s `n`,
//! `ode`'s `s`, an f64 vector of that length) is checked before it is
//! allocated, and a compiled entry's [`estimated_peak_bytes`] is checked
//! before it is planned and run.

pub use graft_core::memory::{
    default_limit, estimated_peak_bytes, parse_bytes, physical_memory, show_bytes, type_bytes, FALLBACK_LIMIT,
};

use crate::error::GbError;

/// `Ok` when `need` fits in `limit`; else the error naming `what`, both
/// sizes and how to raise the limit.
pub fn check(what: &str, need: u64, limit: u64) -> Result<(), GbError> {
    match graft_core::memory::over_limit(what, need, limit, "this tool's memory limit") {
        None => Ok(()),
        Some(msg) => Err(GbError::Memory(format!("{msg}; set GRAFT_MAX_MEMORY to change the limit"))),
    }
}
