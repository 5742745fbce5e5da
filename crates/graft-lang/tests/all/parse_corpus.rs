//! The regression corpus: every file in `tests/corpus/` is parsed; files
//! named `ok_*.graft` must parse (and print), files named `err_*.graft` must
//! fail with lex/parse diagnostics whose spans lie inside the file. Inputs
//! that once crashed or hung the front end (from fuzzing or bug reports) go
//! here, so the fix stays fixed. Deeply nested inputs run on a thread with
//! the default 2 MiB test stack: they must end in a diagnostic, not a stack
//! overflow.

use graft_lang::diag::Stage;
use graft_lang::{parse, sexpr};
use std::path::Path;

#[test]
fn corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut entries: Vec<_> =
        std::fs::read_dir(&dir).expect("tests/corpus exists").map(|e| e.unwrap().path()).collect();
    entries.sort();
    let mut checked = 0;
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(&path).unwrap();
        let src = String::from_utf8_lossy(&bytes).into_owned();
        let src2 = src.clone();
        let result = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || parse(&src2).map(|p| sexpr::program_to_sexpr(&p)))
            .unwrap()
            .join()
            .unwrap_or_else(|_| panic!("{name}: the parser panicked"));
        if name.starts_with("ok_") {
            if let Err(ds) = &result {
                panic!("{name} should parse but failed: {}", graft_lang::diag::render(&ds[0], &name, &src));
            }
        } else if name.starts_with("err_") {
            let ds = result.err().unwrap_or_else(|| panic!("{name} should fail to parse"));
            for d in &ds {
                assert!(matches!(d.stage, Stage::Lex | Stage::Parse), "{name}: stage {:?}", d.stage);
                assert!(d.span.end <= src.len() && d.span.start <= d.span.end, "{name}: span {:?}", d.span);
            }
        } else {
            panic!("corpus file {name} must start with ok_ or err_");
        }
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} corpus files found");
}
