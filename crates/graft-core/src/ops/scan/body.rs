//! Rewrites of bodies (closed sub-functions) shared by the primitives that
//! hold them (`scan`, `cond`): dependency analysis, the JVP of a body as a
//! function, its three-way split for reverse mode, and the transpose of a
//! body that is linear in some of its parameters.
//!
//! Why a three-way split: reverse mode (`ad/vjp.rs`) classifies every result
//! of an equation with a tangent operand as linear, so a loop's JVP rule must
//! emit a primal loop (saving residuals) and a separate loop that is linear
//! in the tangents. [`split`] cuts the JVP of a body into
//! - `hoist`: values that depend only on the loop-invariant parameters
//!   (consts), computed once outside the loop (e.g. `transpose(W)`),
//! - `fwd`: the primal body plus the per-step residuals it must output,
//! - `lin`: the tangent map, reading only residuals and tangents.
//!
//! Invariant used by [`transpose_body`]: a body handed to it is linear in the
//! parameters marked linear (the JVP rules only ever emit such bodies), so its
//! transpose does not depend on their primal values; they are replaced by
//! zeros.

use crate::ad::{jvp_inline, linearize_transpose};
use crate::error::{ExecError, IrError};
use crate::ir::{copy_eqns, lookup, Builder, Func, Value};
use crate::opt;
use crate::tensor::Storage;
use crate::types::TensorType;

/// Which values of `f` depend on a parameter marked in `marked`.
pub(crate) fn depends(f: &Func, marked: &[bool]) -> Vec<bool> {
    let mut d = vec![false; f.n_values()];
    for (&p, &m) in f.params.iter().zip(marked) {
        if m {
            d[p.index()] = true;
        }
    }
    for e in &f.eqns {
        if e.inputs.iter().any(|v| d[v.index()]) {
            for o in &e.outputs {
                d[o.index()] = true;
            }
        }
    }
    d
}

/// Which outputs of `f` depend on a marked parameter.
pub(crate) fn outputs_depending(f: &Func, marked: &[bool]) -> Vec<bool> {
    let d = depends(f, marked);
    f.outputs.iter().map(|v| d[v.index()]).collect()
}

/// Which outputs of `f` get a (possibly) nonzero tangent when the float
/// parameters marked in `nz` carry tangents, as the JVP rules decide it.
pub(crate) fn tangent_outputs(f: &Func, nz: &[bool]) -> Result<Vec<bool>, IrError> {
    let mut b = Builder::new(format!("{}_probe", f.name));
    let ps: Vec<Value> = f.params.iter().map(|&p| b.param(f.ty(p).clone())).collect();
    let ts = tangent_params(&mut b, f, nz);
    let (_, touts) = jvp_inline(&mut b, f, &ps, &ts)?;
    Ok(touts.iter().map(Option::is_some).collect())
}

fn tangent_params(b: &mut Builder, f: &Func, nz: &[bool]) -> Vec<Option<Value>> {
    f.params.iter().zip(nz).map(|(&p, &n)| (n && f.ty(p).dtype.is_float()).then(|| b.param(f.ty(p).clone()))).collect()
}

/// The JVP of `f` as a function: params = `f`'s params, then one tangent per
/// float parameter marked in `nz` (in order); outputs = `f`'s outputs, then
/// one tangent per output marked in `out_t` (zeros where the JVP has none).
pub(crate) fn jvp_body(f: &Func, nz: &[bool], out_t: &[bool]) -> Result<Func, IrError> {
    let mut b = Builder::new(format!("{}_jvp", f.name));
    let ps: Vec<Value> = f.params.iter().map(|&p| b.param(f.ty(p).clone())).collect();
    let ts = tangent_params(&mut b, f, nz);
    let (outs, touts) = jvp_inline(&mut b, f, &ps, &ts)?;
    let mut all = outs.clone();
    for (i, t) in touts.into_iter().enumerate() {
        if out_t[i] {
            all.push(match t {
                Some(t) => t,
                None => b.zeros(f.ty(f.outputs[i]))?,
            });
        }
    }
    Ok(opt::simplify(&b.finish(&all)?))
}

/// A JVP body cut in three (see the module docs).
#[derive(Debug)]
pub(crate) struct Split {
    /// `(consts...) -> (invariant residuals...)`.
    pub hoist: Func,
    /// `(primal params...) -> (primal outputs..., per-step residuals...)`.
    pub fwd: Func,
    /// `(invariant residuals..., per-step residuals..., tangent params...) -> (tangent outputs...)`.
    pub lin: Func,
    /// Number of primal outputs at the front of `fwd`'s outputs.
    pub n_out: usize,
}

