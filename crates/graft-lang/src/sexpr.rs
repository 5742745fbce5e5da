//! The `graft ast` printer: the syntax tree as S-expressions.
//!
//! Every node prints as `(head {attrs} children...)`, the form of seed 000:
//! `(grad {} (var {} loss_fn))`. Transform arguments print in their
//! canonical positional order: a keyword argument that names the transform's
//! parameter at its position (`vmap(f, axis=0)`, `grad(f, wrt=...)`) prints
//! as a bare value, so `vmap(process, axis=0)` and `vmap(process, 0)` print
//! alike; every other keyword argument prints as `(kwarg {name: k} value)`.
//! The full list of forms is in docs/language.md.
//!
//! Output is deterministic; a node whose one-line form would pass
//! [`WIDTH`] columns is broken over indented lines, one child per line.

use crate::ast::*;

/// Preferred line width of the pretty form.
pub const WIDTH: usize = 100;

/// A printed node before layout.
enum Node {
    Atom(String),
    List { head: String, attrs: Vec<(&'static str, Node)>, children: Vec<Node> },
}

fn atom(s: impl Into<String>) -> Node {
    Node::Atom(s.into())
}

fn list(head: impl Into<String>, children: Vec<Node>) -> Node {
    Node::List { head: head.into(), attrs: Vec::new(), children }
}

fn list_a(head: impl Into<String>, attrs: Vec<(&'static str, Node)>, children: Vec<Node>) -> Node {
    Node::List { head: head.into(), attrs, children }
}

fn open(head: &str, attrs: &[(&'static str, Node)], out: &mut String) {
    out.push('(');
    out.push_str(head);
    out.push_str(" {");
    for (i, (k, v)) in attrs.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(k);
        out.push_str(": ");
        flat(v, out);
    }
    out.push('}');
}

fn flat(n: &Node, out: &mut String) {
    match n {
        Node::Atom(s) => out.push_str(s),
        Node::List { head, attrs, children } => {
            open(head, attrs, out);
            for c in children {
                out.push(' ');
                flat(c, out);
            }
            out.push(')');
        }
    }
}

fn pretty(n: &Node, indent: usize, out: &mut String) {
    let mut one = String::new();
    flat(n, &mut one);
    match n {
        Node::List { head, attrs, children } if indent + one.len() > WIDTH && !children.is_empty() => {
            open(head, attrs, out);
            for c in children {
                out.push('\n');
                out.push_str(&" ".repeat(indent + 2));
                pretty(c, indent + 2, out);
            }
            out.push(')');
        }
        _ => out.push_str(&one),
    }
}

fn render(n: &Node) -> String {
    let mut out = String::new();
    pretty(n, 0, &mut out);
    out
}

/// Prints a whole program: its definitions, one after another, separated
/// by blank lines, ending with a newline.
pub fn program_to_sexpr(p: &Program) -> String {
    crate::with_deep_stack(|| program_text(p))
}

fn program_text(p: &Program) -> String {
    let mut out = String::new();
    for (i, d) in p.defs.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&render(&def_node(d)));
        out.push('\n');
    }
    out
}

/// Prints one definition.
pub fn def_to_sexpr(d: &Def) -> String {
    crate::with_deep_stack(|| render(&def_node(d)))
}

/// Prints one expression (no trailing newline).
pub fn expr_to_sexpr(e: &Expr) -> String {
    crate::with_deep_stack(|| render(&expr_node(e)))
}

/// Prints one type (no trailing newline).
pub fn type_to_sexpr(t: &Type) -> String {
    render(&type_node(t))
}

fn def_node(d: &Def) -> Node {
    let mut children: Vec<Node> = d
        .attrs
        .iter()
        .map(|a| list_a("attr", vec![("name", atom(&a.name.name))], a.args.iter().map(arg_node).collect()))
        .collect();
    if !d.tparams.is_empty() {
        children.push(list("tparams", d.tparams.iter().map(|t| atom(&t.name)).collect()));
    }
    children.push(list(
        "params",
        d.params.iter().map(|p| list_a("param", vec![("name", atom(&p.name.name))], vec![type_node(&p.ty)])).collect(),
    ));
    if let Some(r) = &d.ret {
        children.push(list("ret", vec![type_node(r)]));
    }
    children.push(expr_node(&d.body));
    list_a("def", vec![("name", atom(&d.name.name))], children)
}

fn prim_name(s: ScalarType) -> &'static str {
    match s {
        ScalarType::F16 => "float16",
        ScalarType::F32 => "float32",
        ScalarType::F64 => "float64",
        ScalarType::I32 => "int32",
        ScalarType::I64 => "int64",
        ScalarType::U32 => "uint32",
        ScalarType::Bool => "bool",
    }
}

fn prim(name: &str) -> Node {
    list("t-prim", vec![atom(name)])
}

fn type_node(t: &Type) -> Node {
    match &t.kind {
        TypeKind::Scalar(s) => prim(prim_name(*s)),
        TypeKind::Tensor { dims, dtype } => {
            let mut c: Vec<Node> = dims
                .iter()
                .map(|d| match d {
                    Dim::Lit(n, _) => list("dim", vec![atom(n.to_string())]),
                    Dim::Name(id) => list("dim", vec![atom(&id.name)]),
                })
                .collect();
            c.push(prim(prim_name(*dtype)));
            list("t-tensor", c)
        }
        TypeKind::Tuple(ts) => list("t-tuple", ts.iter().map(type_node).collect()),
        TypeKind::Var(id) => list("t-var", vec![atom(&id.name)]),
        TypeKind::Fn => list("t-fn", vec![]),
    }
}

fn pattern_node(p: &Pattern) -> Node {
    match &p.kind {
        PatternKind::Var(id) => list("p-var", vec![atom(&id.name)]),
        PatternKind::Wildcard => list("p-wild", vec![]),
        PatternKind::Tuple(ps) => list("p-tuple", ps.iter().map(pattern_node).collect()),
        PatternKind::Int(n) => list("p-int", vec![atom(n.to_string())]),
        PatternKind::Bool(b) => list("p-bool", vec![atom(b.to_string())]),
    }
}

/// A pattern with an optional type annotation.
fn typed(p: &Pattern, ty: &Option<Type>) -> Node {
    match ty {
        None => pattern_node(p),
        Some(t) => list("typed", vec![pattern_node(p), type_node(t)]),
    }
}

fn lit(ty: &str, v: String) -> Node {
    list_a("lit", vec![("type", prim(ty))], vec![atom(v)])
}

fn float_text(x: f64) -> String {
    // `{:?}` always shows a decimal point or exponent (`1.0`, `1e-5`).
    format!("{x:?}")
}

fn arg_node(a: &Arg) -> Node {
    match &a.name {
        None => expr_node(&a.value),
        Some(n) => list_a("kwarg", vec![("name", atom(&n.name))], vec![expr_node(&a.value)]),
    }
}

/// Parameter names of a transform after its function, by position.
fn transform_params(kind: TransformKind) -> &'static [&'static str] {
    match kind {
        TransformKind::Grad
        | TransformKind::ValueAndGrad
        | TransformKind::Jacfwd
        | TransformKind::Jacrev
        | TransformKind::Jacobian
        | TransformKind::Hessian => &["wrt"],
        TransformKind::Vmap => &["axis"],
        TransformKind::Checkpoint => &[],
        TransformKind::Linearize => &["primals"],
        TransformKind::CustomJvp => &["rule"],
        TransformKind::CustomVjp => &["fwd", "bwd"],
        TransformKind::Jvp => &["primals", "tangents"],
        TransformKind::Vjp => &["primals", "cotangent"],
    }
}

