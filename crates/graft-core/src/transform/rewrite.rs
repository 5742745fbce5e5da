//! The whole-function rewrites every transform is made of, in one place:
//! dependency marking, the JVP of a function as a function (with any subset
//! of parameters carrying tangents), the VJP as a function, partial
//! evaluation (two-way for `linearize`/`vjp`, three-way for loop bodies),
//! the transpose of a function linear in some of its parameters, parameter
//! permutation and pruning.
//!
//! Users: `ad/api.rs` (the public `jvp_func`, `vjp_func`, `linearize`, ...),
//! the primitives that hold functions (`scan`, `cond`, `while`, `call`,
//! `checkpoint`, `custom_jvp`/`custom_vjp`), `jac.rs`, and the front ends
//! through [`super::Transform`]. Before this module each of them carried its
//! own copy of the JVP-as-a-function and the dependency walk.
//!
//! Why a three-way split for loop bodies ([`split_loop`]): reverse mode
//! (`ad/vjp.rs`) classifies every result of an equation with a tangent
//! operand as linear, so a loop's JVP rule must emit a primal loop (saving
//! residuals) and a separate loop that is linear in the tangents. The JVP of
//! a body is cut into
//! - `hoist`: values that depend only on the loop-invariant parameters
//!   (consts), computed once outside the loop (e.g. `transpose(W)`),
//! - `fwd`: the primal body plus the per-step residuals it must output,
//! - `lin`: the tangent map, reading only residuals and tangents.
//!
//! Invariant used by [`transpose_linear`]: a function handed to it is linear
//! in the parameters marked linear (the JVP rules only ever emit such
//! functions), so its transpose does not depend on their primal values;
//! they are replaced by zeros.

use crate::ad::{jvp_inline, linearize_transpose};
use crate::error::IrError;
use crate::ir::{copy_eqns, lookup, Builder, Eqn, Func, Value};
use crate::ops::Op;
use crate::opt;

/// Which values of `f` depend (transitively) on a parameter marked in `marked`.
pub fn depends(f: &Func, marked: &[bool]) -> Vec<bool> {
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
pub fn outputs_depending(f: &Func, marked: &[bool]) -> Vec<bool> {
    let d = depends(f, marked);
    f.outputs.iter().map(|v| d[v.index()]).collect()
}

/// Which outputs of a JVP as a function ([`jvp`]) carry tangents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TangentOuts<'a> {
    /// One per output of `f` (integer outputs get integer zeros).
    All,
    /// One per floating-point output.
    Float,
    /// One per output marked here.
    Marked(&'a [bool]),
}

/// The JVP of `f` as a function, named `name`:
/// - params: `f`'s params, then one tangent per parameter marked in
///   `tangent_in` (in order; marks on integer parameters are ignored);
///   unmarked parameters are symbolic zeros and cost nothing;
/// - outputs: `f`'s outputs when `keep_primal`, then the tangents chosen by
///   `outs` (zeros where the JVP has none).
pub fn jvp(
    f: &Func,
    name: String,
    tangent_in: &[bool],
    keep_primal: bool,
    outs: TangentOuts<'_>,
) -> Result<Func, IrError> {
    let mut b = Builder::new(name);
    let primals = copy_params(&mut b, f);
    let tangents = tangent_params(&mut b, f, tangent_in);
    let (outs_p, touts) = jvp_inline(&mut b, f, &primals, &tangents)?;
    let mut all = if keep_primal { outs_p.clone() } else { Vec::new() };
    for (i, t) in touts.into_iter().enumerate() {
        let ty = f.ty(f.outputs[i]);
        let wanted = match outs {
            TangentOuts::All => true,
            TangentOuts::Float => ty.dtype.is_float(),
            TangentOuts::Marked(m) => m[i],
        };
        if wanted {
            all.push(match t {
                Some(t) => t,
                None => b.zeros(ty)?,
            });
        }
    }
    Ok(opt::simplify(&b.finish(&all)?))
}

/// Tangent parameters for the params marked in `marked` (named `x_dot` for
/// a parameter `x`); marks on integer parameters are ignored (integers have
/// no tangent).
fn tangent_params(b: &mut Builder, f: &Func, marked: &[bool]) -> Vec<Option<Value>> {
    f.params
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let t = (marked.get(i).copied().unwrap_or(false) && f.ty(p).dtype.is_float())
                .then(|| b.param(f.ty(p).clone()))?;
            if let Some(name) = f.name_of(p) {
                b.set_name(t, format!("{name}_dot"));
            }
            Some(t)
        })
        .collect()
}

