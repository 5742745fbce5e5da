//! The lexer: source text to tokens with byte spans.
//!
//! Hand-written, one pass, no backtracking beyond one character of lookahead.
//! Newlines are not tokens: each token instead records whether a line break
//! came before it ([`Token::nl_before`]), and the parser decides where a line
//! break ends a statement (inside `{ }` and at the top level) and where it is
//! only layout (inside `( )`/`[ ]`, after an operator, before `|>`).
//!
//! Invariants: the token list always ends with exactly one [`Tok::Eof`] whose
//! span is `len..len`; spans are non-decreasing and lie on UTF-8 boundaries;
//! lexing never panics and reports the bad text it finds (it skips the
//! offending text and goes on), so one run can show several lex errors: a
//! run of adjacent stray characters is one error, and at most
//! [`crate::diag::MAX_ERRORS`] are kept (the last says how many more).

use crate::ast::Span;
use crate::diag::{Diagnostic, Stage};

/// Token kinds. Keywords that are only special in some positions (transform
/// names, dtypes, `tensor`) are plain identifiers; the parser interprets them.
#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    Ident(String),
    /// Integer literal, at most `i64::MAX` (a leading `-` is a separate token).
    Int(u64),
    Float(f64),
    Str(String),
    // keywords
    Def,
    Let,
    Fn,
    If,
    Then,
    Else,
    Match,
    True,
    False,
    And,
    Or,
    Not,
    // punctuation
    LParen,
    RParen,
    LBracket,
    RBracket,
    LBrace,
    RBrace,
    Comma,
    Colon,
    Semi,
    Dot,
    Assign,
    EqEq,
    NotEq,
    Lt,
    Le,
    Gt,
    Ge,
    Plus,
    Minus,
    Star,
    Slash,
    /// `//` (floor division)
    SlashSlash,
    /// `%` (remainder with the divisor's sign)
    Percent,
    StarStar,
    At,
    Pipe,
    Arrow,
    FatArrow,
    Eof,
}

impl Tok {
    /// How the token is named in messages: "`)`", "identifier `x`", ...
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("identifier `{s}`"),
            Tok::Int(n) => format!("number `{n}`"),
            Tok::Float(x) => format!("number `{x:?}`"),
            Tok::Str(_) => "a string".to_string(),
            Tok::Eof => "end of input".to_string(),
            t => format!("`{}`", t.text()),
        }
    }

    /// The fixed spelling of keywords and punctuation ("" for the others).
    pub fn text(&self) -> &'static str {
        match self {
            Tok::Def => "def",
            Tok::Let => "let",
            Tok::Fn => "fn",
            Tok::If => "if",
            Tok::Then => "then",
            Tok::Else => "else",
            Tok::Match => "match",
            Tok::True => "true",
            Tok::False => "false",
            Tok::And => "and",
            Tok::Or => "or",
            Tok::Not => "not",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::LBracket => "[",
            Tok::RBracket => "]",
            Tok::LBrace => "{",
            Tok::RBrace => "}",
            Tok::Comma => ",",
            Tok::Colon => ":",
            Tok::Semi => ";",
            Tok::Dot => ".",
            Tok::Assign => "=",
            Tok::EqEq => "==",
            Tok::NotEq => "!=",
            Tok::Lt => "<",
            Tok::Le => "<=",
            Tok::Gt => ">",
            Tok::Ge => ">=",
            Tok::Plus => "+",
            Tok::Minus => "-",
            Tok::Star => "*",
            Tok::Slash => "/",
            Tok::SlashSlash => "//",
            Tok::Percent => "%",
            Tok::StarStar => "**",
            Tok::At => "@",
            Tok::Pipe => "|>",
            Tok::Arrow => "->",
            Tok::FatArrow => "=>",
            Tok::Ident(_) | Tok::Int(_) | Tok::Float(_) | Tok::Str(_) | Tok::Eof => "",
        }
    }
}

