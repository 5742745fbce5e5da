//! What the fuzz targets in `fuzz/` run, kept in the crate so that the test
//! suite can replay every input that ever failed (`fuzz/regressions/<target>/`,
//! see `fuzz/README.md`). Not part of the language's API.
//!
//! Each function must return normally on any input: a panic, an abort, a
//! stack overflow or a hang is the bug the fuzzer looks for.

use crate::module::Module;
use graft_core::kernel::CompileMode;

/// Most defs of one input that [`lowering`] instantiates (a mutated input
/// with hundreds of defs would otherwise spend the fuzzer's time there).
const MAX_DEFS: usize = 8;

/// The front end: lexing, parsing, the `graft ast` printer, name
/// resolution, checking at placeholder sizes, and rendering every
/// diagnostic.
pub fn front_end(data: &[u8]) {
    let src = String::from_utf8_lossy(data);
    crate::with_deep_stack(|| {
        // Lexed once for `parse` and `parse_expr` (each is `lex` and then
        // its parser) and parsed once: `Module::from_source` is this parse
        // and `from_program`, and rendering its errors twice tested nothing
        // more.
        let tokens = match crate::lexer::lex(&src) {
            Ok(tokens) => tokens,
            Err(diags) => return render_all(&diags, &src),
        };
        let _ = crate::parser::parse_expr_tokens(&tokens);
        let program = match crate::parser::parse_tokens(&tokens) {
            Ok(program) => program,
            Err(diags) => return render_all(&diags, &src),
        };
        let _ = crate::sexpr::program_to_sexpr(&program);
        match Module::from_program("fuzz.graft", &src, program) {
            Ok(m) => {
                if let Err(diags) = m.check() {
                    render_all(&diags, &src);
                }
            }
            Err(diags) => render_all(&diags, &src),
        }
    });
}

/// Lowering and planning: every def of a program that checks (up to
/// [`MAX_DEFS`]) lowered at placeholder sizes, verified and planned by the
/// executor (fusion, row regions), its kernels and loop programs lowered and
/// rendered to C. Nothing is compiled or run (a mutated loop may never end).
pub fn lowering(data: &[u8]) {
    let src = String::from_utf8_lossy(data);
    crate::with_deep_stack(|| {
        let Ok(m) = Module::from_source("fuzz.graft", &src) else { return };
        if m.check().is_err() {
            return;
        }
        let names: Vec<String> = m.program().defs.iter().take(MAX_DEFS).map(|d| d.name.name.clone()).collect();
        let options = graft_core::ExecOptions { compile: CompileMode::Off, ..graft_core::ExecOptions::default() };
        for name in names {
            let Some(Ok(c)) = m.instantiate_at_placeholders(&name) else { continue };
            let Ok(exe) = graft_core::Executable::with_options(c.func.clone(), options) else { continue };
            let kernels = graft_core::kernel::kernels_of(&exe);
            let _ = graft_core::kernel::render_c::render_unit(&kernels, 8);
            // From `exe`'s plan: `loop_programs(&c.func)` and
            // `while_programs(&c.func)` would each plan `c.func` again,
            // interpreting its parameter-free work twice more.
            let loops = graft_core::kernel::loop_programs_of(&exe, options);
            for (_, p) in &loops.scans {
                let _ = graft_core::kernel::render_c::render_loop(p, 8);
            }
            for (_, w) in &loops.whiles {
                let _ = graft_core::kernel::render_c::render_while(w, 8);
            }
        }
    });
}

fn render_all(diags: &[crate::diag::Diagnostic], src: &str) {
    for d in diags {
        assert!(d.span.start <= d.span.end && d.span.end <= src.len(), "diagnostic span out of the source: {d:?}");
        let _ = crate::diag::render(d, "fuzz.graft", src);
    }
}

#[cfg(test)]
mod tests {
    use graft_core::fuzzing::replay_regressions;

    #[test]
    fn front_end_regressions_replay() {
        replay_regressions("front_end", super::front_end);
    }

    #[test]
    fn lowering_regressions_replay() {
        replay_regressions("lowering", super::lowering);
    }
}