/// `f`'s parameters copied into `b`, with their names.
fn copy_params(b: &mut Builder, f: &Func) -> Vec<Value> {
    f.params.iter().map(|&p| b.param_like(f, p)).collect()
}

/// Which outputs of `f` get a (possibly) nonzero tangent when the float
/// parameters marked in `nz` carry tangents, as the JVP rules decide it.
pub fn tangent_outputs(f: &Func, nz: &[bool]) -> Result<Vec<bool>, IrError> {
    let mut b = Builder::new(format!("{}_probe", f.name));
    let ps = copy_params(&mut b, f);
    let ts = tangent_params(&mut b, f, nz);
    let (_, touts) = jvp_inline(&mut b, f, &ps, &ts)?;
    Ok(touts.iter().map(Option::is_some).collect())
}

/// The VJP of `f` as a function, named `name`:
/// - params: `f`'s params, then one cotangent per output marked in `ct_in`;
/// - outputs: `f`'s outputs when `keep_primal`, then the cotangent of every
///   parameter marked in `wrt`, in parameter order (zeros where none flows).
pub fn vjp(f: &Func, name: String, wrt: &[bool], ct_in: &[bool], keep_primal: bool) -> Result<Func, IrError> {
    let mut b = Builder::new(name);
    let primals = copy_params(&mut b, f);
    let cts: Vec<Option<Value>> = f
        .outputs
        .iter()
        .zip(ct_in)
        .map(|(&o, &c)| {
            let ct = c.then(|| b.param(f.ty(o).clone()))?;
            if let Some(name) = f.name_of(o) {
                b.set_name(ct, format!("{name}_bar"));
            }
            Some(ct)
        })
        .collect();
    let (outs, grads) = linearize_transpose(&mut b, f, &primals, wrt, &cts)?;
    let mut all = if keep_primal { outs } else { Vec::new() };
    for (i, g) in grads.into_iter().enumerate() {
        if wrt[i] {
            all.push(match g {
                Some(g) => g,
                None => b.zeros(f.ty(f.params[i]))?,
            });
        }
    }
    Ok(opt::simplify(&b.finish(&all)?))
}

/// A function staged in two: what needs only the known inputs, and the rest.
/// - `forward: (known params...) -> (first outputs..., residuals...)`
/// - `rest: (residuals..., later params...) -> (remaining outputs...)`
///
/// `linearize` (the rest is the tangent map) and `vjp_split` (the rest is
/// the pullback) return it.
#[derive(Debug, Clone)]
pub struct Staged {
    /// Known inputs to the first outputs and the residuals.
    pub forward: Func,
    /// Residuals and the later inputs to the remaining outputs.
    pub rest: Func,
    /// Number of outputs at the front of `forward`'s outputs.
    pub n_outputs: usize,
}

/// A JVP body cut in three (see the module docs).
#[derive(Debug)]
pub struct LoopStages {
    /// `(consts...) -> (invariant residuals...)`.
    pub hoist: Func,
    /// `(primal params...) -> (primal outputs..., per-step residuals...)`.
    pub fwd: Func,
    /// `(invariant residuals..., per-step residuals..., tangent params...) -> (tangent outputs...)`.
    pub lin: Func,
    /// Number of primal outputs at the front of `fwd`'s outputs.
    pub n_out: usize,
}

