//! Every ```graft block in docs/language.md is a whole program that must
//! parse, so the language reference cannot drift from the parser.

#[test]
fn language_doc_examples_parse() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/language.md");
    let doc = std::fs::read_to_string(path).expect("docs/language.md exists");
    let mut blocks = 0;
    let mut rest = doc.as_str();
    while let Some(start) = rest.find("```graft\n") {
        let body = &rest[start + "```graft\n".len()..];
        let end = body.find("```").expect("code block is closed");
        let src = &body[..end];
        if let Err(ds) = graft_lang::parse(src) {
            panic!("{}", ds.iter().map(|d| graft_lang::diag::render(d, "language.md", src)).collect::<String>());
        }
        blocks += 1;
        rest = &body[end + 3..];
    }
    assert!(blocks >= 4, "found only {blocks} graft blocks");
}
