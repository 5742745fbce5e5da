//! Transforms as data: one [`Transform`] value per whole-function rewrite,
//! with one [`Transform::apply`] path that every front end (the language,
//! the Rust `Jit`, and next Python) goes through.
//!
//! A front end builds a `Transform` from its own syntax, traces the inner
//! function at [`Transform::inner_types`] of the arguments it was called
//! with, and calls `apply`. `apply` resolves the transform's arguments
//! (wrt positions, batch axes and size) once, rewrites with `ad`, `batch`
//! and `jac`, and ends in one simplify-and-verify step; an argument it
//! rejects is named in an [`IrError::Invalid`] whose op is the transform's
//! name.
//!
//! Adding a transform touches three files: this one (the variant, its
//! [`Kind`], `apply`, `inner_types`, [`Transform::from_name`]), the
//! language's `graft-lang/src/lower/transform/mod.rs` (its keyword) and the
//! Python wrapper in `python/graft/_api.py`. The Rust front end reaches
//! every transform through `Jit::transform` and the Python binding through
//! `from_name`, so neither changes (a named `Jit` method is a convenience,
//! not a requirement). The test
//! `transforms::every_transform_is_reachable_from_every_front_end`
//! (graft crate) enumerates [`Kind::ALL`] and fails when a front end lacks
//! one.
//!
//! The rewrites themselves (JVP as a function, partial evaluation, body
//! transposes, dependency marking) live in [`rewrite`], shared with the
//! primitives that hold functions (`scan`, `while`, `cond`, `call`,
//! `checkpoint`, custom rules).

pub mod rewrite;

pub use crate::ad::Wrt;
pub use crate::ops::control::Policy;
pub use rewrite::Staged;

use crate::batch::{place_out_axes, vmap_for_args};
use crate::error::IrError;
use crate::ir::{Builder, Func, Value};
use crate::types::TensorType;
use crate::{ad, jac, opt};
use std::fmt;
use std::sync::Arc;

/// The batch axes of a [`Transform::Vmap`], for its arguments or outputs.
/// Axes may be negative: for an argument, `-1` is the last axis of the
/// batched argument; for an output, `-1` puts the batch axis last. An
/// output axis past the output's rank clamps to the nearest end
/// (`min(k, rank)`; negative: `max(rank + 1 + k, 0)`), so outputs of any
/// rank take the batch axis: under `axis=1` a per-example scalar becomes a
/// vector (see [`crate::batch::place_out_axes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VmapAxes {
    /// One entry per argument (or output); `None` = not batched.
    Each(Vec<Option<isize>>),
    /// Axis `k` for every argument of rank > 0, rank-0 arguments shared
    /// (they have no axis to batch); for outputs, axis `k` for every output.
    All(isize),
}

