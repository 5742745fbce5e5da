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
///
/// A call made on such a thread while at least three quarters of its stack
/// are still free (`Module::from_source` parsing inside a caller's
/// `with_deep_stack`) runs `f` right there: each nested call otherwise
/// spawned and joined one more thread for stack it already had.
pub fn with_deep_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    let here = stack_position();
    let base = DEEP_STACK_BASE.with(std::cell::Cell::get);
    if base != 0 && base.abs_diff(here) < STACK_SIZE / 4 {
        return f();
    }
    let mut slot = Some(f);
    let spawned = std::thread::scope(|s| {
        let slot = &mut slot;
        let job = move || {
            DEEP_STACK_BASE.with(|b| b.set(stack_position()));
            slot.take().map(|f| f())
        };
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

thread_local! {
    /// On a thread [`with_deep_stack`] spawned: roughly where its stack
    /// starts (0 on every other thread).
    static DEEP_STACK_BASE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The address of a local: where the current thread's stack is now.
#[inline(never)]
fn stack_position() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
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

#[cfg(test)]
mod tests {
    use super::with_deep_stack;

    #[test]
    fn nested_deep_stack_calls_share_the_thread() {
        let caller = std::thread::current().id();
        let (outer, inner) =
            with_deep_stack(|| (std::thread::current().id(), with_deep_stack(|| std::thread::current().id())));
        assert_ne!(outer, caller, "the outer call runs on a thread of its own");
        assert_eq!(inner, outer, "a nested call runs on the outer call's thread");
        // A call deep into that thread's stack spawns again.
        fn recurse(n: usize) -> std::thread::ThreadId {
            let pad = std::hint::black_box([0u8; 4096]);
            if n == 0 {
                return with_deep_stack(|| std::thread::current().id());
            }
            let id = recurse(n - 1);
            std::hint::black_box(&pad);
            id
        }
        let (outer, deep) =
            with_deep_stack(|| (std::thread::current().id(), recurse(super::STACK_SIZE / 4 / 4096 + 16)));
        assert_ne!(deep, outer, "a call with a quarter of the stack used gets a fresh stack");
    }

    #[test]
    fn deep_stack_panics_propagate() {
        let r = std::panic::catch_unwind(|| with_deep_stack(|| with_deep_stack(|| panic!("inner"))));
        assert!(r.is_err());
    }
}
