//! Lowering: a checked graft program, instantiated at concrete argument
//! types, becomes a `graft_core::ir::Func` of primitives.
//!
//! The lowering is an evaluator over compile-time values ([`value::Val`]):
//! tensors are IR values in a stack of builder frames, literals stay static
//! until an operation gives them a dtype, and functions (defs, lambdas,
//! builtins, transforms) are compile-time values that are inlined where they
//! are called. A transform lowers its function into a fresh frame (a
//! standalone `Func`), applies graft-core's rewrite to it and inlines the
//! result, so after lowering only primitives remain.
//!
//! Invariants:
//! - a tensor from an outer frame used inside a standalone frame becomes an
//!   extra parameter of that frame (a capture) appended after the real
//!   parameters; transforms treat captures as constants (not
//!   differentiated, not batched) and pass them in at the call;
//! - every equation carries the source location of the expression that
//!   emitted it, so errors after rewrites still point at the user's line;
//! - a def is instantiated once per distinct list of argument types
//!   ([`Prog::cache`]), and recursion is reported, never followed forever.

pub mod at;
pub mod control;
pub mod custom;
pub mod expr;
pub mod fold;
pub mod generic;
pub mod stdlib;
pub mod transform;
pub mod tree;
pub mod value;

use crate::ast::{self, Span};
use crate::diag::{Diagnostic, LineIndex, Stage};
use graft_core::ir::SrcLoc;
use graft_core::{Builder, DType, Func, IrError, Tensor, TensorType, Value};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
pub use value::{Const, FnVal, Tree, Tv, Val};

/// How deep calls and transforms may nest while lowering (guards against
/// lambdas that call themselves through arguments).
const MAX_DEPTH: usize = 200;

/// A lexical environment: an immutable linked list, so lambdas capture it by
/// cloning a pointer.
#[derive(Debug, Clone, Default)]
pub struct Env(Option<Rc<EnvNode>>);

#[derive(Debug)]
pub struct EnvNode {
    name: Rc<str>,
    val: Val,
    next: Env,
}

impl Env {
    pub fn bind(&self, name: &str, val: Val) -> Env {
        Env(Some(Rc::new(EnvNode { name: name.into(), val, next: self.clone() })))
    }

    pub fn get(&self, name: &str) -> Option<&Val> {
        let mut cur = self.0.as_ref();
        while let Some(n) = cur {
            if &*n.name == name {
                return Some(&n.val);
            }
            cur = n.next.0.as_ref();
        }
        None
    }
}

/// One instantiation of a def: its `Func` and the structure of its result.
#[derive(Debug)]
pub struct Inst {
    pub func: Arc<Func>,
    pub out: Tree,
    /// How deep calls nested while lowering it (counted as
    /// [`Lower::enter`] counts), so a cached instance still counts its
    /// nesting and the depth limit does not depend on what is cached:
    /// `check` rejects exactly the call chains `run` would.
    pub height: usize,
}

/// The program being lowered, with what lowering needs about its source.
#[derive(Debug, Clone)]
pub struct Prog {
    pub program: ast::Program,
    pub file: Arc<str>,
    pub src: Arc<str>,
    pub defs: HashMap<String, usize>,
    /// Line starts of `src`, for positions in O(log n).
    pub lines: LineIndex,
    /// Def instantiations by (def, argument structure and types).
    pub cache: RefCell<HashMap<(usize, Vec<Tree>), Rc<Inst>>>,
    /// Generic defs specialised at least once (so `check` can say which
    /// ones it never reached).
    pub specialised: RefCell<std::collections::HashSet<usize>>,
}

impl Prog {
    pub fn new(file: &str, src: &str, program: ast::Program) -> Prog {
        let mut defs = HashMap::new();
        for (i, d) in program.defs.iter().enumerate() {
            defs.entry(d.name.name.clone()).or_insert(i);
        }
        Prog {
            program,
            file: file.into(),
            lines: LineIndex::new(src),
            src: src.into(),
            defs,
            cache: RefCell::new(HashMap::new()),
            specialised: RefCell::new(std::collections::HashSet::new()),
        }
    }

    /// `file:line:col` of a byte offset.
    pub fn pos(&self, span: &Span) -> String {
        let (l, c) = self.lines.line_col(span.start);
        format!("{}:{l}:{c}", self.file)
    }

