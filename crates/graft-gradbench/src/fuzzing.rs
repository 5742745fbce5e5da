//! What the `gradbench` fuzz target (`fuzz/`) runs: every line of the input
//! served by a fresh session of the language backend. Not part of the API.
//!
//! Each session's `define` copies the module as the first `define` of the
//! process parsed and checked it
//! ([`LangBackend::reusing_checked_modules`]): the embedded programs are
//! fixed, so checking them again for every input (nine tenths of the time)
//! tested nothing new.
//!
//! Two liberties are taken, because legitimately slow work would otherwise
//! be reported as a hang: an `evaluate`'s `min_runs` and `min_seconds` are
//! capped at 2 runs and 0 s, and the memory budget is [`BUDGET`] (so an
//! `ode` with a billion steps is refused, as it is on a small machine,
//! rather than run), and `compile` does not wait for the C compiler
//! ([`LangBackend::compiling_in_background`]: kernels still compile, on a
//! background thread, as a program run once would). Everything else
//! (malformed JSON, wrong shapes, sizes over the budget) goes through as
//! sent.

use crate::{LangBackend, Server};

/// The memory budget of a fuzzed session: 256 MiB.
pub const BUDGET: u64 = 256 << 20;

/// Serves the lines of `data` (lossily decoded) in one session.
pub fn protocol(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let backend = LangBackend::with_memory_limit(BUDGET).reusing_checked_modules().compiling_in_background();
    let mut server = Server::new(backend);
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
    use crate::{LangBackend, Server};

    /// A backend reusing checked modules answers as a fresh one does, in
    /// sessions after one that evaluated at other sizes.
    #[test]
    fn reused_modules_answer_as_fresh_ones() {
        let lines = [
            r#"{"id": 0, "kind": "define", "module": "llsq"}"#,
            r#"{"id": 1, "kind": "evaluate", "module": "llsq", "function": "primal", "input": {"x": [0.1, 0.2, 0.3], "n": 7}}"#,
            r#"{"id": 2, "kind": "evaluate", "module": "llsq", "function": "gradient", "input": {"x": [0.5, -0.2], "n": 4}}"#,
            r#"{"id": 3, "kind": "define", "module": "lse"}"#,
            r#"{"id": 4, "kind": "evaluate", "module": "lse", "function": "gradient", "input": {"x": [1.0, 2.0, 3.0]}}"#,
        ];
        let answers = |backend: LangBackend, lines: &[&str]| -> Vec<String> {
            let mut server = Server::new(backend);
            lines
                .iter()
                .filter_map(|l| server.handle_line(l))
                .map(|mut r| {
                    r.timings = None;
                    r.to_line()
                })
                .collect()
        };
        let fresh = answers(LangBackend::with_memory_limit(super::BUDGET), &lines);
        assert!(fresh.iter().all(|a| !a.contains("\"success\":false")), "{fresh:?}");
        for _ in 0..3 {
            let reused = answers(LangBackend::with_memory_limit(super::BUDGET).reusing_checked_modules(), &lines);
            assert_eq!(reused, fresh);
        }
        // Evaluating before defining still fails in a reusing session.
        let undefined = answers(LangBackend::new().reusing_checked_modules(), &lines[1..2]);
        assert!(undefined[0].contains("\"success\":false"), "{undefined:?}");
    }

    /// Every input in `fuzz/regressions/gradbench/` (see `fuzz/README.md`).
    #[test]
    fn gradbench_regressions_replay() {
        graft_core::fuzzing::replay_regressions("gradbench", super::protocol);
    }
}
