//! The parser: tokens to [`ast::Program`], recursive descent with one
//! function per precedence level (see docs/language.md for the grammar).
//!
//! Line breaks: the lexer marks tokens that start a new line; a line break
//! ends an expression only where [`Parser::nl_sig`] is set (at the top level
//! and directly inside `{ }` blocks and `match` bodies) and only before a
//! token that would otherwise continue it as an infix operator, a call
//! `(` or an index `[`. `|>` continues across line breaks, and a line break
//! after an operator, `=`, `->`, `then` or `else` is plain layout because
//! the parser is then looking for an operand, which may start anywhere.
//!
//! Invariants: the parser never panics and always terminates: every loop
//! consumes a token or exits, and nesting (recursion and left-leaning
//! operator chains alike) is capped at [`MAX_DEPTH`], which also bounds the
//! depth of every tree it returns, so later recursive passes are safe.
//! Errors inside a definition abandon that definition and resume at the next
//! `def` (or line-leading `@`), so one run reports one error per broken
//! definition.

mod expr;

use crate::ast::*;
use crate::diag::{Diagnostic, Stage};
use crate::lexer::{Tok, Token};

/// Nesting limit for expressions, types and patterns: deep enough for any
/// hand-written program, shallow enough that the parser and every later
/// recursive pass stay far from the stack limit.
pub const MAX_DEPTH: usize = 200;

/// At most this many diagnostics per run: later ones are mostly echoes.
const MAX_ERRORS: usize = 20;

type PResult<T> = Result<T, Diagnostic>;

pub(crate) struct Parser<'t> {
    toks: &'t [Token],
    pos: usize,
    /// Whether a line break ends the current expression.
    nl_sig: bool,
    depth: usize,
    /// The type parameters of the def whose signature is being parsed
    /// (`T` in `def f[T](x: T) -> T`); empty elsewhere, so a type
    /// parameter is a type only in its def's signature.
    tparams: Vec<String>,
}

fn join(a: &Span, b: &Span) -> Span {
    a.start..b.end.max(a.start)
}

fn err(span: Span, msg: impl Into<String>) -> Diagnostic {
    Diagnostic::new(Stage::Parse, span, msg)
}

/// Parses a whole program, or returns the diagnostics (at least one).
pub fn parse_tokens(toks: &[Token]) -> Result<Program, Vec<Diagnostic>> {
    let mut p = Parser::new(toks);
    let mut defs = Vec::new();
    let mut errors = Vec::new();
    while !p.at(&Tok::Eof) && errors.len() < MAX_ERRORS {
        let start = p.pos;
        match p.def() {
            Ok(d) => defs.push(d),
            Err(e) => {
                errors.push(e);
                p.recover(start);
            }
        }
    }
    if errors.is_empty() {
        Ok(Program { defs })
    } else {
        if !p.at(&Tok::Eof) {
            if let Some(last) = errors.last_mut() {
                last.notes.push(format!(
                    "note: parsing stopped after {MAX_ERRORS} errors; the rest of the file was not read"
                ));
            }
        }
        Err(errors)
    }
}

/// Parses a single expression spanning all tokens (for `--input` literals,
/// tests and tools).
pub fn parse_expr_tokens(toks: &[Token]) -> Result<Expr, Vec<Diagnostic>> {
    let mut p = Parser::new(toks);
    let run = |p: &mut Parser| -> PResult<Expr> {
        let e = p.expr()?;
        if !p.at(&Tok::Eof) {
            return Err(p.unexpected("the end of the input after this expression"));
        }
        Ok(e)
    };
    run(&mut p).map_err(|e| vec![e])
}

impl<'t> Parser<'t> {
    fn new(toks: &'t [Token]) -> Self {
        Parser { toks, pos: 0, nl_sig: true, depth: 0, tparams: Vec::new() }
    }

    // ----- token access -------------------------------------------------

    fn peek(&self) -> &Token {
        // The lexer guarantees a final Eof; `min` keeps us on it.
        &self.toks[self.pos.min(self.toks.len() - 1)]
    }