    /// The span of the token-ish run starting at a 1-based line and column
    /// (the inverse of [`crate::diag::line_col`], for locations carried by IR equations).
    pub fn span_at(&self, line: u32, col: u32) -> Option<Span> {
        let line_start = self.lines.line_start(line)?;
        let rest = self.src.get(line_start..)?;
        let (off, _) = rest.char_indices().nth(col.saturating_sub(1) as usize)?;
        let start = line_start + off;
        let tail = &self.src[start..];
        let len = tail.find(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|&n| n > 0).unwrap_or(1);
        Some(start..(start + len).min(self.src.len()))
    }
}

/// Where each dimension variable got its size: `n -> (4, "argument `w`")`.
pub type Dims = HashMap<String, (usize, String)>;

struct Frame {
    b: Builder,
    /// (value in the frame below, parameter of this frame).
    captures: Vec<(Value, Value)>,
    /// Dimension names of some values (parameters and values derived
    /// elementwise from them), for `sum(x, features)`.
    labels: HashMap<Value, Rc<Vec<Option<Rc<str>>>>>,
}

/// A call argument after evaluation.
#[derive(Debug, Clone)]
pub struct ArgVal {
    pub name: Option<ast::Ident>,
    pub val: Val,
    pub span: Span,
}

/// The lowering state: the program and a stack of builder frames.
pub struct Lower<'p> {
    pub p: &'p Prog,
    frames: Vec<Frame>,
    active: Vec<usize>,
    depth: usize,
    /// The deepest `depth` reached (see [`Inst::height`]).
    peak: usize,
    /// Lowering for `Module::check`, at placeholder sizes: a compile-time
    /// `if` whose branch fails falls back to its other branch.
    pub placeholder_sizes: bool,
    /// How many such fallbacks happened; an instance lowered with one is
    /// not cached (it is not what those sizes run).
    pub branch_fallbacks: usize,
    /// Depth of branches lowered to be computed together and selected
    /// (an `if` on a tensor condition, a `match` on a run-time value):
    /// `debug_print` is an error there, since it would print for every branch.
    pub both_branches: usize,
    /// Named axes bound by the `vmap(.., axis_name=)` being lowered, with
    /// their sizes, innermost last (what collectives resolve names against).
    pub axes: Vec<(Rc<str>, usize)>,
    /// How many collectives resolved an axis name; an instance lowered with
    /// one is not cached, since the name's size belongs to the caller.
    pub axis_uses: usize,
    loc: Option<Arc<SrcLoc>>,
}

/// A finished standalone frame: the function, and the outer tensors its
/// capture parameters stand for (parameters `n_real..`).
pub struct Standalone {
    pub func: Func,
    pub n_real: usize,
    pub captures: Vec<Tv>,
    pub out: Tree,
}

