//! docs/builtins.md stays true: every builtin and every transform has its
//! entry, and every example program prints exactly what the page says it
//! prints (run through the `graft` binary, as a reader would).

use assert_cmd::Command;
use std::path::PathBuf;

fn page() -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/builtins.md");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// One ```graft block: the program, what it prints on stdout if the page
/// shows it, and what it prints on stderr if a ```stderr block follows
/// (`debug_print` lines).
type Example = (String, Option<String>, Option<String>);

/// Every ```graft block of the page.
/// The text of the fenced block that opens with `fence` if it is the next
/// line (that line and the block consumed), else `None` (nothing consumed).
fn fenced_block(lines: &mut std::iter::Peekable<std::str::Lines<'_>>, fence: &str) -> Option<String> {
    if lines.peek().is_none_or(|l| l.trim_end() != fence) {
        return None;
    }
    lines.next();
    let mut s = String::new();
    for l in lines.by_ref() {
        if l.trim_end() == "```" {
            break;
        }
        s.push_str(l);
        s.push('\n');
    }
    Some(s)
}

fn examples(page: &str) -> Vec<Example> {
    let mut out = Vec::new();
    let mut lines = page.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim_end() != "```graft" {
            continue;
        }
        let mut prog = String::new();
        for l in lines.by_ref() {
            if l.trim_end() == "```" {
                break;
            }
            prog.push_str(l);
            prog.push('\n');
        }
        let printed = fenced_block(&mut lines, "```");
        let stderr = if printed.is_some() { fenced_block(&mut lines, "```stderr") } else { None };
        out.push((prog, printed, stderr));
    }
    out
}

#[test]
fn every_builtin_and_transform_has_an_entry() {
    let page = page();
    let mut missing: Vec<String> = graft_lang::lower::stdlib::names().map(String::from).collect();
    missing.extend(
        graft_core::transform::Kind::ALL
            .iter()
            .filter(|k| {
                graft_lang::ast::transform_keyword(k.name()).is_some()
                    || graft_lang::ast::soft_transform(k.name()).is_some()
            })
            .map(|k| k.name().to_string()),
    );
    missing.retain(|n| page.lines().filter(|l| *l == format!("### `{n}`")).count() != 1);
    assert!(missing.is_empty(), "docs/builtins.md needs exactly one `### `name`` entry for: {missing:?}");
}

#[test]
fn every_example_prints_what_the_page_shows() {
    let page = page();
    let examples = examples(&page);
    assert!(examples.len() >= 90, "only {} examples found: is the scan broken?", examples.len());
    let dir = std::env::temp_dir().join(format!("graft-docs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut bad = Vec::new();
    assert!(examples.iter().any(|e| e.2.is_some()), "no ```stderr block found: is the scan broken?");
    for (i, (prog, printed, stderr)) in examples.iter().enumerate() {
        let file = dir.join(format!("example_{i}.graft"));
        std::fs::write(&file, prog).expect("write example");
        let sub = if printed.is_some() { "run" } else { "check" };
        let out = Command::cargo_bin("graft").expect("the graft binary is built").arg(sub).arg(&file).output();
        let out = out.expect("graft runs");
        let got = String::from_utf8_lossy(&out.stdout).to_string();
        // Warnings (no C compiler, ...) are not the program's lines.
        let err: String = String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| !l.starts_with("graft: warning"))
            .map(|l| format!("{l}\n"))
            .collect();
        match stderr {
            Some(want) if out.status.success() && err != *want => {
                bad.push(format!("example {i} printed on stderr\n{err}instead of\n{want}for\n{prog}"))
            }
            _ => {}
        }
        match printed {
            _ if !out.status.success() => {
                bad.push(format!("example {i} failed `graft {sub}`:\n{prog}{}", String::from_utf8_lossy(&out.stderr)))
            }
            Some(want) if got != *want => bad.push(format!("example {i} printed\n{got}instead of\n{want}for\n{prog}")),
            _ => {}
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(bad.is_empty(), "{}", bad.join("\n---\n"));
}

#[test]
fn graft_doc_prints_one_entry_and_lists_them_all() {
    let graft = || Command::cargo_bin("graft").expect("the graft binary is built");
    let out = graft().args(["doc", "softmax"]).output().expect("runs");
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.starts_with("### `softmax`\n") && s.contains("```graft") && !s.contains("### `log_softmax`"), "{s}");
    let list = graft().arg("doc").output().expect("runs");
    let list = String::from_utf8_lossy(&list.stdout).to_string();
    for name in graft_lang::lower::stdlib::names() {
        assert!(list.split_whitespace().any(|w| w == name), "`graft doc` does not list {name}");
    }
    let bad = graft().args(["doc", "sofmax"]).output().expect("runs");
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("did you mean")
            && String::from_utf8_lossy(&bad.stderr).contains("`softmax`")
    );
}