/// A whole-function transform. The signature of the function each one
/// makes from `f`:
#[derive(Clone)]
pub enum Transform {
    /// `(params...) -> (gradient of each wrt param...)`; `f` returns one float scalar.
    Grad {
        /// Parameters to differentiate, the result follows their order.
        wrt: Wrt,
    },
    /// `(params...) -> (value, gradients...)` from one forward pass.
    ValueAndGrad {
        /// Parameters to differentiate.
        wrt: Wrt,
    },
    /// Forward mode: `(primals..., tangents of the wrt params...) ->
    /// (outputs..., output tangents...)`; integer outputs get zero tangents.
    Jvp {
        /// Parameters that carry tangents (the others are constants).
        wrt: Wrt,
    },
    /// Reverse mode: `(primals..., cotangents of the float outputs...) ->
    /// (outputs..., cotangents of the wrt params...)`.
    Vjp {
        /// Parameters whose cotangents are returned.
        wrt: Wrt,
    },
    /// Forward mode staged: as a function it is [`Transform::Jvp`];
    /// [`Transform::stage`] splits it into the forward pass (run once) and
    /// the linear tangent map (run per tangent).
    Linearize {
        /// Parameters that carry tangents.
        wrt: Wrt,
    },
    /// Vectorisation over a batch axis (`jax.vmap`).
    Vmap {
        /// Where each argument's batch axis is (or `None`: shared).
        in_axes: VmapAxes,
        /// Where each output's batch axis goes (or `None`: unbatched).
        out_axes: VmapAxes,
        /// The axis's name for collectives inside (`psum(x, name)`; JAX's
        /// `axis_name`), if any.
        axis_name: Option<String>,
    },
    /// Forward-mode Jacobian of `f`'s one output with respect to one
    /// parameter: shape `out.shape ++ param.shape`.
    Jacfwd {
        /// The parameter.
        wrt: usize,
    },
    /// Reverse-mode Jacobian (same result as [`Transform::Jacfwd`]).
    Jacrev {
        /// The parameter.
        wrt: usize,
    },
    /// The Jacobian in the cheaper mode: forward when the parameter has no
    /// more elements than the output, reverse otherwise.
    Jacobian {
        /// The parameter.
        wrt: usize,
    },
    /// The Hessian of a scalar function (forward over reverse).
    Hessian {
        /// The parameter.
        wrt: usize,
    },
    /// Same function; reverse mode saves only its inputs (and what `policy`
    /// keeps) and recomputes its other intermediates in the backward pass
    /// (`jax.checkpoint`).
    Checkpoint {
        /// What is saved besides the inputs.
        policy: Policy,
    },
    /// Same function; every derivative uses `rule(primals..., tangents of
    /// float params...) -> (outputs..., tangents of float outputs...)`.
    CustomJvp {
        /// The user's tangent rule (linear in the tangents).
        rule: Arc<Func>,
    },
    /// Same function; reverse mode uses `fwd(primals...) -> (outputs...,
    /// residuals...)` and `bwd(residuals..., cotangents of float outputs...)
    /// -> (cotangents of float params...)`.
    CustomVjp {
        /// The forward function.
        fwd: Arc<Func>,
        /// The backward function.
        bwd: Arc<Func>,
    },
}

/// The kinds of [`Transform`], for enumeration (tests, help texts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// [`Transform::Grad`]
    Grad,
    /// [`Transform::ValueAndGrad`]
    ValueAndGrad,
    /// [`Transform::Jvp`]
    Jvp,
    /// [`Transform::Vjp`]
    Vjp,
    /// [`Transform::Linearize`]
    Linearize,
    /// [`Transform::Vmap`]
    Vmap,
    /// [`Transform::Jacfwd`]
    Jacfwd,
    /// [`Transform::Jacrev`]
    Jacrev,
    /// [`Transform::Jacobian`]
    Jacobian,
    /// [`Transform::Hessian`]
    Hessian,
    /// [`Transform::Checkpoint`]
    Checkpoint,
    /// [`Transform::CustomJvp`]
    CustomJvp,
    /// [`Transform::CustomVjp`]
    CustomVjp,
}

impl Kind {
    /// Every kind, in declaration order.
    pub const ALL: [Kind; 13] = [
        Kind::Grad,
        Kind::ValueAndGrad,
        Kind::Jvp,
        Kind::Vjp,
        Kind::Linearize,
        Kind::Vmap,
        Kind::Jacfwd,
        Kind::Jacrev,
        Kind::Jacobian,
        Kind::Hessian,
        Kind::Checkpoint,
        Kind::CustomJvp,
        Kind::CustomVjp,
    ];

