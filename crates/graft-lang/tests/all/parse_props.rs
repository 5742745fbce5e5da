//! Property tests: the lexer and parser never panic or hang on any input
//! (random bytes, random token soups), every reported span lies inside the
//! source, and randomly generated well-formed expressions parse to exactly
//! the tree they were generated from (compared through `graft ast`).

use graft_lang::{parse, parse_expr, sexpr};
use proptest::prelude::*;

fn check_no_panic(src: &str) {
    match parse(src) {
        Ok(p) => {
            // Printing must not panic either.
            let _ = sexpr::program_to_sexpr(&p);
        }
        Err(ds) => {
            assert!(!ds.is_empty());
            for d in &ds {
                assert!(d.span.start <= d.span.end && d.span.end <= src.len(), "bad span {:?} for {src:?}", d.span);
                assert!(src.is_char_boundary(d.span.start) && src.is_char_boundary(d.span.end));
                let _ = graft_lang::diag::render(d, "fuzz.graft", src);
            }
        }
    }
    let _ = parse_expr(src);
}

const VOCAB: &[&str] = &[
    "def",
    "let",
    "fn",
    "if",
    "then",
    "else",
    "match",
    "true",
    "false",
    "and",
    "or",
    "not",
    "grad",
    "vmap",
    "jvp",
    "value_and_grad",
    "checkpoint",
    "tensor",
    "f32",
    "i32",
    "bool",
    "x",
    "y",
    "f",
    "_",
    "0",
    "1",
    "2.5",
    "-1",
    "\"ij->i\"",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    ";",
    ".",
    "=",
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "+",
    "-",
    "*",
    "/",
    "**",
    "@",
    "|>",
    "->",
    "=>",
    "\n",
    "\n",
    " ",
    "#c\n",
    "axis",
    "wrt",
];

/// A generated expression: its source (fully parenthesised where
/// precedence matters) and the S-expression it must parse to.
#[derive(Debug, Clone)]
struct Gen {
    src: String,
    sx: String,
}

fn leaf() -> impl Strategy<Value = Gen> {
    prop_oneof![
        prop::sample::select(vec!["a", "b", "xs", "w_1", "loss"])
            .prop_map(|n| Gen { src: n.to_string(), sx: format!("(var {{}} {n})") }),
        (0i64..1000).prop_map(|n| Gen { src: n.to_string(), sx: format!("(lit {{type: (t-prim {{}} int32)}} {n})") }),
        (0u32..1000).prop_map(|n| {
            let x = n as f64 / 8.0;
            Gen { src: format!("{x:?}"), sx: format!("(lit {{type: (t-prim {{}} float32)}} {x:?})") }
        }),
        any::<bool>().prop_map(|b| Gen { src: b.to_string(), sx: format!("(lit {{type: (t-prim {{}} bool)}} {b})") }),
    ]
}

