//! One loop for neighbouring one-step scans: the scans of length one that
//! [`super::flatten`] keeps as loops (their bodies shift values, which a
//! compiled loop does best) are merged into one scan of length one when
//! nothing between them needs the first one's results.
//!
//! Why: reverse mode through a loop of one step (GradBench's `ode` with
//! `s = 1`) makes two such scans, the forward step saving its stages and
//! the reverse step reading them back. As two compiled loops the saved
//! stages go through memory (four vectors out, four back in: at
//! n = 100 000 f64, 6.4 MB of the gradient's traffic); merged, they are
//! values of one step, which the compiled loop's blocked schedule
//! (`kernel::loops::blocks`) keeps in the first-level cache. Results of a
//! one-step scan that nobody reads are dropped on the way (the reverse
//! step's carried cotangent of the initial state, a `fori`'s counter),
//! so their arithmetic goes too.
//!
//! The merged scan has no `xs`: with one step, a member's carries enter as
//! their initial values and its `xs` as their only rows (a reshape inside
//! the body). A member's final carry that is read afterwards stays a carry
//! of the merged scan (so a compiled loop writes it straight into its
//! result), every other result read afterwards is a `y`.
//!
//! What is merged: scans of length one without effects that `compiles`
//! accepts (the executor passes "its body has a compiled loop program":
//! merging a body that runs stepped by the interpreter into one that
//! compiles would run both interpreted). Equations between two members
//! that do not depend on the first are moved before the merged scan,
//! those that do after it; a member cannot read the latter, and an
//! equation with an effect ends a group (effects keep their order).
//!
//! Invariant: results are unchanged. Every member's equations run once on
//! the same operands, in the same order relative to the others they
//! depend on; moved equations are pure and run on the same operands.

use super::{cse, dce};
use crate::error::IrError;
use crate::ir::{copy_eqns, lookup, Builder, Eqn, Func, Value};
use crate::ops::scan::{Scan, ScanOpts};
use crate::ops::Prim;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// A run of equations to rewrite: one-step scans (`members`) and the
/// equations between them, to go before or after the merged scan.
#[derive(Default)]
struct Group {
    members: Vec<usize>,
    before: Vec<usize>,
    after: Vec<usize>,
}

/// Whether equation `e` is a one-step scan that may join a group.
fn step(e: &Eqn, compiles: &dyn Fn(&Scan) -> bool) -> bool {
    matches!(&e.prim, Prim::Scan(s) if s.length == 1 && !e.prim.has_effect() && compiles(s))
}

/// `f` with neighbouring one-step scans merged and the unread results of
/// one-step scans dropped (see the module docs), or `None` when that
/// changes nothing.
pub fn merge_steps(f: &Func, compiles: &dyn Fn(&Scan) -> bool) -> Option<Func> {
    // Whether each value is read outside equation `i` (by a later equation
    // or as an output); readers per value.
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); f.n_values()];
    for (i, e) in f.eqns.iter().enumerate() {
        for v in &e.inputs {
            readers[v.index()].push(i);
        }
    }
    let returned: Vec<bool> = {
        let mut r = vec![false; f.n_values()];
        for v in &f.outputs {
            r[v.index()] = true;
        }
        r
    };
    let groups = find_groups(f, compiles);
    // Keep a group if it merges scans or drops a result.
    let read_outside =
        |v: Value, g: &Group| returned[v.index()] || readers[v.index()].iter().any(|r| !g.members.contains(r));
    let groups: Vec<Group> = groups
        .into_iter()
        .filter(|g| g.members.len() > 1 || f.eqns[g.members[0]].outputs.iter().any(|&o| !read_outside(o, g)))
        .collect();
    if groups.is_empty() {
        return None;
    }
    // The operands now computed in a body may have no other reader.
    rewrite(f, &groups, &read_outside).ok().map(|g| dce(&g))
}