impl<'p> Lower<'p> {
    pub fn new(p: &'p Prog) -> Lower<'p> {
        Lower {
            p,
            frames: Vec::new(),
            active: Vec::new(),
            depth: 0,
            peak: 0,
            placeholder_sizes: false,
            branch_fallbacks: 0,
            both_branches: 0,
            axes: Vec::new(),
            axis_uses: 0,
            loc: None,
        }
    }

    // ----- diagnostics and locations -----

    pub fn err(&self, stage: Stage, span: &Span, msg: impl Into<String>) -> Diagnostic {
        Diagnostic::new(stage, span.clone(), msg)
    }

    /// A graft-core error during lowering of the expression at `span`.
    pub fn ir_err(&self, e: IrError, span: &Span) -> Diagnostic {
        let msg = match &e {
            IrError::Type(t) => {
                format!("{}: {}; got operands ({})", op_name(&t.prim), t.expected, types_str(&t.operands))
            }
            other => other.to_string(),
        };
        Diagnostic::new(Stage::Type, span.clone(), msg)
    }

    pub fn ir<T>(&self, r: Result<T, IrError>, span: &Span) -> Result<T, Diagnostic> {
        r.map_err(|e| self.ir_err(e, span))
    }

    /// Like [`Lower::ir`], for a graft-core call made by the builtin `name`:
    /// the message names the builtin the user wrote (`` `maximum`: shapes
    /// ... ``), not the primitive or composite that raised it (`max:`).
    pub fn ir_named<T>(&self, r: Result<T, IrError>, name: &str, span: &Span) -> Result<T, Diagnostic> {
        r.map_err(|e| {
            let msg = match &e {
                IrError::Type(t) => format!("`{name}`: {}; got operands ({})", t.expected, types_str(&t.operands)),
                IrError::Invalid { msg, .. } => format!("`{name}`: {msg}"),
                other => format!("`{name}`: {other}"),
            };
            Diagnostic::new(Stage::Type, span.clone(), msg)
        })
    }

    /// Attaches `span`'s position to the equations emitted next.
    pub fn set_span(&mut self, span: &Span) {
        let (line, col) = self.p.lines.line_col(span.start);
        let loc = Some(Arc::new(SrcLoc { file: self.p.file.clone(), line, col }));
        self.loc = loc.clone();
        if let Some(f) = self.frames.last_mut() {
            f.b.set_loc(loc);
        }
    }

    fn restore_loc(&mut self) {
        let loc = self.loc.clone();
        if let Some(f) = self.frames.last_mut() {
            f.b.set_loc(loc);
        }
    }

    pub fn enter(&mut self, span: &Span) -> Result<(), Diagnostic> {
        self.depth += 1;
        self.reach(self.depth, span)
    }

    /// Records that calls nest `depth` deep; an error past [`MAX_DEPTH`].
    fn reach(&mut self, depth: usize, span: &Span) -> Result<(), Diagnostic> {
        self.peak = self.peak.max(depth);
        if depth > MAX_DEPTH {
            return Err(self
                .err(Stage::Type, span, format!("calls nest more than {MAX_DEPTH} deep while compiling"))
                .with_label("this call is too deep")
                .with_note(
                    "note: every def and lambda call is inlined while compiling; a chain of nested calls this \
                     long, or a function calling itself through an argument, exceeds the limit",
                ));
        }
        Ok(())
    }

    pub fn leave(&mut self) {
        self.depth -= 1;
    }

    // ----- frames -----

    pub fn level(&self) -> usize {
        self.frames.len().saturating_sub(1)
    }

    pub fn b(&mut self) -> &mut Builder {
        &mut self.frames.last_mut().expect("internal error: lowering always runs inside a frame").b
    }

    pub fn push_frame(&mut self, name: &str) {
        let mut b = Builder::new(name);
        b.set_loc(self.loc.clone());
        self.frames.push(Frame { b, captures: Vec::new(), labels: HashMap::new() });
    }

    fn pop_frame(&mut self) -> Frame {
        let f = self.frames.pop().expect("internal error: pop_frame matches a push_frame");
        self.restore_loc();
        f
    }

    /// Adds a parameter to the current frame.
    pub fn param(&mut self, ty: TensorType) -> Tv {
        let level = self.level();
        Tv { level, v: self.b().param(ty) }
    }

    /// The value `tv` as seen from the current frame (capturing it through
    /// every frame in between if it is from an outer one).
    pub fn import(&mut self, tv: Tv) -> Value {
        let cur = self.level();
        if tv.level >= cur {
            return tv.v;
        }
        let mut v = tv.v;
        for lvl in tv.level + 1..=cur {
            let frame = &mut self.frames[lvl];
            v = match frame.captures.iter().find(|(o, _)| *o == v) {
                Some(&(_, inner)) => inner,
                None => {
                    let ty = self.frames[lvl - 1].b.func().ty(v).clone();
                    let frame = &mut self.frames[lvl];
                    let p = frame.b.param(ty);
                    frame.captures.push((v, p));
                    p
                }
            };
        }
        v
    }

    pub fn tv(&self, v: Value) -> Tv {
        Tv { level: self.level(), v }
    }

    /// Type of a value of the current frame.
    pub fn ty(&self, v: Value) -> TensorType {
        self.frames.last().expect("internal error: lowering always runs inside a frame").b.func().ty(v).clone()
    }

    pub fn labels(&self, v: Value) -> Option<Rc<Vec<Option<Rc<str>>>>> {
        self.frames.last().and_then(|f| f.labels.get(&v).cloned())
    }

    pub fn set_labels(&mut self, v: Value, l: Rc<Vec<Option<Rc<str>>>>) {
        if let Some(f) = self.frames.last_mut() {
            f.labels.insert(v, l);
        }
    }

    /// Lowers `body` into a fresh frame with parameters of the given
    /// structures; `body` receives the parameter values and returns the result.
    pub fn standalone(
        &mut self,
        name: &str,
        args: &[Tree],
        span: &Span,
        body: impl FnOnce(&mut Self, Vec<Val>) -> Result<Val, Diagnostic>,
    ) -> Result<Standalone, Diagnostic> {
        self.push_frame(name);
        let r = (|| {
            let mut vals = Vec::new();
            for t in args {
                let leaves: Vec<Tv> = t.leaves().into_iter().map(|ty| self.param(ty)).collect();
                vals.push(
                    t.rebuild(&mut leaves.into_iter()).expect("internal error: a tree rebuilds from its own leaves"),
                );
            }
            let n_real = args.iter().map(Tree::n_leaves).sum();
            let out = body(self, vals)?;
            let (outs, tree) = self.flatten(&out, span)?;
            Ok((outs, tree, n_real))
        })();
        match r {
            Ok((outs, tree, n_real)) => {
                let frame = self.pop_frame();
                let func = frame.b.finish(&outs).map_err(|e| self.ir_err(e, span))?;
                let captures = frame.captures.iter().map(|&(o, _)| Tv { level: self.level(), v: o }).collect();
                Ok(Standalone { func, n_real, captures, out: tree })
            }
            Err(e) => {
                self.pop_frame();
                Err(e)
            }
        }
    }

    /// Inlines `func` at the current frame and restores the location.
    pub fn inline(&mut self, func: &Func, args: &[Value], span: &Span) -> Result<Vec<Value>, Diagnostic> {
        let r = self.b().inline(func, args);
        self.restore_loc();
        self.ir(r, span)
    }

    // ----- materialising values -----

    /// A constant tensor of `dtype` from static data.
    pub fn const_tensor(
        &mut self,
        shape: &[usize],
        data: &[f64],
        dtype: DType,
        span: &Span,
    ) -> Result<Value, Diagnostic> {
        let ty = TensorType::new(dtype, shape.to_vec());
        if data.len() == 1 && shape.is_empty() {
            let r = self.b().scalar(data[0], dtype);
            return self.ir(r, span);
        }
        let t = Tensor::from_fn(&ty, |i| data[i]);
        let r = self.b().constant(t);
        self.ir(r, span)
    }

    /// The value as a tensor of the current frame; literals get their
    /// default dtype (f32 for floats, i32 for integers).
    pub fn tensor(&mut self, v: &Val, span: &Span) -> Result<Value, Diagnostic> {
        match v {
            Val::T(tv) => Ok(self.import(*tv)),
            Val::Const(c) => self.const_tensor(&[], &[c.as_f64()], c.default_dtype(), span),
            Val::Dim(_, n) => self.const_tensor(&[], &[*n as f64], DType::I32, span),
            Val::Array { shape, data, kind } => {
                let dt = match kind {
                    value::ArrKind::Bool => DType::Bool,
                    value::ArrKind::Int => DType::I32,
                    value::ArrKind::Float => DType::F32,
                };
                let (shape, data) = (shape.clone(), data.clone());
                self.const_tensor(&shape, &data, dt, span)
            }
            other => Err(self.err(Stage::Type, span, format!("expected a tensor, found {}", other.describe()))),
        }
    }

    /// An integer literal that takes the dtype u32 must lie in `0..=2^32 - 1`
    /// (`x + -1` on a u32 `x` is an error, not a silent 0 or wrap).
    fn check_u32(&self, data: &[f64], span: &Span) -> Result<(), Diagnostic> {
        match data.iter().find(|&&x| !(0.0..=u32::MAX as f64).contains(&x)) {
            Some(x) => Err(self
                .err(Stage::Type, span, format!("{x} is out of range for u32"))
                .with_note(format!("note: u32 holds 0 to {}", u32::MAX))),
            None => Ok(()),
        }
    }

    /// The value as a tensor of `dtype`: literals take it (a float literal
    /// cannot become an integer, a number cannot become bool); tensors must
    /// already have it (nothing is cast silently).
    pub fn tensor_as(&mut self, v: &Val, dtype: DType, span: &Span) -> Result<Value, Diagnostic> {
        let bad = |this: &Self, what: String| {
            Err(this.err(Stage::Type, span, format!("expected a value of dtype {dtype}, found {what}")))
        };
        match v {
            Val::Const(c) => {
                let ok = match c {
                    Const::Int(_) => dtype != DType::Bool,
                    Const::Float(_) => dtype.is_float(),
                    Const::Bool(_) => dtype == DType::Bool,
                };
                if !ok {
                    return bad(self, v.describe());
                }
                if dtype == DType::U32 {
                    self.check_u32(&[c.as_f64()], span)?;
                }
                self.const_tensor(&[], &[c.as_f64()], dtype, span)
            }
            Val::Dim(_, n) if dtype != DType::Bool => self.const_tensor(&[], &[*n as f64], dtype, span),
            Val::Array { shape, data, kind } => {
                let ok = match kind {
                    value::ArrKind::Bool => dtype == DType::Bool,
                    value::ArrKind::Int => dtype != DType::Bool,
                    value::ArrKind::Float => dtype.is_float(),
                };
                if !ok {
                    return bad(self, format!("an array literal of {kind:?} elements").to_lowercase());
                }
                if dtype == DType::U32 {
                    self.check_u32(data, span)?;
                }
                let (shape, data) = (shape.clone(), data.clone());
                self.const_tensor(&shape, &data, dtype, span)
            }
            _ => {
                let t = self.tensor(v, span)?;
                let ty = self.ty(t);
                if ty.dtype != dtype {
                    return Err(self
                        .err(Stage::Type, span, format!("expected a value of dtype {dtype}, found {ty}"))
                        .with_note(format!("help: convert explicitly with `cast(x, {dtype})`")));
                }
                Ok(t)
            }
        }
    }

    /// Flattens a value into tensors of the current frame (depth first) and
    /// its structure. Functions and strings are not data.
    pub fn flatten(&mut self, v: &Val, span: &Span) -> Result<(Vec<Value>, Tree), Diagnostic> {
        match v {
            Val::Tuple(items) => {
                let mut outs = Vec::new();
                let mut trees = Vec::new();
                for it in items.iter() {
                    let (o, t) = self.flatten(it, span)?;
                    outs.extend(o);
                    trees.push(t);
                }
                Ok((outs, Tree::Tuple(trees)))
            }
            Val::F(f) => Err(self
                .err(Stage::Type, span, format!("`{}` is a function, not a value", f.describe()))
                .with_note("note: functions exist only while compiling; call it to get a value")
                .with_note("help: a def that takes or returns a function declares it with `fn` (`-> fn`), which makes it generic: specialised at each call")),
            Val::Str(_) | Val::None => {
                Err(self.err(Stage::Type, span, format!("expected a tensor or tuple, found {}", v.describe())))
            }
            _ => {
                let t = self.tensor(v, span)?;
                let ty = self.ty(t);
                Ok((vec![t], Tree::Leaf(ty)))
            }
        }
    }

    // ----- declared types -----

    /// Checks `v` against a declared type, giving literals the declared
    /// dtype and binding dimension variables in `dims` (`what` names the
    /// value in messages: "argument `w` of `loss`").
    pub fn coerce(
        &mut self,
        v: &Val,
        ty: &ast::Type,
        dims: &mut Dims,
        span: &Span,
        what: &str,
    ) -> Result<Val, Diagnostic> {
        use ast::TypeKind;
        match &ty.kind {
            TypeKind::Tuple(ts) => {
                let Val::Tuple(items) = v else {
                    return Err(self.type_mismatch(ty, dims, &v.describe(), span, what));
                };
                if items.len() != ts.len() {
                    return Err(self.type_mismatch(ty, dims, &format!("a tuple of {}", items.len()), span, what));
                }
                let mut out = Vec::new();
                for (i, (it, t)) in items.iter().zip(ts).enumerate() {
                    out.push(self.coerce(it, t, dims, span, &format!("element {i} of {what}"))?);
                }
                Ok(Val::tuple(out))
            }
            TypeKind::Scalar(s) => self.coerce_tensor(v, &[], *s, ty, dims, span, what),
            TypeKind::Tensor { dims: ds, dtype } => self.coerce_tensor(v, ds, *dtype, ty, dims, span, what),
            TypeKind::Var(_) | TypeKind::Fn => self.coerce_generic(v, ty, dims, &mut generic::TVars::new(), span, what),
        }
    }

    fn coerce_tensor(
        &mut self,
        v: &Val,
        ds: &[ast::Dim],
        dtype: ast::ScalarType,
        ty: &ast::Type,
        dims: &mut Dims,
        span: &Span,
        what: &str,
    ) -> Result<Val, Diagnostic> {
        let dt = dtype_of(dtype);
        if matches!(v, Val::Tuple(_) | Val::F(_) | Val::Str(_) | Val::None) {
            return Err(self.type_mismatch(ty, dims, &v.describe(), span, what));
        }
        let t = match v {
            Val::T(_) => {
                let t = self.tensor(v, span)?;
                if self.ty(t).dtype != dt {
                    let got = self.ty(t).to_string();
                    return Err(self.type_mismatch(ty, dims, &got, span, what));
                }
                t
            }
            _ => self.tensor_as(v, dt, span).map_err(|_| self.type_mismatch(ty, dims, &v.describe(), span, what))?,
        };
        let tt = self.ty(t);
        if tt.rank() != ds.len() {
            return Err(self.type_mismatch(ty, dims, &tt.to_string(), span, what));
        }
        for (i, d) in ds.iter().enumerate() {
            let got = tt.shape[i];
            match d {
                ast::Dim::Lit(n, _) => {
                    if *n != got {
                        return Err(self.type_mismatch(ty, dims, &tt.to_string(), span, what));
                    }
                }
                ast::Dim::Name(id) => match dims.get(&id.name) {
                    Some((n, from)) if *n != got => {
                        return Err(self
                            .err(
                                Stage::Type,
                                span,
                                format!("dimension `{}` is {got} in {what} but {n} in {from}", id.name),
                            )
                            .with_label(format!("this is {tt}, declared {}", show_type(ty, dims)))
                            .with_secondary(id.span.clone(), format!("`{}` declared here", id.name)));
                    }
                    Some(_) => {}
                    None => {
                        dims.insert(id.name.clone(), (got, what.to_string()));
                    }
                },
            }
        }
        Ok(Val::T(self.tv(t)))
    }

    fn type_mismatch(&self, ty: &ast::Type, dims: &Dims, got: &str, span: &Span, what: &str) -> Diagnostic {
        self.err(Stage::Type, span, format!("{what} must be {}, found {got}", show_type(ty, dims)))
            .with_label(format!("this is {got}"))
            .with_secondary(ty.span.clone(), "declared here")
    }

    // ----- defs -----

    /// Calls def `idx` (attributes applied when `with_attrs`).
    pub fn call_def(
        &mut self,
        idx: usize,
        with_attrs: bool,
        args: Vec<ArgVal>,
        span: &Span,
    ) -> Result<Val, Diagnostic> {
        let p = self.p;
        let def = &p.program.defs[idx];
        if def.is_generic() {
            return self.call_generic(idx, args, span);
        }
        let name = def.name.name.as_str();
        let n_extra = if with_attrs { def.attrs.iter().filter(|a| a.is(ast::AttrKind::Jvp)).count() } else { 0 };
        let args = order_args(
            self,
            &def.params.iter().map(|p| p.name.name.clone()).collect::<Vec<_>>(),
            n_extra,
            args,
            name,
            span,
        )?;
        let mut dims = Dims::new();
        let mut coerced = Vec::new();
        for (a, prm) in args.iter().zip(&def.params) {
            let what = format!("argument `{}` of `{name}`", prm.name.name);
            coerced.push(self.coerce(&a.val, &prm.ty, &mut dims, &a.span, &what)?);
        }
        let attrs: Vec<&ast::Attr> = if with_attrs {
            def.attrs.iter().filter(|a| a.kind().is_some_and(ast::AttrKind::is_derivative)).collect()
        } else {
            Vec::new()
        };
        if !attrs.is_empty() {
            let r = transform::call_attr_def(self, idx, &attrs, coerced, &args, span)?;
            return match &def.ret {
                Some(rt) => {
                    let what = format!("the result of `{name}`");
                    self.coerce(&r, rt, &mut dims, span, &what)
                }
                None => Ok(r),
            };
        }
        let mut leaves = Vec::new();
        let mut trees = Vec::new();
        for (c, a) in coerced.iter().zip(&args) {
            let (l, t) = self.flatten(c, &a.span)?;
            leaves.extend(l);
            trees.push(t);
        }
        let inst = self.instantiate(idx, &trees, span)?;
        if with_attrs {
            if let Some(rule) = custom::rule_of(self, def)? {
                return custom::call(self, rule, idx, inst.func.clone(), &inst.out, &trees, &leaves, span);
            }
        }
        let outs = self.inline(&inst.func.clone(), &leaves, span)?;
        let level = self.level();
        Ok(inst
            .out
            .rebuild(&mut outs.into_iter().map(|v| Tv { level, v }))
            .expect("internal error: an instance returns its tree's leaves"))
    }

    /// The def at `idx` lowered for arguments of these structures (cached).
    pub fn instantiate(&mut self, idx: usize, args: &[Tree], span: &Span) -> Result<Rc<Inst>, Diagnostic> {
        let key = (idx, args.to_vec());
        let hit = self.p.cache.borrow().get(&key).cloned();
        if let Some(i) = hit {
            self.reach(self.depth + i.height, span)?;
            return Ok(i);
        }
        let p = self.p;
        let def = &p.program.defs[idx];
        if self.active.contains(&idx) {
            return Err(self
                .err(Stage::Type, span, format!("`{}` calls itself; recursion is not supported", def.name.name))
                .with_secondary(def.name.span.clone(), "defined here")
                .with_note("help: write loops with `scan`, `fori` or `while`"));
        }
        let (depth0, peak0, fallbacks0, axis_uses0) = (self.depth, self.peak, self.branch_fallbacks, self.axis_uses);
        self.peak = depth0;
        if let Err(e) = self.enter(span) {
            self.leave();
            self.peak = self.peak.max(peak0);
            return Err(e);
        }
        self.active.push(idx);
        let saved = self.loc.clone();
        let r = self.standalone(&def.name.name, args, &def.body.span, |this, vals| {
            let mut dims = Dims::new();
            let mut env = Env::default();
            let mut bound = Vec::new();
            for (v, prm) in vals.iter().zip(&def.params) {
                let what = format!("parameter `{}`", prm.name.name);
                let v = this.coerce(v, &prm.ty, &mut dims, &prm.span, &what)?;
                label_param(this, &v, &prm.ty);
                bound.push(v);
            }
            for (d, (n, _)) in &dims {
                env = env.bind(d, Val::Dim(d.as_str().into(), *n));
            }
            for (v, prm) in bound.into_iter().zip(&def.params) {
                this.name_value(&v, &prm.name.name);
                env = env.bind(&prm.name.name, v);
            }
            let out = this.expr(&def.body, &env)?;
            // With `@grad`/`@jvp` the declared type is the derivative's, checked by `call_def`.
            let derived = def.attrs.iter().any(|a| a.kind().is_some_and(ast::AttrKind::is_derivative));
            match &def.ret {
                Some(rt) if !derived => {
                    let what = format!("the result of `{}`", def.name.name);
                    let span = result_span(&def.body);
                    this.coerce(&out, rt, &mut dims, &span, &what)
                }
                _ => Ok(out),
            }
        });
        self.loc = saved;
        self.restore_loc();
        self.active.pop();
        self.leave();
        let height = self.peak - depth0;
        self.peak = self.peak.max(peak0);
        let st = r?;
        if !st.captures.is_empty() {
            return Err(self.err(Stage::Type, span, "internal error: a def captured an outer value"));
        }
        let inst = Rc::new(Inst { func: Arc::new(st.func), out: st.out, height });
        if self.branch_fallbacks == fallbacks0 && self.axis_uses == axis_uses0 {
            self.p.cache.borrow_mut().insert(key, inst.clone());
        }
        Ok(inst)
    }
}

/// The span of a body's final expression (where a result mismatch is shown).
fn result_span(e: &ast::Expr) -> Span {
    match &e.kind {
        ast::ExprKind::Block { result, .. } => result_span(result),
        _ => e.span.clone(),
    }
}

fn label_param(this: &mut Lower<'_>, v: &Val, ty: &ast::Type) {
    if let (Val::T(tv), ast::TypeKind::Tensor { dims, .. }) = (v, &ty.kind) {
        let l: Vec<Option<Rc<str>>> = dims
            .iter()
            .map(|d| match d {
                ast::Dim::Name(id) => Some(Rc::from(id.name.as_str())),
                ast::Dim::Lit(..) => None,
            })
            .collect();
        this.set_labels(tv.v, Rc::new(l));
    }
}

/// Matches positional and keyword arguments to parameter names; `n_extra`
/// more positional arguments may follow (tangents of `@jvp` defs).
pub fn order_args(
    this: &Lower<'_>,
    names: &[String],
    n_extra: usize,
    args: Vec<ArgVal>,
    fname: &str,
    span: &Span,
) -> Result<Vec<ArgVal>, Diagnostic> {
    let total = names.len() + n_extra;
    let mut slots: Vec<Option<ArgVal>> = vec![None; total];
    let mut pos = 0;
    for a in args {
        match &a.name {
            None => {
                if pos >= total {
                    return Err(this
                        .err(Stage::Type, &a.span, format!("`{fname}` takes {total} arguments, but more were given"))
                        .with_label("unexpected argument"));
                }
                slots[pos] = Some(a);
                pos += 1;
            }
            Some(n) => {
                let Some(i) = names.iter().position(|p| *p == n.name) else {
                    return Err(this.err(
                        Stage::Type,
                        &n.span,
                        format!("`{fname}` has no parameter named `{}`", n.name),
                    ));
                };
                if slots[i].is_some() {
                    return Err(this.err(Stage::Type, &n.span, format!("parameter `{}` is given twice", n.name)));
                }
                slots[i] = Some(a);
            }
        }
    }
    let missing: Vec<String> = slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_none())
        .map(|(i, _)| {
            names.get(i).map_or_else(|| format!("tangent {}", i.saturating_sub(names.len())), |n| format!("`{n}`"))
        })
        .collect();
    if !missing.is_empty() {
        return Err(this.err(
            Stage::Type,
            span,
            format!("`{fname}` takes {total} arguments; missing {}", missing.join(", ")),
        ));
    }
    Ok(slots.into_iter().flatten().collect())
}