    /// The JAX-style name (`value_and_grad`, `custom_vjp`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Grad => "grad",
            Kind::ValueAndGrad => "value_and_grad",
            Kind::Jvp => "jvp",
            Kind::Vjp => "vjp",
            Kind::Linearize => "linearize",
            Kind::Vmap => "vmap",
            Kind::Jacfwd => "jacfwd",
            Kind::Jacrev => "jacrev",
            Kind::Jacobian => "jacobian",
            Kind::Hessian => "hessian",
            Kind::Checkpoint => "checkpoint",
            Kind::CustomJvp => "custom_jvp",
            Kind::CustomVjp => "custom_vjp",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Debug for Transform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transform::Grad { wrt }
            | Transform::ValueAndGrad { wrt }
            | Transform::Jvp { wrt }
            | Transform::Vjp { wrt }
            | Transform::Linearize { wrt } => write!(f, "{}(wrt={wrt:?})", self.kind()),
            Transform::Vmap { in_axes, out_axes, axis_name: None } => {
                write!(f, "vmap(in_axes={in_axes:?}, out_axes={out_axes:?})")
            }
            Transform::Vmap { in_axes, out_axes, axis_name: Some(n) } => {
                write!(f, "vmap(in_axes={in_axes:?}, out_axes={out_axes:?}, axis_name={n:?})")
            }
            Transform::Jacfwd { wrt }
            | Transform::Jacrev { wrt }
            | Transform::Jacobian { wrt }
            | Transform::Hessian { wrt } => write!(f, "{}(wrt={wrt})", self.kind()),
            Transform::Checkpoint { policy } => write!(f, "checkpoint(policy={policy})"),
            Transform::CustomJvp { rule } => write!(f, "custom_jvp(rule=@{})", rule.name),
            Transform::CustomVjp { fwd, bwd } => write!(f, "custom_vjp(fwd=@{}, bwd=@{})", fwd.name, bwd.name),
        }
    }
}

/// A transform's arguments as a front end that names transforms by string
/// gathers them (the Python binding): every field any transform takes,
/// each read only by the transforms it belongs to
/// ([`Transform::from_name`]).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `grad`, `value_and_grad`, `jvp`, `vjp`, `linearize`: the parameter
    /// positions (`None`: all).
    pub wrt: Option<Vec<usize>>,
    /// `jacfwd`, `jacrev`, `jacobian`, `hessian`: the parameter position.
    pub index: usize,
    /// `vmap`: the arguments' batch axes (required).
    pub in_axes: Option<VmapAxes>,
    /// `vmap`: the outputs' batch axes (default: axis 0 for every output).
    pub out_axes: Option<VmapAxes>,
    /// `vmap`: the axis's name for collectives (`axis_name`).
    pub axis_name: Option<String>,
    /// `checkpoint`: the policy's name (`nothing`, the default, or `dots`).
    pub policy: Option<String>,
}

impl Transform {
    /// The transform called `name` (its [`Kind::name`]) with the arguments
    /// in `options`: the one place that maps names to transforms, so a
    /// front end naming transforms by string needs no change when one is
    /// added. The custom rules hold functions, which a front end traces
    /// itself, so they are built as values ([`Transform::CustomJvp`],
    /// [`Transform::CustomVjp`]) and refused here.
    pub fn from_name(name: &str, options: Options) -> Result<Transform, IrError> {
        let kind = Kind::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| {
            let names: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
            IrError::invalid("transform", format!("graft has no transform `{name}` (it has {})", names.join(", ")))
        })?;
        let wrt = || options.wrt.clone().map_or(Wrt::All, Wrt::Positions);
        Ok(match kind {
            Kind::Grad => Transform::Grad { wrt: wrt() },
            Kind::ValueAndGrad => Transform::ValueAndGrad { wrt: wrt() },
            Kind::Jvp => Transform::Jvp { wrt: wrt() },
            Kind::Vjp => Transform::Vjp { wrt: wrt() },
            Kind::Linearize => Transform::Linearize { wrt: wrt() },
            Kind::Vmap => Transform::Vmap {
                in_axes: options
                    .in_axes
                    .ok_or_else(|| IrError::invalid("vmap", "vmap needs in_axes (one entry per argument)"))?,
                out_axes: options.out_axes.unwrap_or(VmapAxes::All(0)),
                axis_name: options.axis_name,
            },
            Kind::Jacfwd => Transform::Jacfwd { wrt: options.index },
            Kind::Jacrev => Transform::Jacrev { wrt: options.index },
            Kind::Jacobian => Transform::Jacobian { wrt: options.index },
            Kind::Hessian => Transform::Hessian { wrt: options.index },
            Kind::Checkpoint => {
                let name = options.policy.as_deref().unwrap_or("nothing");
                let policy = Policy::parse(name).ok_or_else(|| {
                    IrError::invalid(
                        "checkpoint",
                        format!("unknown checkpoint policy `{name}` (expected nothing or dots)"),
                    )
                })?;
                Transform::Checkpoint { policy }
            }
            Kind::CustomJvp | Kind::CustomVjp => {
                return Err(IrError::invalid(
                    name,
                    format!("{name} holds its rule functions: build Transform::{kind:?} with the traced rules"),
                ))
            }
        })
    }
}

