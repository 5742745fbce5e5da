//! Functional updates and reads of an indexed part of a tensor:
//! `x.at[idx].set(v)` / `.add(v)` / `.mul(v)` / `.min(v)` / `.max(v)` /
//! `.get()`, as in JAX, and the `scatter_add` builtin built on them.
//!
//! Every form lowers the same way: the index items are turned into the flat
//! (row-major) positions `P` of the indexed elements in `x`, an integer
//! tensor of the indexed shape `S` (slices keep their axis, integers drop
//! it, an index array puts its shape in its place, axes left out are whole);
//! `x` is reshaped to one axis and read with `gather` or written with
//! `scatter_add` at `P`.
//!
//! Index items: a static integer (negative from the end; out of range is a
//! compile-time error, as for `x[k]`), a static slice, a run-time integer
//! scalar, or an integer index array (at most one). Run-time indices count
//! from the end when negative (`i + n`, once); an index still out of range
//! after that is **dropped** by the updates (the element is left as it is,
//! JAX's scatter rule) and **clamped** by `get()` (JAX's gather rule) unless
//! `get(mode="fill")` asks for `fill_value` (0 by default) there.
//!
//! Updates: `add` accumulates duplicate indices (a `scatter_add`). Without
//! an index array the positions are distinct, so `set mul min max` read the
//! old part, combine, and write it back under a mask of the written
//! positions (exact: the new values are scattered onto `-0.0`, which `+`
//! leaves unchanged). With an index array duplicates are possible and the
//! order of writes would decide the result, so `set min max` take a value
//! that is the same for every index (a scalar) and `mul` is not offered:
//! both are a located error, never a silently different result.

use super::expr::static_int;
use super::value::{ArrKind, Val};
use super::{ArgVal, Env, Lower};
use crate::ast::{Arg, Expr, ExprKind, Ident, IndexItem, Span};
use crate::diag::{Diagnostic, Stage};
use graft_core::composite::broadcast;
use graft_core::ops::index::IndexMode;
use graft_core::{DType, TensorType, Value};

/// One resolved index item.
pub enum Item {
    /// Static positions along the axis (a static integer, `keep: false`, or a slice).
    Static { pos: Vec<i64>, keep: bool },
    /// A run-time integer tensor: a scalar (drops the axis) or an index array.
    Run(Value),
}

/// How `get` treats out-of-range indices.
#[derive(Clone, Copy)]
pub enum GetMode {
    Clip,
    Fill(f64),
}

/// Python slice positions of `start:stop:step` over an axis of size `n`.
pub fn slice_positions(n: usize, start: Option<i64>, stop: Option<i64>, step: i64) -> Vec<i64> {
    let n = n as i64;
    let norm = |v: i64, lo: i64, hi: i64| (if v < 0 { v + n } else { v }).clamp(lo, hi);
    let mut out = Vec::new();
    if step > 0 {
        let (a, b) = (start.map_or(0, |v| norm(v, 0, n)), stop.map_or(n, |v| norm(v, 0, n)));
        let mut i = a;
        while i < b {
            out.push(i);
            i += step;
        }
    } else {
        let (a, b) = (start.map_or(n - 1, |v| norm(v, -1, n - 1)), stop.map_or(-1, |v| norm(v, -1, n - 1)));
        let mut i = a;
        while i > b {
            out.push(i);
            i += step;
        }
    }
    out
}

