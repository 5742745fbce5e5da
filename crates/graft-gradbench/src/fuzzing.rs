//! What the `gradbench` fuzz target (`fuzz/`) runs: every line of the input
//! served by a fresh session of the language backend. Not part of the API.
//!
//! Two liberties are taken, because legitimately slow work would otherwise
//! be reported as a hang: an `evaluate`'s `min_runs` and `min_seconds` are
//! capped at 2 runs and 0 s, and the memory budget is [`BUDGET`] (so an
//! `ode` with a billion steps is refused, as it is on a small machine,
//! rather than run). Everything else (malformed JSON, wrong shapes, sizes
//! over the budget) goes through as sent.

use crate::{LangBackend, Server};

/// The memory budget of a fuzzed session: 256 MiB.
pub const BUDGET: u64 = 256 << 20;

/// Serves the lines of `data` (lossily decoded) in one session.
pub fn protocol(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut server = Server::new(LangBackend::with_memory_limit(BUDGET));
    for line in text.lines().take(64) {
        let line = match serde_json::from_str::<serde_json::Value>(line) {
            Ok(mut v) => {
                cap_runs(&mut v);
                v.to_string()
            }
            Err(_) => line.to_string(),
        };
        let _ = server.handle_line(&line);
    }
}

fn cap_runs(v: &mut serde_json::Value) {
    if let Some(input) = v.get_mut("input").and_then(|i| i.as_object_mut()) {
        if input.get("min_runs").is_some_and(|r| r.as_f64().is_none_or(|r| r > 2.0)) {
            input.insert("min_runs".into(), 2.into());
        }
        if input.contains_key("min_seconds") {
            input.insert("min_seconds".into(), 0.into());
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every input in `fuzz/regressions/gradbench/` (see `fuzz/README.md`).
    #[test]
    fn gradbench_regressions_replay() {
        graft_core::fuzzing::replay_regressions("gradbench", super::protocol);
    }
}
