//! `hoist_collectives`: all-reduces as early as their operands allow.
//!
//! The executor runs equations in order, starts an all-reduce in the
//! background and waits for it at its first reader (`ExecOptions::overlap`).
//! That overlaps communication with computation only if the all-reduce
//! comes early in the order: in a data-parallel training step a gradient
//! bucket's `pmean` is emitted after the whole backward pass, although its
//! gradients were ready long before. This pass reorders the equations so
//! that each all-reduce follows right after what it needs: for every
//! all-reduce, in their original order, the equations it depends on that
//! are not placed yet are placed (in their original order), then the
//! all-reduce; every other equation keeps its original order after them.
//! That is a topological order, and the all-reduces keep their relative
//! order, which every rank must share.

use crate::ir::Func;
use crate::ops::Prim;

fn is_all_reduce(p: &Prim) -> bool {
    matches!(p, Prim::Collective(c) if c.is_all_reduce())
}

/// `f` with its all-reduces moved as early as their operands allow (see
/// the module docs), or `None` when that changes nothing.
pub fn hoist_collectives(f: &Func) -> Option<Func> {
    if !f.eqns.iter().any(|e| is_all_reduce(&e.prim)) {
        return None;
    }
    // The equation defining each value (parameters: none).
    let mut def: Vec<Option<usize>> = vec![None; f.n_values()];
    for (i, e) in f.eqns.iter().enumerate() {
        for &o in &e.outputs {
            def[o.index()] = Some(i);
        }
    }
    let mut placed = vec![false; f.eqns.len()];
    let mut order: Vec<usize> = Vec::with_capacity(f.eqns.len());
    let mut stack = Vec::new();
    for (c, e) in f.eqns.iter().enumerate() {
        if !is_all_reduce(&e.prim) {
            continue;
        }
        // Unplaced ancestors of `c`, then `c`, in their original order.
        let mut need = vec![c];
        stack.push(c);
        placed[c] = true;
        while let Some(i) = stack.pop() {
            for &v in &f.eqns[i].inputs {
                if let Some(d) = def[v.index()] {
                    if !placed[d] {
                        placed[d] = true;
                        need.push(d);
                        stack.push(d);
                    }
                }
            }
        }
        need.sort_unstable();
        order.extend(need);
    }
    order.extend((0..f.eqns.len()).filter(|&i| !placed[i]));
    if order.iter().enumerate().all(|(k, &i)| k == i) {
        return None;
    }
    let mut moved = f.clone();
    moved.eqns = order.iter().map(|&i| f.eqns[i].clone()).collect();
    // Renumber the values in the new order (passes read values in order).
    super::rebuild(&moved, |b, e, ins| b.emit(e.prim.clone(), ins)).ok()
}
