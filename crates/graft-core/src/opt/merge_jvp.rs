//! One loop run for a `while` and its JVP: `while_jvp` runs the loop's
//! augmented form, which computes the primal carries beside the tangents,
//! so a graph that also runs the same `while` on the same operands (what
//! forward mode through a loop makes: the `while` for the primal results,
//! `while_jvp` for the tangents) ran the primal loop twice.
//!
//! The pass, run by the executor after every transform, replaces such a
//! pair by one `while_jvp` with `primal` set, whose first results replace
//! the `while`'s. It needs the tangent operands to exist where the `while`
//! runs (they are then moved before it); a loop with prints is left alone
//! (its prints belong to the primal run).
//!
//! Invariant: results are unchanged. The augmented loop's primal carries
//! are computed by the same body equations on the same operands as the
//! `while`'s (`Loop::aug` appends tangent equations and leaves the primal
//! ones as they are), and it runs the same number of trips, because its
//! `cond` reads only primal carries.

use super::rebuild;
use crate::error::IrError;
use crate::ir::{Func, Value};
use crate::ops::while_loop::WhileJvp;
use crate::ops::Prim;
use std::collections::HashMap;

/// `f` with each `while` and its `while_jvp` run as one loop (see the
/// module docs), or `None` when it has no such pair.
pub fn merge_while_jvp(f: &Func) -> Option<Func> {
    // Where each value is defined (parameters before every equation).
    let mut def: Vec<Option<usize>> = vec![None; f.n_values()];
    for (i, e) in f.eqns.iter().enumerate() {
        for o in &e.outputs {
            def[o.index()] = Some(i);
        }
    }
    let before = |v: &Value, i: usize| def[v.index()].is_none_or(|d| d < i);
    // Pairs (while, while_jvp) by equation index.
    let mut jvp_of: HashMap<usize, usize> = HashMap::new();
    for (j, e) in f.eqns.iter().enumerate() {
        let Prim::WhileJvp(wj) = &e.prim else { continue };
        if wj.primal {
            continue;
        }
        let nx = wj.lp.n_x();
        let primal = (0..j).find(|&i| {
            let w = &f.eqns[i];
            matches!(&w.prim, Prim::While(p) if p.lp == wj.lp)
                && !w.prim.has_effect()
                && w.inputs[..] == e.inputs[..nx]
                && !jvp_of.contains_key(&i)
        });
        if let Some(i) = primal {
            if e.inputs[nx..].iter().all(|v| before(v, i)) {
                jvp_of.insert(i, j);
            }
        }
    }
    if jvp_of.is_empty() {
        return None;
    }
    // Each paired `while_jvp` moves to just before its `while` (its
    // operands are all defined there, checked above).
    let moved: std::collections::HashSet<usize> = jvp_of.values().copied().collect();
    let mut g = f.clone();
    g.eqns.clear();
    let mut merged = Vec::new(); // per position in `g`: is it a merged while_jvp / its while
    for (i, e) in f.eqns.iter().enumerate() {
        if moved.contains(&i) {
            continue;
        }
        if let Some(&j) = jvp_of.get(&i) {
            g.eqns.push(f.eqns[j].clone());
            merged.push(Role::Jvp);
            g.eqns.push(e.clone());
            merged.push(Role::Primal);
        } else {
            g.eqns.push(e.clone());
            merged.push(Role::Other);
        }
    }
    let mut at = 0;
    let mut pending: Option<Vec<Value>> = None;
    let out = rebuild(&g, |b, e, ins| {
        let role = merged[at];
        at += 1;
        match (&e.prim, role) {
            (Prim::WhileJvp(wj), Role::Jvp) => {
                let n_carry = wj.lp.carry_types().len();
                let both = WhileJvp { primal: true, ..wj.clone() };
                let mut outs = b.emit(Prim::WhileJvp(both), ins)?;
                let tangents = outs.split_off(n_carry);
                pending = Some(outs);
                Ok(tangents)
            }
            (Prim::While(_), Role::Primal) => pending
                .take()
                .ok_or_else(|| IrError::invalid("while", "internal error: merged while_jvp missing".to_string())),
            (p, _) => b.emit(p.clone(), ins),
        }
    });
    // A graph that fails to rebuild is run as it is.
    out.ok()
}

#[derive(Clone, Copy)]
enum Role {
    Jvp,
    Primal,
    Other,
}
