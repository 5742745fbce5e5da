//! `graft doc NAME`: one entry of the builtin reference (docs/builtins.md,
//! embedded at build time, so the binary's help is the page the test suite
//! checks), or the list of names when none is given.

use crate::Fail;

/// The reference page, as shipped.
const PAGE: &str = include_str!("../../../docs/builtins.md");

/// The entry of `name` (`### \`name\`` up to the next heading), or the list
/// of entries when `name` is `None`.
pub fn doc(name: Option<&str>) -> Result<String, Fail> {
    let entries = entries();
    let Some(name) = name else {
        let names: Vec<&str> = entries.iter().map(|(n, _)| *n).collect();
        return Ok(format!(
            "Builtins and transforms (`graft doc NAME` prints one; docs/builtins.md has them all):\n{}\n",
            wrap(&names, 88)
        ));
    };
    if let Some((_, body)) = entries.iter().find(|(n, _)| *n == name) {
        return Ok(format!("{}\n", body.trim_end()));
    }
    let near: Vec<&str> = entries
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| n.contains(name) || name.contains(*n) || graft_lang::check::edit_distance(n, name) <= 2)
        .collect();
    let hint = if near.is_empty() {
        "run `graft doc` for the list".to_string()
    } else {
        format!("did you mean {}?", near.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", "))
    };
    Err(Fail::new(format!("error: no builtin or transform named `{name}`; {hint}")))
}

/// `(name, entry text)` for every `### \`name\`` heading, in page order.
fn entries() -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    let mut rest = PAGE;
    while let Some(at) = rest.find("\n### `") {
        let start = at + 1;
        let after = &rest[start + 5..];
        let Some(end_name) = after.find('`') else { break };
        let name = &after[..end_name];
        let body_end = rest[start + 4..].find("\n#").map_or(rest.len(), |e| start + 4 + e);
        out.push((name, &rest[start..body_end]));
        rest = &rest[body_end..];
    }
    out
}

fn wrap(names: &[&str], width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for n in names {
        if !line.is_empty() && line.len() + 1 + n.len() > width {
            out.push_str(&line);
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(n);
    }
    out.push_str(&line);
    out
}
