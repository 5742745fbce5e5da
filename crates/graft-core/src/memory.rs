//! Memory budgets: how much memory a plan may need before it runs, and
//! the limit it is checked against. Shared by `graft run` (`--max-memory`)
//! and `graft gradbench`, so that a program or message whose sizes would
//! need more than the limit is rejected before anything of that size is
//! allocated.
//!
//! The limit is `GRAFT_MAX_MEMORY` (bytes, or with a suffix `K`, `M`, `G`,
//! `T`, powers of 1024) when set, else half the machine's physical memory
//! (`MemTotal` in `/proc/meminfo`), else [`FALLBACK_LIMIT`].
//!
//! [`estimated_peak_bytes`] is the executor's peak on the top-level graph
//! without fusion (every value materialised, freed after its last reader,
//! parameters and results held throughout); memory held inside loop bodies
//! is not counted, so it is a lower bound of what a run may need.

use crate::{Func, TensorType};

/// The budget when neither `GRAFT_MAX_MEMORY` nor the physical memory is known: 8 GiB.
pub const FALLBACK_LIMIT: u64 = 8 << 30;

/// `GRAFT_MAX_MEMORY`, else half of physical memory, else [`FALLBACK_LIMIT`].
/// An unparsable `GRAFT_MAX_MEMORY` is ignored (the default applies).
pub fn default_limit() -> u64 {
    if let Some(b) = std::env::var("GRAFT_MAX_MEMORY").ok().as_deref().and_then(parse_bytes) {
        return b;
    }
    physical_memory().map_or(FALLBACK_LIMIT, |m| m / 2)
}

/// `MemTotal` from `/proc/meminfo`, in bytes (Linux); `None` elsewhere.
pub fn physical_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.trim_start_matches("MemTotal:").trim().trim_end_matches("kB").trim().parse().ok()?;
    kib.checked_mul(1024)
}

/// `"1073741824"`, `"512M"`, `"4G"`, `"1.5G"` (suffixes are powers of 1024,
/// an optional `B`/`iB` after them is accepted); `None` for anything else.
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let upper = s.to_ascii_uppercase();
    let body = upper.trim_end_matches("IB").trim_end_matches('B');
    let (num, scale) = match body.chars().last()? {
        'K' => (&body[..body.len() - 1], 1u64 << 10),
        'M' => (&body[..body.len() - 1], 1 << 20),
        'G' => (&body[..body.len() - 1], 1 << 30),
        'T' => (&body[..body.len() - 1], 1 << 40),
        _ => (body, 1),
    };
    let num = num.trim();
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(scale);
    }
    let x: f64 = num.parse().ok()?;
    let b = x * scale as f64;
    (x.is_finite() && x >= 0.0 && b < u64::MAX as f64).then_some(b as u64)
}

/// Bytes of a tensor of type `t`, saturating (a shape whose element count
/// overflows needs "more than any machine has").
pub fn type_bytes(t: &TensorType) -> u64 {
    t.shape.iter().try_fold(t.dtype.size_bytes() as u64, |acc, &d| acc.checked_mul(d as u64)).unwrap_or(u64::MAX)
}

/// The peak of live bytes while the top-level graph of `f` runs one
/// equation after another with every value materialised: parameters and
/// results are live throughout, any other value from its equation until its
/// last reader. Saturating.
pub fn estimated_peak_bytes(f: &Func) -> u64 {
    let n = f.n_values();
    const NEVER: usize = usize::MAX;
    // Index of the last equation reading each value; NEVER for values kept to the end.
    let mut last = vec![None::<usize>; n];
    for (i, e) in f.eqns.iter().enumerate() {
        for v in &e.inputs {
            last[v.index()] = Some(i);
        }
    }
    for v in f.params.iter().chain(&f.outputs) {
        last[v.index()] = Some(NEVER);
    }
    let bytes = |v: crate::Value| type_bytes(f.ty(v));
    let mut live: u64 = f.params.iter().fold(0u64, |acc, &v| acc.saturating_add(bytes(v)));
    let mut peak = live;
    for (i, e) in f.eqns.iter().enumerate() {
        for &v in &e.outputs {
            live = live.saturating_add(bytes(v));
        }
        peak = peak.max(live);
        let mut freed: Vec<usize> = Vec::new();
        for &v in e.inputs.iter().chain(&e.outputs) {
            let dies = match last[v.index()] {
                Some(j) => j == i,
                // Never read: dies as soon as it is made.
                None => e.outputs.contains(&v),
            };
            if dies && !freed.contains(&v.index()) {
                freed.push(v.index());
                live = live.saturating_sub(bytes(v));
            }
        }
    }
    peak
}

/// A human-readable byte count: `1.5 GiB`.
pub fn show_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} bytes")
    } else {
        format!("{x:.1} {}", UNITS[u])
    }
}

/// `None` when `need` fits in `limit`; else the sentence saying that
/// `what` needs `need` bytes, over the limit of `limit` (`limit_name` says
/// whose limit: "this tool's memory limit", "the memory limit").
pub fn over_limit(what: &str, need: u64, limit: u64, limit_name: &str) -> Option<String> {
    if need <= limit {
        return None;
    }
    let need_text = if need == u64::MAX { "more bytes than any machine has".to_string() } else { with_exact(need) };
    Some(format!("{what} needs {need_text}, over {limit_name} of {}", with_exact(limit)))
}

/// `1.5 GiB (1610612736 bytes)`, or `48 bytes` when that says it all.
fn with_exact(b: u64) -> String {
    let shown = show_bytes(b);
    if b < 1024 {
        shown
    } else {
        format!("{shown} ({b} bytes)")
    }
}
