//! Diagnostics: the one error type every front-end stage returns.
//!
//! A diagnostic is data (message, primary span, extra labels, notes), so
//! tests can inspect it and the CLI can render it; rendering (file name,
//! line and column, source excerpt with the span underlined) happens only in
//! [`render`], through `ariadne`.

use crate::ast::Span;

/// Which stage found the problem; part of the rendered header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Lex,
    Parse,
    Resolve,
    Type,
    Transform,
    Runtime,
    /// An input given on the command line (`--input`), located at the
    /// parameter it is for.
    Input,
}

/// A secondary location with its own message ("first bound here").
#[derive(Debug, Clone, PartialEq)]
pub struct Label {
    pub span: Span,
    pub message: String,
}

/// One user-facing error.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostic {
    pub stage: Stage,
    /// One line, lower case, no trailing period: "expected `)` after arguments".
    pub message: String,
    /// Where the problem is; underlined in the excerpt.
    pub span: Span,
    /// Text under the primary underline (may be empty).
    pub label: String,
    pub labels: Vec<Label>,
    /// Extra lines: "note: ...", "help: ..." (written with their prefix).
    pub notes: Vec<String>,
}

impl Diagnostic {
    pub fn new(stage: Stage, span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic { stage, message: message.into(), span, label: String::new(), labels: Vec::new(), notes: Vec::new() }
    }

    /// Sets the text under the primary underline.
    pub fn with_label(mut self, label: impl Into<String>) -> Diagnostic {
        self.label = label.into();
        self
    }

    /// Adds a secondary location.
    pub fn with_secondary(mut self, span: Span, message: impl Into<String>) -> Diagnostic {
        self.labels.push(Label { span, message: message.into() });
        self
    }

    /// Adds a note line (include its `note:`/`help:` prefix).
    pub fn with_note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for Diagnostic {}

/// 1-based (line, column) of a byte offset; columns count characters.
pub fn line_col(src: &str, offset: usize) -> (u32, u32) {
    let offset = offset.min(src.len());
    let before = src.get(..offset).unwrap_or(src);
    let line = before.matches('\n').count() as u32 + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before[line_start..].chars().count() as u32 + 1;
    (line, col)
}

/// Renders a diagnostic as plain text (no colour): a header
/// `error[stage]: message`, the location `file:line:col`, the source
/// excerpt with labels, and the notes.
pub fn render(d: &Diagnostic, file: &str, src: &str) -> String {
    use ariadne::{Config, Label as ALabel, Report, ReportKind, Source};
    // ariadne counts character offsets, our spans are byte offsets.
    let to_chars = |b: usize| src.get(..b.min(src.len())).map_or(0, |s| s.chars().count());
    let span_of = |s: &Span| {
        let (a, b) = (to_chars(s.start), to_chars(s.end));
        (file, a..b.max(a))
    };
    let code = match d.stage {
        Stage::Lex => "lex",
        Stage::Parse => "parse",
        Stage::Resolve => "name",
        Stage::Type => "type",
        Stage::Transform => "transform",
        Stage::Runtime => "runtime",
        Stage::Input => "input",
    };
    let mut report = Report::build(ReportKind::Error, span_of(&d.span))
        .with_config(Config::default().with_color(false))
        .with_code(code)
        .with_message(&d.message);
    let mut primary = ALabel::new(span_of(&d.span));
    if !d.label.is_empty() {
        primary = primary.with_message(&d.label);
    }
    report = report.with_label(primary);
    for l in &d.labels {
        report = report.with_label(ALabel::new(span_of(&l.span)).with_message(&l.message));
    }
    for n in &d.notes {
        report = if let Some(h) = n.strip_prefix("help: ") {
            report.with_help(h)
        } else {
            report.with_note(n.strip_prefix("note: ").unwrap_or(n))
        };
    }
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = report.finish().write((file, Source::from(src)), &mut out);
    String::from_utf8_lossy(&out).into_owned()
}
