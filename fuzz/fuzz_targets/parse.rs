//! Fuzz target: the lexer, parser and `graft ast` printer (and, with the
//! `check` feature, the checker) must never panic, hang or overflow the
//! stack on any input. Crashes found here become files in
//! crates/graft-lang/tests/corpus/ (see docs/language.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    match graft_lang::parse(&src) {
        Ok(program) => {
            let _ = graft_lang::sexpr::program_to_sexpr(&program);
            #[cfg(feature = "check")]
            {
                let _ = graft_lang::check(&program);
            }
        }
        Err(diags) => {
            for d in &diags {
                assert!(d.span.start <= d.span.end && d.span.end <= src.len());
                let _ = graft_lang::diag::render(d, "fuzz.graft", &src);
            }
        }
    }
    let _ = graft_lang::parse_expr(&src);
});