impl Transform {
    /// Which transform this is.
    pub fn kind(&self) -> Kind {
        match self {
            Transform::Grad { .. } => Kind::Grad,
            Transform::ValueAndGrad { .. } => Kind::ValueAndGrad,
            Transform::Jvp { .. } => Kind::Jvp,
            Transform::Vjp { .. } => Kind::Vjp,
            Transform::Linearize { .. } => Kind::Linearize,
            Transform::Vmap { .. } => Kind::Vmap,
            Transform::Jacfwd { .. } => Kind::Jacfwd,
            Transform::Jacrev { .. } => Kind::Jacrev,
            Transform::Jacobian { .. } => Kind::Jacobian,
            Transform::Hessian { .. } => Kind::Hessian,
            Transform::Checkpoint { .. } => Kind::Checkpoint,
            Transform::CustomJvp { .. } => Kind::CustomJvp,
            Transform::CustomVjp { .. } => Kind::CustomVjp,
        }
    }

    /// The types to trace the inner function at, given the argument types
    /// `outer` of the transformed function: a vmap strips the batch axes,
    /// `jvp` and `linearize` drop the tangents; the others take the same
    /// arguments as `f`. `vjp`'s arguments end in one cotangent per float
    /// output of `f`, so where its primals end depends on `f`: a front end
    /// traces `f` at the primal types it was given (see `graft::Jit`),
    /// and this returns an error for it.
    pub fn inner_types(&self, outer: &[TensorType]) -> Result<Vec<TensorType>, IrError> {
        match self {
            Transform::Vmap { in_axes, .. } => {
                let ia = resolve_in_axes(in_axes, outer)?;
                Ok(outer
                    .iter()
                    .zip(&ia)
                    .map(|(t, a)| match a {
                        Some(a) => {
                            let mut shape = t.shape.clone();
                            shape.remove(*a);
                            TensorType::new(t.dtype, shape)
                        }
                        None => t.clone(),
                    })
                    .collect())
            }
            Transform::Jvp { wrt } | Transform::Linearize { wrt } => {
                let name = self.kind().name();
                let n = n_primals_before_tangents(wrt, outer, name)?;
                Ok(outer[..n].to_vec())
            }
            Transform::Vjp { .. } => Err(IrError::invalid(
                "vjp",
                "the arguments of vjp(f) are f's primals then one cotangent per floating-point output of f, \
                 so the primal types cannot be read off them alone; trace f at the primal types and apply vjp to it",
            )),
            _ => Ok(outer.to_vec()),
        }
    }