impl LoopStages {
    /// Number of invariant residuals.
    pub fn n_inv(&self) -> usize {
        self.hoist.outputs.len()
    }

    /// Number of per-step residuals.
    pub fn n_step(&self) -> usize {
        self.fwd.outputs.len() - self.n_out
    }
}

/// Partial evaluation of `v`, whose first `n_known` params are known now and
/// whose first `n_out` outputs depend only on them: equations that do not
/// depend on the later params form `forward`, the rest form `rest`, and the
/// forward values `rest` reads become residuals.
pub fn partial_eval(v: &Func, n_known: usize, n_out: usize) -> Result<Staged, IrError> {
    let s = cut(v, n_known, None, n_out)?;
    Ok(Staged { forward: s.fwd, rest: s.lin, n_outputs: n_out })
}

/// Splits `jf` (from [`jvp`]) whose first `n_primal` params are primals
/// (the first `n_const` of them loop-invariant) and whose first `n_out`
/// outputs are primal outputs (see the module docs).
pub fn split_loop(jf: &Func, n_primal: usize, n_const: usize, n_out: usize) -> Result<LoopStages, IrError> {
    cut(jf, n_primal, Some(n_const), n_out)
}

/// The shared cut: with `n_const = None` nothing is hoisted (`hoist` is empty).
fn cut(jf: &Func, n_primal: usize, n_const: Option<usize>, n_out: usize) -> Result<LoopStages, IrError> {
    let np = jf.params.len();
    let late = depends(jf, &(0..np).map(|i| i >= n_primal).collect::<Vec<_>>());
    // An effect (a print, which has no results) goes to the stage that has
    // its operands, once: never hoisted, never copied into a later stage.
    let effect = |e: &Eqn| e.prim.has_effect();
    let is_late =
        |e: &Eqn| e.outputs.iter().any(|o| late[o.index()]) || (effect(e) && e.inputs.iter().any(|v| late[v.index()]));
    let splat = splats(jf);
    let is_splat = |e: &Eqn| !effect(e) && !e.outputs.is_empty() && e.outputs.iter().all(|o| splat[o.index()]);
    // Residuals: primal values the late part reads or returns, except
    // splats of scalar constants, which the late part builds itself.
    let mut res: Vec<Value> = Vec::new();
    let mut seen = vec![false; jf.n_values()];
    let reads = jf.eqns.iter().filter(|e| is_late(e)).flat_map(|e| e.inputs.iter());
    for &x in reads.chain(&jf.outputs[n_out..]) {
        if !late[x.index()] && !seen[x.index()] && !splat[x.index()] {
            seen[x.index()] = true;
            res.push(x);
        }
    }
    let nc = n_const.unwrap_or(0);
    let (inv, step): (Vec<Value>, Vec<Value>) = match n_const {
        None => (Vec::new(), res),
        Some(nc) => {
            let varying = depends(jf, &(0..np).map(|i| i >= nc && i < n_primal).collect::<Vec<_>>());
            res.into_iter().partition(|v| !varying[v.index()])
        }
    };
    // A stage's parameters that are residuals are named for their role.
    let mut is_param = vec![false; jf.n_values()];
    for p in &jf.params {
        is_param[p.index()] = true;
    }
    let stage = |name: String,
                 params: &mut dyn Iterator<Item = Value>,
                 eqns: &mut dyn Iterator<Item = &Eqn>,
                 outs: &[Value]| {
        let mut b = Builder::new(name);
        let mut map: Vec<Option<Value>> = vec![None; jf.n_values()];
        for p in params {
            let v = b.param(jf.ty(p).clone());
            match (jf.name_of(p), is_param[p.index()]) {
                (Some(name), true) => b.set_name(v, name),
                (Some(name), false) => b.set_name(v, format!("{name}_resid")),
                (None, false) => b.set_name(v, "resid"),
                (None, true) => {}
            }
            map[p.index()] = Some(v);
        }
        copy_eqns(&mut b, jf, eqns, &mut map)?;
        let outs: Vec<Value> = outs.iter().map(|&v| lookup(&map, v)).collect::<Result<_, _>>()?;
        Ok::<Func, IrError>(opt::simplify(&b.finish(&outs)?))
    };
    let hoist = if n_const.is_none() {
        Builder::new(format!("{}_hoist", jf.name)).finish(&[])?
    } else {
        let varying = depends(jf, &(0..np).map(|i| i >= nc && i < n_primal).collect::<Vec<_>>());
        stage(
            format!("{}_hoist", jf.name),
            &mut jf.params[..nc].iter().copied(),
            &mut jf
                .eqns
                .iter()
                .filter(|e| !effect(e) && e.outputs.iter().all(|o| !late[o.index()] && !varying[o.index()])),
            &inv,
        )?
    };
    let fwd_outs: Vec<Value> = jf.outputs[..n_out].iter().chain(&step).copied().collect();
    let fwd = stage(
        format!("{}_fwd", jf.name),
        &mut jf.params[..n_primal].iter().copied(),
        &mut jf.eqns.iter().filter(|e| !is_late(e)),
        &fwd_outs,
    )?;
    let lin = stage(
        format!("{}_lin", jf.name),
        &mut inv.iter().chain(&step).chain(&jf.params[n_primal..]).copied(),
        &mut jf.eqns.iter().filter(|e| is_late(e) || is_splat(e)),
        &jf.outputs[n_out..],
    )?;
    Ok(LoopStages { hoist, fwd, lin, n_out })
}

