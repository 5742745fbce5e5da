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
#[doc(hidden)]
pub mod fuzzing;
pub mod lexer;
pub mod lower;
pub mod module;
pub mod parser;
pub mod sexpr;

pub use lower::value::Tree;
pub use module::{Compiled, Module, Output};

/// Stack size for the front end's recursive passes (see [`with_deep_stack`]).
pub const STACK_SIZE: usize = 64 << 20;

/// Runs `f` on a scoped thread with a [`STACK_SIZE`] stack (falling back to
/// the current thread if none can be spawned). The parser caps nesting at
/// [`parser::MAX_DEPTH`], but one level costs several KiB of stack in
/// unoptimised builds, which would overflow the 2 MiB of a test thread at
/// that depth; recursive passes over the tree (checking, lowering) can run
/// under this too, so a caller's stack size never matters.
pub fn with_deep_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    let mut slot = Some(f);
    let spawned = std::thread::scope(|s| {
        let slot = &mut slot;
        let job = move || slot.take().map(|f| f());
        match std::thread::Builder::new().stack_size(STACK_SIZE).spawn_scoped(s, job) {
            // A panic inside `f` is a bug; re-raise it unchanged.
            Ok(h) => h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)),
            Err(_) => None,
        }
    });
    match (spawned, slot) {
        (Some(v), _) => v,
        (None, Some(f)) => f(),
        (None, None) => unreachable!("internal error: the job ran, so it returned a value"),
    }
}

/// Parses a graft source file. Lex errors are all reported; parse errors
/// are reported one per broken definition (the parser resumes at the next
/// `def`).
pub fn parse(src: &str) -> Result<ast::Program, Vec<diag::Diagnostic>> {
    with_deep_stack(|| {
        let tokens = lexer::lex(src)?;
        parser::parse_tokens(&tokens)
    })
}

/// Parses a single expression (a `--input` literal, a REPL line, a test).
pub fn parse_expr(src: &str) -> Result<ast::Expr, Vec<diag::Diagnostic>> {
    with_deep_stack(|| {
        let tokens = lexer::lex(src)?;
        parser::parse_expr_tokens(&tokens)
    })
}
