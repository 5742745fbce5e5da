//! The checker and lowering never panic, whatever program reaches them.
//!
//! The parser has its own no-panic properties (`parse_props.rs`); this file
//! covers the later stages: every corpus file that parses and every example
//! program is checked, and then a few hundred mutants of the examples
//! (byte ranges deleted, duplicated or swapped for other tokens) that still
//! parse are checked too. Any outcome is fine except a panic: most mutants
//! end in a diagnostic, which must lie inside the source.

use graft_lang::Module;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

/// Runs `check` on a big-stack thread (the front end recurses over trees up
/// to the parser's depth limit) and fails the test on a panic.
fn check_does_not_panic(name: &str, src: &str) {
    let (name2, src2) = (name.to_string(), src.to_string());
    let outcome = std::thread::Builder::new()
        .stack_size(graft_lang::STACK_SIZE)
        .spawn(move || {
            catch_unwind(AssertUnwindSafe(|| {
                if let Ok(m) = Module::from_source(&name2, &src2) {
                    if let Err(ds) = m.check() {
                        for d in ds {
                            assert!(d.span.start <= d.span.end && d.span.end <= src2.len(), "span {:?}", d.span);
                        }
                    }
                }
            }))
        })
        .expect("spawn")
        .join();
    match outcome {
        Ok(Ok(())) => {}
        _ => panic!("checking {name} panicked; source:\n{src}"),
    }
}

fn graft_files(dir: &Path) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(dir)
        .expect("directory exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "graft"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .map(|(n, b)| (n, String::from_utf8_lossy(&b).into_owned()))
        .collect();
    out.sort();
    out
}

fn examples() -> Vec<(String, String)> {
    graft_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples"))
}

#[test]
fn corpus_and_examples_check_without_panicking() {
    let corpus = graft_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus"));
    let ex = examples();
    assert!(ex.len() >= 12 && corpus.len() >= 20);
    for (name, src) in corpus.iter().chain(&ex) {
        check_does_not_panic(name, src);
    }
}

/// xorshift64*: a fixed-seed generator, so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Tokens a mutant may splice in: names of builtins and transforms, types,
/// literals of each kind, and punctuation.
const SPLICE: &[&str] = &[
    "grad(",
    "vmap(",
    "jvp(",
    "scan(",
    "while(",
    "fori(",
    "sum(",
    "x",
    "0",
    "-1",
    "2.5",
    "true",
    "f64",
    "i32",
    "tensor[n, f32]",
    "(",
    ")",
    "[",
    "]",
    ",",
    "@",
    "**",
    " if ",
    " then ",
    " else ",
    "fn (a) -> a",
    ".0",
    "[:, 1:]",
    "axis=1",
    "wrt=(",
    "none",
    "()",
    "[[1, 2], [3]]",
    "reshape(",
    "einsum(\"ij,jk->ik\", ",
];

fn mutate(src: &str, rng: &mut Rng) -> String {
    let chars: Vec<char> = src.chars().collect();
    let a = rng.below(chars.len());
    let len = 1 + rng.below(12);
    let b = (a + len).min(chars.len());
    let middle: String = match rng.below(3) {
        0 => String::new(),
        1 => chars[a..b].iter().collect::<String>().repeat(2),
        _ => SPLICE[rng.below(SPLICE.len())].to_string(),
    };
    chars[..a].iter().collect::<String>() + &middle + &chars[b..].iter().collect::<String>()
}

#[test]
fn mutated_examples_check_without_panicking() {
    let ex = examples();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut parsed = 0;
    for round in 0..240 {
        let (name, src) = &ex[round % ex.len()];
        let mut m = src.clone();
        for _ in 0..1 + rng.below(3) {
            m = mutate(&m, &mut rng);
        }
        if graft_lang::parse(&m).is_ok() {
            parsed += 1;
        }
        check_does_not_panic(&format!("{name} (mutant {round})"), &m);
    }
    // The mutants must reach the checker, not just fail to parse.
    assert!(parsed >= 40, "only {parsed} mutants parsed");
}
