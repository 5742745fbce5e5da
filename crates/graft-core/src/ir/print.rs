//! The stable text form of the IR, used by snapshot tests and `graft ir`.
//!
//! ```text
//! func @f(%0: f32[2,3], %1: f32[3]) -> (f32[2,3]) {
//!   %2 = broadcast_in_dim[shape=(2,3), dims=(1)] %1 : f32[2,3]
//!   %3 = add %0, %2 : f32[2,3]
//!   return %3
//! }
//! ```
//! Functions called by `call` equations are printed first, once each.
//! A value with a name (see [`super::Names`]) prints as `%3:h`.

use super::Func;
use crate::ops::Op;
use std::fmt::Write;
use std::sync::Arc;

/// Prints a function (and the functions it calls) in the text format.
pub fn print_func(func: &Func) -> String {
    let mut seen: Vec<*const Func> = Vec::new();
    let mut out = String::new();
    print_callees(func, &mut seen, &mut out);
    print_one(func, &mut out);
    out
}

fn print_callees(func: &Func, seen: &mut Vec<*const Func>, out: &mut String) {
    for eqn in &func.eqns {
        for sub in eqn.prim.subfuncs() {
            let ptr = Arc::as_ptr(&sub);
            if !seen.contains(&ptr) {
                seen.push(ptr);
                print_callees(&sub, seen, out);
                print_one(&sub, out);
                out.push('\n');
            }
        }
    }
}

fn print_one(func: &Func, out: &mut String) {
    // A named value prints as `%17:x_bar` wherever it appears.
    let show = |v: &super::Value| match func.name_of(*v) {
        Some(n) => format!("{v}:{n}"),
        None => v.to_string(),
    };
    let params: Vec<String> = func.params.iter().map(|p| format!("{}: {}", show(p), func.ty(*p))).collect();
    let results: Vec<String> = func.outputs.iter().map(|&v| func.ty(v).to_string()).collect();
    let _ = writeln!(out, "func @{}({}) -> ({}) {{", func.name, params.join(", "), results.join(", "));
    for eqn in &func.eqns {
        let outs: Vec<String> = eqn.outputs.iter().map(show).collect();
        let ins: Vec<String> = eqn.inputs.iter().map(show).collect();
        let tys: Vec<String> = eqn.outputs.iter().map(|&v| func.ty(v).to_string()).collect();
        let params = eqn.prim.params();
        let params = if params.is_empty() { String::new() } else { format!("[{params}]") };
        let args = if ins.is_empty() { String::new() } else { format!(" {}", ins.join(", ")) };
        let _ = writeln!(out, "  {} = {}{}{} : {}", outs.join(", "), eqn.prim.name(), params, args, tys.join(", "));
    }
    let rets: Vec<String> = func.outputs.iter().map(show).collect();
    let _ = writeln!(out, "  return {}", rets.join(", "));
    out.push('}');
    out.push('\n');
}
