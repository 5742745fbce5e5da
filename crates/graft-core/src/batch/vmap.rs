//! The vmap driver: rewrites a function into its batched version, calling
//! each primitive's batching rule ([`super::Batch`]) on equations that touch
//! a batched value and copying the others unchanged.
//!
//! Semantics: parameter `i` with `in_axes[i] = Some(a)` gains a dim of the
//! batch size at position `a` (`0 <= a <= rank`); `None` leaves it shared by
//! every example. Output `j` gets its batch dim at `out_axes[j]`; an output
//! that does not depend on any batched value is broadcast there, and
//! `out_axes[j] = None` requires the output to be unbatched.

use super::helpers::{batched_shape, bdim_to};
use super::{Batch, BatchCx};
use crate::error::IrError;
use crate::ir::{Builder, Func, Value};
use crate::ops::{Op, Prim};
use crate::types::TensorType;

/// Resolves possibly negative axes against ranks: `a < 0` means
/// `rank + 1 + a` (the batch dim may be inserted at any of `rank + 1`
/// positions). `what` names the list in errors (`in_axes`, `out_axes`).
pub fn resolve_axes(axes: &[Option<isize>], ranks: &[usize], what: &str) -> Result<Vec<Option<usize>>, IrError> {
    if axes.len() != ranks.len() {
        return Err(IrError::invalid("vmap", format!("{what} has {} entries for {} values", axes.len(), ranks.len())));
    }
    axes.iter()
        .zip(ranks)
        .enumerate()
        .map(|(i, (&a, &r))| match a {
            None => Ok(None),
            Some(a) => {
                let n = r as isize + 1;
                let res = if a < 0 { a + n } else { a };
                if (0..n).contains(&res) {
                    Ok(Some(res as usize))
                } else {
                    Err(IrError::invalid(
                        "vmap",
                        format!(
                            "{what}[{i}] = {a} is out of range for a value of rank {r} (expected {} ..= {})",
                            -n,
                            n - 1
                        ),
                    ))
                }
            }
        })
        .collect()
}

/// Places the batch dim of results whose per-example ranks are `ranks`, as
/// the front ends define it (the language's `vmap(f, axis=k)` and
/// `out_axes`, and `graft::Jit::vmap`): `k >= 0` puts it at `min(k, rank)`
/// and `k < 0` at `max(rank + 1 + k, 0)`, i.e. an axis past a result's rank
/// clamps to the nearest end. So every result of any rank can take the batch
/// dim (a per-example scalar under `axis=1` becomes a vector), where
/// [`resolve_axes`] (JAX's rule) rejects an axis out of range. Only a
/// length mismatch is an error.
pub fn place_out_axes(axes: &[Option<isize>], ranks: &[usize]) -> Result<Vec<Option<usize>>, IrError> {
    if axes.len() != ranks.len() {
        return Err(IrError::invalid(
            "vmap",
            format!("out_axes has {} entries for {} results", axes.len(), ranks.len()),
        ));
    }
    Ok(axes
        .iter()
        .zip(ranks)
        .map(|(&a, &r)| a.map(|a| if a >= 0 { a.unsigned_abs().min(r) } else { (r as isize + 1 + a).max(0) as usize }))
        .collect())
}

/// [`vmap_func`] with possibly negative axes (resolved by [`resolve_axes`]:
/// in_axes against the parameter ranks, out_axes against the output ranks).
pub fn vmap_func_signed(
    f: &Func,
    in_axes: &[Option<isize>],
    out_axes: &[Option<isize>],
    size: usize,
) -> Result<Func, IrError> {
    let in_ranks: Vec<usize> = f.param_types().iter().map(TensorType::rank).collect();
    let out_ranks: Vec<usize> = f.output_types().iter().map(TensorType::rank).collect();
    let ia = resolve_axes(in_axes, &in_ranks, "in_axes")?;
    let oa = resolve_axes(out_axes, &out_ranks, "out_axes")?;
    vmap_func(f, &ia, &oa, size)
}

