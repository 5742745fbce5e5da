//! The timing policy of GradBench's `Runs` inputs.
//!
//! An input carrying `min_runs` and `min_seconds` asks the tool to run the
//! function at least `min_runs` times *and* until the accumulated run time
//! reaches `min_seconds`, whichever takes longer, reporting one `"evaluate"`
//! timing per run. "Accumulated run time" is the sum of the timed runs
//! themselves (as GradBench's own Python tools count it), not wall time
//! including JSON work. Inputs without these fields (the `hello` eval sends a
//! bare number) are run once.
//!
//! Both fields are bounded ([`MAX_MIN_RUNS`], [`MAX_MIN_SECONDS`]): a larger
//! value is refused with `success: false` rather than keeping the tool busy
//! for days (the session then goes on with the next message).
//!
//! Invariants: the function runs at least once (an output is always
//! produced); each run counts at least 1 ns towards `min_seconds`, so the
//! loop ends even on a clock too coarse to see a run.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::error::GbError;
use crate::protocol::{json_kind, Timing};

/// The largest `min_runs` accepted (as for `graft bench --runs`).
pub const MAX_MIN_RUNS: u64 = 1_000_000;

/// The largest `min_seconds` accepted: one hour.
pub const MAX_MIN_SECONDS: f64 = 3600.0;

/// How many times, and for how long, to run a function.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Runs {
    /// Run at least this many times.
    pub min_runs: u64,
    /// Keep running until the timed runs add up to at least this long.
    pub min_time: Duration,
}

impl Runs {
    /// One run, no time floor.
    pub fn once() -> Runs {
        Runs { min_runs: 1, min_time: Duration::ZERO }
    }

    /// Reads `min_runs`/`min_seconds` from an object input; a missing field
    /// keeps its default (1 run, 0 seconds) and a non-object input runs once.
    pub fn from_input(input: &Value) -> Result<Runs, GbError> {
        let Value::Object(obj) = input else {
            return Ok(Runs::once());
        };
        let mut runs = Runs::once();
        if let Some(v) = obj.get("min_runs") {
            runs.min_runs = v.as_u64().ok_or_else(|| {
                GbError::Runs(format!(
                    "`min_runs` must be a non-negative integer, found {}",
                    if v.is_number() { v.to_string() } else { json_kind(v).to_string() }
                ))
            })?;
            if runs.min_runs > MAX_MIN_RUNS {
                return Err(GbError::Runs(format!("`min_runs` must be at most {MAX_MIN_RUNS}, found {v}")));
            }
        }
        if let Some(v) = obj.get("min_seconds") {
            let s = v
                .as_f64()
                .ok_or_else(|| GbError::Runs(format!("`min_seconds` must be a number, found {}", json_kind(v))))?;
            if s > MAX_MIN_SECONDS {
                return Err(GbError::Runs(format!("`min_seconds` must be at most {MAX_MIN_SECONDS}, found {v}")));
            }
            runs.min_time = Duration::try_from_secs_f64(s).map_err(|_| {
                GbError::Runs(format!("`min_seconds` must be a finite non-negative number of seconds, found {v}"))
            })?;
        }
        Ok(runs)
    }

    /// Runs `f` under this policy. Returns the last run's result and one
    /// `"evaluate"` timing per run; the first error stops the loop.
    pub fn repeat<T, E>(&self, mut f: impl FnMut() -> Result<T, E>) -> Result<(T, Vec<Timing>), E> {
        let mut timings = Vec::new();
        let mut total = Duration::ZERO;
        let mut last = None;
        while last.is_none() || (timings.len() as u64) < self.min_runs || total < self.min_time {
            let start = Instant::now();
            let out = f()?;
            let took = start.elapsed();
            // The previous output is dropped here, outside the timed window.
            last = Some(out);
            timings.push(Timing::new("evaluate", took));
            total += took.max(Duration::from_nanos(1));
        }
        // The loop body ran at least once (`last.is_none()` forces it).
        let out = last.expect("internal error: the run loop executes at least once");
        Ok((out, timings))
    }
}
