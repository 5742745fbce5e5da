//! The syntax tree of a graft program, as the parser produces it.
//!
//! Every node carries the byte span of the source it came from, so any later
//! stage (checker, lowering, transforms, run time) can point at the user's
//! text. The tree is deliberately close to the surface syntax: sugar such as
//! `x |> f` and transforms written as calls stay distinct nodes so `graft
//! ast` can print what the user wrote; the checker gives them meaning.

use std::fmt;

/// Byte range into the source text.
pub type Span = std::ops::Range<usize>;

/// A name with where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

impl fmt::Display for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// A whole source file: its top-level definitions, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    pub defs: Vec<Def>,
}

/// `@attr(...)* def name(params) -> ret = expr` or `... { block }`.
#[derive(Debug, Clone, PartialEq)]
pub struct Def {
    pub attrs: Vec<Attr>,
    pub name: Ident,
    /// Type parameters `def f[T, U](...)`: names that stand for any value's
    /// type (a tensor of any rank, a tuple tree, a function), fixed at each
    /// call (docs/language.md, "Generic and higher-order defs").
    pub tparams: Vec<Ident>,
    pub params: Vec<Param>,
    /// Declared result type (`-> T`), if written.
    pub ret: Option<Type>,
    /// The body; a `{ ... }` body is an [`ExprKind::Block`].
    pub body: Expr,
    /// From `def` (or the first attribute) to the end of the body.
    pub span: Span,
}

/// An attribute before a definition: `@grad(w)`, `@jvp(x)`,
/// `@custom_vjp(fwd, bwd)`, `@custom_jvp(rule)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Attr {
    pub name: Ident,
    pub args: Vec<Arg>,
    pub span: Span,
}

/// The attributes a def may carry (`graft check` rejects any other name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttrKind {
    /// `@grad(p)`: the def is the gradient of its body in `p`.
    Grad,
    /// `@jvp(p)`: the def is the JVP of its body with a tangent for `p`.
    Jvp,
    /// `@custom_vjp(fwd, bwd)`.
    CustomVjp,
    /// `@custom_jvp(rule)`.
    CustomJvp,
}

impl AttrKind {
    /// The attribute's name as written after `@`.
    pub fn name(self) -> &'static str {
        match self {
            AttrKind::Grad => "grad",
            AttrKind::Jvp => "jvp",
            AttrKind::CustomVjp => "custom_vjp",
            AttrKind::CustomJvp => "custom_jvp",
        }
    }

    /// Whether the def is a derivative of its body (`@grad`, `@jvp`).
    pub fn is_derivative(self) -> bool {
        matches!(self, AttrKind::Grad | AttrKind::Jvp)
    }

    /// Whether it attaches a custom derivative rule.
    pub fn is_custom_rule(self) -> bool {
        matches!(self, AttrKind::CustomVjp | AttrKind::CustomJvp)
    }
}

impl Attr {
    /// Which attribute this is, or `None` for an unknown name.
    pub fn kind(&self) -> Option<AttrKind> {
        Some(match self.name.name.as_str() {
            "grad" => AttrKind::Grad,
            "jvp" => AttrKind::Jvp,
            "custom_vjp" => AttrKind::CustomVjp,
            "custom_jvp" => AttrKind::CustomJvp,
            _ => return None,
        })
    }

    /// Whether this is the attribute `kind`.
    pub fn is(&self, kind: AttrKind) -> bool {
        self.kind() == Some(kind)
    }
}

/// A typed parameter of a definition.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub name: Ident,
    pub ty: Type,
    pub span: Span,
}

/// Element types written in source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarType {
    F16,
    F32,
    F64,
    I32,
    I64,
    Bool,
    U32,
}

impl ScalarType {
    /// The keyword as written in source (`f32`, `bool`, ...).
    pub fn keyword(self) -> &'static str {
        match self {
            ScalarType::F16 => "f16",
            ScalarType::F32 => "f32",
            ScalarType::F64 => "f64",
            ScalarType::I32 => "i32",
            ScalarType::I64 => "i64",
            ScalarType::Bool => "bool",
            ScalarType::U32 => "u32",
        }
    }
}