pub fn dtype_of(s: ast::ScalarType) -> DType {
    match s {
        ast::ScalarType::F16 => DType::F16,
        ast::ScalarType::F32 => DType::F32,
        ast::ScalarType::F64 => DType::F64,
        ast::ScalarType::I32 => DType::I32,
        ast::ScalarType::I64 => DType::I64,
        ast::ScalarType::U32 => DType::U32,
        ast::ScalarType::Bool => DType::Bool,
    }
}

/// A declared type as written, with the sizes of bound dimension names: `tensor[n=3, f32]`.
pub fn show_type(ty: &ast::Type, dims: &Dims) -> String {
    use ast::TypeKind;
    match &ty.kind {
        TypeKind::Scalar(s) => s.keyword().to_string(),
        TypeKind::Var(id) => id.name.clone(),
        TypeKind::Fn => "fn".to_string(),
        TypeKind::Tuple(ts) => format!("({})", ts.iter().map(|t| show_type(t, dims)).collect::<Vec<_>>().join(", ")),
        TypeKind::Tensor { dims: ds, dtype } => {
            let mut parts: Vec<String> = ds
                .iter()
                .map(|d| match d {
                    ast::Dim::Lit(n, _) => n.to_string(),
                    ast::Dim::Name(id) => match dims.get(&id.name) {
                        Some((n, _)) => format!("{}={n}", id.name),
                        None => id.name.clone(),
                    },
                })
                .collect();
            parts.push(dtype.keyword().to_string());
            format!("tensor[{}]", parts.join(", "))
        }
    }
}

fn op_name(prim: &str) -> &str {
    prim.split('[').next().unwrap_or(prim)
}

fn types_str(ts: &[TensorType]) -> String {
    ts.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
}