/// Groups of one-step scans that can run as one (see the module docs),
/// single scans included.
fn find_groups(f: &Func, compiles: &dyn Fn(&Scan) -> bool) -> Vec<Group> {
    let mut groups = Vec::new();
    let mut cur: Option<Group> = None;
    // Asked once per equation: `compiles` plans the body.
    let steps: Vec<bool> = f.eqns.iter().map(|e| step(e, compiles)).collect();
    // Values produced by the open group's members, and by equations placed
    // after it.
    let mut of_member = vec![false; f.n_values()];
    let mut of_after = vec![false; f.n_values()];
    let mut i = 0;
    while i < f.eqns.len() {
        let e = &f.eqns[i];
        let Some(g) = cur.as_mut() else {
            if steps[i] {
                cur = Some(Group { members: vec![i], ..Group::default() });
                e.outputs.iter().for_each(|o| of_member[o.index()] = true);
            }
            i += 1;
            continue;
        };
        let reads_after = e.inputs.iter().any(|v| of_after[v.index()]);
        let reads_group = reads_after || e.inputs.iter().any(|v| of_member[v.index()]);
        if steps[i] && !reads_after {
            g.members.push(i);
            e.outputs.iter().for_each(|o| of_member[o.index()] = true);
        } else if e.prim.has_effect() || steps[i] {
            // Close the group; this equation is looked at again on its own.
            groups.push(cur.take().expect("internal error: the group is open in this branch"));
            of_member.iter_mut().for_each(|t| *t = false);
            of_after.iter_mut().for_each(|t| *t = false);
            continue;
        } else if reads_group {
            g.after.push(i);
            e.outputs.iter().for_each(|o| of_after[o.index()] = true);
        } else {
            g.before.push(i);
        }
        i += 1;
    }
    groups.extend(cur);
    groups
}

/// `f` with each group's members replaced by one scan.
fn rewrite(f: &Func, groups: &[Group], read_outside: &dyn Fn(Value, &Group) -> bool) -> Result<Func, IrError> {
    // The group each equation belongs to, and the first member of each.
    let mut owner: Vec<Option<usize>> = vec![None; f.eqns.len()];
    for (k, g) in groups.iter().enumerate() {
        for &i in g.members.iter().chain(&g.before).chain(&g.after) {
            owner[i] = Some(k);
        }
    }
    let mut b = Builder::new(f.name.clone());
    let mut map: Vec<Option<Value>> = vec![None; f.n_values()];
    for &p in &f.params {
        map[p.index()] = Some(b.param_like(f, p));
    }
    let copy = |b: &mut Builder, map: &mut Vec<Option<Value>>, e: &Eqn| copy_eqns(b, f, std::iter::once(e), map);
    for (i, e) in f.eqns.iter().enumerate() {
        match owner[i] {
            None => copy(&mut b, &mut map, e)?,
            Some(k) if groups[k].members[0] == i => {
                let g = &groups[k];
                for &j in &g.before {
                    copy(&mut b, &mut map, &f.eqns[j])?;
                }
                b.set_loc(e.loc.clone());
                merged(&mut b, f, g, &mut map, &|v| read_outside(v, g))?;
                for &j in &g.after {
                    copy(&mut b, &mut map, &f.eqns[j])?;
                }
            }
            Some(_) => {}
        }
    }
    b.set_loc(None);
    let outs: Vec<Value> = f.outputs.iter().map(|&v| lookup(&map, v)).collect::<Result<_, _>>()?;
    b.finish(&outs)
}

/// How a member's operand enters the merged body.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A const of the merged scan (an outer value read in place).
    Const,
    /// Carry `j` of the merged scan.
    Carry(usize),
    /// A value built from small constants by layout primitives, computed
    /// in the body.
    Constant,
}

/// Constants of at most this many elements are computed in a merged body
/// rather than passed in (see [`constant_layout`]).
const SPLAT_SOURCE_MAX: usize = 64;

/// Most equations [`constant_layout`] copies into a body for one value.
const CONSTANT_LAYOUT_MAX: usize = 16;

/// The equations (in order) computing `v` from constants of at most
/// [`SPLAT_SOURCE_MAX`] elements through layout primitives only
/// (broadcasts, reshapes, pads, concatenations: a splat, a one-hot seed
/// of reverse mode), if that is how `v` is defined.
fn constant_layout(f: &Func, def: &[Option<usize>], v: Value) -> Option<Vec<usize>> {
    let mut eqns = std::collections::BTreeSet::new();
    let mut stack = vec![v];
    while let Some(u) = stack.pop() {
        let i = def[u.index()]?;
        if !eqns.insert(i) {
            continue;
        }
        if eqns.len() > CONSTANT_LAYOUT_MAX {
            return None;
        }
        let e = &f.eqns[i];
        match &e.prim {
            Prim::Constant(c) if c.value.numel() <= SPLAT_SOURCE_MAX => {}
            Prim::BroadcastInDim(_) | Prim::Reshape(_) | Prim::Pad(_) | Prim::Concatenate(_) => stack.extend(&e.inputs),
            _ => return None,
        }
    }
    Some(eqns.into_iter().collect())
}

