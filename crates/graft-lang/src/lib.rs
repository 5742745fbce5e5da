//! The graft language front end.
//!
//! Pipeline: [`lexer`] (text -> tokens) -> [`parser`] (tokens -> [`ast`]) ->
//! [`check`] (names, types, dimension variables) -> [`lower`] (AST ->
//! `graft_core::ir::Func`, with transforms applied as graph rewrites).
//! Every stage reports problems as [`diag::Diagnostic`]s carrying byte spans
//! into the source; [`diag::render`] turns them into the user-facing text.
//! No input may make any stage panic (see the fuzz target).

pub mod ast;
pub mod check;
pub mod diag;
pub mod lexer;
pub mod lower;
pub mod module;
pub mod parser;
pub mod sexpr;

pub use module::{Compiled, Module, Output};

/// Parses a graft source file. Lex errors are all reported; parse errors
/// are reported one per broken definition (the parser resumes at the next
/// `def`).
pub fn parse(src: &str) -> Result<ast::Program, Vec<diag::Diagnostic>> {
    let tokens = lexer::lex(src)?;
    parser::parse_tokens(&tokens)
}

/// Parses a single expression (a `--input` literal, a REPL line, a test).
pub fn parse_expr(src: &str) -> Result<ast::Expr, Vec<diag::Diagnostic>> {
    let tokens = lexer::lex(src)?;
    parser::parse_expr_tokens(&tokens)
}
