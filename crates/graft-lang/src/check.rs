//! Name resolution: every name a program uses must be a local, a
//! parameter, a dimension variable of the enclosing def, a def, or a
//! builtin; attributes must name real parameters and defs. All problems are
//! reported at once, each with a "did you mean" where one is close.
//!
//! Types and dimensions are checked by instantiation (see
//! `Module::check`), which evaluates the program at concrete shapes.

use crate::ast::*;
use crate::diag::{Diagnostic, Stage};
use std::collections::HashMap;

/// The names in scope, in binding order (for "did you mean"), with a count
/// per name so a lookup is O(1): a linear search made checking a block of
/// thousands of `let`s quadratic.
#[derive(Default)]
struct Scope {
    names: Vec<String>,
    count: HashMap<String, u32>,
}

impl Scope {
    fn push(&mut self, name: String) {
        *self.count.entry(name.clone()).or_default() += 1;
        self.names.push(name);
    }

    fn contains(&self, name: &str) -> bool {
        self.count.contains_key(name)
    }

    fn len(&self) -> usize {
        self.names.len()
    }

    fn truncate(&mut self, n: usize) {
        for name in self.names.drain(n.min(self.names.len())..) {
            if let Some(c) = self.count.get_mut(&name) {
                *c -= 1;
                if *c == 0 {
                    self.count.remove(&name);
                }
            }
        }
    }
}

struct R<'a> {
    defs: HashMap<&'a str, &'a Def>,
    /// The generic def being checked, whose body must not name it.
    generic: Option<&'a Def>,
    errs: Vec<Diagnostic>,
    /// Unknown names past [`crate::diag::MAX_ERRORS`], counted only.
    dropped: usize,
}

/// Checks names and attributes; `Err` holds every problem found.
pub fn resolve(p: &Program) -> Result<(), Vec<Diagnostic>> {
    let mut r = R { defs: HashMap::new(), generic: None, errs: Vec::new(), dropped: 0 };
    for d in &p.defs {
        if let Some(prev) = r.defs.get(d.name.name.as_str()) {
            r.errs.push(
                Diagnostic::new(Stage::Resolve, d.name.span.clone(), format!("`{}` is defined twice", d.name.name))
                    .with_secondary(prev.name.span.clone(), "first defined here"),
            );
        } else {
            r.defs.insert(&d.name.name, d);
        }
    }
    for d in &p.defs {
        r.def(d);
    }
    if r.errs.is_empty() {
        Ok(())
    } else {
        Err(crate::diag::cap(r.errs, r.dropped))
    }
}

fn dims_of(t: &Type, out: &mut Vec<String>) {
    match &t.kind {
        TypeKind::Scalar(_) | TypeKind::Var(_) | TypeKind::Fn => {}
        TypeKind::Tuple(ts) => ts.iter().for_each(|t| dims_of(t, out)),
        TypeKind::Tensor { dims, .. } => {
            for d in dims {
                if let Dim::Name(id) = d {
                    out.push(id.name.clone());
                }
            }
        }
    }
}

/// Levenshtein distance between two names (for "did you mean" hints).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + usize::from(a[i - 1] != b[j - 1]));
        }
        prev = cur;
    }
    prev[b.len()]
}

impl<'a> R<'a> {
    fn known_global(&self, n: &str) -> bool {
        self.defs.contains_key(n)
            || crate::lower::stdlib::is_builtin(n)
            || n == "none"
            || crate::lower::stdlib::constant(n).is_some()
            || crate::ast::soft_transform(n).is_some()
            || graft_core::DType::parse(n).is_some()
    }

    fn unknown(&mut self, id: &Ident, scope: &[String]) {
        if self.errs.len() >= crate::diag::MAX_ERRORS {
            // Not shown: skip the search for a suggestion.
            self.dropped += 1;
            return;
        }
        let mut d = Diagnostic::new(Stage::Resolve, id.span.clone(), format!("unknown name `{}`", id.name))
            .with_label("not defined here");
        let mut cands: Vec<String> = scope.to_vec();
        cands.extend(self.defs.keys().map(|k| k.to_string()));
        cands.extend(crate::lower::stdlib::names().map(String::from));
        cands.extend(crate::lower::stdlib::CONSTANTS.iter().map(|(n, _)| n.to_string()));
        let best = cands
            .iter()
            .filter(|c| **c != id.name)
            .map(|c| (edit_distance(c, &id.name), c.clone()))
            .filter(|(k, c)| *k <= 2 && *k < c.len().max(2))
            .min();
        if let Some((_, c)) = best {
            d = d.with_note(format!("help: did you mean `{c}`?"));
        }
        self.errs.push(d);
    }

