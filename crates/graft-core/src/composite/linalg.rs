//! Linear-algebra composites over `dot_general`: NumPy's `matmul`,
//! PyTorch's `linear`, and a real `einsum`.
//!
//! - [`matmul`] follows `np.matmul`: 1-D operands are promoted to a matrix
//!   (a leading 1 for the left, a trailing 1 for the right) and the added dim
//!   is removed from the result; batch dims (all but the last two) broadcast
//!   with NumPy rules. When no broadcasting is needed the operands feed
//!   `dot_general` directly (no copies): a matrix or vector on the right
//!   contracts against any batch of left operands in one product.
//! - [`linear`] is `torch.nn.functional.linear`: `w` is `[out, in]`, so
//!   `y = x @ w.T + b`, computed as one `dot_general` contracting the last
//!   dim of `x` with dim 1 of `w` (no transpose is materialised).
//! - [`einsum`] parses NumPy subscripts (see its docs) and lowers to
//!   diagonals (iota masks + sum), early sums, and left-to-right pairwise
//!   `dot_general` contractions.

use super::broadcast::{self, broadcast_shapes};
use super::shape::transpose_to;
use crate::dtype::DType;
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::ops::binary::Compare;
use crate::types::Shape;
use std::collections::BTreeMap;

/// `np.matmul(x, y)` (the `@` operator); see the module docs.
pub fn matmul(b: &mut Builder, x: Value, y: Value) -> Result<Value, IrError> {
    let (xt, yt) = (b.ty(x)?.clone(), b.ty(y)?.clone());
    let (xs, ys) = (&xt.shape, &yt.shape);
    let (xr, yr) = (xs.len(), ys.len());
    if xr == 0 || yr == 0 {
        return Err(IrError::invalid(
            "matmul",
            format!("operands must have rank >= 1 (use multiplication for scalars); got {xt} and {yt}"),
        ));
    }
    if xt.dtype != yt.dtype {
        return Err(IrError::invalid("matmul", format!("operands must have one dtype; got {xt} and {yt}")));
    }
    let kx = xs[xr - 1];
    let ky = if yr == 1 { ys[0] } else { ys[yr - 2] };
    if kx != ky {
        return Err(IrError::invalid(
            "matmul",
            format!("contraction dims differ: {xt} has {kx} columns, {yt} has {ky} rows"),
        ));
    }
    match (xr, yr) {
        // Vector or matrix on the right: one product against every left batch.
        (_, 1) => b.dot_general(x, y, &[xr - 1], &[0], &[], &[]),
        (_, 2) => b.dot_general(x, y, &[xr - 1], &[0], &[], &[]),
        // Vector on the left: contract it with the rows of every right matrix.
        (1, _) => b.dot_general(x, y, &[0], &[yr - 2], &[], &[]),
        _ => {
            let (bx, by) = (&xs[..xr - 2], &ys[..yr - 2]);
            let batch = broadcast_shapes("matmul", bx, by).map_err(|_| {
                IrError::invalid("matmul", format!("batch dims of {xt} and {yt} cannot be broadcast together"))
            })?;
            let nb = batch.len();
            let mut xfull = batch.clone();
            xfull.extend_from_slice(&xs[xr - 2..]);
            let mut yfull = batch.clone();
            yfull.extend_from_slice(&ys[yr - 2..]);
            let x = broadcast::broadcast_to(b, x, &xfull)?;
            let y = broadcast::broadcast_to(b, y, &yfull)?;
            let bd: Vec<usize> = (0..nb).collect();
            b.dot_general(x, y, &[nb + 1], &[nb], &bd, &bd)
        }
    }
}

