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

/// How many diagnostics one stage reports for a file. A file with thousands
/// of errors (a line of stray characters, a generated program gone wrong)
/// would otherwise take time and memory in proportion to errors times
/// source; the first ones are what a user fixes first anyway.
pub const MAX_ERRORS: usize = 50;

/// Keeps the first [`MAX_ERRORS`] diagnostics; when there were more (`more`
/// of them were dropped, or are left in `ds`), the last kept one gets a note
/// saying how many were not shown.
pub fn cap(mut ds: Vec<Diagnostic>, more: usize) -> Vec<Diagnostic> {
    let more = more + ds.len().saturating_sub(MAX_ERRORS);
    ds.truncate(MAX_ERRORS);
    if more > 0 {
        if let Some(last) = ds.last_mut() {
            last.notes.push(format!(
                "note: {more} more error{} not shown (graft reports the first {MAX_ERRORS})",
                if more == 1 { "" } else { "s" }
            ));
        }
    }
    ds
}

/// 1-based (line, column) of a byte offset; columns count characters.
pub fn line_col(src: &str, offset: usize) -> (u32, u32) {
    let offset = offset.min(src.len());
    let before = src.get(..offset).unwrap_or(src);
    let line = before.matches('\n').count() as u32 + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before[line_start..].chars().count() as u32 + 1;
    (line, col)
}

/// Where the lines of a source start, and where its multi-byte characters
/// are, so that [`LineIndex::line_col`] answers in O(log n). Lowering asks
/// for the position of every expression it lowers; [`line_col`]'s scan from
/// the start of the file made that quadratic in the file's length.
#[derive(Debug, Clone, Default)]
pub struct LineIndex {
    /// Byte offset of the start of each line (the first is 0).
    starts: Vec<usize>,
    /// Byte offsets of UTF-8 continuation bytes (characters count once).
    cont: Vec<usize>,
    len: usize,
}

impl LineIndex {
    pub fn new(src: &str) -> LineIndex {
        let mut starts = vec![0];
        let mut cont = Vec::new();
        for (i, b) in src.bytes().enumerate() {
            if b == b'\n' {
                starts.push(i + 1);
            } else if b & 0xC0 == 0x80 {
                cont.push(i);
            }
        }
        LineIndex { starts, cont, len: src.len() }
    }

    /// 1-based (line, column) of a byte offset, as [`line_col`] gives it.
    pub fn line_col(&self, offset: usize) -> (u32, u32) {
        let mut offset = offset.min(self.len);
        if self.cont.binary_search(&offset).is_ok() {
            // Not a character boundary: [`line_col`] reads the whole source then.
            offset = self.len;
        }
        let line = self.starts.partition_point(|&s| s <= offset);
        let start = self.starts[line - 1];
        let multi = self.cont.partition_point(|&c| c < offset) - self.cont.partition_point(|&c| c < start);
        (line as u32, (offset - start - multi) as u32 + 1)
    }

    /// Byte offset where 1-based line `line` starts.
    pub fn line_start(&self, line: u32) -> Option<usize> {
        self.starts.get((line.max(1) - 1) as usize).copied()
    }
}

/// Renders a diagnostic as plain text (no colour): a header
/// `error[stage]: message`, the location `file:line:col`, the source
/// excerpt with labels, and the notes.
pub fn render(d: &Diagnostic, file: &str, src: &str) -> String {
    if !src.split('\n').any(|l| l.len() > MAX_LINE) {
        return render_in(d, file, src);
    }
    // Show long lines as a window around the spans they hold, so an error
    // on a line of 20 000 characters does not echo all of them.
    let c = Clipped::new(src, d);
    let map = |s: &Span| c.map(s.start)..c.map(s.end);
    let mut dc = d.clone();
    dc.span = map(&d.span);
    for l in &mut dc.labels {
        l.span = map(&l.span);
    }
    let out = render_in(&dc, file, &c.text);
    // The header's column is the clipped line's: put back the real one.
    let (l0, c0) = line_col(src, d.span.start);
    let (l1, c1) = line_col(&c.text, dc.span.start);
    out.replacen(&format!("{file}:{l1}:{c1}"), &format!("{file}:{l0}:{c0}"), 1)
}

/// Lines longer than this many bytes are shown clipped by [`render`].
const MAX_LINE: usize = 240;
/// Bytes shown before the first span on a clipped line.
const CLIP_BEFORE: usize = 60;

/// A source with every line longer than [`MAX_LINE`] cut to a window
/// around the first span (of a diagnostic) it holds, `…` marking each cut.
struct Clipped {
    text: String,
    /// (old start, old end, new start, window old start, window old end,
    /// new start of the window) per clipped line, in order.
    cuts: Vec<[usize; 6]>,
}

impl Clipped {
    fn new(src: &str, d: &Diagnostic) -> Clipped {
        let mut anchors: Vec<usize> = vec![d.span.start];
        anchors.extend(d.labels.iter().map(|l| l.span.start));
        let mut text = String::with_capacity(src.len().min(1 << 20));
        let mut cuts = Vec::new();
        let mut start = 0;
        for line in src.split_inclusive('\n') {
            let end = start + line.trim_end_matches('\n').len();
            if end - start <= MAX_LINE {
                text.push_str(line);
            } else {
                let a = anchors.iter().copied().find(|a| (start..=end).contains(a)).unwrap_or(start);
                let floor = |mut i: usize| {
                    while !src.is_char_boundary(i) {
                        i -= 1;
                    }
                    i
                };
                let ws = floor(a.saturating_sub(CLIP_BEFORE).max(start));
                let we = floor((ws + MAX_LINE).min(end));
                let new_start = text.len();
                if ws > start {
                    text.push('…');
                }
                let win_new = text.len();
                text.push_str(&src[ws..we]);
                if we < end {
                    text.push('…');
                }
                text.push_str(&line[end - start..]);
                cuts.push([start, end, new_start, ws, we, win_new]);
            }
            start += line.len();
        }
        Clipped { text, cuts }
    }

    /// Where byte `o` of the source is in the clipped text.
    fn map(&self, o: usize) -> usize {
        let i = self.cuts.partition_point(|c| c[0] <= o);
        let Some(&[_, end, new_start, ws, we, win_new]) = i.checked_sub(1).map(|i| &self.cuts[i]) else {
            return o;
        };
        if o > end {
            // After a clipped line (its newline and beyond): shift by what the cut removed.
            let new_end = win_new + (we - ws) + if we < end { '…'.len_utf8() } else { 0 };
            return o - end + new_end;
        }
        if o < ws {
            new_start
        } else if o <= we {
            win_new + (o - ws)
        } else {
            win_new + (we - ws) + '…'.len_utf8()
        }
    }
}

fn render_in(d: &Diagnostic, file: &str, src: &str) -> String {
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
