//! The transforms applied directly to their arguments: `jvp(f, primals,
//! tangents)`, `vjp(f, primals, ct)` and `linearize(f, primals)` (whose
//! tangent map is a function value, `FnVal::Linear`).

use super::*;

/// `jvp(f, primals, tangents)`: (outputs, output tangents). A `None`
/// tangent is zero.
pub fn jvp_call(
    l: &mut Lower<'_>,
    f: &Rc<FnVal>,
    prims: Vec<Val>,
    pspan: &Span,
    tans: Vec<Option<Val>>,
    tspan: &Span,
    span: &Span,
) -> Result<(Val, Val), Diagnostic> {
    let args = prims.into_iter().map(|val| ArgVal { name: None, val, span: pspan.clone() }).collect();
    let pr = prepare(l, f, args, span)?;
    let st = lower_fn(l, f, &pr.trees, &pr.spans, span)?;
    let desc = format!("jvp({})", f.describe());
    let mut ins = pr.leaves.clone();
    for &c in &st.captures {
        ins.push(l.import(c));
    }
    // Tangents of the float leaves of the real params, in order; `None` for
    // captures (constants of `f`) and for params given no tangent, so they
    // stay symbolic zeros and emit no tangent equations.
    let mut has_tangent = Vec::new();
    for (k, t) in pr.trees.iter().enumerate() {
        let leaves = t.leaves();
        match &tans[k] {
            None => has_tangent.extend(leaves.iter().map(|_| false)),
            Some(tv) => {
                let (tl, tt) = flatten_as(l, tv, t, tspan)?;
                if tt.len() != leaves.len() {
                    return Err(l.err(Stage::Type, tspan, format!("tangent {k} must have the structure {t}")));
                }
                for (v, ty) in tl.into_iter().zip(&leaves) {
                    has_tangent.push(ty.dtype.is_float());
                    if ty.dtype.is_float() {
                        ins.push(v);
                    }
                }
            }
        }
    }
    has_tangent.extend(st.captures.iter().map(|_| false));
    let wrt = Wrt::Positions((0..has_tangent.len()).filter(|&i| has_tangent[i]).collect());
    let g = apply_core(l, &Transform::Jvp { wrt }, &st.func, &desc, span)?;
    l.set_span(span);
    let outs = l.inline(&g, &ins, span)?;
    let n = st.out.n_leaves();
    Ok((rebuild(l, &st.out, &outs[..n]), rebuild(l, &st.out, &outs[n..])))
}

/// `linearize(f, primals)`: `(f(primals), f_jvp)`, where `f_jvp` maps
/// tangents shaped like the primals to output tangents, reusing the
/// forward values saved here (the forward pass runs once however often
/// `f_jvp` is called).
pub fn linearize_call(
    l: &mut Lower<'_>,
    f: &Rc<FnVal>,
    prims: Vec<Val>,
    pspan: &Span,
    span: &Span,
) -> Result<Val, Diagnostic> {
    let args = prims.into_iter().map(|val| ArgVal { name: None, val, span: pspan.clone() }).collect();
    let pr = prepare(l, f, args, span)?;
    let st = lower_fn(l, f, &pr.trees, &pr.spans, span)?;
    let desc = format!("linearize({})", f.describe());
    // Tangents for the float leaves of the real arguments; captures are constants.
    let types = st.func.param_types();
    let pos: Vec<usize> = (0..pr.leaves.len()).filter(|&i| types[i].dtype.is_float()).collect();
    let staged =
        Transform::Linearize { wrt: Wrt::Positions(pos) }.stage(&st.func).map_err(|e| tf_err(l, e, &desc, span))?;
    l.set_span(span);
    let fwd = inline_with(l, &staged.forward, &pr.leaves, &st.captures, span)?;
    let n = staged.n_outputs;
    let out = rebuild(l, &st.out, &fwd[..n]);
    let residuals: Vec<Tv> = fwd[n..].iter().map(|&v| l.tv(v)).collect();
    let lf = LinearFn {
        rest: staged.rest,
        residuals,
        primals: pr.trees,
        out: st.out,
        name: format!("{}_jvp", f.describe()),
    };
    Ok(Val::tuple(vec![out, Val::F(Rc::new(FnVal::Linear(Rc::new(lf))))]))
}

