//! Lowering of expressions: operators, literals, names, blocks, `if`,
//! `match`, indexing, and calls (dispatching to defs, lambdas, builtins and
//! transforms).
//!
//! A scalar `if` on a run-time condition becomes a `cond` (only the taken
//! branch runs) when both branches have the same types; otherwise (and for
//! a tensor condition, which selects elementwise) both branches are
//! evaluated and `select` picks. `match` on a run-time scrutinee evaluates
//! every arm and selects. A condition known while compiling picks its arm
//! statically.

use super::value::{ArrKind, Const, FnVal, Val};
use super::{ArgVal, Env, Lower};
use crate::ast::{BinOp, Expr, ExprKind, IndexItem, Pattern, PatternKind, Span, Stmt, UnOp};
use crate::diag::{Diagnostic, Stage};
use graft_core::composite::{broadcast, linalg, shape as cshape};
use graft_core::ops::binary::{Binary, Compare};
use graft_core::{DType, Value};
use std::rc::Rc;

/// The result of testing a pattern: known now, or a run-time bool scalar.
enum Test {
    Static(bool),
    Dyn(Value),
}

impl Lower<'_> {
    pub fn expr(&mut self, e: &Expr, env: &Env) -> Result<Val, Diagnostic> {
        self.set_span(&e.span);
        let span = &e.span;
        match &e.kind {
            ExprKind::Int(i) => Ok(Val::Const(Const::Int(*i))),
            ExprKind::Float(f) => Ok(Val::Const(Const::Float(*f))),
            ExprKind::Bool(b) => Ok(Val::Const(Const::Bool(*b))),
            ExprKind::Str(s) => Ok(Val::Str(s.as_str().into())),
            ExprKind::Var(id) => self.lookup(&id.name, span, env),
            ExprKind::Array(items) => self.array(items, span, env),
            ExprKind::Tuple(items) => {
                let vals = items.iter().map(|i| self.expr(i, env)).collect::<Result<Vec<_>, _>>()?;
                Ok(Val::tuple(vals))
            }
            ExprKind::Field { base, index, index_span } => {
                let b = self.expr(base, env)?;
                match b {
                    Val::Tuple(items) => items.get(*index).cloned().ok_or_else(|| {
                        self.err(
                            Stage::Type,
                            index_span,
                            format!("tuple index {index} is out of range: the tuple has {} elements", items.len()),
                        )
                    }),
                    other => Err(self.err(
                        Stage::Type,
                        &base.span,
                        format!("`.{index}` needs a tuple, found {}", other.describe()),
                    )),
                }
            }
            ExprKind::Unary { op, operand } => {
                let v = self.expr(operand, env)?;
                self.set_span(span);
                self.unary(*op, v, span)
            }
            ExprKind::Binary { op, lhs, rhs } => {
                let l = self.expr(lhs, env)?;
                let r = self.expr(rhs, env)?;
                self.set_span(span);
                self.binary(*op, l, r, &lhs.span, &rhs.span, span)
            }
            ExprKind::Call { func, args } => {
                if let Some(kind) = self.soft_transform(func, env) {
                    return match args.split_first() {
                        Some((first, rest)) if first.name.is_none() => {
                            super::transform::make(self, kind, &first.value, rest, env, span)
                        }
                        _ => Err(self
                            .err(Stage::Transform, span, format!("`{}` must be applied to a function", kind.name()))
                            .with_note(format!("help: pass the function first: `{}(f, ...)`", kind.name()))),
                    };
                }
                let f = self.expr(func, env)?;
                let args = self.args(args, env)?;
                self.set_span(span);
                self.call_val(f, args, &func.span, span)
            }
            ExprKind::Pipe { value, func } => {
                let v = self.expr(value, env)?;
                let f = self.expr(func, env)?;
                self.set_span(span);
                self.call_val(f, vec![ArgVal { name: None, val: v, span: value.span.clone() }], &func.span, span)
            }
            ExprKind::Transform { kind, func, args } => super::transform::make(self, *kind, func, args, env, span),
            ExprKind::Lambda { params, body } => Ok(Val::F(Rc::new(FnVal::Lambda {
                params: Rc::new(params.clone()),
                body: Rc::new((**body).clone()),
                env: env.clone(),
                span: span.clone(),
            }))),
            ExprKind::If { cond, then, otherwise } => {
                let c = self.expr(cond, env)?;
                match c {
                    Val::Const(Const::Bool(b)) => {
                        let (taken, other) = if b { (then, otherwise) } else { (otherwise, then) };
                        match self.expr(taken, env) {
                            // `check` decides this at placeholder sizes; real sizes may take
                            // the other branch (docs/language.md, "Errors").
                            Err(e) if self.placeholder_sizes && !literal_only(cond) => match self.expr(other, env) {
                                Ok(v) => {
                                    self.branch_fallbacks += 1;
                                    Ok(v)
                                }
                                Err(_) => Err(e),
                            },
                            r => r,
                        }
                    }
                    Val::T(_) => {
                        let c = self.tensor(&c, &cond.span)?;
                        if self.ty(c).dtype != DType::Bool {
                            let t = self.ty(c);
                            return Err(self.err(
                                Stage::Type,
                                &cond.span,
                                format!("the condition of `if` must be bool, found {t}"),
                            ));
                        }
                        if self.ty(c).rank() == 0 {
                            if let Some(v) = super::control::if_cond(self, c, then, otherwise, env, span)? {
                                return Ok(v);
                            }
                        }
                        self.both_branches += 1;
                        let a = self.expr(then, env);
                        let b = self.expr(otherwise, env);
                        self.both_branches -= 1;
                        let (a, b) = (a?, b?);
                        self.set_span(span);
                        self.select_vals(c, &a, &b, span)
                    }
                    other => Err(self.err(
                        Stage::Type,
                        &cond.span,
                        format!("the condition of `if` must be bool, found {}", other.describe()),
                    )),
                }
            }
            ExprKind::Match { scrutinee, arms } => {
                let v = self.expr(scrutinee, env)?;
                let mut dyn_arms: Vec<(Value, Val, Span)> = Vec::new();
                let mut default: Option<Val> = None;
                // From the first run-time test on, every arm is computed and selected.
                let before = self.both_branches;
                let arms_done = (|| {
                    for arm in arms {
                        let mut benv = env.clone();
                        match self.test(&arm.pat, &v, &mut benv, &scrutinee.span)? {
                            Test::Static(false) => continue,
                            Test::Static(true) => {
                                default = Some(self.expr(&arm.body, &benv)?);
                                break;
                            }
                            Test::Dyn(c) => {
                                self.both_branches = before + 1;
                                let r = self.expr(&arm.body, &benv)?;
                                dyn_arms.push((c, r, arm.span.clone()));
                            }
                        }
                    }
                    Ok::<(), Diagnostic>(())
                })();
                self.both_branches = before;
                arms_done?;
                let Some(mut acc) = default else {
                    return Err(self
                        .err(Stage::Type, span, "this `match` does not cover every value")
                        .with_note("help: add a final `_ => ...` arm"));
                };
                self.set_span(span);
                for (c, r, s) in dyn_arms.into_iter().rev() {
                    acc = self.select_vals(c, &r, &acc, &s)?;
                }
                Ok(acc)
            }
            ExprKind::Index { base, items } => {
                let b = self.expr(base, env)?;
                self.index(b, items, &base.span, span, env)
            }
            ExprKind::At(at) => self.at_expr(&at.base, &at.items, &at.method, &at.args, span, env),
            ExprKind::Block { stmts, result } => {
                let mut env = env.clone();
                for Stmt::Let { pat, ty, value, span: lspan } in stmts {
                    let mut v = self.expr(value, &env)?;
                    if let Some(t) = ty {
                        let mut dims = super::Dims::new();
                        for_dim_names(t, &mut |n| {
                            if let Some(Val::Dim(_, s)) = env.get(n) {
                                dims.insert(n.to_string(), (*s, "the enclosing function's arguments".into()));
                            }
                        });
                        v = self.coerce(&v, t, &mut dims, &value.span, "the value of this `let`")?;
                    }
                    env = self.bind_pattern(pat, v, env, lspan)?;
                }
                self.expr(result, &env)
            }
        }
    }

    /// `jacobian(...)` / `linearize(...)` where the name is the transform
    /// (not a local or a def of that name; see `ast::soft_transform`).
    fn soft_transform(&self, func: &crate::ast::Expr, env: &Env) -> Option<crate::ast::TransformKind> {
        match &func.kind {
            ExprKind::Var(id) if env.get(&id.name).is_none() && !self.p.defs.contains_key(id.name.as_str()) => {
                crate::ast::soft_transform(&id.name)
            }
            _ => None,
        }
    }

    fn lookup(&mut self, name: &str, span: &Span, env: &Env) -> Result<Val, Diagnostic> {
        if let Some(v) = env.get(name) {
            return Ok(v.clone());
        }
        if let Some(&i) = self.p.defs.get(name) {
            return Ok(Val::F(Rc::new(FnVal::Def(i, name.into()))));
        }
        if super::stdlib::is_builtin(name) {
            return Ok(Val::F(Rc::new(FnVal::Builtin(name.into()))));
        }
        if name == "none" {
            return Ok(Val::None);
        }
        if let Some(v) = super::stdlib::constant(name) {
            return Ok(Val::Const(Const::Float(v)));
        }
        if let Some(kind) = crate::ast::soft_transform(name) {
            return Err(self
                .err(Stage::Transform, span, format!("`{name}` must be applied to a function"))
                .with_note(format!("help: write `{}`", super::transform::usage(kind))));
        }
        if graft_core::DType::parse(name).is_some() {
            return Ok(Val::Str(name.into()));
        }
        Err(self.err(Stage::Resolve, span, format!("unknown name `{name}`")).with_label("not defined"))
    }

    pub fn args(&mut self, args: &[crate::ast::Arg], env: &Env) -> Result<Vec<ArgVal>, Diagnostic> {
        args.iter()
            .map(|a| Ok(ArgVal { name: a.name.clone(), val: self.expr(&a.value, env)?, span: a.span.clone() }))
            .collect()
    }

    /// Calls a value that must be a function.
    pub fn call_val(&mut self, f: Val, args: Vec<ArgVal>, fspan: &Span, span: &Span) -> Result<Val, Diagnostic> {
        match f {
            Val::F(f) => self.call_fn(&f, args, span),
            other => Err(self.err(Stage::Type, fspan, format!("{} is not a function", other.describe()))),
        }
    }

    /// Calls a function value.
    pub fn call_fn(&mut self, f: &FnVal, args: Vec<ArgVal>, span: &Span) -> Result<Val, Diagnostic> {
        let r = self.enter(span).and_then(|()| self.call_fn_inner(f, args, span));
        self.leave();
        r
    }

    fn call_fn_inner(&mut self, f: &FnVal, args: Vec<ArgVal>, span: &Span) -> Result<Val, Diagnostic> {
        match f {
            FnVal::Def(i, _) => self.call_def(*i, true, args, span),
            FnVal::DefBody(i, _) => self.call_def(*i, false, args, span),
            FnVal::Builtin(n) => super::stdlib::call(self, n, args, span),
            FnVal::Linear(lf) => super::transform::call_linear(self, lf, args, span),
            FnVal::Lambda { params, body, env, .. } => {
                if let Some(a) = args.iter().find(|a| a.name.is_some()) {
                    return Err(self.err(Stage::Type, &a.span, "a lambda takes positional arguments only"));
                }
                if args.len() != params.len() {
                    return Err(self.err(
                        Stage::Type,
                        span,
                        format!("this `fn` takes {} arguments, but {} were given", params.len(), args.len()),
                    ));
                }
                let mut env = env.clone();
                let mut res = Ok(());
                for (p, a) in params.iter().zip(args) {
                    let mut v = a.val;
                    if let Some(t) = &p.ty {
                        match self.coerce(&v, t, &mut super::Dims::new(), &a.span, "this argument") {
                            Ok(c) => v = c,
                            Err(e) => {
                                res = Err(e);
                                break;
                            }
                        }
                    }
                    match self.bind_pattern(&p.pat, v, env.clone(), &a.span) {
                        Ok(e) => env = e,
                        Err(e) => {
                            res = Err(e);
                            break;
                        }
                    }
                }
                match res {
                    Ok(()) => self.expr(body, &env),
                    Err(e) => Err(e),
                }
            }
            FnVal::Transform(t) => super::transform::apply(self, t, args, span),
        }
    }

    /// Binds a pattern (let, lambda parameter) to a value.
    /// Names the tensors of `v` after the name it is bound to (`x`, or
    /// `x.0`, `x.1` for a tuple's leaves) for `graft ir`, unless they
    /// already have a name (a value keeps the first name it was bound to).
    pub fn name_value(&mut self, v: &Val, name: &str) {
        match v {
            Val::T(tv) if tv.level == self.level() => self.b().name_if_unnamed(tv.v, name),
            Val::Tuple(items) => {
                for (i, it) in items.iter().enumerate() {
                    self.name_value(it, &format!("{name}.{i}"));
                }
            }
            _ => {}
        }
    }

    pub fn bind_pattern(&mut self, pat: &Pattern, v: Val, env: Env, span: &Span) -> Result<Env, Diagnostic> {
        match &pat.kind {
            PatternKind::Var(id) => {
                self.name_value(&v, &id.name);
                Ok(env.bind(&id.name, v))
            }
            PatternKind::Wildcard => Ok(env),
            PatternKind::Tuple(ps) => {
                let Val::Tuple(items) = &v else {
                    return Err(self
                        .err(Stage::Type, &pat.span, format!("cannot unpack {} into {} names", v.describe(), ps.len()))
                        .with_secondary(span.clone(), "the value comes from here"));
                };
                if items.len() != ps.len() {
                    return Err(self
                        .err(
                            Stage::Type,
                            &pat.span,
                            format!("cannot unpack a tuple of {} into {} names", items.len(), ps.len()),
                        )
                        .with_secondary(span.clone(), "the value comes from here"));
                }
                let mut env = env;
                for (p, it) in ps.iter().zip(items.iter()) {
                    env = self.bind_pattern(p, it.clone(), env, span)?;
                }
                Ok(env)
            }
            PatternKind::Int(_) | PatternKind::Bool(_) => Err(self
                .err(Stage::Type, &pat.span, "a literal pattern can only be used in a `match` arm")
                .with_note("help: bind a name instead")),
        }
    }

    fn test(&mut self, pat: &Pattern, v: &Val, env: &mut Env, span: &Span) -> Result<Test, Diagnostic> {
        match &pat.kind {
            PatternKind::Var(id) => {
                *env = env.bind(&id.name, v.clone());
                Ok(Test::Static(true))
            }
            PatternKind::Wildcard => Ok(Test::Static(true)),
            PatternKind::Tuple(ps) => {
                let Val::Tuple(items) = v else {
                    return Err(self.err(
                        Stage::Type,
                        &pat.span,
                        format!("a tuple pattern cannot match {}", v.describe()),
                    ));
                };
                if items.len() != ps.len() {
                    return Err(self.err(
                        Stage::Type,
                        &pat.span,
                        format!("this pattern has {} elements but the value is a tuple of {}", ps.len(), items.len()),
                    ));
                }
                let mut acc = Test::Static(true);
                for (p, it) in ps.iter().zip(items.iter()) {
                    let t = self.test(p, it, env, span)?;
                    acc = match (acc, t) {
                        (Test::Static(false), _) | (_, Test::Static(false)) => Test::Static(false),
                        (Test::Static(true), t) | (t, Test::Static(true)) => t,
                        (Test::Dyn(a), Test::Dyn(b)) => Test::Dyn(self.ir_and(a, b, span)?),
                    };
                }
                Ok(acc)
            }
            PatternKind::Int(k) => match v {
                Val::Const(Const::Int(i)) => Ok(Test::Static(i == k)),
                Val::Dim(_, n) => Ok(Test::Static(*n as i64 == *k)),
                Val::T(_) => {
                    let x = self.tensor(v, span)?;
                    let ty = self.ty(x);
                    if !ty.dtype.is_int() || ty.rank() != 0 {
                        return Err(self.err(
                            Stage::Type,
                            &pat.span,
                            format!("an integer pattern needs an integer scalar, found {ty}"),
                        ));
                    }
                    let k = self.const_tensor(&[], &[*k as f64], ty.dtype, span)?;
                    let r = self.b().eq(x, k);
                    Ok(Test::Dyn(self.ir(r, span)?))
                }
                other => Err(self.err(
                    Stage::Type,
                    &pat.span,
                    format!("an integer pattern cannot match {}", other.describe()),
                )),
            },
            PatternKind::Bool(k) => match v {
                Val::Const(Const::Bool(b)) => Ok(Test::Static(b == k)),
                Val::T(_) => {
                    let x = self.tensor_as(v, DType::Bool, span)?;
                    if *k {
                        Ok(Test::Dyn(x))
                    } else {
                        let r = self.b().not(x);
                        Ok(Test::Dyn(self.ir(r, span)?))
                    }
                }
                other => {
                    Err(self.err(Stage::Type, &pat.span, format!("a bool pattern cannot match {}", other.describe())))
                }
            },
        }
    }

    fn ir_and(&mut self, a: Value, b: Value, span: &Span) -> Result<Value, Diagnostic> {
        let r = self.b().and(a, b);
        self.ir(r, span)
    }

    /// `pred ? a : b` leaf by leaf (`pred` broadcasts against each leaf).
    pub fn select_vals(&mut self, pred: Value, a: &Val, b: &Val, span: &Span) -> Result<Val, Diagnostic> {
        match (a, b) {
            (Val::Tuple(xs), Val::Tuple(ys)) if xs.len() == ys.len() => {
                let mut out = Vec::new();
                for (x, y) in xs.iter().zip(ys.iter()) {
                    out.push(self.select_vals(pred, x, y, span)?);
                }
                Ok(Val::tuple(out))
            }
            (Val::Tuple(_), _) | (_, Val::Tuple(_)) => Err(self.err(
                Stage::Type,
                span,
                format!("the branches give different kinds of values: {} and {}", a.describe(), b.describe()),
            )),
            _ => {
                let (x, y) = self.unify(a, b, span)?;
                let (tx, ty) = (self.ty(x), self.ty(y));
                if tx.dtype != ty.dtype {
                    return Err(self.err(
                        Stage::Type,
                        span,
                        format!("the branches have different dtypes: {tx} and {ty}"),
                    ));
                }
                let r = broadcast::select(self.b(), pred, x, y);
                let v = self.ir(r, span)?;
                Ok(Val::T(self.tv(v)))
            }
        }
    }

    /// Two operands as tensors of one dtype: literals take the dtype of the
    /// tensor beside them; two tensors must already agree.
    pub fn unify(&mut self, a: &Val, b: &Val, span: &Span) -> Result<(Value, Value), Diagnostic> {
        let is_t = |v: &Val| matches!(v, Val::T(_));
        if is_t(a) {
            let x = self.tensor(a, span)?;
            let dt = self.ty(x).dtype;
            let y = self.tensor_as(b, dt, span)?;
            return Ok((x, y));
        }
        if is_t(b) {
            let y = self.tensor(b, span)?;
            let dt = self.ty(y).dtype;
            let x = self.tensor_as(a, dt, span)?;
            return Ok((x, y));
        }
        let dt = match (lit_kind(a), lit_kind(b)) {
            (Some(ArrKind::Float), _) | (_, Some(ArrKind::Float)) => DType::F32,
            (Some(ArrKind::Bool), Some(ArrKind::Bool)) => DType::Bool,
            _ => DType::I32,
        };
        Ok((self.tensor_as(a, dt, span)?, self.tensor_as(b, dt, span)?))
    }

    pub(super) fn unary(&mut self, op: UnOp, v: Val, span: &Span) -> Result<Val, Diagnostic> {
        if let Val::Tuple(_) = &v {
            return self.tree_unary(op, &v, span);
        }
        match (op, &v) {
            (UnOp::Neg, Val::Const(Const::Int(i))) => Ok(Val::Const(Const::Int(i.wrapping_neg()))),
            (UnOp::Neg, Val::Const(Const::Float(f))) => Ok(Val::Const(Const::Float(-f))),
            (UnOp::Neg, Val::Dim(_, n)) => Ok(Val::Const(Const::Int(-(*n as i64)))),
            (UnOp::Not, Val::Const(Const::Bool(b))) => Ok(Val::Const(Const::Bool(!b))),
            (UnOp::Neg, Val::Array { shape, data, kind }) if *kind != ArrKind::Bool => {
                Ok(Val::Array { shape: shape.clone(), data: Rc::new(data.iter().map(|x| -x).collect()), kind: *kind })
            }
            _ => {
                let x = self.tensor(&v, span)?;
                let ty = self.ty(x);
                let r = match op {
                    UnOp::Neg => {
                        if ty.dtype == DType::Bool {
                            return Err(self.err(Stage::Type, span, format!("cannot negate a bool value ({ty})")));
                        }
                        self.b().neg(x)
                    }
                    UnOp::Not => {
                        if ty.dtype != DType::Bool {
                            return Err(self
                                .err(Stage::Type, span, format!("`not` needs a bool value, found {ty}"))
                                .with_note("help: compare first, e.g. `x != 0`"));
                        }
                        self.b().not(x)
                    }
                };
                let y = self.ir(r, span)?;
                self.copy_labels(y, &[x]);
                Ok(Val::T(self.tv(y)))
            }
        }
    }

    fn copy_labels(&mut self, out: Value, from: &[Value]) {
        let shape = self.ty(out).shape;
        for &f in from {
            if self.ty(f).shape == shape {
                if let Some(l) = self.labels(f) {
                    self.set_labels(out, l);
                    return;
                }
            }
        }
    }

    /// `l` and `r` as tensors of one dtype for the operator or builtin
    /// `what` (`` `+` ``, `` `matmul` ``), with a located error that shows
    /// both operands when they cannot share one.
    fn unify_operands(
        &mut self,
        what: &str,
        l: &Val,
        r: &Val,
        ls: &Span,
        rs: &Span,
        span: &Span,
    ) -> Result<(Value, Value), Diagnostic> {
        self.unify(l, r, span).map_err(|d| {
            let (lt, rt) = (self.describe_operand(l), self.describe_operand(r));
            let tensor_like = |v: &Val| matches!(v, Val::T(_) | Val::Const(_) | Val::Array { .. } | Val::Dim(..));
            let help = if matches!(l, Val::Tuple(_)) || matches!(r, Val::Tuple(_)) {
                "help: arithmetic applies to tensors, not tuples: take an element (`t.0`) or make one tensor with `stack(t)`".to_string()
            } else if !tensor_like(l) || !tensor_like(r) {
                format!("help: {what} applies to numbers and tensors only")
            } else {
                match (l, r) {
                    (Val::T(a), Val::T(_)) => {
                        let x = self.import(*a);
                        let dt = self.ty(x).dtype;
                        format!("help: convert one side to the other's dtype, e.g. `cast(y, {dt})`; tensors are never cast implicitly")
                    }
                    _ => "help: convert the tensor with `cast(x, dtype)` (e.g. `cast(x, f32)`), or write the literal as the tensor's dtype needs (`2.0` for a float, `2` for an integer)".to_string(),
                }
            };
            Diagnostic::new(Stage::Type, span.clone(), format!("{what} needs operands of one dtype, found {lt} and {rt}"))
                .with_secondary(ls.clone(), lt)
                .with_secondary(rs.clone(), rt)
                .with_note(format!("note: {}", d.message))
                .with_note(help)
        })
    }

    /// The matrix product `l @ r` (NumPy's `matmul` rules), for the operator
    /// or builtin `what` (`` `@` `` or `` `matmul` ``, which messages name).
    pub fn matmul(
        &mut self,
        what: &str,
        l: &Val,
        r: &Val,
        ls: &Span,
        rs: &Span,
        span: &Span,
    ) -> Result<Val, Diagnostic> {
        let (x, y) = self.unify_operands(what, l, r, ls, rs, span)?;
        let (tx, ty) = (self.ty(x), self.ty(y));
        if tx.rank() == 0 || ty.rank() == 0 {
            // As `jnp.matmul`: a scalar operand is an error, not a scaling.
            return Err(self
                .err(Stage::Type, span, format!("{what} needs operands with at least one axis, found {tx} and {ty}"))
                .with_secondary(ls.clone(), format!("this is {}", self.show_val_ty(x)))
                .with_secondary(rs.clone(), format!("this is {}", self.show_val_ty(y)))
                .with_note("help: scale with `*` instead"));
        }
        let ok = tx.shape[tx.rank() - 1] == if ty.rank() == 1 { ty.shape[0] } else { ty.shape[ty.rank() - 2] };
        if !ok {
            return Err(self
                .err(
                    Stage::Type,
                    span,
                    format!(
                        "{what} needs the last dimension of the left operand to match the {} of the right one",
                        if ty.rank() == 1 { "length" } else { "second-to-last dimension" }
                    ),
                )
                .with_secondary(ls.clone(), format!("this is {}", self.show_val_ty(x)))
                .with_secondary(rs.clone(), format!("this is {}", self.show_val_ty(y))));
        }
        let r = linalg::matmul(self.b(), x, y);
        let v = self.ir_named(r, what.trim_matches('`'), span)?;
        Ok(Val::T(self.tv(v)))
    }

    pub fn binary(&mut self, op: BinOp, l: Val, r: Val, ls: &Span, rs: &Span, span: &Span) -> Result<Val, Diagnostic> {
        if matches!(l, Val::Tuple(_)) || matches!(r, Val::Tuple(_)) {
            return self.tree_binary(op, &l, &r, ls, rs, span);
        }
        if let (Some(a), Some(b)) = (static_scalar(&l), static_scalar(&r)) {
            if let Some(c) = fold(op, a, b) {
                return Ok(Val::Const(c));
            }
        }
        let sym = format!("`{}`", op.symbol());
        if op == BinOp::MatMul {
            return self.matmul(&sym, &l, &r, ls, rs, span);
        }
        let (x, y) = self.unify_operands(&sym, &l, &r, ls, rs, span)?;
        let (tx, ty) = (self.ty(x), self.ty(y));
        if graft_core::composite::broadcast::broadcast_shapes("", &tx.shape, &ty.shape).is_err() {
            return Err(self
                .err(
                    Stage::Type,
                    span,
                    format!("the operands of `{}` have shapes that do not broadcast together", op.symbol()),
                )
                .with_secondary(ls.clone(), format!("this is {}", self.show_val_ty(x)))
                .with_secondary(rs.clone(), format!("this is {}", self.show_val_ty(y)))
                .with_note(
                    "note: shapes broadcast when, from the right, each pair of dims is equal or one of them is 1",
                ));
        }
        let dt = tx.dtype;
        let need = |this: &Self, ok: bool, what: &str| -> Result<(), Diagnostic> {
            if ok {
                Ok(())
            } else {
                Err(this.err(Stage::Type, span, format!("`{}` needs {what}, found {tx} and {ty}", op.symbol())))
            }
        };
        let r = match op {
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div => {
                need(self, dt != DType::Bool, "numbers, not bool")?;
                let bop = match op {
                    BinOp::Add => Binary::Add,
                    BinOp::Sub => Binary::Sub,
                    BinOp::Mul => Binary::Mul,
                    _ => Binary::Div,
                };
                broadcast::binary(self.b(), bop, x, y)
            }
            BinOp::FloorDiv => {
                need(self, dt != DType::Bool, "numbers, not bool")?;
                graft_core::composite::math::floor_divide(self.b(), x, y)
            }
            BinOp::Mod => {
                need(self, dt != DType::Bool, "numbers, not bool")?;
                graft_core::composite::math::remainder(self.b(), x, y)
            }
            BinOp::Pow => {
                need(self, dt.is_float(), "floating-point operands (use a float base)")?;
                match static_scalar(&r) {
                    Some(Const::Int(2)) | Some(Const::Float(2.0)) if tx.rank() >= ty.rank() => self.b().mul(x, x),
                    Some(Const::Int(1)) | Some(Const::Float(1.0)) if tx.rank() >= ty.rank() => Ok(x),
                    _ => broadcast::binary(self.b(), Binary::Pow, x, y),
                }
            }
            BinOp::And | BinOp::Or => {
                need(self, dt == DType::Bool, "bool operands")?;
                let bop = if op == BinOp::And { Binary::And } else { Binary::Or };
                broadcast::binary(self.b(), bop, x, y)
            }
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                let c = match op {
                    BinOp::Eq => Compare::Eq,
                    BinOp::Ne => Compare::Ne,
                    BinOp::Lt => Compare::Lt,
                    BinOp::Le => Compare::Le,
                    BinOp::Gt => Compare::Gt,
                    _ => Compare::Ge,
                };
                broadcast::compare(self.b(), c, x, y)
            }
            BinOp::MatMul => unreachable!("internal error: matmul is handled above"),
        };
        let v = self.ir(r, span)?;
        self.copy_labels(v, &[x, y]);
        Ok(Val::T(self.tv(v)))
    }

    fn describe_operand(&mut self, v: &Val) -> String {
        match v {
            Val::T(tv) => {
                let x = self.import(*tv);
                self.show_val_ty(x)
            }
            other => other.describe(),
        }
    }

    /// A value's type with known dimension names: `f32[m=3, n=4]`.
    pub fn show_val_ty(&self, v: Value) -> String {
        let t = self.ty(v);
        match self.labels(v) {
            Some(l) if l.len() == t.rank() => {
                let dims: Vec<String> = t
                    .shape
                    .iter()
                    .zip(l.iter())
                    .map(|(s, n)| match n {
                        Some(n) => format!("{n}={s}"),
                        None => s.to_string(),
                    })
                    .collect();
                format!("{}[{}]", t.dtype, dims.join(", "))
            }
            _ => t.to_string(),
        }
    }

    fn array(&mut self, items: &[Expr], span: &Span, env: &Env) -> Result<Val, Diagnostic> {
        let vals = items.iter().map(|i| self.expr(i, env)).collect::<Result<Vec<_>, _>>()?;
        if vals.is_empty() {
            return Err(self
                .err(Stage::Type, span, "an empty array literal has no type")
                .with_note("help: use `zeros((0,))`"));
        }
        // All static: one constant.
        let mut statics = Vec::new();
        for v in &vals {
            match v {
                Val::Const(c) => statics.push((Vec::new(), Rc::new(vec![c.as_f64()]), kind_of(*c))),
                Val::Array { shape, data, kind } => statics.push((shape.clone(), data.clone(), *kind)),
                _ => break,
            }
        }
        if statics.len() == vals.len() {
            let first = statics[0].0.clone();
            if let Some((i, _)) = statics.iter().enumerate().find(|(_, s)| s.0 != first) {
                return Err(self.err(
                    Stage::Type,
                    &items[i].span,
                    format!(
                        "array rows must have one shape: element 0 has shape {first:?}, element {i} has {:?}",
                        statics[i].0
                    ),
                ));
            }
            let kind = statics.iter().map(|s| s.2).max().unwrap_or(ArrKind::Int);
            let mut shape = vec![statics.len()];
            shape.extend(first);
            let data: Vec<f64> = statics.iter().flat_map(|s| s.1.iter().copied()).collect();
            return Ok(Val::Array { shape, data: Rc::new(data), kind });
        }
        let dt = vals
            .iter()
            .find_map(|v| if let Val::T(tv) = v { Some(*tv) } else { None })
            .map(|tv| {
                let x = self.import(tv);
                self.ty(x).dtype
            })
            .unwrap_or(DType::F32);
        let mut ts = Vec::new();
        for (v, e) in vals.iter().zip(items) {
            let t = self.tensor_as(v, dt, &e.span)?;
            if let Some(&t0) = ts.first() {
                if self.ty(t0).shape != self.ty(t).shape {
                    return Err(self.err(
                        Stage::Type,
                        &e.span,
                        format!("array elements must have one shape: {} and {}", self.ty(t0), self.ty(t)),
                    ));
                }
            }
            ts.push(t);
        }
        self.set_span(span);
        let r = cshape::stack(self.b(), &ts, 0);
        let v = self.ir(r, span)?;
        Ok(Val::T(self.tv(v)))
    }

    fn index(
        &mut self,
        base: Val,
        items: &[IndexItem],
        bspan: &Span,
        span: &Span,
        env: &Env,
    ) -> Result<Val, Diagnostic> {
        if let Val::Tuple(ts) = &base {
            return Err(self
                .err(Stage::Type, bspan, format!("cannot index a tuple of {} with `[...]`", ts.len()))
                .with_note("help: use `t.0`, `t.1`, ... for tuple elements"));
        }
        let mut x = self.tensor(&base, bspan)?;
        let rank = self.ty(x).rank();
        // `none` inserts an axis of size 1 there (NumPy's `np.newaxis`): it
        // takes no axis of `x`, and its position counts in the result.
        let is_new = |it: &IndexItem| matches!(it, IndexItem::Single(e) if matches!(&e.kind, ExprKind::Var(id) if id.name == "none" && env.get("none").is_none()));
        let n_real = items.iter().filter(|it| !is_new(it)).count();
        if n_real > rank {
            return Err(self.err(
                Stage::Type,
                span,
                format!("too many indices: {n_real} given for a value of type {}", self.ty(x)),
            ));
        }
        let mut new_axes = Vec::new();
        let mut out_pos = 0;
        for it in items {
            match it {
                _ if is_new(it) => {
                    new_axes.push(out_pos);
                    out_pos += 1;
                }
                IndexItem::Slice { .. } => out_pos += 1,
                IndexItem::Single(_) => {}
            }
        }
        let mut squeeze = Vec::new();
        for (axis, item) in items.iter().filter(|it| !is_new(it)).enumerate() {
            let n = self.ty(x).shape[axis];
            match item {
                IndexItem::Single(e) => {
                    let v = self.expr(e, env)?;
                    self.set_span(span);
                    match static_int(&v) {
                        Some(k) => {
                            let k2 = if k < 0 { k + n as i64 } else { k };
                            if k2 < 0 || k2 >= n as i64 {
                                return Err(self.err(
                                    Stage::Type,
                                    &e.span,
                                    format!("index {k} is out of bounds for axis {axis} of size {n}"),
                                ));
                            }
                            let r = cshape::slice_axis(self.b(), x, axis, Some(k2 as isize), Some(k2 as isize + 1), 1);
                            x = self.ir(r, span)?;
                        }
                        None => {
                            let i = self.tensor(&v, &e.span)?;
                            let it = self.ty(i);
                            if !it.dtype.is_int() || it.rank() != 0 {
                                return Err(self.err(
                                    Stage::Type,
                                    &e.span,
                                    format!("an index must be an integer scalar, found {it}"),
                                ));
                            }
                            // A negative index counts from the end, as a
                            // literal one does: `i + n` where `i < 0`. An index
                            // still out of range after that is clamped
                            // (`dynamic_slice`'s rule).
                            let zero = self.const_tensor(&[], &[0.0], it.dtype, span)?;
                            let size = self.const_tensor(&[], &[n as f64], it.dtype, span)?;
                            let r = self.b().lt(i, zero);
                            let neg = self.ir(r, span)?;
                            let r = self.b().add(i, size);
                            let wrapped = self.ir(r, span)?;
                            let r = self.b().select(neg, wrapped, i);
                            let i = self.ir(r, span)?;
                            let shape = self.ty(x).shape;
                            let mut starts = Vec::new();
                            for a in 0..shape.len() {
                                if a == axis {
                                    starts.push(i);
                                } else {
                                    starts.push(self.const_tensor(&[], &[0.0], it.dtype, span)?);
                                }
                            }
                            let mut sizes = shape.clone();
                            sizes[axis] = 1;
                            let r = self.b().dynamic_slice(x, &starts, &sizes);
                            x = self.ir(r, span)?;
                        }
                    }
                    squeeze.push(axis);
                }
                IndexItem::Slice { start, stop, step, span: ss } => {
                    let part = |this: &mut Self, e: &Option<Expr>| -> Result<Option<isize>, Diagnostic> {
                        match e {
                            None => Ok(None),
                            Some(e) => {
                                let v = this.expr(e, env)?;
                                static_int(&v).map(|k| Some(k as isize)).ok_or_else(|| {
                                    this.err(
                                        Stage::Type,
                                        &e.span,
                                        format!("slice bounds must be known while compiling, found {}", v.describe()),
                                    )
                                    .with_note("help: for a block at a run-time start use `dynamic_slice(x, starts, sizes)`; `x[i]` takes one element at a run-time `i`")
                                })
                            }
                        }
                    };
                    let (a, b, c) = (part(self, start)?, part(self, stop)?, part(self, step)?.unwrap_or(1));
                    if c == 0 {
                        return Err(self.err(Stage::Type, ss, "slice step must not be zero"));
                    }
                    self.set_span(span);
                    let r = cshape::slice_axis(self.b(), x, axis, a, b, c);
                    x = self.ir(r, span)?;
                }
            }
        }
        if !squeeze.is_empty() {
            let r = cshape::squeeze(self.b(), x, &squeeze);
            x = self.ir(r, span)?;
        }
        if !new_axes.is_empty() {
            let r = cshape::expand_dims(self.b(), x, &new_axes);
            x = self.ir(r, span)?;
        }
        Ok(Val::T(self.tv(x)))
    }
}