fn index_item_node(it: &IndexItem) -> Node {
    match it {
        IndexItem::Single(e) => expr_node(e),
        IndexItem::Slice { start, stop, step, .. } => {
            let part = |e: &Option<Expr>| e.as_ref().map_or_else(|| atom("_"), expr_node);
            list("slice", vec![part(start), part(stop), part(step)])
        }
    }
}

fn expr_node(e: &Expr) -> Node {
    match &e.kind {
        ExprKind::Int(n) => lit("int32", n.to_string()),
        ExprKind::Float(x) => lit("float32", float_text(*x)),
        ExprKind::Bool(b) => lit("bool", b.to_string()),
        ExprKind::Str(s) => lit("string", format!("{s:?}")),
        ExprKind::Array(items) => list("array", items.iter().map(expr_node).collect()),
        ExprKind::Tuple(items) => list("tuple", items.iter().map(expr_node).collect()),
        ExprKind::Var(id) => list("var", vec![atom(&id.name)]),
        ExprKind::Field { base, index, .. } => {
            list_a("field", vec![("index", atom(index.to_string()))], vec![expr_node(base)])
        }
        ExprKind::Unary { op, operand } => {
            let head = match op {
                UnOp::Neg => "neg",
                UnOp::Not => "not",
            };
            list(head, vec![expr_node(operand)])
        }
        ExprKind::Binary { op, lhs, rhs } => list(op.symbol(), vec![expr_node(lhs), expr_node(rhs)]),
        ExprKind::Call { func, args } => {
            let mut c = vec![expr_node(func)];
            c.extend(args.iter().map(arg_node));
            list("call", c)
        }
        ExprKind::Pipe { value, func } => list("pipe", vec![expr_node(value), expr_node(func)]),
        ExprKind::Transform { kind, func, args } => {
            let names = transform_params(*kind);
            let mut c = vec![expr_node(func)];
            let mut canonical = true;
            for (i, a) in args.iter().enumerate() {
                canonical &= match &a.name {
                    None => true,
                    Some(n) => names.get(i) == Some(&n.name.as_str()),
                };
                c.push(if canonical { expr_node(&a.value) } else { arg_node(a) });
            }
            list(kind.name(), c)
        }
        ExprKind::Lambda { params, body } => {
            let ps = params.iter().map(|p| typed(&p.pat, &p.ty)).collect();
            list("fn", vec![list("params", ps), expr_node(body)])
        }
        ExprKind::If { cond, then, otherwise } => {
            list("if", vec![expr_node(cond), expr_node(then), expr_node(otherwise)])
        }
        ExprKind::Match { scrutinee, arms } => {
            let mut c = vec![expr_node(scrutinee)];
            c.extend(arms.iter().map(|a| list("arm", vec![pattern_node(&a.pat), expr_node(&a.body)])));
            list("match", c)
        }
        ExprKind::Index { base, items } => {
            let mut c = vec![expr_node(base)];
            c.extend(items.iter().map(index_item_node));
            list("index", c)
        }
        ExprKind::At(at) => {
            let mut c = vec![expr_node(&at.base)];
            c.push(list("at", at.items.iter().map(index_item_node).collect()));
            c.extend(at.args.iter().map(arg_node));
            list(format!("at-{}", at.method.name), c)
        }
        ExprKind::Block { stmts, result } => {
            let mut c: Vec<Node> = stmts
                .iter()
                .map(|s| match s {
                    Stmt::Let { pat, ty, value, .. } => list("let", vec![typed(pat, ty), expr_node(value)]),
                })
                .collect();
            c.push(expr_node(result));
            list("block", c)
        }
    }
}
