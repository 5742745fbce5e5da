//! `graft run --timeout SECONDS`: a watchdog thread that ends the process.
//!
//! The executor has no cooperative cancellation (kernels are tight loops,
//! loops run inside one kernel call, native code runs without calling back),
//! so the watchdog does not stop the run from inside: when the time is up
//! it prints one error line naming the phase (compiling, running, writing
//! results) and exits the process with code 1. Nothing is printed on
//! stdout; an `--out` file being written at that moment may be left
//! incomplete.

use crate::Fail;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub const COMPILING: u8 = 0;
pub const RUNNING: u8 = 1;
pub const WRITING: u8 = 2;

/// The phase the command is in, read by the watchdog when it fires.
pub struct Phase(Arc<AtomicU8>);

impl Phase {
    pub fn set(&self, p: u8) {
        self.0.store(p, Ordering::SeqCst);
    }
}

/// Starts the watchdog for `seconds` (finite and positive, else a usage
/// error). It is a detached thread: the process ends when `main` returns.
pub fn start(seconds: f64) -> Result<Phase, Fail> {
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= 1e9) {
        return Err(Fail::usage(format!(
            "error: --timeout {seconds}: expected a number of seconds greater than 0 (at most 1e9)"
        )));
    }
    let phase = Arc::new(AtomicU8::new(COMPILING));
    let seen = phase.clone();
    std::thread::Builder::new()
        .name("graft-timeout".into())
        .spawn(move || {
            std::thread::sleep(Duration::from_secs_f64(seconds));
            let what = match seen.load(Ordering::SeqCst) {
                COMPILING => "while compiling",
                RUNNING => "while running",
                _ => "while writing the results",
            };
            eprintln!("error: stopped after --timeout {seconds} s {what}; the run did not finish");
            std::process::exit(1);
        })
        .map_err(|e| Fail::new(format!("error: cannot start the --timeout watchdog: {e}")))?;
    Ok(Phase(phase))
}