fn gen_expr() -> impl Strategy<Value = Gen> {
    leaf().prop_recursive(6, 64, 4, |inner| {
        let ops = prop::sample::select(vec!["+", "-", "*", "/", "**", "@", "==", "<", ">=", "and", "or"]);
        prop_oneof![
            (ops, inner.clone(), inner.clone()).prop_map(|(op, a, b)| Gen {
                src: format!("({} {op} {})", a.src, b.src),
                sx: format!("({op} {{}} {} {})", a.sx, b.sx),
            }),
            (prop::collection::vec(inner.clone(), 0..4), prop::sample::select(vec!["f", "sum", "relu"])).prop_map(
                |(args, f)| Gen {
                    src: format!("{f}({})", args.iter().map(|a| a.src.as_str()).collect::<Vec<_>>().join(", ")),
                    sx: format!(
                        "(call {{}} (var {{}} {f}){})",
                        args.iter().map(|a| format!(" {}", a.sx)).collect::<String>()
                    ),
                }
            ),
            prop::collection::vec(inner.clone(), 2..4).prop_map(|items| Gen {
                src: format!("({})", items.iter().map(|a| a.src.as_str()).collect::<Vec<_>>().join(",\n ")),
                sx: format!("(tuple {{}}{})", items.iter().map(|a| format!(" {}", a.sx)).collect::<String>()),
            }),
            (inner.clone(), inner.clone(), inner.clone()).prop_map(|(c, a, b)| Gen {
                src: format!("(if {} then {} else {})", c.src, a.src, b.src),
                sx: format!("(if {{}} {} {} {})", c.sx, a.sx, b.sx),
            }),
            inner.clone().prop_map(|b| Gen {
                src: format!("(fn (a, b) -> {})", b.src),
                sx: format!("(fn {{}} (params {{}} (p-var {{}} a) (p-var {{}} b)) {})", b.sx),
            }),
            inner.clone().prop_map(|f| Gen {
                src: format!("grad({}, wrt=(a, b))", f.src),
                sx: format!("(grad {{}} {} (tuple {{}} (var {{}} a) (var {{}} b)))", f.sx),
            }),
            (inner.clone(), inner.clone()).prop_map(|(v, f)| Gen {
                src: format!("({}\n |> {})", v.src, f.src),
                sx: format!("(pipe {{}} {} {})", v.sx, f.sx),
            }),
            (inner.clone(), inner.clone()).prop_map(|(x, i)| Gen {
                src: format!("{}[{}, 1:]", paren(&x.src), i.src),
                sx: format!("(index {{}} {} {} (slice {{}} (lit {{type: (t-prim {{}} int32)}} 1) _ _))", x.sx, i.sx),
            }),
            inner.clone().prop_map(|x| Gen {
                src: format!("{}.1", paren(&x.src)),
                sx: format!("(field {{index: 1}} {})", x.sx)
            }),
            prop::collection::vec(inner, 1..3).prop_map(|items| Gen {
                src: format!("[{}]", items.iter().map(|a| a.src.as_str()).collect::<Vec<_>>().join(", ")),
                sx: format!("(array {{}}{})", items.iter().map(|a| format!(" {}", a.sx)).collect::<String>()),
            }),
        ]
    })
}

/// Parenthesises a postfix operand that is not already atomic.
fn paren(s: &str) -> String {
    format!("({s})")
}

/// The one-line form of an S-expression, whatever the printer's layout.
fn one_line(s: &str) -> String {
    s.lines().map(str::trim).collect::<Vec<_>>().join(" ")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        check_no_panic(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn random_ascii_never_panics(s in "[ -~\n\t]{0,200}") {
        check_no_panic(&s);
    }

    #[test]
    fn token_soup_never_panics(toks in prop::collection::vec(prop::sample::select(VOCAB), 0..80)) {
        check_no_panic(&toks.join(" "));
        check_no_panic(&toks.concat());
    }

    #[test]
    fn def_shaped_token_soup_never_panics(toks in prop::collection::vec(prop::sample::select(VOCAB), 0..40)) {
        check_no_panic(&format!("def f(x: f32) -> f32 = {}\ndef g(y: f32) -> f32 {{\n  {}\n}}\n", toks.join(" "), toks.join(" ")));
    }

    #[test]
    fn generated_expressions_parse_to_their_tree(g in gen_expr()) {
        let e = parse_expr(&g.src).map_err(|d| TestCaseError::fail(format!("{}: {:?}", g.src, d)))?;
        prop_assert_eq!(one_line(&sexpr::expr_to_sexpr(&e)), g.sx.clone(), "source: {}", g.src);
        // The same expression as a definition's body, and inside a block.
        let src = format!("def f(a: f32, b: f32) -> f32 =\n  {}\n", g.src);
        prop_assert!(parse(&src).is_ok(), "{}", src);
        let src = format!("def f(a: f32, b: f32) -> f32 {{\n  let r = {}\n  r\n}}\n", g.src);
        prop_assert!(parse(&src).is_ok(), "{}", src);
    }
}