/// `torch.nn.functional.linear(x, w, bias)`: `x [..., in]`, `w [out, in]`,
/// optional `bias [out]`; result `[..., out]`.
pub fn linear(b: &mut Builder, x: Value, w: Value, bias: Option<Value>) -> Result<Value, IrError> {
    let (xt, wt) = (b.ty(x)?.clone(), b.ty(w)?.clone());
    if wt.rank() != 2 {
        return Err(IrError::invalid("linear", format!("weight must be [out, in] (rank 2), got {wt}")));
    }
    if xt.rank() == 0 || xt.shape[xt.rank() - 1] != wt.shape[1] {
        return Err(IrError::invalid(
            "linear",
            format!("input {xt} must end in in_features = {} (weight {wt} is [out, in])", wt.shape[1]),
        ));
    }
    if xt.dtype != wt.dtype {
        return Err(IrError::invalid("linear", format!("input {xt} and weight {wt} must have one dtype")));
    }
    let y = b.dot_general(x, w, &[xt.rank() - 1], &[1], &[], &[])?;
    match bias {
        None => Ok(y),
        Some(bv) => {
            let bt = b.ty(bv)?.clone();
            if bt.shape != [wt.shape[0]] || bt.dtype != wt.dtype {
                return Err(IrError::invalid(
                    "linear",
                    format!("bias must be {}[{}] to match weight {wt}, got {bt}", wt.dtype, wt.shape[0]),
                ));
            }
            broadcast::binary(b, crate::ops::binary::Binary::Add, y, bv)
        }
    }
}

// ---------------------------------------------------------------------------
// einsum
// ---------------------------------------------------------------------------

/// An index label: an ASCII letter, or ellipsis dim `i` (counted from the
/// left of the broadcast ellipsis block).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Label {
    Ell(usize),
    Char(u8),
}

/// One parsed term: letters, with the position of `...` if present.
struct Term {
    letters: Vec<u8>,
    ellipsis: Option<usize>,
}

fn parse_term(spec: &str, term: &str) -> Result<Term, IrError> {
    let mut letters = Vec::new();
    let mut ellipsis = None;
    let bytes = term.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'.' {
            if bytes.get(i..i + 3) != Some(b"...") {
                return Err(IrError::invalid("einsum", format!("'.' must be part of '...' in {spec:?}")));
            }
            if ellipsis.is_some() {
                return Err(IrError::invalid("einsum", format!("term {term:?} has more than one '...' in {spec:?}")));
            }
            ellipsis = Some(letters.len());
            i += 3;
        } else if c.is_ascii_alphabetic() {
            letters.push(c);
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else {
            return Err(IrError::invalid(
                "einsum",
                format!("invalid character {:?} in {spec:?} (indices are ASCII letters)", c as char),
            ));
        }
    }
    Ok(Term { letters, ellipsis })
}

