//! NumPy-style printing of tensors (`print(np.array(...))`'s layout).
//!
//! Floats share one notation per tensor: positional with aligned decimal
//! points (`[1.  2.5 3. ]`), or scientific when the magnitudes call for it
//! (any |x| >= 1e8, or a nonzero |x| < 1e-4, as NumPy decides). Up to 8
//! significant fractional digits, trailing zeros trimmed. Tensors with more
//! than 1000 elements are summarised with `...` (3 edge items per axis). An
//! empty tensor prints `[]`, whatever its shape.

use crate::dtype::DType;
use crate::tensor::{Storage, Tensor};
use std::fmt;

const THRESHOLD: usize = 1000;
const EDGE: usize = 3;
const PRECISION: usize = 8;

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_tensor(self))
    }
}

/// Formats a tensor the way NumPy's `str()` does.
pub fn format_tensor(t: &Tensor) -> String {
    let shape = t.shape();
    if t.numel() == 0 && !shape.is_empty() {
        // As NumPy prints any empty array, whatever its other dimensions
        // (walking a dimension of 2^32 beside a 0 would never end).
        return "[]".to_string();
    }
    let summarise = t.numel() > THRESHOLD;
    // Indices (flat) of the elements that will be shown, to size the columns.
    let shown = shown_indices(shape, summarise);
    let fmt_el = element_formatter(t, &shown);
    let width = shown.iter().map(|&i| fmt_el(i).len()).max().unwrap_or(0);
    if shape.is_empty() {
        return fmt_el(0).trim().to_string();
    }
    let mut out = String::new();
    write_axis(&mut out, shape, 0, 0, &fmt_el, width, summarise);
    out
}

fn shown_indices(shape: &[usize], summarise: bool) -> Vec<usize> {
    let mut idx = vec![0usize];
    let mut stride = 1;
    let mut all: Vec<usize> = vec![0];
    for &d in shape.iter().rev() {
        let positions: Vec<usize> =
            if summarise && d > 2 * EDGE { (0..EDGE).chain(d - EDGE..d).collect() } else { (0..d).collect() };
        all = positions.iter().flat_map(|&p| all.iter().map(move |&a| a + p * stride)).collect();
        stride *= d;
    }
    idx.clear();
    idx.extend(all);
    idx
}

fn write_axis(
    out: &mut String,
    shape: &[usize],
    axis: usize,
    offset: usize,
    fmt_el: &dyn Fn(usize) -> String,
    width: usize,
    summarise: bool,
) {
    let d = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    out.push('[');
    let positions: Vec<Option<usize>> = if summarise && d > 2 * EDGE {
        (0..EDGE).map(Some).chain(std::iter::once(None)).chain((d - EDGE..d).map(Some)).collect()
    } else {
        (0..d).map(Some).collect()
    };
    let last_axis = axis + 1 == shape.len();
    for (k, pos) in positions.iter().enumerate() {
        if k > 0 {
            if last_axis {
                out.push(' ');
            } else {
                let blank_lines = shape.len() - axis - 2;
                out.push('\n');
                for _ in 0..blank_lines {
                    out.push('\n');
                }
                for _ in 0..=axis {
                    out.push(' ');
                }
            }
        }
        match pos {
            None => out.push_str("..."),
            Some(p) if last_axis => {
                let s = fmt_el(offset + p);
                for _ in s.len()..width {
                    out.push(' ');
                }
                out.push_str(&s);
            }
            Some(p) => write_axis(out, shape, axis + 1, offset + p * inner, fmt_el, width, summarise),
        }
    }
    out.push(']');
}