    /// Applies the transform to `f`, traced at `self.inner_types(outer)`
    /// (`outer`: the argument types of the transformed function; vmap
    /// reads the batch size from them, the others check nothing more).
    /// The result is simplified and verified.
    pub fn apply(&self, f: &Func, outer: &[TensorType]) -> Result<Func, IrError> {
        let g = match self {
            Transform::Grad { wrt } => ad::grad(f, wrt)?,
            Transform::ValueAndGrad { wrt } => ad::value_and_grad(f, wrt)?,
            Transform::Jvp { wrt } | Transform::Linearize { wrt } => jvp_wrt(f, wrt, self.kind().name())?,
            Transform::Vjp { wrt } => ad::vjp_func(f, wrt)?,
            Transform::Vmap { in_axes, out_axes, axis_name } => {
                let ia = resolve_in_axes(in_axes, outer)?;
                let out_ranks: Vec<usize> = f.output_types().iter().map(TensorType::rank).collect();
                let oa = match out_axes {
                    VmapAxes::Each(v) => place_out_axes(v, &out_ranks)?,
                    VmapAxes::All(a) => place_out_axes(&vec![Some(*a); out_ranks.len()], &out_ranks)?,
                };
                vmap_for_args(f, &ia, &oa, outer, None, axis_name.as_deref())?
            }
            Transform::Jacfwd { wrt } => jac::jacfwd(f, *wrt)?,
            Transform::Jacrev { wrt } => jac::jacrev(f, *wrt)?,
            Transform::Jacobian { wrt } => jac::jacobian(f, *wrt)?,
            Transform::Hessian { wrt } => jac::hessian(f, *wrt)?,
            Transform::Checkpoint { policy } => {
                wrap(f, "checkpoint", |b, f, args| b.checkpoint_with(f, args, *policy))?
            }
            Transform::CustomJvp { rule } => wrap(f, "custom_jvp", |b, f, args| b.custom_jvp(f, rule.clone(), args))?,
            Transform::CustomVjp { fwd, bwd } => {
                wrap(f, "custom_vjp", |b, f, args| b.custom_vjp(f, fwd.clone(), bwd.clone(), args))?
            }
        };
        let g = opt::simplify(&g);
        crate::ir::verify(&g).map_err(|e| {
            IrError::invalid(self.kind().name(), format!("internal error: the transformed function is invalid: {e}"))
        })?;
        Ok(g)
    }

    /// The staged form of [`Transform::Linearize`] and [`Transform::Vjp`]:
    /// the forward pass `(primals...) -> (outputs..., residuals...)` and
    /// the linear map `(residuals..., tangents or cotangents...) -> (...)`,
    /// so one forward pass serves many tangents (cotangents). Other
    /// transforms are not linear maps and are rejected.
    pub fn stage(&self, f: &Func) -> Result<Staged, IrError> {
        match self {
            Transform::Linearize { wrt } => {
                let j = jvp_wrt(f, wrt, "linearize")?;
                rewrite::partial_eval(&j, f.params.len(), f.outputs.len())
            }
            Transform::Vjp { wrt } => ad::vjp_split(f, wrt),
            other => Err(IrError::invalid(
                other.kind().name(),
                format!(
                    "only linearize and vjp can be staged into a forward pass and a linear map, not {}",
                    other.kind()
                ),
            )),
        }
    }
}

/// `f` called once, under the primitive `emit` adds (checkpoint, custom rules).
fn wrap(
    f: &Func,
    what: &str,
    emit: impl FnOnce(&mut Builder, Arc<Func>, &[Value]) -> Result<Vec<Value>, IrError>,
) -> Result<Func, IrError> {
    let mut b = Builder::new(format!("{what}_{}", f.name));
    let args: Vec<Value> = f.params.iter().map(|&p| b.param_like(f, p)).collect();
    let outs = emit(&mut b, Arc::new(f.clone()), &args)?;
    b.finish(&outs)
}