/// A type annotation.
#[derive(Debug, Clone, PartialEq)]
pub struct Type {
    pub kind: TypeKind,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TypeKind {
    /// `f32`, `i32`, `bool`, ... (a rank-0 tensor).
    Scalar(ScalarType),
    /// `tensor[d1, ..., dk, dtype]`.
    Tensor { dims: Vec<Dim>, dtype: ScalarType },
    /// `(A, B, ...)`.
    Tuple(Vec<Type>),
    /// A type parameter of the enclosing def (`T` in `def f[T](x: T)`).
    Var(Ident),
    /// `fn`: any function value (a def, a lambda, a builtin, a transform).
    Fn,
}

impl Type {
    /// Whether the type mentions a type parameter or `fn` (such a def is
    /// generic: specialised at each call, never an entry).
    pub fn is_generic(&self) -> bool {
        match &self.kind {
            TypeKind::Scalar(_) | TypeKind::Tensor { .. } => false,
            TypeKind::Tuple(ts) => ts.iter().any(Type::is_generic),
            TypeKind::Var(_) | TypeKind::Fn => true,
        }
    }
}

impl Def {
    /// Whether the def is generic: it has type parameters, or a parameter or
    /// its result is (or holds) a function (`fn`).
    pub fn is_generic(&self) -> bool {
        !self.tparams.is_empty()
            || self.params.iter().any(|p| p.ty.is_generic())
            || self.ret.as_ref().is_some_and(Type::is_generic)
    }
}

/// One dimension in a tensor type.
#[derive(Debug, Clone, PartialEq)]
pub enum Dim {
    /// An integer literal: `3`.
    Lit(usize, Span),
    /// A dimension variable: `n`, `batch` (bound by argument shapes at a call).
    Name(Ident),
}

/// An expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

/// Binary operators, by increasing precedence groups:
/// `or` < `and` < comparisons < `+ -` < `* / @` < `**` (right-assoc).
/// `|>` binds loosest of all and is [`ExprKind::Pipe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    /// `//`: floor division (Python semantics; exact on integers)
    FloorDiv,
    /// `%`: remainder with the divisor's sign (Python semantics)
    Mod,
    Pow,
    MatMul,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl BinOp {
    /// The operator as written in source.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::FloorDiv => "//",
            BinOp::Mod => "%",
            BinOp::Pow => "**",
            BinOp::MatMul => "@",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::And => "and",
            BinOp::Or => "or",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnOp {
    /// `-x`
    Neg,
    /// `not x`
    Not,
}

/// The transforms, shared with every front end (`graft_core::transform`).
/// Most are reserved words (`grad`, `vmap`, ...): applying one always
/// needs a function argument, so a bare `grad` or `grad()` is a parse
/// error. `jacobian` and `linearize` are soft keywords (GradBench programs
/// define a `def jacobian`): a call of the name is the transform unless a
/// def or a local of that name is in scope. `custom_jvp` and `custom_vjp`
/// are def attributes (`@custom_vjp(fwd, bwd)`).
pub use graft_core::transform::Kind as TransformKind;

/// The reserved transform keywords (see [`TransformKind`]).
pub fn transform_keyword(s: &str) -> Option<TransformKind> {
    Some(match s {
        "grad" => TransformKind::Grad,
        "value_and_grad" => TransformKind::ValueAndGrad,
        "jvp" => TransformKind::Jvp,
        "vjp" => TransformKind::Vjp,
        "vmap" => TransformKind::Vmap,
        "checkpoint" => TransformKind::Checkpoint,
        "jacfwd" => TransformKind::Jacfwd,
        "jacrev" => TransformKind::Jacrev,
        "hessian" => TransformKind::Hessian,
        _ => return None,
    })
}

/// The soft transform keywords: transforms when called and not shadowed.
pub fn soft_transform(s: &str) -> Option<TransformKind> {
    Some(match s {
        "jacobian" => TransformKind::Jacobian,
        "linearize" => TransformKind::Linearize,
        _ => return None,
    })
}

/// How the language spells a transform: a keyword, a soft keyword, or a
/// def attribute. Every [`TransformKind`] has one (tested).
pub fn transform_spelling(kind: TransformKind) -> &'static str {
    match kind {
        TransformKind::CustomJvp => "@custom_jvp(rule)",
        TransformKind::CustomVjp => "@custom_vjp(fwd, bwd)",
        other => other.name(),
    }
}

/// A call argument, positional or `name=value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Arg {
    pub name: Option<Ident>,
    pub value: Expr,
    pub span: Span,
}