fn element_formatter<'a>(t: &'a Tensor, shown: &[usize]) -> Box<dyn Fn(usize) -> String + 'a> {
    match t.dtype() {
        DType::Bool => Box::new(move |i| if t.storage().get_f64(i) != 0.0 { "True".into() } else { "False".into() }),
        // Integers print exactly (through f64 an i64 above 2^53 would round).
        DType::I32 | DType::I64 | DType::U32 => Box::new(move |i| match t.storage() {
            Storage::I64(v) => v[i].to_string(),
            Storage::U32(v) => v[i].to_string(),
            Storage::I32(v) => v[i].to_string(),
            other => format!("{}", other.get_f64(i) as i64),
        }),
        // f16 prints like f32: the shortest decimal that reads back as the
        // same f32, which an f16 value (exact in f32) also is.
        DType::F16 | DType::F32 | DType::F64 => {
            let single = matches!(t.dtype(), DType::F16 | DType::F32);
            let vals: Vec<f64> = shown.iter().map(|&i| t.storage().get_f64(i)).filter(|v| v.is_finite()).collect();
            let max = vals.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let min_nz = vals.iter().filter(|v| **v != 0.0).fold(f64::INFINITY, |m, v| m.min(v.abs()));
            let sci = max >= 1e8 || min_nz < 1e-4 || (min_nz.is_finite() && max / min_nz > 1e3);
            // Align decimal points: pad the fractional part to the longest one shown.
            let frac_len = if sci {
                shown
                    .iter()
                    .map(|&i| t.storage().get_f64(i))
                    .filter(|v| v.is_finite())
                    .map(|v| scientific(v, single, 0))
                    .map(|s| s.find('e').unwrap_or(0) - s.find('.').map_or(0, |p| p + 1))
                    .max()
                    .unwrap_or(0)
            } else {
                shown
                    .iter()
                    .map(|&i| positional(t.storage().get_f64(i), single))
                    .map(|s| s.find('.').map_or(0, |p| s.len() - p - 1))
                    .max()
                    .unwrap_or(0)
            };
            Box::new(move |i| {
                let v = t.storage().get_f64(i);
                if !v.is_finite() {
                    return if v.is_nan() {
                        "nan".into()
                    } else if v > 0.0 {
                        "inf".into()
                    } else {
                        "-inf".into()
                    };
                }
                if sci {
                    scientific(v, single, frac_len)
                } else {
                    let mut s = positional(v, single);
                    let cur = s.find('.').map_or(0, |p| s.len() - p - 1);
                    for _ in cur..frac_len {
                        s.push(' ');
                    }
                    s
                }
            })
        }
    }
}

/// Shortest round-trip digits, at most PRECISION fractional digits, `1.` for integers.
fn positional(v: f64, single: bool) -> String {
    if !v.is_finite() {
        return String::new();
    }
    let shortest = if single { format!("{}", v as f32) } else { format!("{v}") };
    let mut s = if shortest.contains('e') || shortest.split('.').nth(1).is_some_and(|f| f.len() > PRECISION) {
        let fixed = format!("{v:.PRECISION$}");
        fixed.trim_end_matches('0').to_string()
    } else {
        shortest
    };
    if !s.contains('.') {
        s.push('.');
    }
    s
}

/// Scientific notation with the mantissa's fraction zero-padded to `min_frac` digits.
///
/// A mantissa with more than PRECISION fractional digits is rounded together
/// with its exponent (`{:.8e}`), so a carry out of the leading digit moves
/// into the exponent: 9.9999999995e-11 prints `1.e-10`, as NumPy prints it,
/// never `10.e-11` (rounding the mantissa alone would give two digits
/// before the point).
fn scientific(v: f64, single: bool, min_frac: usize) -> String {
    let shortest = if single { format!("{:e}", v as f32) } else { format!("{v:e}") };
    let too_long = shortest
        .split_once('e')
        .map_or(shortest.as_str(), |(m, _)| m)
        .split_once('.')
        .is_some_and(|(_, frac)| frac.len() > PRECISION);
    let s = if too_long {
        let r = if single { format!("{:.PRECISION$e}", v as f32) } else { format!("{v:.PRECISION$e}") };
        match r.split_once('e') {
            Some((m, e)) => format!("{}e{e}", m.trim_end_matches('0')),
            None => r,
        }
    } else {
        shortest
    };
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let mut mant = mant.to_string();
    if !mant.contains('.') {
        mant.push('.');
    }
    let cur = mant.find('.').map_or(0, |p| mant.len() - p - 1);
    for _ in cur..min_frac {
        mant.push('0');
    }
    let e: i32 = exp.parse().unwrap_or(0);
    format!("{mant}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(v: Vec<f64>) -> String {
        format_tensor(&Tensor::from_vec(vec![v.len()], v).expect("a vector"))
    }

    /// Rounding to PRECISION digits that carries into a new leading digit
    /// bumps the exponent (NumPy prints these the same way).
    #[test]
    fn a_rounding_carry_moves_into_the_exponent() {
        assert_eq!(show(vec![9.9999999995e-11]), "[1.e-10]");
        assert_eq!(show(vec![9.9999999995e-11, 1.0]), "[1.e-10 1.e+00]");
        assert_eq!(show(vec![-9.99999999999e-5, 2.0]), "[-1.e-04  2.e+00]");
        assert_eq!(show(vec![9.9999999996e20]), "[1.e+21]");
        assert_eq!(show(vec![9.999999994e-5, 1.0]), "[9.99999999e-05 1.00000000e+00]");
        assert_eq!(show(vec![0.999999999996, 1.5]), "[1.  1.5]");
        assert_eq!(format_tensor(&Tensor::scalar(9.9999999995e-11f64)), "1.e-10");
    }
}