    fn nth(&self, n: usize) -> &Tok {
        &self.toks[(self.pos + n).min(self.toks.len() - 1)].tok
    }

    fn tok(&self) -> &Tok {
        &self.peek().tok
    }

    fn span(&self) -> Span {
        self.peek().span.clone()
    }

    fn prev_end(&self) -> usize {
        if self.pos == 0 {
            0
        } else {
            self.toks[(self.pos - 1).min(self.toks.len() - 1)].span.end
        }
    }

    fn at(&self, t: &Tok) -> bool {
        std::mem::discriminant(self.tok()) == std::mem::discriminant(t)
    }

    fn bump(&mut self) -> Token {
        let t = self.peek().clone();
        if t.tok != Tok::Eof {
            self.pos += 1;
        }
        t
    }

    fn eat(&mut self, t: &Tok) -> Option<Span> {
        if self.at(t) {
            Some(self.bump().span)
        } else {
            None
        }
    }

    /// Whether the next token starts a new line where line breaks end
    /// expressions.
    fn line_break(&self) -> bool {
        self.nl_sig && self.peek().nl_before
    }

    fn with_nl<T>(&mut self, sig: bool, f: impl FnOnce(&mut Self) -> T) -> T {
        let saved = std::mem::replace(&mut self.nl_sig, sig);
        let r = f(self);
        self.nl_sig = saved;
        r
    }

    fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            let d = err(self.span(), "expression is nested too deeply")
                .with_label(format!("more than {MAX_DEPTH} levels of nesting here"))
                .with_note("help: split it up with `let` bindings");
            return Err(d);
        }
        Ok(())
    }

    /// Runs `f` one nesting level deeper.
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> PResult<T>) -> PResult<T> {
        self.enter()?;
        let r = f(self);
        self.depth -= 1;
        r
    }

    // ----- errors -------------------------------------------------------

    /// "expected X, found Y" at the current token; "unexpected end of
    /// input" when the input has run out.
    fn unexpected(&self, expected: &str) -> Diagnostic {
        let t = self.peek();
        if t.tok == Tok::Eof {
            err(t.span.clone(), "unexpected end of input").with_label(format!("expected {expected}"))
        } else {
            err(t.span.clone(), format!("expected {expected}, found {}", t.tok.describe()))
                .with_label(format!("expected {expected}"))
        }
    }

    /// Comma-separated items inside `( )`, stopping before the `)` (or at
    /// anything that is not a comma); also says whether a trailing comma was
    /// written, which makes `(x,)` a 1-tuple.
    fn paren_items<T>(&mut self, mut item: impl FnMut(&mut Self) -> PResult<T>) -> PResult<(Vec<T>, bool)> {
        let mut items = Vec::new();
        loop {
            items.push(item(self)?);
            if self.eat(&Tok::Comma).is_none() {
                return Ok((items, false));
            }
            if self.at(&Tok::RParen) {
                return Ok((items, true));
            }
        }
    }

    /// Error for a bracket that is not closed where expected.
    fn unclosed(&self, open: &Span, close: &Tok, what: &str) -> Diagnostic {
        let t = self.peek();
        let c = close.text();
        if t.tok == Tok::Eof {
            err(t.span.clone(), "unexpected end of input")
                .with_label(format!("expected `{c}` to close the {what}"))
                .with_secondary(open.clone(), format!("the {what} opened here is never closed"))
        } else {
            let mut d = err(t.span.clone(), format!("expected `{c}` to close the {what} opened here"))
                .with_label(format!("found {}", t.tok.describe()))
                .with_secondary(open.clone(), format!("the {what} opened here"));
            let infix = matches!(
                t.tok,
                Tok::Plus
                    | Tok::Star
                    | Tok::Slash
                    | Tok::SlashSlash
                    | Tok::Percent
                    | Tok::StarStar
                    | Tok::At
                    | Tok::EqEq
                    | Tok::NotEq
                    | Tok::Lt
                    | Tok::Le
                    | Tok::Gt
                    | Tok::Ge
                    | Tok::And
                    | Tok::Or
            );
            if *close == Tok::RBrace && infix && t.nl_before {
                d = d.with_note(format!(
                    "help: a line cannot start with `{}`; to continue an expression, end the previous line with the operator",
                    t.tok.text()
                ));
            } else if *close != Tok::RBrace && !matches!(t.tok, Tok::RParen | Tok::RBracket | Tok::RBrace) {
                d = d.with_note("help: separate items with `,`");
            }
            d
        }
    }

    /// Skips to where the next definition plausibly starts.
    fn recover(&mut self, start: usize) {
        if self.pos == start {
            self.bump();
        }
        loop {
            let line_attr = self.at(&Tok::At) && self.peek().nl_before;
            if self.at(&Tok::Eof) || self.at(&Tok::Def) || line_attr {
                break;
            }
            self.bump();
        }
        self.depth = 0;
        self.nl_sig = true;
    }

    // ----- names --------------------------------------------------------

    /// A name being bound or defined (not a transform keyword).
    fn binder(&mut self, what: &str) -> PResult<Ident> {
        match self.tok().clone() {
            Tok::Ident(name) => {
                let span = self.span();
                if crate::ast::transform_keyword(&name).is_some() {
                    return Err(err(span, format!("`{name}` is a transform and cannot be used as a name"))
                        .with_label("reserved word")
                        .with_note(format!("help: pick another name, e.g. `{name}_`")));
                }
                self.bump();
                Ok(Ident { name, span })
            }
            t if !t.text().is_empty() && t.text().chars().all(|c| c.is_ascii_alphabetic()) => {
                Err(err(self.span(), format!("`{}` is a keyword and cannot be used as a name", t.text()))
                    .with_label(format!("expected {what}")))
            }
            _ => Err(self.unexpected(what)),
        }
    }

    // ----- definitions --------------------------------------------------

    fn def(&mut self) -> PResult<Def> {
        let start = self.span();
        let mut attrs = Vec::new();
        while self.at(&Tok::At) {
            attrs.push(self.attr()?);
        }
        if !self.at(&Tok::Def) {
            let mut d = self.unexpected(if attrs.is_empty() { "`def`" } else { "`def` after the attribute" });
            if attrs.is_empty() && self.peek().tok != Tok::Eof {
                d = d.with_note("note: a graft file is a list of `def name(params) -> type = expr` definitions");
            }
            return Err(d);
        }
        self.bump();
        let name = self.binder("the function's name")?;
        let tparams = if let Some(open) = self.eat(&Tok::LBracket) {
            self.with_nl(false, |p| p.type_params(&open))?
        } else {
            Vec::new()
        };
        self.tparams = tparams.iter().map(|t| t.name.clone()).collect();
        let sig = self.signature(&name);
        self.tparams.clear();
        let (params, ret) = sig?;
        let body = if self.eat(&Tok::Assign).is_some() {
            self.expr()?
        } else if self.at(&Tok::LBrace) {
            self.block()?
        } else {
            let t = self.peek();
            let (msg, label) = if t.tok == Tok::Eof {
                ("unexpected end of input".to_string(), "`=` or `{` expected after the signature".to_string())
            } else {
                ("`=` or `{` expected after the signature".to_string(), format!("found {}", t.tok.describe()))
            };
            let mut d = err(t.span.clone(), msg).with_label(label);
            if matches!(t.tok, Tok::Colon) {
                d = d.with_note("help: the result type is written `-> type`, e.g. `def f(x: f32) -> f32 = x`");
            } else {
                d = d.with_note("help: write `= expr` or a block `{ let y = ...  y }`");
            }
            return Err(d);
        };
        // Another definition must not start on the same line as this one ends.
        if !self.at(&Tok::Eof) && !self.peek().nl_before {
            return Err(self
                .unexpected("a new line after the end of the definition")
                .with_secondary(body.span.clone(), "the definition's body ends here"));
        }
        let span = join(&start, &body.span);
        Ok(Def { attrs, name, tparams, params, ret, body, span })
    }

    /// `(params) [-> type]` after a def's name (and type parameters).
    fn signature(&mut self, name: &Ident) -> PResult<(Vec<Param>, Option<Type>)> {
        let open = match self.eat(&Tok::LParen) {
            Some(s) => s,
            None => {
                return Err(self
                    .unexpected("`(` and the parameter list")
                    .with_note(format!("help: a definition looks like `def {name}(x: f32) -> f32 = x`")))
            }
        };
        let params = self.with_nl(false, |p| p.params(&open))?;
        let ret = if self.eat(&Tok::Arrow).is_some() { Some(self.ty()?) } else { None };
        Ok((params, ret))
    }

    /// `[T, U]` after a def's name (the `[` already eaten).
    fn type_params(&mut self, open: &Span) -> PResult<Vec<Ident>> {
        let mut out: Vec<Ident> = Vec::new();
        loop {
            if let Some(close) = self.eat(&Tok::RBracket) {
                if out.is_empty() {
                    return Err(err(join(open, &close), "an empty type parameter list `[]`")
                        .with_label("name at least one type parameter, e.g. `[T]`, or leave out the brackets"));
                }
                return Ok(out);
            }
            let id = self.binder("a type parameter name")?;
            if scalar_type(&id.name).is_some() || id.name == "tensor" {
                return Err(err(id.span.clone(), format!("`{}` is a type and cannot be a type parameter", id.name))
                    .with_label("built-in type name")
                    .with_note("help: type parameters are new names, e.g. `def f[T](x: T) -> T`"));
            }
            if let Some(prev) = out.iter().find(|t| t.name == id.name) {
                return Err(err(id.span.clone(), format!("type parameter `{}` is declared twice", id.name))
                    .with_label("second declaration")
                    .with_secondary(prev.span.clone(), "first declared here"));
            }
            out.push(id);
            if self.eat(&Tok::Comma).is_none() && !self.at(&Tok::RBracket) {
                return Err(self.unclosed(open, &Tok::RBracket, "type parameter list"));
            }
        }
    }

    fn attr(&mut self) -> PResult<Attr> {
        let at = self.bump().span;
        let name = match self.tok().clone() {
            Tok::Ident(name) => Ident { name, span: self.bump().span },
            _ => return Err(self.unexpected("an attribute name after `@`, e.g. `@grad(w)`")),
        };
        let mut end = name.span.clone();
        let args = if let Some(open) = self.eat(&Tok::LParen) {
            let (args, close) = self.with_nl(false, |p| p.args(&open, "attribute's argument list"))?;
            end = close;
            args
        } else {
            Vec::new()
        };
        if !self.peek().nl_before && !self.at(&Tok::At) && !self.at(&Tok::Def) {
            return Err(self.unexpected("a new line or `def` after the attribute"));
        }
        Ok(Attr { name, args, span: join(&at, &end) })
    }

    fn params(&mut self, open: &Span) -> PResult<Vec<Param>> {
        let mut params: Vec<Param> = Vec::new();
        loop {
            if self.eat(&Tok::RParen).is_some() {
                return Ok(params);
            }
            let name = self.binder("a parameter name")?;
            if let Some(prev) = params.iter().find(|p| p.name.name == name.name) {
                return Err(err(name.span.clone(), format!("parameter `{name}` is declared twice"))
                    .with_label("second declaration")
                    .with_secondary(prev.name.span.clone(), "first declared here"));
            }
            if self.eat(&Tok::Colon).is_none() {
                return Err(err(name.span.clone(), format!("parameter `{name}` needs a type"))
                    .with_label("missing `: type`")
                    .with_note(format!("help: write e.g. `{name}: f32` or `{name}: tensor[n, f32]`")));
            }
            let ty = self.ty()?;
            params.push(Param { span: join(&name.span, &ty.span), name, ty });
            if self.eat(&Tok::Comma).is_none() && !self.at(&Tok::RParen) {
                return Err(self.unclosed(open, &Tok::RParen, "parameter list"));
            }
        }
    }

    // ----- types --------------------------------------------------------

    fn ty(&mut self) -> PResult<Type> {
        self.nested(|p| p.ty_inner())
    }

    fn ty_inner(&mut self) -> PResult<Type> {
        let start = self.span();
        match self.tok().clone() {
            Tok::Ident(name) => {
                if let Some(s) = scalar_type(&name) {
                    self.bump();
                    return Ok(Type { kind: TypeKind::Scalar(s), span: start });
                }
                if name == "tensor" {
                    self.bump();
                    let Some(open) = self.eat(&Tok::LBracket) else {
                        return Err(self.unexpected("`[` after `tensor`, e.g. `tensor[n, f32]`"));
                    };
                    return self.with_nl(false, |p| p.tensor_type(start, open));
                }
                if self.tparams.contains(&name) {
                    self.bump();
                    return Ok(Type { kind: TypeKind::Var(Ident { name, span: start.clone() }), span: start });
                }
                let mut d = err(start, format!("unknown type `{name}`")).with_label("not a type").with_note(
                    "note: types are `f32`, `f64`, `i32`, `i64`, `bool`, `tensor[d1, ..., dtype]`, tuples `(A, B)`, \
                     `fn` and a def's type parameters",
                );
                if name.chars().next().is_some_and(|c| c.is_ascii_uppercase()) {
                    d = d.with_note(format!(
                        "help: declare a type parameter after the def's name, `def f[{name}](x: {name})`; \
                         type parameters are types only in their def's signature"
                    ));
                }
                Err(d)
            }
            Tok::Fn => Ok(Type { kind: TypeKind::Fn, span: self.bump().span }),
            Tok::LParen => {
                let open = self.bump().span;
                self.with_nl(false, |p| p.tuple_type(open))
            }
            _ => Err(self.unexpected("a type such as `f32`, `tensor[n, f32]`, `(f32, f32)` or `fn`")),
        }
    }

    fn tensor_type(&mut self, start: Span, open: Span) -> PResult<Type> {
        let mut dims = Vec::new();
        loop {
            match self.tok().clone() {
                Tok::Int(n) => {
                    dims.push(Dim::Lit(n as usize, self.bump().span));
                }
                Tok::Ident(name) => {
                    let span = self.bump().span;
                    if let Some(dtype) = scalar_type(&name) {
                        self.eat(&Tok::Comma);
                        if !self.at(&Tok::RBracket) {
                            if !matches!(self.tok(), Tok::Int(_) | Tok::Ident(_)) {
                                return Err(self.unclosed(&open, &Tok::RBracket, "tensor type"));
                            }
                            return Err(err(span, "the element type must be the last entry of `tensor[...]`")
                                .with_label("element type")
                                .with_note("help: write the dimensions first, e.g. `tensor[m, n, f32]`"));
                        }
                        let close = self.bump().span;
                        return Ok(Type { kind: TypeKind::Tensor { dims, dtype }, span: join(&start, &close) });
                    }
                    dims.push(Dim::Name(Ident { name, span }));
                }
                Tok::RBracket => {
                    return Err(err(self.span(), "`tensor[...]` needs its element type as the last entry")
                        .with_label("expected `f32`, `f64`, `i32`, `i64` or `bool` before this")
                        .with_secondary(open, "in this tensor type")
                        .with_note("help: e.g. `tensor[n, f32]`"));
                }
                Tok::Minus => {
                    return Err(err(self.span(), "a dimension cannot be negative")
                        .with_label("dimensions are sizes: a number or a name"));
                }
                _ if self.peek().tok == Tok::Eof => return Err(self.unclosed(&open, &Tok::RBracket, "tensor type")),
                _ => {
                    return Err(self.unexpected("a dimension (a number or a name) or an element type"));
                }
            }
            if self.eat(&Tok::Comma).is_none() && !self.at(&Tok::RBracket) {
                return Err(self.unclosed(&open, &Tok::RBracket, "tensor type"));
            }
        }
    }

    fn tuple_type(&mut self, open: Span) -> PResult<Type> {
        if self.at(&Tok::RParen) {
            return Err(err(join(&open, &self.span()), "the empty tuple type `()` does not exist")
                .with_label("a tuple type needs at least one element"));
        }
        let (mut items, trailing) = self.paren_items(Self::ty)?;
        let Some(close) = self.eat(&Tok::RParen) else {
            return Err(self.unclosed(&open, &Tok::RParen, "tuple type"));
        };
        if items.len() == 1 && !trailing {
            // `(T)` is just `T`.
            let mut t = items.pop().expect("internal error: one item was pushed");
            t.span = join(&open, &close);
            return Ok(t);
        }
        Ok(Type { kind: TypeKind::Tuple(items), span: join(&open, &close) })
    }

    // ----- patterns -----------------------------------------------------

    /// A binding pattern; `literals` allows the refutable forms of `match`
    /// arms (integers, booleans).
    fn pattern(&mut self, literals: bool) -> PResult<Pattern> {
        self.nested(|p| p.pattern_inner(literals))
    }

    fn pattern_inner(&mut self, literals: bool) -> PResult<Pattern> {
        let start = self.span();
        let lit = |kind: PatternKind, span: Span| -> PResult<Pattern> {
            if literals {
                Ok(Pattern { kind, span })
            } else {
                Err(err(span, "a literal cannot be used as a binding pattern")
                    .with_label("only names, `_` and tuples can be bound here")
                    .with_note("help: use `match` to compare against literal values"))
            }
        };
        match self.tok().clone() {
            Tok::Ident(name) if name == "_" => {
                self.bump();
                Ok(Pattern { kind: PatternKind::Wildcard, span: start })
            }
            Tok::Ident(_) => {
                let id = self.binder("a pattern")?;
                Ok(Pattern { span: id.span.clone(), kind: PatternKind::Var(id) })
            }
            Tok::Int(n) => {
                self.bump();
                lit(PatternKind::Int(n as i64), start)
            }
            Tok::Minus => {
                let Tok::Int(n) = *self.nth(1) else {
                    return Err(self.unexpected("a pattern; only a number may follow `-` in a pattern"));
                };
                self.bump();
                let end = self.bump().span;
                lit(PatternKind::Int(-(n as i64)), join(&start, &end))
            }
            Tok::True | Tok::False => {
                let b = self.at(&Tok::True);
                self.bump();
                lit(PatternKind::Bool(b), start)
            }
            Tok::LParen => {
                let open = self.bump().span;
                self.with_nl(false, |p| p.tuple_pattern(open, literals))
            }
            _ => Err(self.unexpected(if literals {
                "a pattern (a number, `true`, `false`, a name, `_` or a tuple `(a, b)`)"
            } else {
                "a pattern (a name, `_` or a tuple `(a, b)`)"
            })),
        }
    }

    fn tuple_pattern(&mut self, open: Span, literals: bool) -> PResult<Pattern> {
        if self.at(&Tok::RParen) {
            return Err(err(join(&open, &self.span()), "the empty pattern `()` matches nothing")
                .with_label("a tuple pattern needs at least one element"));
        }
        let (mut items, trailing) = self.paren_items(|p| p.pattern(literals))?;
        let Some(close) = self.eat(&Tok::RParen) else {
            return Err(self.unclosed(&open, &Tok::RParen, "tuple pattern"));
        };
        if items.len() == 1 && !trailing {
            let mut p = items.pop().expect("internal error: one item was pushed");
            p.span = join(&open, &close);
            return Ok(p);
        }
        Ok(Pattern { kind: PatternKind::Tuple(items), span: join(&open, &close) })
    }
}

fn scalar_type(name: &str) -> Option<ScalarType> {
    Some(match name {
        "f16" => ScalarType::F16,
        "f32" => ScalarType::F32,
        "f64" => ScalarType::F64,
        "i32" => ScalarType::I32,
        "i64" => ScalarType::I64,
        "u32" => ScalarType::U32,
        "bool" => ScalarType::Bool,
        _ => return None,
    })
}