/// The batch size implied by the types of the actual (batched) arguments:
/// argument `i` with `in_axes[i] = Some(a)` must be `f`'s parameter type
/// with one extra dim at `a`, and all those extra dims must agree. An error
/// names the disagreeing arguments and their sizes. `None` if nothing is batched.
pub fn batch_size_of(f: &Func, in_axes: &[Option<usize>], arg_types: &[TensorType]) -> Result<Option<usize>, IrError> {
    check_in_axes(f, in_axes)?;
    if arg_types.len() != f.params.len() {
        return Err(IrError::invalid(
            "vmap",
            format!("`{}` takes {} arguments, got {}", f.name, f.params.len(), arg_types.len()),
        ));
    }
    let mut first: Option<(usize, usize)> = None;
    for (i, (&a, t)) in in_axes.iter().zip(arg_types).enumerate() {
        let per = f.ty(f.params[i]);
        let Some(a) = a else {
            if t != per {
                return Err(IrError::invalid(
                    "vmap",
                    format!("argument {i} is unbatched (in_axes[{i}] = None) so must have type {per}, got {t}"),
                ));
            }
            continue;
        };
        if t.rank() != per.rank() + 1 || t.dtype != per.dtype {
            return Err(IrError::invalid(
                "vmap",
                format!("argument {i} must be {per} with a batch dim at axis {a}, got {t}"),
            ));
        }
        let s = t.shape[a];
        if TensorType::new(t.dtype, batched_shape(&per.shape, a, s)) != *t {
            return Err(IrError::invalid(
                "vmap",
                format!("argument {i} must be {per} with a batch dim at axis {a}, got {t}"),
            ));
        }
        match first {
            None => first = Some((i, s)),
            Some((j, s0)) if s0 != s => {
                return Err(IrError::invalid(
                    "vmap",
                    format!(
                        "batched arguments disagree on the batch size: argument {j} has size {s0} (axis {}), argument {i} has size {s} (axis {a})",
                        in_axes[j].unwrap_or(0)
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(first.map(|(_, s)| s))
}

/// [`vmap_func`] with the batch size taken from the actual argument types
/// (see [`batch_size_of`]); `size` is required only when nothing is batched.
/// `axis` names the batch axis for collectives (see [`vmap_func_named`]).
pub fn vmap_for_args(
    f: &Func,
    in_axes: &[Option<usize>],
    out_axes: &[Option<usize>],
    arg_types: &[TensorType],
    size: Option<usize>,
    axis: Option<&str>,
) -> Result<Func, IrError> {
    let s = match (batch_size_of(f, in_axes, arg_types)?, size) {
        (Some(s), None) => s,
        (Some(s), Some(t)) if s == t => s,
        (Some(s), Some(t)) => {
            return Err(IrError::invalid(
                "vmap",
                format!("the arguments have batch size {s} but size {t} was requested"),
            ))
        }
        (None, Some(t)) => t,
        (None, None) => {
            return Err(IrError::invalid("vmap", "no argument is batched, so the batch size must be given"))
        }
    };
    vmap_func_named(f, in_axes, out_axes, s, axis)
}

fn check_in_axes(f: &Func, in_axes: &[Option<usize>]) -> Result<(), IrError> {
    if in_axes.len() != f.params.len() {
        return Err(IrError::invalid(
            "vmap",
            format!("`{}` takes {} arguments but in_axes has {} entries", f.name, f.params.len(), in_axes.len()),
        ));
    }
    for (i, &a) in in_axes.iter().enumerate() {
        let r = f.ty(f.params[i]).rank();
        if let Some(a) = a {
            if a > r {
                return Err(IrError::invalid(
                    "vmap",
                    format!("in_axes[{i}] = {a} is out of range for argument {i} of rank {r} (expected 0 ..= {r})"),
                ));
            }
        }
    }
    Ok(())
}

/// The batched version of `f` for batch size `size` (see the module docs):
/// parameter `i` gets the batch dim at `in_axes[i]`, output `j` at `out_axes[j]`.
pub fn vmap_func(
    f: &Func,
    in_axes: &[Option<usize>],
    out_axes: &[Option<usize>],
    size: usize,
) -> Result<Func, IrError> {
    vmap_func_named(f, in_axes, out_axes, size, None)
}

/// Whether `prim` (or a function it holds) runs a collective over the axis
/// `name`: such an equation goes through its batching rule even when no
/// operand is batched (an `axis_index` has none; a `psum` of a shared
/// value is `size` times it).
pub fn binds_axis(prim: &Prim, name: &str) -> bool {
    match prim {
        Prim::Collective(c) => c.over(name),
        p => p.subfuncs().iter().any(|f| f.eqns.iter().any(|e| binds_axis(&e.prim, name))),
    }
}

/// [`vmap_func`] whose batch axis is called `axis` (JAX's `axis_name`):
/// collectives over that name inside `f` become operations over the batch
/// dimension. Rules that vmap sub-functions pass the name on.
pub fn vmap_func_named(
    f: &Func,
    in_axes: &[Option<usize>],
    out_axes: &[Option<usize>],
    size: usize,
    axis: Option<&str>,
) -> Result<Func, IrError> {
    check_in_axes(f, in_axes)?;
    if out_axes.len() != f.outputs.len() {
        return Err(IrError::invalid(
            "vmap",
            format!("`{}` has {} outputs but out_axes has {} entries", f.name, f.outputs.len(), out_axes.len()),
        ));
    }
    for (j, &a) in out_axes.iter().enumerate() {
        let r = f.ty(f.outputs[j]).rank();
        if let Some(a) = a {
            if a > r {
                return Err(IrError::invalid(
                    "vmap",
                    format!("out_axes[{j}] = {a} is out of range for output {j} of rank {r} (expected 0 ..= {r})"),
                ));
            }
        }
    }
    let mut b = Builder::new(format!("vmap_{}", f.name));
    let mut env: Vec<Option<(Value, Option<usize>)>> = vec![None; f.n_values()];
    for (&p, &a) in f.params.iter().zip(in_axes) {
        let per = f.ty(p);
        let ty = match a {
            None => per.clone(),
            Some(a) => TensorType::new(per.dtype, batched_shape(&per.shape, a, size)),
        };
        let v = b.param(ty);
        if let Some(name) = f.names.get(p) {
            b.set_name(v, name.clone());
        }
        env[p.index()] = Some((v, a));
    }
    let get = |env: &[Option<(Value, Option<usize>)>], v: Value| {
        env[v.index()].ok_or_else(|| {
            IrError::invalid("vmap", format!("internal error: {v} used before definition in `{}`", f.name))
        })
    };
    for eqn in &f.eqns {
        let ins: Vec<(Value, Option<usize>)> = eqn.inputs.iter().map(|&v| get(&env, v)).collect::<Result<_, _>>()?;
        b.set_loc(eqn.loc.clone());
        let args: Vec<Value> = ins.iter().map(|p| p.0).collect();
        let bdims: Vec<Option<usize>> = ins.iter().map(|p| p.1).collect();
        let bound = axis.is_some_and(|a| binds_axis(&eqn.prim, a));
        let outs: Vec<(Value, Option<usize>)> = if bdims.iter().all(Option::is_none) && !bound {
            b.emit(eqn.prim.clone(), &args)?.into_iter().map(|o| (o, None)).collect()
        } else {
            eqn.prim
                .batch(&mut b, &BatchCx { args: &args, bdims: &bdims, size, axis })
                .map_err(|e| e.at(eqn.loc.as_ref()))?
        };
        if outs.len() != eqn.outputs.len() {
            return Err(rule_bug(&eqn.prim, format!("returned {} results for {}", outs.len(), eqn.outputs.len())));
        }
        for (&v, &(o, d)) in eqn.outputs.iter().zip(&outs) {
            let per = f.ty(v);
            let expected = match d {
                None => per.clone(),
                Some(d) if d <= per.rank() => TensorType::new(per.dtype, batched_shape(&per.shape, d, size)),
                Some(d) => return Err(rule_bug(&eqn.prim, format!("batch dim {d} out of range for {per}"))),
            };
            if b.ty(o)? != &expected {
                return Err(rule_bug(
                    &eqn.prim,
                    format!("result has type {} but batch dim {d:?} of {per} needs {expected}", b.ty(o)?),
                ));
            }
            if let Some(name) = f.names.get(v) {
                b.name_if_unnamed(o, name.clone());
            }
            env[v.index()] = Some((o, d));
        }
    }
    b.set_loc(None);
    let mut outs = Vec::with_capacity(f.outputs.len());
    for (j, (&v, &oa)) in f.outputs.iter().zip(out_axes).enumerate() {
        let (o, d) = get(&env, v)?;
        outs.push(match (d, oa) {
            (_, Some(to)) => bdim_to(&mut b, o, d, to, size)?,
            (None, None) => o,
            (Some(_), None) => {
                return Err(IrError::invalid(
                    "vmap",
                    format!("out_axes[{j}] is None but output {j} of `{}` depends on a batched argument", f.name),
                ))
            }
        });
    }
    // Like the AD transforms, hand back a cleaned-up function: rules emit
    // moves and broadcasts per equation that often repeat or cancel.
    Ok(crate::opt::simplify(&b.finish(&outs)?))
}

fn rule_bug(prim: &crate::ops::Prim, msg: String) -> IrError {
    IrError::NoRule { prim: prim.name().to_string(), rule: "batch", msg: format!("internal error: the rule {msg}") }
}