    fn def(&mut self, d: &'a Def) {
        let mut dims: Vec<String> = Vec::new();
        for p in &d.params {
            dims_of(&p.ty, &mut dims);
        }
        if let Some(ret) = &d.ret {
            self.unbound_dims(d, ret, &dims);
        }
        let mut scope = Scope::default();
        for n in dims {
            scope.push(n);
        }
        for p in &d.params {
            scope.push(p.name.name.clone());
        }
        for a in &d.attrs {
            self.attr(d, a);
            if d.is_generic() && a.kind().is_some() {
                let why =
                    if d.tparams.is_empty() { "takes or returns a function (`fn`)" } else { "has type parameters" };
                self.errs.push(
                    Diagnostic::new(
                        Stage::Resolve,
                        a.span.clone(),
                        format!("`@{}` cannot be put on a generic def: `{}` {why}", a.name.name, d.name.name),
                    )
                    .with_label("attribute of a generic def")
                    .with_note(
                        "help: give the def concrete parameter types, or apply the transform at the call: `grad(f)(x)`",
                    ),
                );
            }
        }
        self.generic = d.is_generic().then_some(d);
        self.expr(&d.body, &mut scope);
        self.generic = None;
    }

    /// Every dimension name of the result type `t` must be bound by a
    /// parameter's type (`bound`): a result size nothing determines is an
    /// error, not a size taken from whatever the body returns.
    fn unbound_dims(&mut self, d: &Def, t: &Type, bound: &[String]) {
        match &t.kind {
            TypeKind::Scalar(_) | TypeKind::Var(_) | TypeKind::Fn => {}
            TypeKind::Tuple(ts) => ts.iter().for_each(|t| self.unbound_dims(d, t, bound)),
            TypeKind::Tensor { dims, .. } => {
                for dim in dims {
                    let Dim::Name(id) = dim else { continue };
                    if bound.contains(&id.name) {
                        continue;
                    }
                    let mut diag = Diagnostic::new(
                        Stage::Resolve,
                        id.span.clone(),
                        format!(
                            "dimension `{}` in the result type of `{}` is not bound by any parameter",
                            id.name, d.name.name
                        ),
                    )
                    .with_label("no parameter's type names this dimension");
                    let best = bound
                        .iter()
                        .map(|c| (edit_distance(c, &id.name), c))
                        .filter(|(k, c)| *k <= 2 && *k < c.len().max(2))
                        .min();
                    diag = diag.with_note(if bound.is_empty() {
                        format!("note: the parameters of `{}` bind no dimension names", d.name.name)
                    } else {
                        let mut names: Vec<&str> = Vec::new();
                        for b in bound {
                            if !names.contains(&b.as_str()) {
                                names.push(b);
                            }
                        }
                        format!("note: the parameters bind {}", names.join(", "))
                    });
                    if let Some((_, c)) = best {
                        diag = diag.with_note(format!("help: did you mean `{c}`?"));
                    } else {
                        diag = diag.with_note(
                            "help: use a parameter's dimension name or a literal size, or leave out the result type",
                        );
                    }
                    self.errs.push(diag);
                }
            }
        }
    }

    fn attr(&mut self, d: &Def, a: &Attr) {
        let pnames: Vec<&str> = d.params.iter().map(|p| p.name.name.as_str()).collect();
        let names: Vec<&Expr> = a.args.iter().map(|x| &x.value).collect();
        match a.kind() {
            Some(AttrKind::Grad | AttrKind::Jvp) => {
                for e in names {
                    if let ExprKind::Var(id) = &e.kind {
                        if !pnames.contains(&id.name.as_str()) {
                            self.errs.push(
                                Diagnostic::new(
                                    Stage::Resolve,
                                    id.span.clone(),
                                    format!("`@{}({})` names no parameter of `{}`", a.name.name, id.name, d.name.name),
                                )
                                .with_note(format!("note: the parameters are {}", pnames.join(", "))),
                            );
                        }
                    } else {
                        self.errs.push(Diagnostic::new(
                            Stage::Resolve,
                            e.span.clone(),
                            format!("`@{}` takes a parameter name", a.name.name),
                        ));
                    }
                }
            }
            Some(AttrKind::CustomVjp | AttrKind::CustomJvp) => {
                for e in names {
                    match &e.kind {
                        ExprKind::Var(id) if self.defs.contains_key(id.name.as_str()) => {}
                        ExprKind::Var(id) => self.unknown(id, &[]),
                        _ => self.errs.push(Diagnostic::new(
                            Stage::Resolve,
                            e.span.clone(),
                            format!("`@{}` takes names of defs", a.name.name),
                        )),
                    }
                }
            }
            None => self.errs.push(
                Diagnostic::new(Stage::Resolve, a.name.span.clone(), format!("unknown attribute `@{}`", a.name.name))
                    .with_note("note: the attributes are @grad(p), @jvp(p), @custom_vjp(fwd, bwd), @custom_jvp(rule)"),
            ),
        }
    }

