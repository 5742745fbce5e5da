//! The graft language front end.
//!
//! Pipeline: [`lexer`] (text -> tokens) -> [`parser`] (tokens -> [`ast`]) ->
//! [`check`] (names, types, dimension variables) -> [`lower`] (AST ->
//! `graft_core::ir::Func`, with transforms applied as graph rewrites).
//! Every stage reports problems as [`diag::Diagnostic`]s carrying byte spans
//! into the source; [`diag::render`] turns them into the user-facing text.
//! No input may make any stage panic (see the fuzz target).

pub mod ast;
pub mod diag;
pub mod lower;