/// A token with its source range.
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub tok: Tok,
    pub span: Span,
    /// A line break (possibly inside a comment line) separates this token
    /// from the previous one.
    pub nl_before: bool,
}

fn keyword(s: &str) -> Option<Tok> {
    Some(match s {
        "def" => Tok::Def,
        "let" => Tok::Let,
        "fn" => Tok::Fn,
        "if" => Tok::If,
        "then" => Tok::Then,
        "else" => Tok::Else,
        "match" => Tok::Match,
        "true" => Tok::True,
        "false" => Tok::False,
        "and" => Tok::And,
        "or" => Tok::Or,
        "not" => Tok::Not,
        _ => return None,
    })
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

struct Lexer<'a> {
    src: &'a str,
    pos: usize,
    tokens: Vec<Token>,
    errors: Vec<Diagnostic>,
    /// Errors not kept (past [`crate::diag::MAX_ERRORS`]).
    dropped: usize,
    /// Index in `errors` of the last "unexpected character" error and its
    /// character count, so a run of stray characters is one error.
    stray: Option<(usize, usize)>,
    /// Where the last stray text ended (also past the cap).
    stray_end: usize,
    nl: bool,
}

impl Lexer<'_> {
    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn peek2(&self) -> Option<char> {
        let mut it = self.src[self.pos..].chars();
        it.next();
        it.next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn push(&mut self, tok: Tok, start: usize) {
        let nl_before = std::mem::take(&mut self.nl);
        self.tokens.push(Token { tok, span: start..self.pos, nl_before });
    }

    fn error(&mut self, d: Diagnostic) {
        if self.errors.len() < crate::diag::MAX_ERRORS {
            self.errors.push(d);
        } else {
            self.dropped += 1;
        }
    }

    /// Reports the stray text `start..self.pos`; one right after the last
    /// stray text extends that error instead of adding one per character.
    fn stray(&mut self, start: usize, hint: Option<&str>) {
        if let Some((i, n)) = self.stray {
            if let Some(d) = self.errors.get_mut(i).filter(|d| d.span.end == start) {
                let n = n + self.src[start..self.pos].chars().count();
                d.span.end = self.pos;
                let text = &self.src[d.span.clone()];
                let head: String = text.chars().take(16).collect();
                let shown = if n > 16 { format!("{head}…") } else { head };
                let shown =
                    if shown.chars().all(|c| !c.is_control()) { format!("`{shown}`") } else { format!("{shown:?}") };
                d.message = format!("unexpected characters {shown} ({n} characters)");
                d.label = "graft does not use these characters here".into();
                self.stray = Some((i, n));
                return;
            }
        }
        if self.errors.len() >= crate::diag::MAX_ERRORS {
            // Past the cap: count a run of stray text once.
            if self.stray_end != start {
                self.dropped += 1;
            }
            self.stray_end = self.pos;
            self.stray = None;
            return;
        }
        let shown = &self.src[start..self.pos];
        let printable =
            if shown.chars().all(|c| !c.is_control()) { format!("`{shown}`") } else { format!("{:?}", shown) };
        let mut d = Diagnostic::new(Stage::Lex, start..self.pos, format!("unexpected character {printable}"))
            .with_label("graft does not use this character here");
        if let Some(h) = hint {
            d = d.with_note(h);
        }
        self.stray = Some((self.errors.len(), shown.chars().count()));
        self.errors.push(d);
    }

    fn after_dot(&self) -> bool {
        matches!(self.tokens.last(), Some(Token { tok: Tok::Dot, .. })) && !self.nl
    }

    fn run(&mut self) {
        while let Some(c) = self.peek() {
            let start = self.pos;
            match c {
                '\n' => {
                    self.bump();
                    self.nl = true;
                }
                ' ' | '\t' | '\r' => {
                    self.bump();
                }
                '#' => {
                    while let Some(c) = self.peek() {
                        if c == '\n' {
                            break;
                        }
                        self.bump();
                    }
                }
                c if is_ident_start(c) => {
                    while self.peek().is_some_and(is_ident_char) {
                        self.bump();
                    }
                    let word = &self.src[start..self.pos];
                    let tok = keyword(word).unwrap_or_else(|| Tok::Ident(word.to_string()));
                    self.push(tok, start);
                }
                c if c.is_ascii_digit() => self.number(start),
                '"' => self.string(start),
                _ => self.punct(c, start),
            }
        }
        let end = self.src.len();
        let nl_before = self.nl;
        self.tokens.push(Token { tok: Tok::Eof, span: end..end, nl_before });
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '_') {
            self.bump();
        }
    }

    fn number(&mut self, start: usize) {
        // After `t.` only a plain integer can follow: `t.0.1` is two field
        // accesses, not `t.` followed by the float `0.1`.
        let field = self.after_dot();
        self.digits();
        let mut is_float = false;
        if !field && self.peek() == Some('.') {
            let next = self.peek2();
            // `1.5` and `1.` are floats; `1..` and `1.x` are not (`.x` is no
            // field syntax, but we leave the error to the parser).
            if next.is_some_and(|c| c.is_ascii_digit()) {
                self.bump();
                self.digits();
                is_float = true;
            } else if !next.is_some_and(|c| is_ident_start(c) || c == '.') {
                self.bump();
                is_float = true;
            }
        }
        if !field && matches!(self.peek(), Some('e' | 'E')) {
            let mut it = self.src[self.pos..].chars();
            it.next();
            let (a, b) = (it.next(), it.next());
            let has_exp = match a {
                Some(c) if c.is_ascii_digit() => true,
                Some('+' | '-') => b.is_some_and(|c| c.is_ascii_digit()),
                _ => false,
            };
            if has_exp {
                self.bump();
                if matches!(self.peek(), Some('+' | '-')) {
                    self.bump();
                }
                self.digits();
                is_float = true;
            }
        }
        // A letter glued to a number (`2x`, `1f32`) is almost always a typo.
        if self.peek().is_some_and(is_ident_start) {
            while self.peek().is_some_and(is_ident_char) {
                self.bump();
            }
            let text = &self.src[start..self.pos];
            self.error(
                Diagnostic::new(Stage::Lex, start..self.pos, format!("invalid number `{text}`"))
                    .with_label("a number cannot be followed directly by letters")
                    .with_note("help: put a space or an operator between them, e.g. `2 * x`"),
            );
            return;
        }
        let text: String = self.src[start..self.pos].chars().filter(|&c| c != '_').collect();
        if is_float {
            match text.parse::<f64>() {
                Ok(x) if x.is_finite() => self.push(Tok::Float(x), start),
                _ => self.error(
                    Diagnostic::new(Stage::Lex, start..self.pos, "number is too large")
                        .with_label("this does not fit in a 64-bit float"),
                ),
            }
        } else {
            match text.parse::<u64>() {
                Ok(n) if n <= i64::MAX as u64 => self.push(Tok::Int(n), start),
                _ => self.error(
                    Diagnostic::new(Stage::Lex, start..self.pos, "integer literal is too large")
                        .with_label(format!("the largest integer is {}", i64::MAX))
                        .with_note("help: write a float (`1e20`) if you need a big value"),
                ),
            }
        }
    }

    fn string(&mut self, start: usize) {
        self.bump(); // opening quote
        let mut value = String::new();
        loop {
            match self.peek() {
                None | Some('\n') => {
                    self.error(
                        Diagnostic::new(Stage::Lex, start..self.pos, "unterminated string")
                            .with_label("this string has no closing `\"` on its line"),
                    );
                    return;
                }
                Some('"') => {
                    self.bump();
                    self.push(Tok::Str(value), start);
                    return;
                }
                Some('\\') => {
                    let esc_start = self.pos;
                    self.bump();
                    match self.bump() {
                        Some('n') => value.push('\n'),
                        Some('t') => value.push('\t'),
                        Some('\\') => value.push('\\'),
                        Some('"') => value.push('"'),
                        other => {
                            // Leave a newline for the unterminated check.
                            if other == Some('\n') {
                                self.pos -= 1;
                            }
                            self.error(
                                Diagnostic::new(Stage::Lex, esc_start..self.pos, "unknown escape in string")
                                    .with_label("not a valid escape")
                                    .with_note("note: the escapes are `\\n`, `\\t`, `\\\\` and `\\\"`"),
                            );
                        }
                    }
                }
                Some(c) => {
                    self.bump();
                    value.push(c);
                }
            }
        }
    }

    fn punct(&mut self, c: char, start: usize) {
        self.bump();
        let next = self.peek();
        let two = |l: &mut Self, t: Tok| {
            l.bump();
            t
        };
        let tok = match (c, next) {
            ('(', _) => Tok::LParen,
            (')', _) => Tok::RParen,
            ('[', _) => Tok::LBracket,
            (']', _) => Tok::RBracket,
            ('{', _) => Tok::LBrace,
            ('}', _) => Tok::RBrace,
            (',', _) => Tok::Comma,
            (':', _) => Tok::Colon,
            (';', _) => Tok::Semi,
            ('.', _) => Tok::Dot,
            ('=', Some('=')) => two(self, Tok::EqEq),
            ('=', Some('>')) => two(self, Tok::FatArrow),
            ('=', _) => Tok::Assign,
            ('!', Some('=')) => two(self, Tok::NotEq),
            ('<', Some('=')) => two(self, Tok::Le),
            ('<', _) => Tok::Lt,
            ('>', Some('=')) => two(self, Tok::Ge),
            ('>', _) => Tok::Gt,
            ('+', _) => Tok::Plus,
            ('-', Some('>')) => two(self, Tok::Arrow),
            ('-', _) => Tok::Minus,
            ('*', Some('*')) => two(self, Tok::StarStar),
            ('*', _) => Tok::Star,
            ('/', Some('/')) => two(self, Tok::SlashSlash),
            ('/', _) => Tok::Slash,
            ('%', _) => Tok::Percent,
            ('@', _) => Tok::At,
            ('|', Some('>')) => two(self, Tok::Pipe),
            _ => {
                let (len, hint) = match (c, next) {
                    ('&', Some('&')) => (2, Some("help: write `and` for logical and")),
                    ('|', Some('|')) => (2, Some("help: write `or` for logical or")),
                    ('&', _) => (1, Some("help: write `and` for logical and")),
                    ('|', _) => (1, Some("help: write `or` for logical or, or `|>` to pipe a value into a function")),
                    ('!', _) => (1, Some("help: write `not` for logical negation")),
                    ('\'', _) => (1, Some("help: strings use double quotes: \"ij,jk->ik\"")),
                    (c, _) if !c.is_ascii() && c.is_alphabetic() => {
                        (1, Some("note: names may only use ASCII letters, digits and `_`"))
                    }
                    _ => (1, None),
                };
                if len == 2 {
                    self.bump();
                }
                self.stray(start, hint);
                return;
            }
        };
        self.push(tok, start);
    }
}

/// Splits `src` into tokens, or returns every lex error found.
pub fn lex(src: &str) -> Result<Vec<Token>, Vec<Diagnostic>> {
    let mut l = Lexer {
        src,
        pos: 0,
        tokens: Vec::new(),
        errors: Vec::new(),
        dropped: 0,
        stray: None,
        stray_end: usize::MAX,
        nl: false,
    };
    l.run();
    if l.errors.is_empty() {
        Ok(l.tokens)
    } else {
        Err(crate::diag::cap(l.errors, l.dropped))
    }
}