fn for_dim_names(t: &crate::ast::Type, f: &mut impl FnMut(&str)) {
    use crate::ast::TypeKind;
    match &t.kind {
        TypeKind::Scalar(_) | TypeKind::Var(_) | TypeKind::Fn => {}
        TypeKind::Tuple(ts) => ts.iter().for_each(|t| for_dim_names(t, f)),
        TypeKind::Tensor { dims, .. } => {
            for d in dims {
                if let crate::ast::Dim::Name(id) = d {
                    f(&id.name);
                }
            }
        }
    }
}

fn kind_of(c: Const) -> ArrKind {
    match c {
        Const::Int(_) => ArrKind::Int,
        Const::Float(_) => ArrKind::Float,
        Const::Bool(_) => ArrKind::Bool,
    }
}

fn lit_kind(v: &Val) -> Option<ArrKind> {
    match v {
        Val::Const(c) => Some(kind_of(*c)),
        Val::Dim(..) => Some(ArrKind::Int),
        Val::Array { kind, .. } => Some(*kind),
        _ => None,
    }
}

/// A value known while compiling as a scalar.
pub fn static_scalar(v: &Val) -> Option<Const> {
    match v {
        Val::Const(c) => Some(*c),
        Val::Dim(_, n) => Some(Const::Int(*n as i64)),
        _ => None,
    }
}