/// `np.einsum(spec, *operands)`.
///
/// Subscripts are ASCII letters (case-sensitive), one term per operand,
/// separated by commas, optionally followed by `->` and the output term.
/// - Implicit mode (no `->`): the output is the broadcast ellipsis dims
///   followed by the letters that appear exactly once, in ASCII order
///   (so `"ij,jk"` is a matrix product and `"ba"` a transpose).
/// - A letter repeated inside one operand takes the diagonal (`"ii->i"`,
///   `"ii"` is the trace). A letter missing from the output is summed.
/// - `...` stands for the leading unnamed dims; they broadcast across
///   operands like NumPy (right-aligned, size 1 stretches). In explicit mode
///   an output without `...` sums them.
/// - Letter sizes must agree exactly between operands (no broadcasting of
///   named dims). Operands must share one numeric dtype.
///
/// Lowering: per operand, squeeze broadcast size-1 ellipsis dims, take
/// diagonals (`iota == iota` mask, `select`, `reduce_sum`), and sum the
/// letters that no other operand or the output uses; then contract left to
/// right with `dot_general` (batch = letters shared and still needed,
/// contract = shared and no longer needed), and transpose to the output;
/// the last product may take leading output letters as batch letters too,
/// broadcasting the operand that lacks them, when that makes the transpose
/// unnecessary and costs no more (see `batch_lead`).
pub fn einsum(b: &mut Builder, spec: &str, operands: &[Value]) -> Result<Value, IrError> {
    let (lhs, rhs) = match spec.split_once("->") {
        Some((l, r)) => {
            if r.contains("->") {
                return Err(IrError::invalid("einsum", format!("more than one '->' in {spec:?}")));
            }
            (l, Some(r))
        }
        None => (spec, None),
    };
    let terms: Vec<Term> = lhs.split(',').map(|t| parse_term(spec, t)).collect::<Result<_, _>>()?;
    if terms.len() != operands.len() {
        return Err(IrError::invalid(
            "einsum",
            format!("{spec:?} has {} input terms but {} operands were given", terms.len(), operands.len()),
        ));
    }
    let types: Vec<_> = operands.iter().map(|&v| b.ty(v).cloned()).collect::<Result<_, _>>()?;
    let dtype: DType = types[0].dtype;
    for t in &types {
        if t.dtype != dtype || !dtype.is_numeric() {
            return Err(IrError::invalid(
                "einsum",
                format!("operands must share one numeric dtype; got {}", fmt_types(&types)),
            ));
        }
    }

    // Expand each term to one label per operand dim.
    let mut ell_rank = 0;
    for (i, (t, ty)) in terms.iter().zip(&types).enumerate() {
        let named = t.letters.len();
        match t.ellipsis {
            None if ty.rank() != named => {
                return Err(IrError::invalid(
                    "einsum",
                    format!("operand {i} ({ty}) has rank {} but its term names {named} dims", ty.rank()),
                ))
            }
            Some(_) if ty.rank() < named => {
                return Err(IrError::invalid(
                    "einsum",
                    format!("operand {i} ({ty}) has rank {} but its term names {named} dims plus '...'", ty.rank()),
                ))
            }
            Some(_) => ell_rank = ell_rank.max(ty.rank() - named),
            None => {}
        }
    }
    let mut labels: Vec<Vec<Label>> = Vec::with_capacity(terms.len());
    for (t, ty) in terms.iter().zip(&types) {
        let mut ls: Vec<Label> = t.letters.iter().map(|&c| Label::Char(c)).collect();
        if let Some(pos) = t.ellipsis {
            let ne = ty.rank() - t.letters.len();
            let ell: Vec<Label> = (0..ne).map(|j| Label::Ell(ell_rank - ne + j)).collect();
            ls.splice(pos..pos, ell);
        }
        labels.push(ls);
    }

    // Sizes: letters must agree exactly; ellipsis dims broadcast.
    let mut sizes: BTreeMap<Label, usize> = BTreeMap::new();
    for (i, (ls, ty)) in labels.iter().zip(&types).enumerate() {
        for (&l, &d) in ls.iter().zip(&ty.shape) {
            match (sizes.get(&l).copied(), l) {
                (None, _) => {
                    sizes.insert(l, d);
                }
                (Some(s), _) if s == d => {}
                (Some(s), Label::Ell(_)) if s == 1 || d == 1 => {
                    sizes.insert(l, s.max(d));
                }
                (Some(s), Label::Char(c)) => {
                    return Err(IrError::invalid(
                        "einsum",
                        format!("index '{}' has size {s} elsewhere but {d} in operand {i} ({ty})", c as char),
                    ))
                }
                (Some(s), Label::Ell(_)) => {
                    return Err(IrError::invalid(
                        "einsum",
                        format!("'...' dims cannot be broadcast together: {s} vs {d} in operand {i} ({ty})"),
                    ))
                }
            }
        }
    }

    // Output labels.
    let output: Vec<Label> = match rhs {
        Some(r) => {
            let t = parse_term(spec, r)?;
            let mut out: Vec<Label> = t.letters.iter().map(|&c| Label::Char(c)).collect();
            if let Some(pos) = t.ellipsis {
                out.splice(pos..pos, (0..ell_rank).map(Label::Ell));
            }
            for (k, &l) in out.iter().enumerate() {
                if let Label::Char(c) = l {
                    if out[..k].contains(&l) {
                        return Err(IrError::invalid(
                            "einsum",
                            format!("output index '{}' appears more than once in {spec:?}", c as char),
                        ));
                    }
                    if !sizes.contains_key(&l) {
                        return Err(IrError::invalid(
                            "einsum",
                            format!("output index '{}' does not appear in any input of {spec:?}", c as char),
                        ));
                    }
                }
            }
            out
        }
        None => {
            let mut counts: BTreeMap<u8, usize> = BTreeMap::new();
            for ls in &labels {
                for l in ls {
                    if let Label::Char(c) = l {
                        *counts.entry(*c).or_default() += 1;
                    }
                }
            }
            let mut out: Vec<Label> = (0..ell_rank).map(Label::Ell).collect();
            out.extend(counts.iter().filter(|(_, &n)| n == 1).map(|(&c, _)| Label::Char(c)));
            out
        }
    };

    // Per-operand preparation.
    let mut ops: Vec<(Value, Vec<Label>)> = Vec::with_capacity(operands.len());
    for (i, (&x, ls)) in operands.iter().zip(&labels).enumerate() {
        let (mut x, mut ls) = (x, ls.clone());
        // Squeeze ellipsis dims that broadcast (size 1 here, larger elsewhere).
        let shape = b.ty(x)?.shape.clone();
        let keep: Vec<usize> = (0..ls.len())
            .filter(|&k| !(matches!(ls[k], Label::Ell(_)) && shape[k] == 1 && sizes[&ls[k]] > 1))
            .collect();
        if keep.len() != ls.len() {
            let new_shape: Shape = keep.iter().map(|&k| shape[k]).collect();
            x = b.reshape(x, &new_shape)?;
            ls = keep.iter().map(|&k| ls[k]).collect();
        }
        // Diagonals of repeated letters.
        while let Some((p, q)) = first_repeat(&ls) {
            let shape = b.ty(x)?.shape.clone();
            let ip = b.iota(DType::I64, &shape, p)?;
            let iq = b.iota(DType::I64, &shape, q)?;
            let on_diag = b.compare(Compare::Eq, ip, iq)?;
            let zero = b.full(0.0, &b.ty(x)?.clone())?;
            let masked = b.select(on_diag, x, zero)?;
            x = b.reduce_sum(masked, &[q])?;
            ls.remove(q);
        }
        // Sum letters used nowhere else.
        let used_elsewhere =
            |l: &Label| output.contains(l) || labels.iter().enumerate().any(|(j, o)| j != i && o.contains(l));
        let lonely: Vec<usize> = (0..ls.len()).filter(|&k| !used_elsewhere(&ls[k])).collect();
        if !lonely.is_empty() {
            x = b.reduce_sum(x, &lonely)?;
            ls = ls.into_iter().enumerate().filter(|(k, _)| !lonely.contains(k)).map(|(_, l)| l).collect();
        }
        ops.push((x, ls));
    }

    // Left-to-right pairwise contraction.
    let mut iter = ops.into_iter();
    let (mut acc, mut acc_ls) = iter.next().expect("internal error: einsum has at least one operand");
    let rest: Vec<(Value, Vec<Label>)> = iter.collect();
    for (i, (y, y_ls)) in rest.iter().enumerate() {
        let needed_after = |l: &Label| output.contains(l) || rest[i + 1..].iter().any(|(_, ls)| ls.contains(l));
        // Labels of acc that neither y nor anything later uses (possible only
        // in unusual specs) are summed before the product.
        let dead: Vec<usize> =
            (0..acc_ls.len()).filter(|&k| !y_ls.contains(&acc_ls[k]) && !needed_after(&acc_ls[k])).collect();
        if !dead.is_empty() {
            acc = b.reduce_sum(acc, &dead)?;
            acc_ls = acc_ls.into_iter().enumerate().filter(|(k, _)| !dead.contains(k)).map(|(_, l)| l).collect();
        }
        let shared: Vec<Label> = acc_ls.iter().copied().filter(|l| y_ls.contains(l)).collect();
        let mut batch: Vec<Label> = shared.iter().copied().filter(|l| needed_after(l)).collect();
        let contract: Vec<Label> = shared.iter().copied().filter(|l| !needed_after(l)).collect();
        let (mut y, mut y_ls) = (*y, y_ls.clone());
        if i + 1 == rest.len() {
            if let Some(lead) = batch_lead(&output, &acc_ls, &y_ls, &batch, &contract, &sizes) {
                let widen = |b: &mut Builder, x: Value, ls: &mut Vec<Label>| -> Result<Value, IrError> {
                    let missing: Vec<Label> = lead.iter().copied().filter(|l| !ls.contains(l)).collect();
                    if missing.is_empty() {
                        return Ok(x);
                    }
                    let mut shape: Shape = missing.iter().map(|l| sizes[l]).collect();
                    shape.extend(b.ty(x)?.shape.iter().copied());
                    let dims: Vec<usize> = (missing.len()..shape.len()).collect();
                    let mut new_ls = missing;
                    new_ls.append(ls);
                    *ls = new_ls;
                    b.broadcast_in_dim(x, &shape, &dims)
                };
                acc = widen(b, acc, &mut acc_ls)?;
                y = widen(b, y, &mut y_ls)?;
                batch = lead;
            }
        }
        let y_ls = &y_ls;
        let pos = |ls: &[Label], l: &Label| ls.iter().position(|m| m == l).expect("internal error: label present");
        let lc: Vec<usize> = contract.iter().map(|l| pos(&acc_ls, l)).collect();
        let rc: Vec<usize> = contract.iter().map(|l| pos(y_ls, l)).collect();
        let lb: Vec<usize> = batch.iter().map(|l| pos(&acc_ls, l)).collect();
        let rb: Vec<usize> = batch.iter().map(|l| pos(y_ls, l)).collect();
        acc = b.dot_general(acc, y, &lc, &rc, &lb, &rb)?;
        let mut new_ls = batch.clone();
        new_ls.extend(acc_ls.iter().copied().filter(|l| !batch.contains(l) && !contract.contains(l)));
        new_ls.extend(y_ls.iter().copied().filter(|l| !batch.contains(l) && !contract.contains(l)));
        acc_ls = new_ls;
    }

    // Sum anything left that the output does not keep, then order the dims.
    let extra: Vec<usize> = (0..acc_ls.len()).filter(|&k| !output.contains(&acc_ls[k])).collect();
    if !extra.is_empty() {
        acc = b.reduce_sum(acc, &extra)?;
        acc_ls = acc_ls.into_iter().enumerate().filter(|(k, _)| !extra.contains(k)).map(|(_, l)| l).collect();
    }
    let perm: Vec<usize> = output
        .iter()
        .map(|l| acc_ls.iter().position(|m| m == l).expect("internal error: output label present"))
        .collect();
    transpose_to(b, acc, &perm)
}

