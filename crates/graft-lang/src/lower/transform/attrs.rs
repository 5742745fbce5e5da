//! Defs with `@grad(p)` / `@jvp(p)` attributes: calling one applies the
//! transform to the def's body.

use super::*;

/// A def with `@grad(p)` or `@jvp(p)` attributes, called with (coerced) arguments.
pub fn call_attr_def(
    l: &mut Lower<'_>,
    idx: usize,
    attrs: &[&Attr],
    coerced: Vec<Val>,
    args: &[ArgVal],
    span: &Span,
) -> Result<Val, Diagnostic> {
    let def = &l.p.program.defs[idx];
    let name: Rc<str> = def.name.name.as_str().into();
    let body = Rc::new(FnVal::DefBody(idx, name.clone()));
    let kinds: Vec<Option<AttrKind>> = attrs.iter().map(|a| a.kind()).collect();
    if kinds.iter().any(|k| *k != kinds[0]) {
        return Err(l.err(Stage::Transform, &attrs[0].span, "a def cannot have both `@grad` and `@jvp` attributes"));
    }
    let kind = match kinds.first() {
        Some(Some(k)) if k.is_derivative() => *k,
        _ => return Err(l.err(Stage::Transform, span, "internal error: call_attr_def needs @grad or @jvp attributes")),
    };
    let mut names = Vec::new();
    for a in attrs {
        match a.args.as_slice() {
            [arg] if arg.name.is_none() => match &arg.value.kind {
                ExprKind::Var(id) => names.push(id.clone()),
                _ => {
                    return Err(l.err(
                        Stage::Transform,
                        &arg.span,
                        format!("`@{}` takes a parameter name", kind.name()),
                    ))
                }
            },
            _ => {
                return Err(l
                    .err(Stage::Transform, &a.span, format!("`@{}` takes exactly one parameter name", kind.name()))
                    .with_note(format!("help: write `@{}(w)`; repeat the attribute for more parameters", kind.name())))
            }
        }
    }
    let pnames: Vec<String> = def.params.iter().map(|p| p.name.name.clone()).collect();
    for n in &names {
        if !pnames.contains(&n.name) {
            return Err(l
                .err(Stage::Resolve, &n.span, format!("`{name}` has no parameter named `{}`", n.name))
                .with_note(format!(
                    "note: its parameters are {}",
                    pnames.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
                )));
        }
    }
    let n_params = def.params.len();
    if kind == AttrKind::Grad {
        let single = names.len() == 1;
        let tf = TransformFn {
            kind: TransformKind::Grad,
            inner: body,
            wrt: WrtSpec::Names { names, single },
            axis: None,
            in_axes: None,
            out_axes: None,
            policy: Default::default(),
            axis_name: None,
            span: attrs[0].span.clone(),
        };
        let av =
            coerced.into_iter().zip(args).map(|(val, a)| ArgVal { name: None, val, span: a.span.clone() }).collect();
        return apply(l, &tf, av, span);
    }
    // @jvp: the remaining arguments are the tangents, in attribute order.
    let mut tans: Vec<Option<Val>> = vec![None; n_params];
    for (k, n) in names.iter().enumerate() {
        let i = pnames.iter().position(|p| *p == n.name).expect("internal error: checked above");
        tans[i] = Some(args[n_params + k].val.clone());
    }
    let tspan = args.get(n_params).map(|a| a.span.clone()).unwrap_or(span.clone());
    let pspan = args.first().map(|a| a.span.clone()).unwrap_or(span.clone());
    let desc = format!("jvp({name})");
    let pos = l.p.pos(span);
    jvp_call(l, &body, coerced, &pspan, tans, &tspan, span).map(|(_, t)| t).map_err(|d| chain(d, &desc, &pos))
}
