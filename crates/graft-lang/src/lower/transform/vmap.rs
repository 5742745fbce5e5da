//! `vmap(f, axis=k)` / `vmap(f, in_axes=..., out_axes=...)` at a call:
//! per-leaf batch axes from the (nested) axis specs, located errors for
//! out-of-range axes and disagreeing batch sizes, then the core vmap.

use super::*;

/// Per-leaf batch axes of one argument from an `in_axes` entry.
fn axes_for(l: &Lower<'_>, spec: &Val, tree: &Tree, span: &Span, out: &mut Vec<Option<i64>>) -> Result<(), Diagnostic> {
    match (spec, tree) {
        (Val::None, t) => out.extend(std::iter::repeat_n(None, t.n_leaves())),
        (Val::Tuple(items), Tree::Tuple(ts)) if items.len() == ts.len() => {
            for (s, t) in items.iter().zip(ts) {
                axes_for(l, s, t, span, out)?;
            }
        }
        (v, t) => match crate::lower::expr::static_int(v) {
            Some(k) => out.extend(std::iter::repeat_n(Some(k), t.n_leaves())),
            None => {
                return Err(l.err(
                    Stage::Transform,
                    span,
                    format!(
                        "an axis entry must be an integer or `none` (nested like the value {t}), found {}",
                        v.describe()
                    ),
                ))
            }
        },
    }
    Ok(())
}

pub(super) fn vmap_apply(
    l: &mut Lower<'_>,
    tf: &TransformFn,
    args: Vec<ArgVal>,
    span: &Span,
    desc: &str,
) -> Result<Val, Diagnostic> {
    let f = &tf.inner;
    let pr = prepare(l, f, args, span)?;
    let types: Vec<Vec<graft_core::TensorType>> = pr.trees.iter().map(Tree::leaves).collect();
    // Per-leaf axes (as written, possibly negative).
    let mut axes: Vec<Option<i64>> = Vec::new();
    match &tf.in_axes {
        Some(Val::Tuple(items)) => {
            if items.len() != pr.trees.len() {
                return Err(l.err(
                    Stage::Transform,
                    &tf.span,
                    format!(
                        "in_axes has {} entries but the function is called with {} arguments",
                        items.len(),
                        pr.trees.len()
                    ),
                ));
            }
            for (s, t) in items.iter().zip(&pr.trees) {
                axes_for(l, s, t, &tf.span, &mut axes)?;
            }
        }
        Some(v) => {
            for t in &pr.trees {
                axes_for(l, v, t, &tf.span, &mut axes)?;
            }
        }
        None => {
            let k = tf.axis.unwrap_or(0);
            // Scalars are shared; a tensor passed for a parameter declared
            // scalar is batched too (the only reading under which it fits).
            for ts in &types {
                for t in ts {
                    axes.push(if t.rank() == 0 { None } else { Some(k) });
                }
            }
        }
    }
    // Resolve against the batched ranks, find the batch size, strip the axis.
    let mut per: Vec<graft_core::TensorType> = Vec::new();
    let mut in_axes: Vec<Option<usize>> = Vec::new();
    let mut size: Option<(usize, usize)> = None;
    let arg_of: Vec<usize> =
        pr.trees.iter().enumerate().flat_map(|(i, t)| std::iter::repeat_n(i, t.n_leaves())).collect();
    let flat: Vec<graft_core::TensorType> = types.concat();
    for (j, (t, a)) in flat.iter().zip(&axes).enumerate() {
        match a {
            None => {
                per.push(t.clone());
                in_axes.push(None);
            }
            Some(a) => {
                let r = t.rank() as i64;
                let ax = if *a < 0 { a + r } else { *a };
                if ax < 0 || ax >= r {
                    return Err(l
                        .err(
                            Stage::Transform,
                            &pr.spans[arg_of[j]],
                            format!("{desc}: cannot batch along axis {a}: this argument is {t} (rank {r})"),
                        )
                        .with_secondary(tf.span.clone(), "batch axis chosen here"));
                }
                let ax = ax as usize;
                let n = t.shape[ax];
                match size {
                    None => size = Some((n, j)),
                    Some((n0, j0)) if n0 != n => {
                        return Err(l
                            .err(
                                Stage::Transform,
                                &pr.spans[arg_of[j]],
                                format!("{desc}: the batched arguments disagree on the batch size: {n0} and {n}"),
                            )
                            .with_label(format!("this is {t}, batch size {n}"))
                            .with_secondary(pr.spans[arg_of[j0]].clone(), format!("this has batch size {n0}")));
                    }
                    Some(_) => {}
                }
                let mut s = t.shape.clone();
                s.remove(ax);
                per.push(graft_core::TensorType::new(t.dtype, s));
                in_axes.push(Some(ax));
            }
        }
    }
    if size.is_none() {
        return Err(l
            .err(Stage::Transform, span, format!("{desc}: no argument has a batch axis"))
            .with_note("help: scalars are shared by every example; pass at least one tensor to batch over"));
    }
    let mut it = per.into_iter();
    let per_trees: Vec<Tree> = pr.trees.iter().map(|t| retype(t, &mut it)).collect();
    let named = tf.axis_name.clone().zip(size.map(|s| s.0));
    if let Some(n) = &named {
        l.axes.push(n.clone());
    }
    let st = lower_fn(l, f, &per_trees, &pr.spans, span);
    if named.is_some() {
        l.axes.pop();
    }
    let st = st?;
    let n_out = st.out.n_leaves();
    let mut out_axes: Vec<Option<isize>> = Vec::new();
    match &tf.out_axes {
        Some(v) => {
            let mut o = Vec::new();
            axes_for(l, v, &st.out, &tf.span, &mut o)?;
            out_axes = o.into_iter().map(|a| a.map(|a| a as isize)).collect();
        }
        None => out_axes.extend(std::iter::repeat_n(Some(tf.axis.unwrap_or(0) as isize), n_out)),
    }
    // The axes are resolved above (for located messages); the core
    // resolves them again against the batched types, which agree.
    let mut ia: Vec<Option<isize>> = in_axes.iter().map(|a| a.map(|a| a as isize)).collect();
    ia.extend(std::iter::repeat_n(None, st.captures.len()));
    let mut outer = flat;
    outer.extend(st.func.param_types().drain(st.n_real..));
    let t = Transform::Vmap {
        in_axes: VmapAxes::Each(ia),
        out_axes: VmapAxes::Each(out_axes),
        axis_name: tf.axis_name.as_deref().map(String::from),
    };
    let g = t.apply(&st.func, &outer).map_err(|e| tf_err(l, e, desc, span))?;
    l.set_span(span);
    let outs = inline_with(l, &g, &pr.leaves, &st.captures, span)?;
    Ok(rebuild(l, &st.out, &outs))
}

fn retype(t: &Tree, it: &mut impl Iterator<Item = graft_core::TensorType>) -> Tree {
    match t {
        Tree::Leaf(_) => Tree::Leaf(it.next().expect("internal error: one per-example type per leaf")),
        Tree::Tuple(ts) => Tree::Tuple(ts.iter().map(|t| retype(t, it)).collect()),
    }
}
