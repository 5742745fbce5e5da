//! Expressions, blocks and their sub-forms (arguments, indexing, lambdas,
//! `if`, `match`).
//!
//! One function per precedence level, loosest first: `|>`, `or`, `and`,
//! `not`, comparisons (non-associative), `+ -`, `* / @`, unary `-`, `**`
//! (right-associative; its right operand may carry a unary `-`), postfix
//! (call, index, `.0`). `if`, `fn` and `match` are primary forms whose last
//! part extends as far right as possible. Each step of a left-leaning
//! operator chain counts as a nesting level so the tree depth stays bounded.

use super::{err, join, PResult, Parser};
use crate::ast::*;
use crate::lexer::Tok;

fn bin(op: BinOp, lhs: Expr, rhs: Expr) -> Expr {
    let span = join(&lhs.span, &rhs.span);
    Expr { kind: ExprKind::Binary { op, lhs: Box::new(lhs), rhs: Box::new(rhs) }, span }
}

impl Parser<'_> {
    /// A full expression.
    pub(super) fn expr(&mut self) -> PResult<Expr> {
        self.nested(|p| p.pipe())
    }

    /// Runs a left-associative chain: `operand (op operand)*`, where `op`
    /// maps the current token to an operator if it continues the chain.
    fn chain(&mut self, operand: fn(&mut Self) -> PResult<Expr>, op: fn(&Tok) -> Option<BinOp>) -> PResult<Expr> {
        let mut lhs = operand(self)?;
        let base = self.depth;
        let r = (|| {
            while let Some(o) = op(self.tok()) {
                if self.line_break() {
                    break;
                }
                self.enter()?;
                self.bump();
                let rhs = operand(self)?;
                lhs = bin(o, std::mem::replace(&mut lhs, placeholder()), rhs);
            }
            Ok(())
        })();
        self.depth = base;
        r.map(|()| lhs)
    }

    fn pipe(&mut self) -> PResult<Expr> {
        let mut lhs = self.or()?;
        let base = self.depth;
        let r = (|| {
            // `|>` continues across line breaks, even in a block.
            while self.at(&Tok::Pipe) {
                self.enter()?;
                self.bump();
                let func = self.or()?;
                let value = std::mem::replace(&mut lhs, placeholder());
                let span = join(&value.span, &func.span);
                lhs = Expr { kind: ExprKind::Pipe { value: Box::new(value), func: Box::new(func) }, span };
            }
            Ok(())
        })();
        self.depth = base;
        r.map(|()| lhs)
    }

    fn or(&mut self) -> PResult<Expr> {
        self.chain(Self::and, |t| (*t == Tok::Or).then_some(BinOp::Or))
    }

    fn and(&mut self) -> PResult<Expr> {
        self.chain(Self::not, |t| (*t == Tok::And).then_some(BinOp::And))
    }

    fn not(&mut self) -> PResult<Expr> {
        if self.at(&Tok::Not) {
            let start = self.bump().span;
            let operand = self.nested(|p| p.not())?;
            let span = join(&start, &operand.span);
            return Ok(Expr { kind: ExprKind::Unary { op: UnOp::Not, operand: Box::new(operand) }, span });
        }
        self.comparison()
    }

    fn comparison(&mut self) -> PResult<Expr> {
        let cmp = |t: &Tok| {
            Some(match t {
                Tok::EqEq => BinOp::Eq,
                Tok::NotEq => BinOp::Ne,
                Tok::Lt => BinOp::Lt,
                Tok::Le => BinOp::Le,
                Tok::Gt => BinOp::Gt,
                Tok::Ge => BinOp::Ge,
                _ => return None,
            })
        };
        let lhs = self.additive()?;
        let Some(op) = cmp(self.tok()) else { return Ok(lhs) };
        if self.line_break() {
            return Ok(lhs);
        }
        let op_span = self.bump().span;
        let rhs = self.nested(|p| p.additive())?;
        if let Some(op2) = cmp(self.tok()) {
            if !self.line_break() {
                return Err(err(self.span(), "comparisons cannot be chained")
                    .with_label("second comparison")
                    .with_secondary(op_span, "first comparison")
                    .with_note(format!(
                        "help: combine them with `and`, e.g. `a {} b and b {} c`",
                        op.symbol(),
                        op2.symbol()
                    )));
            }
        }
        Ok(bin(op, lhs, rhs))
    }

    fn additive(&mut self) -> PResult<Expr> {
        self.chain(Self::multiplicative, |t| match t {
            Tok::Plus => Some(BinOp::Add),
            Tok::Minus => Some(BinOp::Sub),
            _ => None,
        })
    }

    fn multiplicative(&mut self) -> PResult<Expr> {
        self.chain(Self::unary, |t| match t {
            Tok::Star => Some(BinOp::Mul),
            Tok::Slash => Some(BinOp::Div),
            Tok::SlashSlash => Some(BinOp::FloorDiv),
            Tok::Percent => Some(BinOp::Mod),
            Tok::At => Some(BinOp::MatMul),
            _ => None,
        })
    }

    fn unary(&mut self) -> PResult<Expr> {
        if self.at(&Tok::Minus) {
            let start = self.bump().span;
            let operand = self.nested(|p| p.unary())?;
            let span = join(&start, &operand.span);
            // `-` directly on a number literal is part of the literal (so
            // `x[::-1]` and `match` arms see `-1`); `-2 ** 2` is still
            // `-(2 ** 2)` because the operand there is the power.
            let kind = match operand.kind {
                ExprKind::Int(n) => ExprKind::Int(-n),
                ExprKind::Float(x) => ExprKind::Float(-x),
                k => ExprKind::Unary { op: UnOp::Neg, operand: Box::new(Expr { kind: k, span: operand.span }) },
            };
            return Ok(Expr { kind, span });
        }
        if self.at(&Tok::Not) {
            return Err(err(self.span(), "`not` cannot be used as an operand here")
                .with_label("`not` binds more loosely than arithmetic and comparisons")
                .with_note("help: put it in parentheses: `(not x)`"));
        }
        self.power()
    }

    fn power(&mut self) -> PResult<Expr> {
        let base = self.postfix()?;
        if self.at(&Tok::StarStar) && !self.line_break() {
            self.bump();
            // Right operand at the unary level: `a ** -b`, `a ** b ** c`.
            let exp = self.nested(|p| p.unary())?;
            return Ok(bin(BinOp::Pow, base, exp));
        }
        Ok(base)
    }

    fn postfix(&mut self) -> PResult<Expr> {
        let mut e = self.primary()?;
        let base = self.depth;
        let r = (|| loop {
            match self.tok() {
                Tok::LParen if !self.line_break() => {
                    self.enter()?;
                    let open = self.bump().span;
                    let (args, close) = self.with_nl(false, |p| p.args(&open, "argument list"))?;
                    let func = std::mem::replace(&mut e, placeholder());
                    let span = join(&func.span, &close);
                    e = Expr { kind: ExprKind::Call { func: Box::new(func), args }, span };
                }
                Tok::LBracket if !self.line_break() => {
                    self.enter()?;
                    let open = self.bump().span;
                    let (items, close) = self.with_nl(false, |p| p.index_items(&open))?;
                    let b = std::mem::replace(&mut e, placeholder());
                    let span = join(&b.span, &close);
                    e = Expr { kind: ExprKind::Index { base: Box::new(b), items }, span };
                }
                Tok::Dot => {
                    self.enter()?;
                    let dot = self.bump().span;
                    if matches!(self.tok(), Tok::Ident(id) if id.as_str() == "T") {
                        // `x.T`: the reversed axes, `transpose(x)` (NumPy's `.T`).
                        let t_span = self.bump().span;
                        let b = std::mem::replace(&mut e, placeholder());
                        let span = join(&b.span, &t_span);
                        let func = Expr {
                            kind: ExprKind::Var(crate::ast::Ident { name: "transpose".into(), span: t_span.clone() }),
                            span: t_span,
                        };
                        let arg = crate::ast::Arg { name: None, span: b.span.clone(), value: b };
                        e = Expr { kind: ExprKind::Call { func: Box::new(func), args: vec![arg] }, span };
                        continue;
                    }
                    if matches!(self.tok(), Tok::Ident(id) if id.as_str() == "at") {
                        let b = std::mem::replace(&mut e, placeholder());
                        e = self.at_update(b)?;
                        continue;
                    }
                    let Tok::Int(n) = *self.tok() else {
                        let mut d = self.unexpected("a tuple index after `.`, e.g. `t.0`, `.T` or `.at[i]`");
                        if matches!(self.tok(), Tok::Ident(_)) {
                            d = d.with_note(
                                "note: graft has no methods or named fields (only `x.T` and `x.at[i].set(v)`); call functions instead: `sum(x)`",
                            );
                        }
                        return Err(d.with_secondary(dot, "after this `.`"));
                    };
                    let index_span = self.bump().span;
                    let b = std::mem::replace(&mut e, placeholder());
                    let span = join(&b.span, &index_span);
                    e = Expr { kind: ExprKind::Field { base: Box::new(b), index: n as usize, index_span }, span };
                }
                _ => return Ok(()),
            }
        })();
        self.depth = base;
        r.map(|()| e)
    }

    /// `base.at[items].method(args)`, with the parser just past the `.`
    /// and at `at`. Every malformed form is a located error.
    fn at_update(&mut self, base: Expr) -> PResult<Expr> {
        let at_span = self.bump().span;
        let usage = "help: write `x.at[i].set(v)`; the methods are `set add mul min max` (with a value) and `.get()`";
        if !self.at(&Tok::LBracket) || self.line_break() {
            return Err(self
                .unexpected("`[` after `.at`, as in `x.at[i].set(v)`")
                .with_secondary(at_span, "`.at` needs an index")
                .with_note(usage));
        }
        let open = self.bump().span;
        let (items, close) = self.with_nl(false, |p| p.index_items(&open))?;
        let at_whole = join(&at_span, &close);
        if !self.at(&Tok::Dot) || self.line_break() {
            return Err(err(at_whole, "`.at[...]` must be followed by a method: `.set(v)`, `.add(v)`, `.mul(v)`, `.min(v)`, `.max(v)` or `.get()`")
                .with_label("no method called on this")
                .with_note("note: `x.at[i]` alone is not a value; use `x[i]` to read"));
        }
        self.bump();
        let Tok::Ident(name) = self.tok().clone() else {
            return Err(self.unexpected("a method name after `.at[...]`").with_note(usage));
        };
        let method = Ident { name, span: self.bump().span };
        if !AT_METHODS.contains(&method.name.as_str()) {
            return Err(err(method.span.clone(), format!("`.at[...]` has no method `{}`", method.name))
                .with_label("unknown method")
                .with_note(usage));
        }
        if !self.at(&Tok::LParen) || self.line_break() {
            let m = &method.name;
            let call = if m == "get" { "get()".to_string() } else { format!("{m}(v)") };
            return Err(err(method.span.clone(), format!("`.{m}` must be called: `.{call}`"))
                .with_label("not called")
                .with_note(usage));
        }
        let open = self.bump().span;
        let (args, close) = self.with_nl(false, |p| p.args(&open, "argument list"))?;
        let span = join(&base.span, &close);
        Ok(Expr { kind: ExprKind::At(Box::new(AtExpr { base, items, method, args })), span })
    }

    fn primary(&mut self) -> PResult<Expr> {
        let t = self.peek().clone();
        let span = t.span.clone();
        let lit = |kind| Ok(Expr { kind, span: span.clone() });
        match t.tok {
            Tok::Int(n) => {
                self.bump();
                lit(ExprKind::Int(n as i64))
            }
            Tok::Float(x) => {
                self.bump();
                lit(ExprKind::Float(x))
            }
            Tok::Str(s) => {
                self.bump();
                lit(ExprKind::Str(s))
            }
            Tok::True | Tok::False => {
                self.bump();
                lit(ExprKind::Bool(t.tok == Tok::True))
            }
            Tok::Ident(name) => {
                if let Some(kind) = crate::ast::transform_keyword(&name) {
                    return self.transform(kind);
                }
                if name == "_" {
                    return Err(err(span, "`_` is not a value")
                        .with_label("`_` can only be used in patterns, to ignore a value"));
                }
                self.bump();
                lit(ExprKind::Var(Ident { name, span: span.clone() }))
            }
            Tok::LParen => {
                self.bump();
                self.with_nl(false, |p| p.paren(span))
            }
            Tok::LBracket => {
                self.bump();
                self.with_nl(false, |p| p.array(span))
            }
            Tok::LBrace => self.block(),
            Tok::If => self.if_expr(),
            Tok::Fn => self.lambda(),
            Tok::Match => self.match_expr(),
            Tok::Let => Err(err(span, "`let` is only allowed inside a `{ }` block")
                .with_label("not an expression")
                .with_note("help: write the body as a block: `def f(x: f32) -> f32 { let y = x * x; y + 1 }`")),
            _ => Err(self.unexpected("an expression")),
        }
    }

    /// `grad(f, ...)` etc.: the first positional argument is the function.
    fn transform(&mut self, kind: TransformKind) -> PResult<Expr> {
        let kw = self.bump().span;
        let name = kind.name();
        let example = match kind {
            TransformKind::Vmap => "`vmap(f, axis=0)`",
            TransformKind::Jvp => "`jvp(f, (x,), (t,))`",
            TransformKind::Vjp => "`vjp(f, (x,), ct)`",
            TransformKind::Grad => "`grad(loss)`",
            _ => "",
        };
        let example = if example.is_empty() { format!("`{name}(f)`") } else { example.to_string() };
        let must = format!("`{name}` must be applied to a function, e.g. {example}");
        let note = format!("note: `{name}` is a transform: it takes a function and produces a new function");
        let Some(open) = self.eat(&Tok::LParen) else {
            return Err(err(kw, must).with_label(format!("bare `{name}`")).with_note(note));
        };
        let (mut args, close) = self.with_nl(false, |p| p.args(&open, "argument list"))?;
        let span = join(&kw, &close);
        if args.first().is_none_or(|a| a.name.is_some()) {
            let mut d = err(span, must).with_label("no function given").with_note(note);
            if !args.is_empty() {
                d = d.with_note(format!("help: pass the function first: `{name}(f, ...)`"));
            }
            return Err(d);
        }
        let func = args.remove(0).value;
        Ok(Expr { kind: ExprKind::Transform { kind, func: Box::new(func), args }, span })
    }

    /// After `(`: a parenthesised expression or a tuple.
    fn paren(&mut self, open: Span) -> PResult<Expr> {
        if self.at(&Tok::RParen) {
            return Err(err(join(&open, &self.span()), "`()` is not a value")
                .with_label("empty parentheses")
                .with_note("note: graft has no empty tuple; a tuple needs at least one element: `(a,)`"));
        }
        let (mut items, trailing) = self.paren_items(Self::expr)?;
        let what = if items.len() > 1 || trailing { "tuple" } else { "parenthesis" };
        let Some(close) = self.eat(&Tok::RParen) else {
            return Err(self.unclosed(&open, &Tok::RParen, what));
        };
        if items.len() == 1 && !trailing {
            return Ok(items.pop().expect("internal error: one item was pushed"));
        }
        Ok(Expr { kind: ExprKind::Tuple(items), span: join(&open, &close) })
    }

    /// After `[`: an array literal.
    fn array(&mut self, open: Span) -> PResult<Expr> {
        let mut items = Vec::new();
        loop {
            if let Some(close) = self.eat(&Tok::RBracket) {
                if items.is_empty() {
                    return Err(err(join(&open, &close), "an array literal needs at least one element")
                        .with_label("empty array")
                        .with_note("help: create empty tensors with `zeros((0,))`"));
                }
                return Ok(Expr { kind: ExprKind::Array(items), span: join(&open, &close) });
            }
            items.push(self.expr()?);
            if self.eat(&Tok::Comma).is_none() && !self.at(&Tok::RBracket) {
                return Err(self.unclosed(&open, &Tok::RBracket, "array literal"));
            }
        }
    }

    /// Call arguments after `(`, through the closing `)` (whose span is
    /// returned).
    pub(super) fn args(&mut self, open: &Span, what: &str) -> PResult<(Vec<Arg>, Span)> {
        let mut args: Vec<Arg> = Vec::new();
        loop {
            if let Some(close) = self.eat(&Tok::RParen) {
                return Ok((args, close));
            }
            let arg = if let (Tok::Ident(name), Tok::Assign) = (self.tok().clone(), self.nth(1)) {
                let name = Ident { name, span: self.bump().span };
                self.bump();
                if let Some(prev) = args.iter().filter_map(|a| a.name.as_ref()).find(|n| n.name == name.name) {
                    return Err(err(name.span.clone(), format!("keyword argument `{name}` is given twice"))
                        .with_label("second time")
                        .with_secondary(prev.span.clone(), "first given here"));
                }
                let value = self.expr()?;
                Arg { span: join(&name.span, &value.span), name: Some(name), value }
            } else {
                let value = self.expr()?;
                if let Some(kw) = args.iter().rev().find_map(|a| a.name.as_ref()) {
                    return Err(err(value.span.clone(), "positional argument after a keyword argument")
                        .with_label("positional argument")
                        .with_secondary(kw.span.clone(), "keyword argument given before it")
                        .with_note("help: put positional arguments first, then `name=value` ones"));
                }
                Arg { span: value.span.clone(), name: None, value }
            };
            args.push(arg);
            if self.eat(&Tok::Comma).is_none() && !self.at(&Tok::RParen) {
                let mut d = self.unclosed(open, &Tok::RParen, what);
                if self.at(&Tok::Colon) {
                    d = d.with_note("help: keyword arguments are written `name=value`");
                }
                return Err(d);
            }
        }
    }

    /// Index items after `[`, through the closing `]`.
    fn index_items(&mut self, open: &Span) -> PResult<(Vec<IndexItem>, Span)> {
        let mut items = Vec::new();
        loop {
            if let Some(close) = self.eat(&Tok::RBracket) {
                if items.is_empty() {
                    return Err(err(join(open, &close), "empty index `[]`")
                        .with_label("expected an index or a slice such as `i`, `1:3` or `::-1`"));
                }
                return Ok((items, close));
            }
            items.push(self.index_item()?);
            if self.eat(&Tok::Comma).is_none() && !self.at(&Tok::RBracket) {
                return Err(self.unclosed(open, &Tok::RBracket, "index"));
            }
        }
    }

    fn index_item(&mut self) -> PResult<IndexItem> {
        let start_pos = self.span().start;
        let ends = |p: &Self| matches!(p.tok(), Tok::Colon | Tok::Comma | Tok::RBracket);
        let start = if ends(self) { None } else { Some(self.expr()?) };
        if !self.at(&Tok::Colon) {
            return match start {
                Some(e) => Ok(IndexItem::Single(e)),
                None => Err(self.unexpected("an index or a slice")),
            };
        }
        self.bump();
        let stop = if ends(self) { None } else { Some(self.expr()?) };
        let step = if self.eat(&Tok::Colon).is_some() {
            if ends(self) {
                None
            } else {
                Some(self.expr()?)
            }
        } else {
            None
        };
        Ok(IndexItem::Slice { start, stop, step, span: start_pos..self.prev_end() })
    }

    /// `{ (let ...)* result }`; line breaks separate statements inside.
    pub(super) fn block(&mut self) -> PResult<Expr> {
        self.nested(|p| p.with_nl(true, |p| p.block_inner()))
    }

    fn block_inner(&mut self) -> PResult<Expr> {
        let open = self.bump().span;
        let mut stmts = Vec::new();
        loop {
            if self.at(&Tok::Eof) {
                return Err(self.unclosed(&open, &Tok::RBrace, "block"));
            }
            if self.eat(&Tok::Semi).is_some() {
                continue;
            }
            if self.at(&Tok::RBrace) {
                let d = err(self.span(), "a block must end with an expression: its value")
                    .with_label("expected the block's value before this `}`")
                    .with_secondary(
                        open,
                        if stmts.is_empty() { "this block is empty" } else { "this block ends with a `let`" },
                    );
                return Err(d.with_note("help: end the block with its value, e.g. `{ let y = x * x; y + 1 }`"));
            }
            if self.at(&Tok::Let) {
                let stmt = self.let_stmt()?;
                if !self.peek().nl_before && self.eat(&Tok::Semi).is_none() && !self.at(&Tok::RBrace) {
                    return Err(self
                        .unexpected("a new line or `;` after the `let` statement")
                        .with_note("help: each `let` goes on its own line"));
                }
                stmts.push(stmt);
                continue;
            }
            let result = self.expr()?;
            if self.at(&Tok::Assign) {
                let text = if matches!(result.kind, ExprKind::Var(_) | ExprKind::Tuple(_)) {
                    "a name or tuple"
                } else {
                    "this"
                };
                return Err(err(self.span(), "bindings start with `let`")
                    .with_label("`=` outside a `let`")
                    .with_secondary(result.span.clone(), format!("to bind {text}, write `let` before it"))
                    .with_note("help: e.g. `let (dw, db) = grad(loss, wrt=(w, b))(w, b)`"));
            }
            let semi = self.eat(&Tok::Semi).is_some();
            while self.eat(&Tok::Semi).is_some() {}
            // A `debug_print(...)` call not on the last line is a statement:
            // `let _ = debug_print(...)` (its value is the empty tuple).
            if is_debug_print(&result) && !self.at(&Tok::RBrace) && (semi || self.peek().nl_before) {
                let pat = Pattern { kind: PatternKind::Wildcard, span: result.span.clone() };
                stmts.push(Stmt::Let { span: result.span.clone(), pat, ty: None, value: result });
                continue;
            }
            let Some(close) = self.eat(&Tok::RBrace) else {
                let mut d = self.unclosed(&open, &Tok::RBrace, "block");
                if self.peek().nl_before && !self.at(&Tok::Eof) {
                    d = d.with_secondary(result.span.clone(), "this expression is not the last line").with_note(
                        "help: only the last line of a block is an expression (its value); bind earlier values with `let`",
                    );
                }
                return Err(d);
            };
            return Ok(Expr { kind: ExprKind::Block { stmts, result: Box::new(result) }, span: join(&open, &close) });
        }
    }

    fn let_stmt(&mut self) -> PResult<Stmt> {
        let start = self.bump().span;
        let pat = self.pattern(false)?;
        let ty = if self.eat(&Tok::Colon).is_some() { Some(self.ty()?) } else { None };
        if self.eat(&Tok::Assign).is_none() {
            let mut d = self.unexpected("`=` after the `let` pattern");
            if self.at(&Tok::EqEq) {
                d = d.with_note("help: `==` compares; bind with a single `=`");
            }
            return Err(d);
        }
        let value = self.expr()?;
        Ok(Stmt::Let { span: join(&start, &value.span), pat, ty, value })
    }

    fn if_expr(&mut self) -> PResult<Expr> {
        let kw = self.bump().span;
        let cond = self.expr()?;
        if self.eat(&Tok::Then).is_none() {
            let mut d = self.unexpected("`then` after the condition").with_secondary(kw.clone(), "this `if`");
            if self.at(&Tok::LBrace) {
                d = d.with_note("help: graft writes `if c then a else b` (no braces)");
            }
            return Err(d);
        }
        let then = self.expr()?;
        if self.eat(&Tok::Else).is_none() {
            return Err(self
                .unexpected("`else`")
                .with_secondary(kw, "this `if` has no `else` branch")
                .with_note("note: `if` is an expression, so it needs a value for both cases: `if c then a else b`"));
        }
        let otherwise = self.expr()?;
        let span = join(&kw, &otherwise.span);
        Ok(Expr {
            kind: ExprKind::If { cond: Box::new(cond), then: Box::new(then), otherwise: Box::new(otherwise) },
            span,
        })
    }

    /// `fn (p: T, q) -> body` or `fn x -> body`.
    fn lambda(&mut self) -> PResult<Expr> {
        let kw = self.bump().span;
        let mut params = Vec::new();
        if let Some(open) = self.eat(&Tok::LParen) {
            self.with_nl(false, |p| -> PResult<()> {
                loop {
                    if p.eat(&Tok::RParen).is_some() {
                        return Ok(());
                    }
                    params.push(p.lambda_param()?);
                    if p.eat(&Tok::Comma).is_none() && !p.at(&Tok::RParen) {
                        return Err(p.unclosed(&open, &Tok::RParen, "parameter list"));
                    }
                }
            })?;
        } else if matches!(self.tok(), Tok::Ident(_)) {
            params.push(self.lambda_param()?);
        } else {
            return Err(self.unexpected("the lambda's parameters, e.g. `fn (a, b) -> a + b` or `fn x -> x * x`"));
        }
        if self.eat(&Tok::Arrow).is_none() {
            let mut d =
                self.unexpected("`->` before the lambda's body").with_secondary(kw.clone(), "lambda starts here");
            if self.at(&Tok::FatArrow) || self.at(&Tok::Assign) {
                d = d.with_note("help: lambdas are written `fn (a, b) -> a + b`");
            }
            return Err(d);
        }
        let body = self.expr()?;
        let span = join(&kw, &body.span);
        Ok(Expr { kind: ExprKind::Lambda { params, body: Box::new(body) }, span })
    }

    fn lambda_param(&mut self) -> PResult<LambdaParam> {
        let pat = self.pattern(false)?;
        let ty = if self.eat(&Tok::Colon).is_some() { Some(self.ty()?) } else { None };
        Ok(LambdaParam { pat, ty })
    }

    /// `match x { p => e, ... }`: arms separated by `,` or line breaks.
    fn match_expr(&mut self) -> PResult<Expr> {
        let kw = self.bump().span;
        let scrutinee = self.expr()?;
        let Some(open) = self.eat(&Tok::LBrace) else {
            return Err(self.unexpected("`{` after the value to match").with_secondary(kw, "this `match`"));
        };
        let (arms, close) = self.with_nl(true, |p| -> PResult<_> {
            let mut arms = Vec::new();
            loop {
                if let Some(close) = p.eat(&Tok::RBrace) {
                    if arms.is_empty() {
                        return Err(err(join(&open, &close), "a `match` needs at least one arm")
                            .with_label("no arms")
                            .with_note("help: e.g. `match i { 0 => a, _ => b }`"));
                    }
                    return Ok((arms, close));
                }
                if p.at(&Tok::Eof) {
                    return Err(p.unclosed(&open, &Tok::RBrace, "match body"));
                }
                let pat = p.pattern(true)?;
                if p.eat(&Tok::FatArrow).is_none() {
                    return Err(p.unexpected("`=>` after the pattern"));
                }
                let body = p.expr()?;
                let span = join(&pat.span, &body.span);
                arms.push(MatchArm { pat, body, span });
                if p.eat(&Tok::Comma).is_none() && !p.peek().nl_before && !p.at(&Tok::RBrace) {
                    return Err(p
                        .unclosed(&open, &Tok::RBrace, "match body")
                        .with_note("help: separate arms with `,` or line breaks"));
                }
            }
        })?;
        Ok(Expr { kind: ExprKind::Match { scrutinee: Box::new(scrutinee), arms }, span: join(&kw, &close) })
    }
}

/// A throwaway node used while moving a subtree out of `&mut` (never
/// observable: it is overwritten immediately).
fn placeholder() -> Expr {
    Expr { kind: ExprKind::Int(0), span: 0..0 }
}

/// Whether `e` is a call of `debug_print` (which may stand as a statement).
fn is_debug_print(e: &Expr) -> bool {
    matches!(&e.kind, ExprKind::Call { func, .. } if matches!(&func.kind, ExprKind::Var(id) if id.name == "debug_print"))
}