/// Values that are a one-element `constant` or a broadcast, reshape or
/// convert of one: the later stages of [`cut`] rebuild these rather than
/// take them as residuals. Why: a step size or the `2` of `2 * x` broadcast
/// to a tensor's shape would otherwise be materialised by the forward pass
/// and loaded back, element by element, by every reverse step (a scan's
/// linear body read four such arrays per step in GradBench `ode`), where
/// the kernels can fold the scalar into their code.
fn splats(f: &Func) -> Vec<bool> {
    let mut splat = vec![false; f.n_values()];
    for e in &f.eqns {
        let [out] = e.outputs[..] else { continue };
        let yes = match e.prim.name() {
            "constant" => e.inputs.is_empty() && f.ty(out).numel() == 1,
            "broadcast_in_dim" | "reshape" | "convert" => {
                matches!(e.inputs[..], [x] if splat[x.index()] && f.ty(x).numel() == 1)
            }
            _ => false,
        };
        splat[out.index()] = yes;
    }
    splat
}

/// `f` with its parameters permuted: parameter `i` of the result is
/// parameter `order[i]` of `f`.
pub fn permute_params(f: &Func, order: &[usize]) -> Result<Func, IrError> {
    let mut b = Builder::new(f.name.clone());
    let mut args: Vec<Option<Value>> = vec![None; f.params.len()];
    for &i in order {
        args[i] = Some(b.param_like(f, f.params[i]));
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
pub fn transpose_linear(f: &Func, linear: &[bool], ct_present: &[bool]) -> Result<Func, IrError> {
    let mut b = Builder::new(format!("{}_t", f.name));
    let mut primals: Vec<Option<Value>> = vec![None; f.params.len()];
    for (i, &p) in f.params.iter().enumerate() {
        if !linear[i] {
            primals[i] = Some(b.param_like(f, p));
        }
    }
    let mut cts = Vec::with_capacity(f.outputs.len());
    for (j, &o) in f.outputs.iter().enumerate() {
        let ct = ct_present[j].then(|| b.param(f.ty(o).clone()));
        if let (Some(ct), Some(name)) = (ct, f.name_of(o)) {
            b.set_name(ct, format!("{name}_bar"));
        }
        cts.push(ct);
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

/// `f` restricted to the outputs marked `keep_out`, without the parameters
/// nothing reads any more. Returns the pruned function and which of `f`'s
/// parameters it kept (in order).
pub fn prune(f: &Func, keep_out: &[bool]) -> (Func, Vec<bool>) {
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