    fn pat(&mut self, p: &Pattern, scope: &mut Scope) {
        match &p.kind {
            PatternKind::Var(id) => scope.push(id.name.clone()),
            PatternKind::Tuple(ps) => ps.iter().for_each(|p| self.pat(p, scope)),
            _ => {}
        }
    }

    fn index_items(&mut self, items: &[IndexItem], scope: &mut Scope) {
        for it in items {
            match it {
                IndexItem::Single(x) => self.expr(x, scope),
                IndexItem::Slice { start, stop, step, .. } => {
                    for x in [start, stop, step].into_iter().flatten() {
                        self.expr(x, scope);
                    }
                }
            }
        }
    }

    fn expr(&mut self, e: &Expr, scope: &mut Scope) {
        match &e.kind {
            ExprKind::Int(_) | ExprKind::Float(_) | ExprKind::Bool(_) | ExprKind::Str(_) => {}
            ExprKind::Var(id) => {
                if !scope.contains(&id.name) && !self.known_global(&id.name) {
                    self.unknown(id, &scope.names);
                }
                if let Some(d) = self.generic.filter(|d| d.name.name == id.name && !scope.contains(&id.name)) {
                    self.errs.push(
                        Diagnostic::new(
                            Stage::Resolve,
                            id.span.clone(),
                            format!("`{}` calls itself; recursion is not supported", id.name),
                        )
                        .with_label("names the generic def it is in")
                        .with_secondary(d.name.span.clone(), "defined here")
                        .with_note("help: write loops with `scan`, `fori` or `while`"),
                    );
                }
            }
            ExprKind::Array(xs) | ExprKind::Tuple(xs) => xs.iter().for_each(|x| self.expr(x, scope)),
            ExprKind::Field { base, .. } => self.expr(base, scope),
            ExprKind::Unary { operand, .. } => self.expr(operand, scope),
            ExprKind::Binary { lhs, rhs, .. } => {
                self.expr(lhs, scope);
                self.expr(rhs, scope);
            }
            ExprKind::Call { func, args } => {
                self.expr(func, scope);
                // `wrt=` of a soft transform keyword names parameters, not values.
                let soft = matches!(&func.kind, ExprKind::Var(id) if crate::ast::soft_transform(&id.name).is_some()
                    && !scope.contains(&id.name) && !self.defs.contains_key(id.name.as_str()));
                for a in args {
                    if !(soft && a.name.as_ref().is_some_and(|n| n.name == "wrt")) {
                        self.expr(&a.value, scope);
                    }
                }
            }
            ExprKind::Pipe { value, func } => {
                self.expr(value, scope);
                self.expr(func, scope);
            }
            ExprKind::Transform { func, args, .. } => {
                self.expr(func, scope);
                for a in args {
                    // `wrt=` names the function's parameters, not values in scope.
                    if a.name.as_ref().is_some_and(|n| n.name == "wrt") {
                        continue;
                    }
                    self.expr(&a.value, scope);
                }
            }
            ExprKind::Lambda { params, body } => {
                let n = scope.len();
                for p in params {
                    self.pat(&p.pat, scope);
                }
                self.expr(body, scope);
                scope.truncate(n);
            }
            ExprKind::If { cond, then, otherwise } => {
                self.expr(cond, scope);
                self.expr(then, scope);
                self.expr(otherwise, scope);
            }
            ExprKind::Match { scrutinee, arms } => {
                self.expr(scrutinee, scope);
                for a in arms {
                    let n = scope.len();
                    self.pat(&a.pat, scope);
                    self.expr(&a.body, scope);
                    scope.truncate(n);
                }
            }
            ExprKind::At(at) => {
                self.expr(&at.base, scope);
                self.index_items(&at.items, scope);
                for a in &at.args {
                    self.expr(&a.value, scope);
                }
            }
            ExprKind::Index { base, items } => {
                self.expr(base, scope);
                self.index_items(items, scope);
            }
            ExprKind::Block { stmts, result } => {
                let n = scope.len();
                for Stmt::Let { pat, value, .. } in stmts {
                    self.expr(value, scope);
                    self.pat(pat, scope);
                }
                self.expr(result, scope);
                scope.truncate(n);
            }
        }
    }
}