impl Split {
    /// Number of invariant residuals.
    pub fn n_inv(&self) -> usize {
        self.hoist.outputs.len()
    }

    /// Number of per-step residuals.
    pub fn n_step(&self) -> usize {
        self.fwd.outputs.len() - self.n_out
    }
}

/// Splits `jf` (from [`jvp_body`]) whose first `n_primal` params are primals
/// (the first `n_const` of them loop-invariant) and whose first `n_out`
/// outputs are primal outputs.
pub(crate) fn split(jf: &Func, n_primal: usize, n_const: usize, n_out: usize) -> Result<Split, IrError> {
    let np = jf.params.len();
    let late = depends(jf, &(0..np).map(|i| i >= n_primal).collect::<Vec<_>>());
    let varying = depends(jf, &(0..np).map(|i| i >= n_const && i < n_primal).collect::<Vec<_>>());
    let is_late = |e: &crate::ir::Eqn| e.outputs.iter().any(|o| late[o.index()]);
    // Residuals: primal values the tangent part reads or returns.
    let mut res: Vec<Value> = Vec::new();
    let mut seen = vec![false; jf.n_values()];
    let reads = jf.eqns.iter().filter(|e| is_late(e)).flat_map(|e| e.inputs.iter());
    for &x in reads.chain(&jf.outputs[n_out..]) {
        if !late[x.index()] && !seen[x.index()] {
            seen[x.index()] = true;
            res.push(x);
        }
    }
    let (inv, step): (Vec<Value>, Vec<Value>) = res.into_iter().partition(|v| !varying[v.index()]);

    let mut hb = Builder::new(format!("{}_hoist", jf.name));
    let mut map: Vec<Option<Value>> = vec![None; jf.n_values()];
    for &p in &jf.params[..n_const] {
        map[p.index()] = Some(hb.param(jf.ty(p).clone()));
    }
    let inv_eqns = jf.eqns.iter().filter(|e| e.outputs.iter().all(|o| !late[o.index()] && !varying[o.index()]));
    copy_eqns(&mut hb, inv_eqns, &mut map)?;
    let hoist_outs: Vec<Value> = inv.iter().map(|&v| lookup(&map, v)).collect::<Result<_, _>>()?;
    let hoist = opt::simplify(&hb.finish(&hoist_outs)?);

    let mut fb = Builder::new(format!("{}_fwd", jf.name));
    let mut map: Vec<Option<Value>> = vec![None; jf.n_values()];
    for &p in &jf.params[..n_primal] {
        map[p.index()] = Some(fb.param(jf.ty(p).clone()));
    }
    copy_eqns(&mut fb, jf.eqns.iter().filter(|e| !is_late(e)), &mut map)?;
    let fwd_outs: Vec<Value> =
        jf.outputs[..n_out].iter().chain(&step).map(|&v| lookup(&map, v)).collect::<Result<_, _>>()?;
    let fwd = opt::simplify(&fb.finish(&fwd_outs)?);

    let mut lb = Builder::new(format!("{}_lin", jf.name));
    let mut map: Vec<Option<Value>> = vec![None; jf.n_values()];
    for &v in inv.iter().chain(&step).chain(&jf.params[n_primal..]) {
        map[v.index()] = Some(lb.param(jf.ty(v).clone()));
    }
    copy_eqns(&mut lb, jf.eqns.iter().filter(|e| is_late(e)), &mut map)?;
    let lin_outs: Vec<Value> = jf.outputs[n_out..].iter().map(|&v| lookup(&map, v)).collect::<Result<_, _>>()?;
    let lin = opt::simplify(&lb.finish(&lin_outs)?);
    Ok(Split { hoist, fwd, lin, n_out })
}

/// `f` with its parameters permuted: parameter `i` of the result is
/// parameter `order[i]` of `f`.
pub(crate) fn permute_params(f: &Func, order: &[usize]) -> Result<Func, IrError> {
    let mut b = Builder::new(f.name.clone());
    let mut args: Vec<Option<Value>> = vec![None; f.params.len()];
    for &i in order {
        args[i] = Some(b.param(f.ty(f.params[i]).clone()));
    }
    let args: Vec<Value> = args
        .into_iter()
        .map(|a| a.ok_or_else(|| IrError::invalid("permute", "internal error: order is not a permutation")))
        .collect::<Result<_, _>>()?;
    let outs = b.inline(f, &args)?;
    b.finish(&outs)
}