/// The methods of `x.at[...]`: the updates, then the read.
pub const AT_METHODS: &[&str] = &["set", "add", "mul", "min", "max", "get"];

/// `base.at[items].method(args)` (see [`ExprKind::At`]).
#[derive(Debug, Clone, PartialEq)]
pub struct AtExpr {
    pub base: Expr,
    pub items: Vec<IndexItem>,
    pub method: Ident,
    pub args: Vec<Arg>,
}

/// One entry of an indexing expression `x[...]`.
#[derive(Debug, Clone, PartialEq)]
pub enum IndexItem {
    /// `x[i]`: removes the axis.
    Single(Expr),
    /// `x[a:b:c]`, any part optional; keeps the axis.
    Slice { start: Option<Expr>, stop: Option<Expr>, step: Option<Expr>, span: Span },
}

/// A binding pattern (`let` left-hand sides, lambda parameters, match arms).
#[derive(Debug, Clone, PartialEq)]
pub struct Pattern {
    pub kind: PatternKind,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum PatternKind {
    /// Binds a name.
    Var(Ident),
    /// `_`
    Wildcard,
    /// `(p1, p2, ...)`
    Tuple(Vec<Pattern>),
    /// An integer literal (match arms only; may be negative).
    Int(i64),
    /// `true` / `false` (match arms only).
    Bool(bool),
}

/// A statement inside a block.
#[derive(Debug, Clone, PartialEq)]
pub enum Stmt {
    /// `let pat (: type)? = value`
    Let { pat: Pattern, ty: Option<Type>, value: Expr, span: Span },
}

/// A parameter of a lambda: a pattern with an optional type.
#[derive(Debug, Clone, PartialEq)]
pub struct LambdaParam {
    pub pat: Pattern,
    pub ty: Option<Type>,
}

/// One arm of a `match`.
#[derive(Debug, Clone, PartialEq)]
pub struct MatchArm {
    pub pat: Pattern,
    pub body: Expr,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    /// Integer literal (untyped until checked: usable as a float).
    Int(i64),
    /// Float literal (takes the dtype of its context).
    Float(f64),
    Bool(bool),
    /// String literal (einsum specs).
    Str(String),
    /// `[a, b, ...]`: an array literal (nested for higher rank).
    Array(Vec<Expr>),
    /// `(a, b, ...)` with at least two elements, or `(a,)`.
    Tuple(Vec<Expr>),
    /// A name: variable, function, or builtin.
    Var(Ident),
    /// `t.0`
    Field {
        base: Box<Expr>,
        index: usize,
        index_span: Span,
    },
    Unary {
        op: UnOp,
        operand: Box<Expr>,
    },
    Binary {
        op: BinOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    /// `f(args)`; `f` is any expression (`grad(f)(x)` calls a transform's result).
    Call {
        func: Box<Expr>,
        args: Vec<Arg>,
    },
    /// `x |> f` (meaning `f(x)`); kept distinct for `graft ast`.
    Pipe {
        value: Box<Expr>,
        func: Box<Expr>,
    },
    /// A transform applied to a function: `grad(f, wrt=(a, b))`,
    /// `vmap(f, axis=0)`, `jvp(f, (x,), (t,))`. `func` is the first
    /// positional argument; `args` the rest, in order.
    Transform {
        kind: TransformKind,
        func: Box<Expr>,
        args: Vec<Arg>,
    },
    /// `fn (a, b) -> body`
    Lambda {
        params: Vec<LambdaParam>,
        body: Box<Expr>,
    },
    /// `if c then a else b`
    If {
        cond: Box<Expr>,
        then: Box<Expr>,
        otherwise: Box<Expr>,
    },
    /// `match x { p => e, ... }`
    Match {
        scrutinee: Box<Expr>,
        arms: Vec<MatchArm>,
    },
    /// `x[i, a:b, ::-1]`
    Index {
        base: Box<Expr>,
        items: Vec<IndexItem>,
    },
    /// `x.at[items].method(args)`: a functional update (`set add mul min
    /// max`) or read (`get`) of the indexed part of `x`, as in JAX.
    At(Box<AtExpr>),
    /// `{ stmts... result }`
    Block {
        stmts: Vec<Stmt>,
        result: Box<Expr>,
    },
}
