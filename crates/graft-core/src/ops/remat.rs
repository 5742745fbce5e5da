//! How reverse mode keeps a loop's state for the backward sweep: one policy
//! for `scan`, `fori` and `while` (and the language's and Rust API's loop
//! options), so "save everything" has one name.

use std::fmt;

/// What the reverse pass of a loop keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Remat {
    /// Every trip's residuals (or carries) are saved by the forward pass:
    /// fastest, memory grows with the trip count.
    #[default]
    Off,
    /// Only the carry at the start of every segment of `k` trips is saved
    /// (k >= 1); the reverse sweep recomputes a segment from it just before
    /// transposing it (memory ~ `n/k` carries + one segment).
    Every(usize),
    /// `Every(ceil(sqrt(n)))`: memory ~ `2 sqrt(n)` trips for about one
    /// extra forward sweep (a `while` counts its trips first).
    Sqrt,
}

impl Remat {
    /// The segment length for a loop of `n` trips, or `None` when nothing
    /// is recomputed (`Off`, or one segment would hold every trip).
    pub fn segment(self, n: usize) -> Option<usize> {
        let k = match self {
            Remat::Off => return None,
            Remat::Every(k) => k,
            Remat::Sqrt => (n as f64).sqrt().ceil() as usize,
        };
        (k >= 1 && k < n).then_some(k)
    }
}

impl fmt::Display for Remat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Remat::Off => f.write_str("off"),
            Remat::Every(k) => write!(f, "every({k})"),
            Remat::Sqrt => f.write_str("sqrt"),
        }
    }
}
