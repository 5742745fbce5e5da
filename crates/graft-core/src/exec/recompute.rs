//! Recompute instead of materialise: a fused group that reads several
//! values another group computes from fewer inputs computes them again
//! from those inputs, where that moves fewer bytes.
//!
//! Why: reverse mode copies the forward pass first and transposes the
//! linear part after it, so the coefficients a derivative needs (for
//! `gelu`'s tanh form: `u^2`, `1 - tanh(..)^2`, `1 + tanh(..)`, `0.5 u`,
//! all elementwise in the pre-activation `u`) are computed in the forward
//! pass's fused group and read by a backward group on the other side of
//! the matrix products. Each such value is *materialised*: stored in full
//! by the forward group and loaded back by the backward one. In the
//! transformer block of `bench/side_by_side.py` the MLP's backward group
//! loaded five such `[8, 128, 1024]` arrays, 20 MB, where computing them
//! again from the matrix product's output (one array) costs a few vector
//! instructions per element. XLA's fusion duplicates cheap producers into
//! their consumers the same way.
//!
//! The decision, per pair of groups (`G1` computing, `G2` reading, with a
//! matrix product or convolution between them in the schedule: groups with
//! none between them are compiled together as one row kernel or pass
//! values through the cache anyway):
//! - the candidates are `G1`'s outputs that `G2` reads, that the function
//!   does not return, and whose *cone* (the members of `G1` they are
//!   computed from, back to `G1`'s inputs: elementwise, splat and layout
//!   equations) has at most [`CONE_MAX`] equations;
//! - the pair is rewritten when the candidates' bytes exceed the bytes of
//!   the full-size cone inputs `G2` does not already read (what `G2` loads
//!   instead), and the cones together have at most [`PAIR_MAX`] equations.
//!
//! The rewrite copies the cones (the same primitives on the same operands,
//! so the same bits) just before `G2`'s first reader, which reads the
//! copies; `G1` keeps computing them for its own members, and stops storing
//! those no one else reads. The function is then planned again, the copies
//! joining `G2`'s group.
//!
//! Invariant: results are unchanged (every copy computes exactly what the
//! original computes; pure primitives only).

use super::fuse::{classify, Kind, Plan, Step};
use crate::ir::{Func, Value};
use crate::ops::Op;
use std::collections::{BTreeSet, HashMap};

/// Most equations one value's cone may have.
const CONE_MAX: usize = 24;

/// Most equations the cones copied for one pair of groups may have.
const PAIR_MAX: usize = 48;

/// Whether equation `i` is a matrix product or a convolution: the values
/// a group reads across one are materialised whatever the fusion.
fn barrier(func: &Func, i: usize) -> bool {
    matches!(func.eqns[i].prim.name(), "dot_general" | "conv_general")
}

/// Whether equation `i` may be copied into another group: an elementwise,
/// splat or layout primitive with one result.
fn copyable(func: &Func, i: usize) -> bool {
    let e = &func.eqns[i];
    e.outputs.len() == 1
        && !e.prim.has_effect()
        && matches!(classify(func, e), Kind::Elementwise(_) | Kind::Splat(_) | Kind::Layout(_))
}

/// The members of group `members` that `v` is computed from (in equation
/// order), and the values they read from outside it; `None` when a member
/// of the cone cannot be copied or it is too large.
fn cone(func: &Func, def: &[Option<usize>], members: &BTreeSet<usize>, v: Value) -> Option<(Vec<usize>, Vec<Value>)> {
    let mut eqns = BTreeSet::new();
    let mut leaves = Vec::new();
    let mut stack = vec![v];
    while let Some(u) = stack.pop() {
        match def[u.index()].filter(|d| members.contains(d)) {
            Some(i) => {
                if !eqns.insert(i) {
                    continue;
                }
                if eqns.len() > CONE_MAX || !copyable(func, i) {
                    return None;
                }
                stack.extend(&func.eqns[i].inputs);
            }
            None => {
                if !leaves.contains(&u) {
                    leaves.push(u);
                }
            }
        }
    }
    Some((eqns.into_iter().collect(), leaves))
}