impl Lower<'_> {
    /// Lowers `base.at[items].method(args)`.
    pub(super) fn at_expr(
        &mut self,
        base: &Expr,
        items: &[IndexItem],
        method: &Ident,
        args: &[Arg],
        span: &Span,
        env: &Env,
    ) -> Result<Val, Diagnostic> {
        let bv = self.expr(base, env)?;
        if let Val::Tuple(ts) = &bv {
            return Err(self
                .err(Stage::Type, &base.span, format!("`.at[...]` needs a tensor, found a tuple of {}", ts.len()))
                .with_note("help: use `t.0`, `t.1`, ... for tuple elements"));
        }
        let x = self.tensor(&bv, &base.span)?;
        let rank = self.ty(x).rank();
        if items.len() > rank {
            return Err(self.err(
                Stage::Type,
                span,
                format!("too many indices in `.at[...]`: {} given for a value of type {}", items.len(), self.ty(x)),
            ));
        }
        let mut resolved = Vec::new();
        for (axis, it) in items.iter().enumerate() {
            let n = self.ty(x).shape[axis];
            resolved.push(self.at_item(it, axis, n, env)?);
        }
        let m = method.name.as_str();
        let mut vals = Vec::new();
        for a in args {
            vals.push(ArgVal { name: a.name.clone(), val: self.expr(&a.value, env)?, span: a.span.clone() });
        }
        let mut value = None;
        let mut mode = GetMode::Clip;
        let mut fill = None;
        for a in &vals {
            match (&a.name, m) {
                (None, "get") => {
                    return Err(self.err(Stage::Type, &a.span, "`.get()` takes no positional arguments").with_note(
                        "note: its options are `mode=\"clip\"` (the default) or `mode=\"fill\"` with `fill_value`",
                    ))
                }
                (None, _) if value.is_none() => value = Some(a.clone()),
                (None, _) => {
                    return Err(self.err(Stage::Type, &a.span, format!("`.{m}` takes one value, but more were given")))
                }
                (Some(k), "get") if k.name == "mode" => {
                    mode = match &a.val {
                        Val::Str(s) if &**s == "clip" => GetMode::Clip,
                        Val::Str(s) if &**s == "fill" => GetMode::Fill(0.0),
                        other => {
                            return Err(self.err(
                                Stage::Type,
                                &a.span,
                                format!("`mode` must be \"clip\" or \"fill\", found {}", describe_str(other)),
                            ))
                        }
                    };
                }
                (Some(k), "get") if k.name == "fill_value" => {
                    let v = super::expr::static_scalar(&a.val).map(|c| c.as_f64()).ok_or_else(|| {
                        self.err(
                            Stage::Type,
                            &a.span,
                            format!("`fill_value` must be a number known while compiling, found {}", a.val.describe()),
                        )
                    })?;
                    fill = Some((v, a.span.clone()));
                }
                (Some(k), _) => {
                    let note = if m == "get" {
                        "note: `.get()` takes `mode` and `fill_value`".to_string()
                    } else {
                        format!("note: `.{m}` takes the value only, e.g. `x.at[i].{m}(v)`")
                    };
                    return Err(self
                        .err(Stage::Type, &k.span, format!("`.{m}` has no parameter `{}`", k.name))
                        .with_note(note));
                }
            }
        }
        if let Some((v, fspan)) = fill {
            match mode {
                GetMode::Fill(_) => mode = GetMode::Fill(v),
                GetMode::Clip => {
                    return Err(self
                        .err(Stage::Type, &fspan, "`fill_value` applies only with `mode=\"fill\"`")
                        .with_note("help: write `.get(mode=\"fill\", fill_value=...)`"))
                }
            }
        }
        if m != "get" && value.is_none() {
            return Err(self
                .err(Stage::Type, span, format!("`.{m}` needs the value to {}", verb(m)))
                .with_note(format!("help: write `x.at[i].{m}(v)`")));
        }
        let r = self.at_apply(x, resolved, m, value.as_ref(), mode, &method.span, span)?;
        Ok(Val::T(self.tv(r)))
    }

    /// Resolves one index item of `.at[...]` for axis `axis` of size `n`.
    fn at_item(&mut self, it: &IndexItem, axis: usize, n: usize, env: &Env) -> Result<(Item, Span), Diagnostic> {
        match it {
            IndexItem::Single(e) => {
                if matches!(&e.kind, ExprKind::Var(id) if id.name == "none" && env.get("none").is_none()) {
                    return Err(self.err(Stage::Type, &e.span, "`none` (a new axis) is not allowed in `.at[...]`"));
                }
                let v = self.expr(e, env)?;
                let item = self.index_value(&v, axis, n, &e.span)?;
                Ok((item, e.span.clone()))
            }
            IndexItem::Slice { start, stop, step, span } => {
                let mut part = |e: &Option<Expr>| -> Result<Option<i64>, Diagnostic> {
                    match e {
                        None => Ok(None),
                        Some(e) => {
                            let v = self.expr(e, env)?;
                            static_int(&v).map(Some).ok_or_else(|| {
                                self.err(
                                    Stage::Type,
                                    &e.span,
                                    format!("slice bounds must be known while compiling, found {}", v.describe()),
                                )
                                .with_note("help: for a block at a run-time start use `dynamic_slice(x, starts, sizes)` or `dynamic_update_slice(x, update, starts)`")
                            })
                        }
                    }
                };
                let (a, b, c) = (part(start)?, part(stop)?, part(step)?.unwrap_or(1));
                if c == 0 {
                    return Err(self.err(Stage::Type, span, "slice step must not be zero"));
                }
                Ok((Item::Static { pos: slice_positions(n, a, b, c), keep: true }, span.clone()))
            }
        }
    }

    /// An index value (static integer, integer array literal, run-time
    /// integer scalar or array) for an axis of size `n`.
    pub(super) fn index_value(&mut self, v: &Val, axis: usize, n: usize, span: &Span) -> Result<Item, Diagnostic> {
        if let Some(k) = static_int(v) {
            let k2 = if k < 0 { k + n as i64 } else { k };
            if k2 < 0 || k2 >= n as i64 {
                return Err(self.err(
                    Stage::Type,
                    span,
                    format!("index {k} is out of bounds for axis {axis} of size {n}"),
                ));
            }
            return Ok(Item::Static { pos: vec![k2], keep: false });
        }
        let bad = |this: &Self, found: String| {
            this.err(
                Stage::Type,
                span,
                format!("an index must be an integer (known while compiling or a run-time scalar) or an integer index array, found {found}"),
            )
        };
        let t = match v {
            Val::Array { kind: ArrKind::Int, .. } => self.tensor_as(v, DType::I64, span)?,
            Val::T(_) => self.tensor(v, span)?,
            other => return Err(bad(self, other.describe())),
        };
        let ty = self.ty(t);
        if !ty.dtype.is_int() {
            let mut d = bad(self, ty.to_string());
            if ty.dtype == DType::Bool {
                d = d.with_note("help: boolean masks are not indices; use `where(mask, v, x)`");
            } else {
                d = d.with_note("help: convert with `cast(i, i32)`");
            }
            return Err(d);
        }
        Ok(Item::Run(t))
    }

    /// The flat positions (i64, shape `S`) of the indexed elements and, for
    /// run-time indices, whether each is in range (bool, shape `S`). With
    /// `clamp`, run-time indices are clamped instead (and always valid).
    fn positions(
        &mut self,
        shape: &[usize],
        items: &[(Item, Span)],
        clamp: bool,
        span: &Span,
    ) -> Result<(Value, Vec<usize>, Option<Value>), Diagnostic> {
        let rank = shape.len();
        let strides = graft_core::types::strides_of(shape);
        // The indexed shape and where each axis's coordinates go in it.
        let mut s = Vec::new();
        let mut dims: Vec<Vec<usize>> = Vec::new();
        for a in 0..rank {
            let d0 = s.len();
            match items.get(a).map(|i| &i.0) {
                None => s.push(shape[a]),
                Some(Item::Static { pos, keep: true }) => s.push(pos.len()),
                Some(Item::Static { keep: false, .. }) => {}
                Some(Item::Run(t)) => s.extend(self.ty(*t).shape),
            }
            dims.push((d0..s.len()).collect());
        }
        let i64s = |this: &mut Self, shape: &[usize], data: &[f64]| this.const_tensor(shape, data, DType::I64, span);
        let mut p: Option<Value> = None;
        let mut valid: Option<Value> = None;
        for a in 0..rank {
            let stride = strides[a] as f64;
            let c = match items.get(a).map(|i| &i.0) {
                None => {
                    let data: Vec<f64> = (0..shape[a]).map(|i| i as f64 * stride).collect();
                    i64s(self, &[shape[a]], &data)?
                }
                Some(Item::Static { pos, keep }) => {
                    let data: Vec<f64> = pos.iter().map(|&i| i as f64 * stride).collect();
                    let sh = if *keep { vec![pos.len()] } else { vec![] };
                    i64s(self, &sh, &data)?
                }
                Some(Item::Run(t)) => {
                    let t = *t;
                    let tt = self.ty(t);
                    let r = self.b().convert(t, DType::I64);
                    let i = self.ir(r, span)?;
                    let n = shape[a] as f64;
                    let zero = self.const_tensor(&tt.shape, &vec![0.0; tt.numel()], DType::I64, span)?;
                    let nn = self.const_tensor(&tt.shape, &vec![n; tt.numel()], DType::I64, span)?;
                    let r = self.b().lt(i, zero);
                    let neg = self.ir(r, span)?;
                    let r = self.b().add(i, nn);
                    let w = self.ir(r, span)?;
                    let r = self.b().select(neg, w, i);
                    let i = self.ir(r, span)?;
                    let i = if clamp {
                        let hi =
                            self.const_tensor(&tt.shape, &vec![(n - 1.0).max(0.0); tt.numel()], DType::I64, span)?;
                        let r = self.b().min(i, hi);
                        let i = self.ir(r, span)?;
                        let r = self.b().max(i, zero);
                        self.ir(r, span)?
                    } else {
                        let r = self.b().ge(i, zero);
                        let lo_ok = self.ir(r, span)?;
                        let r = self.b().lt(i, nn);
                        let hi_ok = self.ir(r, span)?;
                        let r = self.b().and(lo_ok, hi_ok);
                        let ok = self.ir(r, span)?;
                        let r = self.b().broadcast_in_dim(ok, &s, &dims[a]);
                        let ok = self.ir(r, span)?;
                        valid = Some(match valid {
                            None => ok,
                            Some(v) => {
                                let r = self.b().and(v, ok);
                                self.ir(r, span)?
                            }
                        });
                        i
                    };
                    let st = self.const_tensor(&tt.shape, &vec![stride; tt.numel()], DType::I64, span)?;
                    let r = self.b().mul(i, st);
                    self.ir(r, span)?
                }
            };
            let r = self.b().broadcast_in_dim(c, &s, &dims[a]);
            let c = self.ir(r, span)?;
            p = Some(match p {
                None => c,
                Some(p) => {
                    let r = self.b().add(p, c);
                    self.ir(r, span)?
                }
            });
        }
        let p = match p {
            Some(p) => p,
            None => self.const_tensor(&[], &[0.0], DType::I64, span)?,
        };
        Ok((p, s, valid))
    }

    /// `x.at[items].method(value)` on the tensor `x` (see the module docs).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn at_apply(
        &mut self,
        x: Value,
        items: Vec<(Item, Span)>,
        m: &str,
        value: Option<&ArgVal>,
        mode: GetMode,
        mspan: &Span,
        span: &Span,
    ) -> Result<Value, Diagnostic> {
        let xt = self.ty(x);
        let arrays: Vec<&Span> =
            items.iter().filter(|(i, _)| matches!(i, Item::Run(t) if self.ty(*t).rank() > 0)).map(|(_, s)| s).collect();
        if arrays.len() > 1 {
            return Err(self
                .err(Stage::Type, arrays[1], "`.at[...]` takes at most one index array")
                .with_secondary(arrays[0].clone(), "the first index array")
                .with_note("help: index the other axes with integers, run-time integer scalars or slices"));
        }
        let has_array = !arrays.is_empty();
        if m != "get" && !xt.dtype.is_numeric() {
            return Err(self.err(Stage::Type, span, format!("`.at[...].{m}` needs a numeric tensor, found {xt}")));
        }
        let n = xt.numel();
        let flat_ty = TensorType::new(xt.dtype, vec![n]);
        let r = self.b().reshape(x, &[n]);
        let flat = self.ir(r, span)?;
        let clamp = matches!((m, mode), ("get", GetMode::Clip));
        let (p, s, valid) = self.positions(&xt.shape, &items, clamp, span)?;
        // Out-of-range positions become -1, which `fill` gathers read as 0
        // and `fill` scatters drop.
        let p = match valid {
            Some(ok) => {
                let m1 = self.const_tensor(&s, &vec![-1.0; s.iter().product()], DType::I64, span)?;
                let r = self.b().select(ok, p, m1);
                self.ir(r, span)?
            }
            None => p,
        };
        let mut ps = s.clone();
        ps.push(1);
        let r = self.b().reshape(p, &ps);
        let idx = self.ir(r, span)?;
        let gather = |this: &mut Self, src: Value| -> Result<Value, Diagnostic> {
            let r = this.b().gather(src, idx, 0, &[0], IndexMode::Fill);
            this.ir(r, span)
        };
        let scatter = |this: &mut Self, dst: Value, upd: Value| -> Result<Value, Diagnostic> {
            let r = this.b().scatter_add(dst, idx, upd, 0, &[0], IndexMode::Fill);
            this.ir(r, span)
        };
        let out = if m == "get" {
            let g = gather(self, flat)?;
            match (mode, valid) {
                (GetMode::Fill(f), Some(ok)) if f != 0.0 => {
                    let fv = self.const_tensor(&s, &vec![f; s.iter().product()], xt.dtype, span)?;
                    let r = self.b().select(ok, g, fv);
                    self.ir(r, span)?
                }
                _ => g,
            }
        } else {
            let a = value.expect("internal error: updates have a value (checked by at_expr)");
            let v = self.tensor_as(&a.val, xt.dtype, &a.span)?;
            let vt = self.ty(v);
            let scalar_value = vt.shape.iter().all(|&d| d == 1);
            let vs = {
                let r = broadcast::broadcast_to(self.b(), v, &s);
                self.ir(r, &a.span).map_err(|_| {
                    self.err(
                        Stage::Type,
                        &a.span,
                        format!("`.{m}`: a value of type {vt} does not broadcast to the indexed shape {s:?}"),
                    )
                })?
            };
            if m == "add" {
                scatter(self, flat, vs)?
            } else {
                if has_array && (m == "mul" || !scalar_value) {
                    let what = if m == "mul" {
                        "`.mul` with an index array is not supported".to_string()
                    } else {
                        format!("`.{m}` with an index array needs a scalar value, found {vt}")
                    };
                    return Err(self
                        .err(Stage::Type, mspan, what)
                        .with_secondary(arrays[0].clone(), "index array")
                        .with_note("note: an index array may repeat an index, and then the order of the updates would decide the result")
                        .with_note("help: use `.add` (repeated indices accumulate), index with integers, run-time scalars and slices, or give one value for all indices"));
                }
                // Which flat positions are written.
                let r = self.b().zeros(&TensorType::new(DType::I32, vec![n]));
                let z = self.ir(r, span)?;
                let ones = self.const_tensor(&s, &vec![1.0; s.iter().product()], DType::I32, span)?;
                let count = scatter(self, z, ones)?;
                let r = self.b().zeros(&TensorType::new(DType::I32, vec![n]));
                let z = self.ir(r, span)?;
                let r = self.b().gt(count, z);
                let mask = self.ir(r, span)?;
                let new_full = if has_array {
                    // One value for every index: combine elementwise over all of x.
                    let r = self.b().reshape(v, &[]);
                    let v0 = self.ir(r, span)?;
                    let r = self.b().broadcast_in_dim(v0, &[n], &[]);
                    let vn = self.ir(r, span)?;
                    self.combine(m, flat, vn, span)?
                } else {
                    let new = if m == "set" {
                        vs
                    } else {
                        let old = gather(self, flat)?;
                        self.combine(m, old, vs, span)?
                    };
                    let r = self.b().full(-0.0, &flat_ty);
                    let base = self.ir(r, span)?;
                    scatter(self, base, new)?
                };
                let r = self.b().select(mask, new_full, flat);
                self.ir(r, span)?
            }
        };
        if m == "get" {
            return Ok(out);
        }
        let r = self.b().reshape(out, &xt.shape);
        self.ir(r, span)
    }

    /// The new value of an updated element: `set` takes `v`, the others
    /// combine the old value `x` with it.
    fn combine(&mut self, m: &str, x: Value, v: Value, span: &Span) -> Result<Value, Diagnostic> {
        let r = match m {
            "set" => return Ok(v),
            "mul" => self.b().mul(x, v),
            "min" => self.b().min(x, v),
            "max" => self.b().max(x, v),
            _ => unreachable!("internal error: `.at` methods are checked by the parser"),
        };
        self.ir(r, span)
    }
}

fn verb(m: &str) -> &'static str {
    match m {
        "set" => "write",
        "add" => "add",
        "mul" => "multiply by",
        _ => "compare with",
    }
}

fn describe_str(v: &Val) -> String {
    match v {
        Val::Str(s) => format!("\"{s}\""),
        other => other.describe(),
    }
}