/// The transpose of `f` in the parameters marked `linear` (all float; `f` is
/// linear in them jointly, see the module docs): params = the non-linear
/// params of `f` in order, then one cotangent per output marked
/// `ct_present`; outputs = the cotangents of the linear params, in order
/// (zeros where none flows).
pub(crate) fn transpose_body(f: &Func, linear: &[bool], ct_present: &[bool]) -> Result<Func, IrError> {
    let mut b = Builder::new(format!("{}_t", f.name));
    let mut primals: Vec<Option<Value>> = vec![None; f.params.len()];
    for (i, &p) in f.params.iter().enumerate() {
        if !linear[i] {
            primals[i] = Some(b.param(f.ty(p).clone()));
        }
    }
    let mut cts = Vec::with_capacity(f.outputs.len());
    for (j, &o) in f.outputs.iter().enumerate() {
        cts.push(ct_present[j].then(|| b.param(f.ty(o).clone())));
    }
    for (i, &p) in f.params.iter().enumerate() {
        if linear[i] {
            if !f.ty(p).dtype.is_float() {
                return Err(IrError::NoRule {
                    prim: f.name.clone(),
                    rule: "transpose",
                    msg: format!("internal error: parameter {i} of `{}` is linear but not floating-point", f.name),
                });
            }
            primals[i] = Some(b.zeros(f.ty(p))?);
        }
    }
    let primals: Vec<Value> = primals.into_iter().flatten().collect();
    let (_, grads) = linearize_transpose(&mut b, f, &primals, linear, &cts)?;
    let mut outs = Vec::new();
    for (i, g) in grads.into_iter().enumerate() {
        if linear[i] {
            outs.push(match g {
                Some(g) => g,
                None => b.zeros(f.ty(f.params[i]))?,
            });
        }
    }
    Ok(opt::simplify(&b.finish(&outs)?))
}

/// The types of `f`'s parameters in `range`.
pub(crate) fn param_types(f: &Func, range: std::ops::Range<usize>) -> Vec<TensorType> {
    f.params[range].iter().map(|&p| f.ty(p).clone()).collect()
}

/// The types of `f`'s outputs in `range`.
pub(crate) fn output_types(f: &Func, range: std::ops::Range<usize>) -> Vec<TensorType> {
    f.outputs[range].iter().map(|&p| f.ty(p).clone()).collect()
}

/// Copies `n` elements from `src[src_at..]` to `dst[dst_at..]` (same dtype).
pub(crate) fn copy_chunk(
    prim: &str,
    src: &Storage,
    src_at: usize,
    dst: &mut Storage,
    dst_at: usize,
    n: usize,
) -> Result<(), ExecError> {
    macro_rules! go {
        ($($v:ident),*) => {
            match (src, dst) {
                $( (Storage::$v(s), Storage::$v(d)) => {
                    d[dst_at..dst_at + n].copy_from_slice(&s[src_at..src_at + n]);
                    Ok(())
                } )*
                (s, d) => Err(ExecError::kernel(
                    prim,
                    format!("internal error: copying {} elements into a {} buffer", s.dtype(), d.dtype()),
                )),
            }
        };
    }
    go!(F32, F64, I32, I64, Bool)
}

/// `f` restricted to the outputs marked `keep_out`, without the parameters
/// nothing reads any more. Returns the pruned function and which of `f`'s
/// parameters it kept (in order).
pub(crate) fn prune(f: &Func, keep_out: &[bool]) -> (Func, Vec<bool>) {
    let mut g = f.clone();
    g.outputs = f.outputs.iter().zip(keep_out).filter(|(_, &k)| k).map(|(&o, _)| o).collect();
    let g = opt::dce(&g);
    let mut read = vec![false; g.n_values()];
    for v in g.eqns.iter().flat_map(|e| &e.inputs).chain(&g.outputs) {
        read[v.index()] = true;
    }
    let kept: Vec<bool> = g.params.iter().map(|p| read[p.index()]).collect();
    let mut h = g.clone();
    h.params = g.params.iter().zip(&kept).filter(|(_, &k)| k).map(|(&p, _)| p).collect();
    (opt::dce(&h), kept)
}