/// `func` with values recomputed by the groups that read them (see the
/// module docs), or `None` when no pair of groups gains from it.
pub(crate) fn recompute(func: &Func, plan: &Plan) -> Option<Func> {
    let mut def: Vec<Option<usize>> = vec![None; func.n_values()];
    for (i, e) in func.eqns.iter().enumerate() {
        e.outputs.iter().for_each(|o| def[o.index()] = Some(i));
    }
    let mut group_of: Vec<Option<usize>> = vec![None; func.eqns.len()];
    // Per group, how many matrix products the schedule runs before it.
    let mut products_before: Vec<usize> = vec![0; plan.groups.len()];
    let mut products = 0;
    for step in &plan.steps {
        match *step {
            Step::Group(g) => {
                plan.groups[g].eqns.iter().for_each(|&i| group_of[i] = Some(g));
                products_before[g] = products;
            }
            Step::Eqn(i) => products += usize::from(barrier(func, i)),
        }
    }
    let returned: BTreeSet<Value> = func.outputs.iter().copied().collect();
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); func.n_values()];
    for (i, e) in func.eqns.iter().enumerate() {
        for v in &e.inputs {
            if readers[v.index()].last() != Some(&i) {
                readers[v.index()].push(i);
            }
        }
    }
    let bytes = |v: Value| func.ty(v).size_bytes();
    // (reader group, value) -> the cone its copy is made of.
    let mut copies: HashMap<(usize, Value), Vec<usize>> = HashMap::new();
    for (g1, grp) in plan.groups.iter().enumerate() {
        let members: BTreeSet<usize> = grp.eqns.iter().copied().collect();
        // Readers in other groups of each output.
        let mut by_reader: HashMap<usize, Vec<Value>> = HashMap::new();
        for &v in &grp.outputs {
            if returned.contains(&v) {
                continue;
            }
            for &i in &readers[v.index()] {
                // Only across a matrix product: groups with none between
                // them (a softmax's, a layer norm's) are compiled together
                // as one row kernel, or pass cached values.
                if let Some(g2) = group_of[i].filter(|&g2| products_before[g2] > products_before[g1]) {
                    let vs = by_reader.entry(g2).or_default();
                    if !vs.contains(&v) {
                        vs.push(v);
                    }
                }
            }
        }
        for (g2, vs) in by_reader {
            let reads: BTreeSet<Value> = plan.groups[g2].inputs.iter().copied().collect();
            let n = plan.groups[g2].n;
            let mut cones = Vec::new();
            let mut leaves: BTreeSet<Value> = BTreeSet::new();
            let mut size = 0;
            for v in vs {
                let Some((eqns, ls)) = cone(func, &def, &members, v) else { continue };
                size += eqns.len();
                leaves.extend(ls);
                cones.push((v, eqns));
            }
            let saved: usize = cones.iter().map(|(v, _)| bytes(*v)).sum();
            // What the reader loads instead: full-size leaves it does not
            // read already (one-element and small layout sources are cheap).
            let extra: usize =
                leaves.iter().filter(|l| !reads.contains(l) && func.ty(**l).numel() >= n).map(|&l| bytes(l)).sum();
            if cones.is_empty() || size > PAIR_MAX || saved <= extra {
                continue;
            }
            for (v, eqns) in cones {
                copies.insert((g2, v), eqns);
            }
        }
    }
    if copies.is_empty() {
        return None;
    }
    // The originals whose every reader now reads a copy are dead.
    Some(crate::opt::dce(&rewrite(func, &group_of, &copies)))
}

/// `func` with each `(group, value)` of `copies` read by the group from a
/// copy of its cone, emitted before the group's first reader of it. The
/// copies of one group share their common members (`u` of `u^2` and `3u`
/// is computed once).
fn rewrite(func: &Func, group_of: &[Option<usize>], copies: &HashMap<(usize, Value), Vec<usize>>) -> Func {
    let mut out = func.clone();
    out.eqns = Vec::with_capacity(func.eqns.len());
    // Per (group, original value): its copy for that group.
    let mut made: HashMap<(usize, Value), Value> = HashMap::new();
    for (i, e) in func.eqns.iter().enumerate() {
        let mut e = e.clone();
        if let Some(g) = group_of[i] {
            for k in 0..e.inputs.len() {
                let v = e.inputs[k];
                let Some(cone) = copies.get(&(g, v)) else { continue };
                // Copy the cone's members not copied for this group yet,
                // each reading the copies of the members it reads.
                for &j in cone {
                    let o = func.eqns[j].outputs[0];
                    if made.contains_key(&(g, o)) {
                        continue;
                    }
                    let mut c = func.eqns[j].clone();
                    for x in c.inputs.iter_mut() {
                        if let Some(&y) = made.get(&(g, *x)) {
                            *x = y;
                        }
                    }
                    let fresh = Value(out.types.len() as u32);
                    out.types.push(func.ty(o).clone());
                    if let Some(name) = func.names.get(o) {
                        out.names.set(fresh, name.clone());
                    }
                    c.outputs = vec![fresh];
                    made.insert((g, o), fresh);
                    out.eqns.push(c);
                }
                // `v` is defined by its cone's last member.
                if let Some(&c) = made.get(&(g, v)) {
                    e.inputs[k] = c;
                }
            }
        }
        out.eqns.push(e);
    }
    out
}
