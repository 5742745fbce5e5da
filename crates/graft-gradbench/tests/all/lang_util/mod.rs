//! Helpers shared by the per-eval language-backend tests (`lang_<eval>.rs`):
//! a whole protocol session through the real server, and running one entry
//! def of a module directly. Each test crate uses a subset.
#![allow(dead_code)]

use graft_core::{exec, Tensor, TensorType};
use graft_gradbench::{LangBackend, Server};
use graft_lang::Module;
use serde_json::Value;

/// Serves `lines` (one message each) with a fresh `LangBackend` and returns
/// the parsed responses in order.
pub fn session<S: AsRef<str>>(lines: &[S]) -> Vec<Value> {
    let mut server = Server::new(LangBackend::new());
    let mut input = lines.iter().map(|l| l.as_ref()).collect::<Vec<_>>().join("\n");
    input.push('\n');
    let mut out = Vec::new();
    server.serve(input.as_bytes(), &mut out).expect("serving to memory cannot fail");
    let text = String::from_utf8(out).expect("responses are UTF-8");
    text.lines().map(|l| serde_json::from_str(l).expect("response is JSON")).collect()
}

/// Runs def `entry` of `m` on `args`; the f64 results, flattened in order.
pub fn call(m: &Module, entry: &str, args: &[Tensor]) -> Vec<f64> {
    let types: Vec<TensorType> = args.iter().map(Tensor::ty).collect();
    let c = m.instantiate(entry, &types).unwrap_or_else(|d| panic!("{entry}: {}", d.message));
    let exe = exec::plan_cached(&c.func).expect("plans");
    let refs: Vec<&Tensor> = args.iter().collect();
    exe.run(&refs).expect("runs").iter().flat_map(|t| t.to_vec::<f64>().expect("f64 result")).collect()
}