/// A value known while compiling as an integer.
pub fn static_int(v: &Val) -> Option<i64> {
    match static_scalar(v) {
        Some(Const::Int(i)) => Some(i),
        _ => None,
    }
}

fn fold(op: BinOp, a: Const, b: Const) -> Option<Const> {
    use Const::*;
    Some(match (a, b) {
        (Int(x), Int(y)) => match op {
            BinOp::Add => Int(x.wrapping_add(y)),
            BinOp::Sub => Int(x.wrapping_sub(y)),
            BinOp::Mul => Int(x.wrapping_mul(y)),
            BinOp::Div => Float(x as f64 / y as f64),
            // Python semantics; a zero divisor gives 0 like the integer kernels.
            BinOp::FloorDiv if y == 0 => Int(0),
            BinOp::Mod if y == 0 => Int(0),
            BinOp::FloorDiv => Int(x.wrapping_div(y) - i64::from(x.wrapping_rem(y) != 0 && ((x < 0) != (y < 0)))),
            BinOp::Mod => {
                let r = x.wrapping_rem(y);
                Int(if r != 0 && ((r < 0) != (y < 0)) { r + y } else { r })
            }
            BinOp::Pow if (0..64).contains(&y) => Int(x.wrapping_pow(y as u32)),
            BinOp::Pow => Float((x as f64).powf(y as f64)),
            BinOp::Eq => Bool(x == y),
            BinOp::Ne => Bool(x != y),
            BinOp::Lt => Bool(x < y),
            BinOp::Le => Bool(x <= y),
            BinOp::Gt => Bool(x > y),
            BinOp::Ge => Bool(x >= y),
            _ => return None,
        },
        (Bool(x), Bool(y)) => match op {
            BinOp::And => Bool(x && y),
            BinOp::Or => Bool(x || y),
            BinOp::Eq => Bool(x == y),
            BinOp::Ne => Bool(x != y),
            _ => return None,
        },
        (Bool(_), _) | (_, Bool(_)) => return None,
        (x, y) => {
            let (x, y) = (x.as_f64(), y.as_f64());
            match op {
                BinOp::Add => Float(x + y),
                BinOp::Sub => Float(x - y),
                BinOp::Mul => Float(x * y),
                BinOp::Div => Float(x / y),
                BinOp::FloorDiv => Float((x / y).floor()),
                BinOp::Mod => {
                    let r = x % y;
                    Float(if r != 0.0 && ((r < 0.0) != (y < 0.0)) { r + y } else { r })
                }
                BinOp::Pow => Float(x.powf(y)),
                BinOp::Eq => Bool(x == y),
                BinOp::Ne => Bool(x != y),
                BinOp::Lt => Bool(x < y),
                BinOp::Le => Bool(x <= y),
                BinOp::Gt => Bool(x > y),
                BinOp::Ge => Bool(x >= y),
                _ => return None,
            }
        }
    })
}

/// True when `e` is made of literals and operators only (its value does not
/// depend on any name, so not on sizes).
fn literal_only(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Int(_) | ExprKind::Float(_) | ExprKind::Bool(_) | ExprKind::Str(_) => true,
        ExprKind::Unary { operand, .. } => literal_only(operand),
        ExprKind::Binary { lhs, rhs, .. } => literal_only(lhs) && literal_only(rhs),
        ExprKind::Tuple(xs) | ExprKind::Array(xs) => xs.iter().all(literal_only),
        _ => false,
    }
}