/// Calls the tangent map `linearize` returned: one tangent per primal,
/// shaped like it (integer leaves take no tangent and are ignored).
pub fn call_linear(l: &mut Lower<'_>, lf: &LinearFn, args: Vec<ArgVal>, span: &Span) -> Result<Val, Diagnostic> {
    if let Some(a) = args.iter().find(|a| a.name.is_some()) {
        return Err(l.err(Stage::Type, &a.span, format!("`{}` takes positional arguments only", lf.name)));
    }
    if args.len() != lf.primals.len() {
        return Err(l.err(
            Stage::Type,
            span,
            format!(
                "`{}` takes {} tangents (one per primal), but {} were given",
                lf.name,
                lf.primals.len(),
                args.len()
            ),
        ));
    }
    let mut ins: Vec<Value> = lf.residuals.iter().map(|&r| l.import(r)).collect();
    for (a, t) in args.iter().zip(&lf.primals) {
        let (vals, types) = flatten_as(l, &a.val, t, &a.span)?;
        ins.extend(vals.into_iter().zip(&types).filter(|(_, ty)| ty.dtype.is_float()).map(|(v, _)| v));
    }
    l.set_span(span);
    let outs = l.inline(&lf.rest, &ins, span)?;
    Ok(rebuild(l, &lf.out, &outs))
}

/// `v` flattened with literals given the dtypes of `like`'s leaves and
/// shapes checked against them.
fn flatten_as(
    l: &mut Lower<'_>,
    v: &Val,
    like: &Tree,
    span: &Span,
) -> Result<(Vec<Value>, Vec<graft_core::TensorType>), Diagnostic> {
    match (v, like) {
        (Val::Tuple(items), Tree::Tuple(ts)) if items.len() == ts.len() => {
            let mut a = Vec::new();
            let mut b = Vec::new();
            for (i, t) in items.iter().zip(ts) {
                let (x, y) = flatten_as(l, i, t, span)?;
                a.extend(x);
                b.extend(y);
            }
            Ok((a, b))
        }
        (v, Tree::Leaf(ty)) if !matches!(v, Val::Tuple(_)) => {
            let x = l.tensor_as(v, ty.dtype, span)?;
            let x = if l.ty(x).rank() == 0 && ty.rank() > 0 {
                let r = l.b().broadcast_in_dim(x, &ty.shape, &[]);
                l.ir(r, span)?
            } else {
                x
            };
            if l.ty(x) != *ty {
                return Err(l.err(Stage::Type, span, format!("expected {ty}, found {}", l.ty(x))));
            }
            Ok((vec![x], vec![ty.clone()]))
        }
        (v, t) => Err(l.err(Stage::Type, span, format!("expected a value shaped like {t}, found {}", v.describe()))),
    }
}

/// `vjp(f, primals, ct)`: (outputs, (gradient per primal...)).
pub fn vjp_call(
    l: &mut Lower<'_>,
    f: &Rc<FnVal>,
    prims: Vec<Val>,
    pspan: &Span,
    ct: Val,
    cspan: &Span,
    span: &Span,
) -> Result<Val, Diagnostic> {
    let args = prims.into_iter().map(|val| ArgVal { name: None, val, span: pspan.clone() }).collect();
    let pr = prepare(l, f, args, span)?;
    let st = lower_fn(l, f, &pr.trees, &pr.spans, span)?;
    let desc = format!("vjp({})", f.describe());
    let all: Vec<graft_core::TensorType> = pr.trees.iter().flat_map(Tree::leaves).collect();
    let pos: Vec<usize> = (0..all.len()).filter(|&i| all[i].dtype.is_float()).collect();
    let g = apply_core(l, &Transform::Vjp { wrt: Wrt::Positions(pos.clone()) }, &st.func, &desc, span)?;
    let mut ins = pr.leaves.clone();
    for &c in &st.captures {
        ins.push(l.import(c));
    }
    let (cl, ct_types) = flatten_as(l, &ct, &st.out, cspan)?;
    for (v, ty) in cl.into_iter().zip(&ct_types) {
        if ty.dtype.is_float() {
            ins.push(v);
        }
    }
    l.set_span(span);
    let outs = l.inline(&g, &ins, span)?;
    let n = st.out.n_leaves();
    let out = rebuild(l, &st.out, &outs[..n]);
    let mut grads_by_leaf: Vec<Option<Value>> = vec![None; all.len()];
    for (k, &p) in pos.iter().enumerate() {
        grads_by_leaf[p] = Some(outs[n + k]);
    }
    let mut leaf_vals = Vec::new();
    for (i, g) in grads_by_leaf.into_iter().enumerate() {
        leaf_vals.push(match g {
            Some(v) => v,
            None => {
                let r = l.b().zeros(&all[i]);
                l.ir(r, span)?
            }
        });
    }
    let mut grads = Vec::new();
    let mut k = 0;
    for t in &pr.trees {
        let m = t.n_leaves();
        grads.push(rebuild(l, t, &leaf_vals[k..k + m]));
        k += m;
    }
    Ok(Val::tuple(vec![out, Val::tuple(grads)]))
}