/// For the last product of an einsum whose `dot_general` result (batch,
/// then `acc`'s free labels, then `y`'s) is not in the output's order: the
/// shortest leading run of output labels that, taken as batch labels (the
/// operand lacking one is broadcast along it), leaves the remaining free
/// labels in output order, so that no transpose follows the product. `None`
/// when no transpose is needed, when no such run exists, or when the
/// broadcasts would copy more elements than the transpose they replace.
///
/// Why: in `"bi,gij->gbj"` (an LSTM's stacked gates) the plain product is
/// `[b, g, j]` and needs a transpose, its weight operand is read with a
/// layout GEMM cannot take in place (`g` and `j` are not adjacent), and its
/// gradient comes out as `[g, j, i]`, transposed again; with `g` as a batch
/// label (`x` broadcast to `[g, b, i]`) each gate is a plain GEMM on a
/// contiguous weight and the gradients come out in place.
fn batch_lead(
    output: &[Label],
    acc_ls: &[Label],
    y_ls: &[Label],
    batch: &[Label],
    contract: &[Label],
    sizes: &BTreeMap<Label, usize>,
) -> Option<Vec<Label>> {
    let free = |ls: &[Label], skip: &[Label]| -> Vec<Label> {
        ls.iter().copied().filter(|l| !skip.contains(l) && !contract.contains(l)).collect()
    };
    let mut plain = batch.to_vec();
    plain.extend(free(acc_ls, batch));
    plain.extend(free(y_ls, batch));
    if plain == output {
        return None;
    }
    let elems = |ls: &[Label]| ls.iter().map(|l| sizes[l]).product::<usize>();
    for p in 1..=output.len() {
        let lead = &output[..p];
        if !batch.iter().all(|l| lead.contains(l)) {
            continue;
        }
        let mut rest = free(acc_ls, lead);
        rest.extend(free(y_ls, lead));
        if rest != output[p..] {
            continue;
        }
        let widened = |ls: &[Label]| {
            let missing: Vec<Label> = lead.iter().copied().filter(|l| !ls.contains(l)).collect();
            if missing.is_empty() {
                0
            } else {
                elems(ls) * elems(&missing)
            }
        };
        return (widened(acc_ls) + widened(y_ls) <= elems(output)).then(|| lead.to_vec());
    }
    None
}

fn first_repeat(ls: &[Label]) -> Option<(usize, usize)> {
    for q in 0..ls.len() {
        if let Some(p) = ls[..q].iter().position(|l| *l == ls[q]) {
            return Some((p, q));
        }
    }
    None
}

fn fmt_types(ts: &[crate::types::TensorType]) -> String {
    ts.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
}