/// A member result's value inside the merged body (every member result is
/// mapped when its member is inlined).
fn inner_of(inside: &HashMap<Value, (Value, bool)>, o: Value) -> Result<(Value, bool), IrError> {
    inside
        .get(&o)
        .copied()
        .ok_or_else(|| IrError::invalid("merge_steps", "internal error: a member result is unmapped"))
}

/// Emits the merged scan of `g` into `b`, mapping every member result read
/// outside the group.
fn merged(
    b: &mut Builder,
    f: &Func,
    g: &Group,
    map: &mut [Option<Value>],
    read_outside: &dyn Fn(Value) -> bool,
) -> Result<(), IrError> {
    let scans: Vec<&Scan> = g
        .members
        .iter()
        .map(|&m| match &f.eqns[m].prim {
            Prim::Scan(s) => Ok(s),
            _ => Err(IrError::invalid("merge_steps", "internal error: a group member is not a scan")),
        })
        .collect::<Result<_, _>>()?;
    let produced: HashSet<Value> = g.members.iter().flat_map(|&m| f.eqns[m].outputs.iter().copied()).collect();
    let inner = |v: &Value| produced.contains(v);
    let mut def: Vec<Option<usize>> = vec![None; f.n_values()];
    for (i, e) in f.eqns.iter().enumerate() {
        e.outputs.iter().for_each(|o| def[o.index()] = Some(i));
    }
    // The merged scan's consts (outer values, once each) and carries
    // (member carries read afterwards whose initial value is an outer one).
    // Values built from small constants by layout primitives (splats, a
    // reverse sweep's one-hot seed) are computed in the body instead: a
    // loop body's constant values are computed once, when its program is
    // built (and a kernel reads a splat as a scalar), not every call by the
    // caller.
    let mut consts: Vec<Value> = Vec::new();
    let mut carries: Vec<(usize, usize)> = Vec::new(); // (member, carry index)
    let mut roles: HashMap<(usize, usize), Role> = HashMap::new(); // (member, operand) -> role
    for (mi, (&m, s)) in g.members.iter().zip(&scans).enumerate() {
        let e = &f.eqns[m];
        for (k, v) in e.inputs.iter().enumerate() {
            if inner(v) {
                continue;
            }
            let is_carry = k >= s.n_consts && k < s.n_consts + s.n_carry;
            if is_carry && read_outside(e.outputs[k - s.n_consts]) {
                roles.insert((mi, k), Role::Carry(carries.len()));
                carries.push((mi, k - s.n_consts));
            } else if constant_layout(f, &def, *v).is_some() {
                roles.insert((mi, k), Role::Constant);
            } else {
                if !consts.contains(v) {
                    consts.push(*v);
                }
                roles.insert((mi, k), Role::Const);
            }
        }
    }
    // A kept carry whose initial value is such a constant reads it computed
    // in the body; the carry's own initial value is then never read, so any
    // outer value of its type already passed will do (no vector filled for
    // nothing), and the constant only where there is none.
    let mut inits: Vec<Value> = Vec::with_capacity(carries.len());
    let mut constant_carry: Vec<bool> = Vec::with_capacity(carries.len());
    for &(mi, j) in &carries {
        let v = f.eqns[g.members[mi]].inputs[scans[mi].n_consts + j];
        let constant = constant_layout(f, &def, v).is_some();
        let stand_in = constant.then(|| consts.iter().find(|c| f.ty(**c) == f.ty(v)).copied()).flatten();
        inits.push(stand_in.unwrap_or(v));
        constant_carry.push(constant);
    }
    // The body.
    let name = format!("{}_steps", scans[0].body.name);
    let mut body = Builder::new(name);
    let const_params: Vec<Value> = consts.iter().map(|&v| body.param_like(f, v)).collect();
    let carry_params: Vec<Value> = carries
        .iter()
        .map(|&(mi, j)| {
            let e = &f.eqns[g.members[mi]];
            body.param_like(f, e.inputs[scans[mi].n_consts + j])
        })
        .collect();
    // Constants computed in the body, by outer value.
    let mut computed: HashMap<Value, Value> = HashMap::new();
    let mut constant = |body: &mut Builder, v: Value| -> Result<Value, IrError> {
        if let Some(&s) = computed.get(&v) {
            return Ok(s);
        }
        let chain = constant_layout(f, &def, v)
            .ok_or_else(|| IrError::invalid("merge_steps", "internal error: a constant operand is not one"))?;
        let mut cmap: Vec<Option<Value>> = vec![None; f.n_values()];
        copy_eqns(body, f, chain.iter().map(|&i| &f.eqns[i]), &mut cmap)?;
        let s = lookup(&cmap, v)?;
        computed.insert(v, s);
        Ok(s)
    };
    // Each member result inside the body: the body's value and whether it
    // is a row (a `y`, whose outer value has a leading axis of one).
    let mut inside: HashMap<Value, (Value, bool)> = HashMap::new();
    for (mi, (&m, s)) in g.members.iter().zip(&scans).enumerate() {
        let e = &f.eqns[m];
        let nck = s.n_consts + s.n_carry;
        let mut args = Vec::with_capacity(e.inputs.len());
        for (k, v) in e.inputs.iter().enumerate() {
            let row = k >= nck;
            let a = match inside.get(v) {
                Some(&(iv, true)) if row => iv,
                Some(&(iv, _)) => {
                    // A member's result read whole: a `y` read as a const
                    // or carry (its stacked shape), a carry read as `xs`.
                    let want = if row { f.ty(*v).shape[1..].to_vec() } else { f.ty(*v).shape.clone() };
                    if body.ty(iv)?.shape == want {
                        iv
                    } else {
                        body.reshape(iv, &want)?
                    }
                }
                None => {
                    let p = match roles.get(&(mi, k)) {
                        Some(Role::Carry(j)) if constant_carry[*j] => constant(&mut body, *v)?,
                        Some(Role::Carry(j)) => carry_params[*j],
                        Some(Role::Constant) => constant(&mut body, *v)?,
                        _ => {
                            let c = consts.iter().position(|c| c == v).ok_or_else(|| {
                                IrError::invalid("merge_steps", "internal error: an outer operand has no const")
                            })?;
                            const_params[c]
                        }
                    };
                    if row {
                        body.reshape(p, &f.ty(*v).shape[1..])?
                    } else {
                        p
                    }
                }
            };
            args.push(a);
        }
        let outs = body.inline(&s.body, &args)?;
        for (j, (&o, iv)) in e.outputs.iter().zip(outs).enumerate() {
            inside.insert(o, (iv, j >= s.n_carry));
        }
    }
    // Body outputs: the kept carries, then every other result read
    // afterwards as a `y` (a carry whose initial value came from another
    // member is stacked and reshaped back outside).
    let mut body_outs: Vec<Value> = Vec::new();
    for &(mi, j) in &carries {
        let o = f.eqns[g.members[mi]].outputs[j];
        body_outs.push(inner_of(&inside, o)?.0);
    }
    let carried: Vec<Value> = carries.iter().map(|&(mi, j)| f.eqns[g.members[mi]].outputs[j]).collect();
    let mut ys: Vec<(Value, bool)> = Vec::new(); // (outer value, reshape back)
    for &m in &g.members {
        for &o in &f.eqns[m].outputs {
            if carried.contains(&o) || !read_outside(o) {
                continue;
            }
            let (iv, row) = inner_of(&inside, o)?;
            body_outs.push(iv);
            ys.push((o, !row));
        }
    }
    let body = Arc::new(dce(&cse(&body.finish(&body_outs)?)));
    let outer = |v: &Value| lookup(map, *v);
    let consts_outer: Vec<Value> = consts.iter().map(outer).collect::<Result<_, _>>()?;
    let inits: Vec<Value> = inits.iter().map(outer).collect::<Result<_, _>>()?;
    let res = b.scan(body, &consts_outer, &inits, &[], ScanOpts::new(1))?;
    for (&o, &r) in carried.iter().zip(&res) {
        map[o.index()] = Some(r);
    }
    for (&(o, back), &r) in ys.iter().zip(&res[carries.len()..]) {
        map[o.index()] = Some(if back { b.reshape(r, &f.ty(o).shape)? } else { r });
        if let Some(name) = f.names.get(o) {
            b.name_if_unnamed(map[o.index()].expect("internal error: mapped just above"), name.clone());
        }
    }
    Ok(())
}