/// Forward mode with tangents for the `wrt` parameters, in `wrt` order.
fn jvp_wrt(f: &Func, wrt: &Wrt, name: &str) -> Result<Func, IrError> {
    let pos = wrt.resolve(f, name)?;
    let mask: Vec<bool> = (0..f.params.len()).map(|i| pos.contains(&i)).collect();
    let j = rewrite::jvp(f, format!("{name}_{}", f.name), &mask, true, rewrite::TangentOuts::All)?;
    let mut sorted = pos.clone();
    sorted.sort_unstable();
    if sorted == pos {
        return Ok(j);
    }
    // Tangent parameters come in parameter order; put them in wrt order.
    let np = f.params.len();
    let mut order: Vec<usize> = (0..np).collect();
    order.extend(pos.iter().map(|p| np + sorted.iter().position(|s| s == p).expect("internal error: pos is sorted")));
    rewrite::permute_params(&j, &order)
}

/// How many of `outer` are primals when the rest are the tangents of the
/// `wrt` parameters, and a check that each tangent has its primal's type.
fn n_primals_before_tangents(wrt: &Wrt, outer: &[TensorType], name: &str) -> Result<usize, IrError> {
    let pos: Vec<usize> = match wrt {
        Wrt::All => {
            // p + (float params among the first p) = len has one solution at most.
            let mut found = None;
            let mut floats = 0;
            for p in 0..=outer.len() {
                if p + floats == outer.len() {
                    found = Some(p);
                    break;
                }
                if let Some(t) = outer.get(p) {
                    floats += usize::from(t.dtype.is_float());
                }
            }
            let Some(p) = found else {
                return Err(IrError::invalid(
                    name,
                    format!(
                        "{name} takes the primals then one tangent per floating-point primal; {} arguments cannot be split that way",
                        outer.len()
                    ),
                ));
            };
            (0..p).filter(|&i| outer[i].dtype.is_float()).collect()
        }
        Wrt::Positions(ps) => {
            let p = outer.len().checked_sub(ps.len()).ok_or_else(|| {
                IrError::invalid(
                    name,
                    format!("{} arguments cannot hold tangents for {} parameters", outer.len(), ps.len()),
                )
            })?;
            if let Some(&bad) = ps.iter().find(|&&i| i >= p) {
                return Err(IrError::invalid(
                    name,
                    format!("wrt names parameter {bad}, but there are only {p} primals"),
                ));
            }
            ps.clone()
        }
    };
    let p = outer.len() - pos.len();
    for (k, &i) in pos.iter().enumerate() {
        if outer[p + k] != outer[i] {
            return Err(IrError::invalid(
                name,
                format!("the tangent of parameter {i} must have its type {}, got {}", outer[i], outer[p + k]),
            ));
        }
    }
    Ok(p)
}

/// Resolves a vmap's argument axes against the actual (batched) argument
/// types: axis `a` of an argument of rank `r` must be in `-r ..= r - 1`.
pub fn resolve_in_axes(axes: &VmapAxes, types: &[TensorType]) -> Result<Vec<Option<usize>>, IrError> {
    let each: Vec<Option<isize>> = match axes {
        VmapAxes::Each(v) => {
            if v.len() != types.len() {
                return Err(IrError::invalid(
                    "vmap",
                    format!(
                        "in_axes has {} entries but the function was called with {} arguments",
                        v.len(),
                        types.len()
                    ),
                ));
            }
            v.clone()
        }
        VmapAxes::All(a) => types.iter().map(|t| (t.rank() > 0).then_some(*a)).collect(),
    };
    each.iter()
        .zip(types)
        .enumerate()
        .map(|(i, (a, t))| {
            let Some(a) = *a else { return Ok(None) };
            let r = t.rank() as isize;
            let res = if a < 0 { a + r } else { a };
            if (0..r).contains(&res) {
                Ok(Some(res as usize))
            } else if r == 0 {
                Err(IrError::invalid(
                    "vmap",
                    format!("in_axes[{i}] = {a}, but argument {i} has type {t}, a scalar with no axis to batch"),
                ))
            } else {
                Err(IrError::invalid(
                    "vmap",
                    format!(
                        "in_axes[{i}] = {a} is out of range for argument {i} of type {t} (expected {} ..= {})",
                        -r,
                        r - 1
                    ),
                ))
            }
        })
        .collect()
}
