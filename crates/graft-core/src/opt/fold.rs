//! Constant folding: the equations that depend on no parameter (tables
//! built from `iota`, literals and shapes, such as GradBench `det`'s
//! permutation tables decoded with scans) are evaluated once when a
//! function is planned, and the values the rest of the function reads
//! become `constant`s. A call then starts from the tables instead of
//! rebuilding them, and a loop body's parameter-free work is done once
//! instead of at every step (its body is planned, and folded, on its own).
//!
//! The values are computed by the interpreter, so results are bitwise what
//! the unfolded function computes. Only bounded work is folded: every
//! value involved, including those of sub-functions, has at most
//! [`FOLD_MAX_ELEMS`] elements, the folded results together at most
//! [`FOLD_MAX_BYTES`], and nothing holding a `while` loop (whose trip count
//! is unbounded) is folded. An evaluation that fails leaves the function as
//! it was: the error then happens at run time, where it is reported.

use crate::ir::{Eqn, Func, Value};
use crate::ops::create::Constant;
use crate::ops::{Op, Prim};
use crate::tensor::Tensor;

/// Most elements of any value of a folded equation.
pub const FOLD_MAX_ELEMS: usize = 1 << 20;

/// Most bytes of folded results kept as constants in one function.
pub const FOLD_MAX_BYTES: usize = 64 << 20;

/// Whether a primitive may be folded: no `while` (also not nested in its
/// sub-functions), every value of its sub-functions within the size bound.
fn bounded(prim: &Prim) -> bool {
    // A collective communicates when the function runs, never at plan time.
    if matches!(prim, Prim::While(_) | Prim::WhileJvp(_) | Prim::WhileVjp(_) | Prim::WhileHvp(_) | Prim::Collective(_))
    {
        return false;
    }
    prim.subfuncs()
        .iter()
        .all(|f| f.types.iter().all(|t| t.numel() <= FOLD_MAX_ELEMS) && f.eqns.iter().all(|e| bounded(&e.prim)))
}

/// Families computed where they are read at no more cost than loading a
/// table: elementwise work and layout, which fusion turns into in-register
/// arithmetic and address arithmetic (a folded `full(2.0, [n])` would be an
/// `n`-element buffer where a literal was). Not `iota`: it has no kernel
/// form, so the interpreter would build its buffer at every call (the
/// position tables of the max-pooling derivative: 2.5 % of a CNN step).
fn light(prim: &Prim) -> bool {
    matches!(
        prim,
        Prim::Binary(_)
            | Prim::Compare(_)
            | Prim::Select(_)
            | Prim::Fma(_)
            | Prim::Convert(_)
            | Prim::StopGradient(_)
            | Prim::Unary(_)
            | Prim::Constant(_)
            | Prim::BroadcastInDim(_)
            | Prim::Reshape(_)
            | Prim::Transpose(_)
            | Prim::Slice(_)
            | Prim::Pad(_)
            | Prim::Concatenate(_)
            | Prim::Reverse(_)
    )
}

/// The parameter-free equations of `f` that are worth folding (those that
/// are, or depend on, an equation that is not [`light`]), the
/// parameter-free equations needed to evaluate them, and the folded values
/// the rest of `f` reads.
fn foldable(f: &Func) -> (Vec<bool>, Vec<bool>, Vec<Value>) {
    let mut constant = vec![false; f.n_values()];
    let mut heavy = vec![false; f.n_values()];
    let mut eval = vec![false; f.eqns.len()];
    let mut fold = vec![false; f.eqns.len()];
    for (i, eqn) in f.eqns.iter().enumerate() {
        let free = eqn.inputs.iter().all(|v| constant[v.index()]);
        let small = eqn.inputs.iter().chain(&eqn.outputs).all(|&v| f.ty(v).numel() <= FOLD_MAX_ELEMS);
        // An effect happens when the function runs, not when it is planned.
        let pure = !eqn.prim.has_effect();
        if !(free && pure && (matches!(eqn.prim, Prim::Constant(_)) || (small && bounded(&eqn.prim)))) {
            continue;
        }
        eval[i] = true;
        fold[i] = !light(&eqn.prim) || eqn.inputs.iter().any(|v| heavy[v.index()]);
        for v in &eqn.outputs {
            constant[v.index()] = true;
            heavy[v.index()] = fold[i];
        }
    }
    // Folded values read by an equation that stays, or returned.
    let mut read = vec![false; f.n_values()];
    for (i, eqn) in f.eqns.iter().enumerate() {
        if !fold[i] {
            for v in &eqn.inputs {
                read[v.index()] = true;
            }
        }
    }
    for v in &f.outputs {
        read[v.index()] = true;
    }
    let mut needed = Vec::new();
    let mut bytes = 0usize;
    for (i, eqn) in f.eqns.iter().enumerate() {
        if !fold[i] {
            continue;
        }
        for &v in &eqn.outputs {
            if read[v.index()] && !needed.contains(&v) {
                bytes = bytes.saturating_add(f.ty(v).numel() * f.ty(v).dtype.size_bytes());
                needed.push(v);
            }
        }
    }
    if bytes > FOLD_MAX_BYTES {
        return (fold, eval, Vec::new());
    }
    (fold, eval, needed)
}

/// `f` with its parameter-free equations evaluated by `eval` (which runs a
/// parameterless function and returns its outputs) and replaced by
/// `constant`s, or `None` when there is nothing to fold or the evaluation
/// fails.
pub fn fold_constants(f: &Func, eval: impl FnOnce(Func) -> Option<Vec<Tensor>>) -> Option<Func> {
    let (fold, eval_eqns, needed) = foldable(f);
    if needed.is_empty() {
        return None;
    }
    // The parameterless function computing the needed values from every
    // parameter-free equation (numbered as in `f`; DCE keeps what they read).
    let sub = Func {
        name: format!("{}.constants", f.name),
        types: f.types.clone(),
        params: Vec::new(),
        eqns: f.eqns.iter().zip(&eval_eqns).filter(|(_, k)| **k).map(|(e, _)| e.clone()).collect(),
        outputs: needed.clone(),
        names: Default::default(),
    };
    let values = eval(super::dce(&sub))?;
    if values.len() != needed.len() || values.iter().zip(&needed).any(|(t, &v)| t.ty() != *f.ty(v)) {
        return None;
    }
    // Constants first (they read nothing), then the equations that stay.
    let mut loc = vec![None; f.n_values()];
    for e in &f.eqns {
        for v in &e.outputs {
            loc[v.index()].clone_from(&e.loc);
        }
    }
    let mut eqns: Vec<Eqn> = needed
        .iter()
        .zip(values)
        .map(|(&v, value)| Eqn {
            prim: Prim::Constant(Constant { value }),
            inputs: vec![],
            outputs: vec![v],
            loc: loc[v.index()].clone(),
        })
        .collect();
    eqns.extend(f.eqns.iter().zip(&fold).filter(|(_, folded)| !**folded).map(|(e, _)| e.clone()));
    let folded = Func {
        name: f.name.clone(),
        types: f.types.clone(),
        params: f.params.clone(),
        eqns,
        outputs: f.outputs.clone(),
        names: f.names.clone(),
    };
    // Drops the values no equation defines any more.
    Some(super::dce(&folded))
}
