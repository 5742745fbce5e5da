//! The kernel IR: what a backend renders.
//!
//! A [`Kernel`] is one loop over an index space `0..extent` whose body is a
//! straight-line SSA program run at every point `i`: loads through index
//! expressions, scalar ALU instructions (the elementwise primitives'
//! operations, by the same enums), and stores at `i`. Every register has a
//! dtype (inferred by [`verify`]); registers are instruction positions, so
//! the body is in definition order by construction.
//!
//! Why this shape: it is the part of the schedule where graft spends its
//! fixed per-op cost today (fused elementwise groups), it vectorises
//! directly (the backend runs `GL` points per step and a masked tail), and
//! it is backend-neutral: the C renderer (`render_c`) and the WGSL renderer
//! of the GPU issue read the same structure. Index expressions make layout
//! operations address arithmetic instead of copies: a broadcast is a stride
//! of 0, a transpose a permuted stride vector, a slice an offset.
//!
//! Row kernels: a kernel whose body holds [`Inst::Reduce`] or
//! [`Inst::Map`] treats each of its `extent` points as a *row* of `len`
//! inner points (flat index `j = i * len + k`). The outer body runs once
//! per row on row values (per-row loads, ALU work, stores of `extent`
//! elements); a `Reduce` combines its inner body's value over the row's
//! `len` points in the interpreter's fixed pairwise order (see
//! `ops::reduce`), and a `Map` runs its inner body at every point of the
//! row (its stores write `extent * len` elements). Inner bodies have their
//! own registers and read outer ones through [`Inst::Outer`]. This is how
//! softmax, layer norm and logsumexp run in one pass per row: the
//! producers of a reduction are recomputed inside its inner body instead
//! of being materialised.
//!
//! Semantics every backend must keep (see ARCHITECTURE.md, "Native
//! kernels"): each ALU instruction computes exactly what its primitive's
//! interpreter kernel computes for one element, bit for bit (NaN payloads
//! aside); no floating-point contraction or reassociation; points are
//! independent, so any split of `0..extent` into ranges gives the same
//! result.

use crate::dtype::DType;
use crate::ops::binary::{Binary, Compare};
use crate::ops::reduce::ReduceKind;
use crate::ops::unary::Unary;
use crate::ops::Op;
use std::fmt;

/// A register: the position of the instruction that defines it.
pub type Reg = u32;

/// How a kernel uses one of its buffer arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Read only.
    Read,
    /// Written (never read): at every point, or where its strided stores
    /// place values (the rest of the buffer is left as it was).
    Write,
}

/// One buffer argument of a kernel, in call order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Arg {
    /// Element type.
    pub dtype: DType,
    /// Number of elements the buffer holds.
    pub len: usize,
    /// Read or written.
    pub access: Access,
}

/// Which element of a buffer a load reads at point `i`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Index {
    /// Element `i` (a buffer of `extent` elements, read in step).
    Point,
    /// Element 0 at every point (a one-element buffer broadcast).
    Scalar,
    /// `offset + sum_k coord_k * strides[k]`, where `coord` is the
    /// row-major decomposition of `i` over `dims` (whose product is the
    /// kernel's extent). Broadcasts have stride 0, transposes permuted
    /// strides, reversals negative strides, slices an offset.
    Strided {
        /// The logical shape the point index is decomposed over.
        dims: Vec<usize>,
        /// Elements to step per unit of each coordinate.
        strides: Vec<isize>,
        /// Element index of coordinate zero.
        offset: isize,
    },
}

impl Window {
    /// The same window over the fewest dimensions: a dimension of size 1
    /// that the box holds is dropped, and a dimension merges into the one
    /// after it when the box spans that whole inner dimension and the
    /// addresses continue across it (as for a slice or concatenation
    /// along one axis of a row-major buffer). Backends read the coalesced
    /// form: longer runs in the last dimension take their vector paths.
    pub fn coalesced(&self) -> Window {
        let mut w = Window { dims: vec![], lo: vec![], size: vec![], strides: vec![], offset: self.offset };
        for k in 0..self.dims.len() {
            let (d, lo, size, st) = (self.dims[k], self.lo[k], self.size[k], self.strides[k]);
            if d == 1 && lo <= 0 && lo + size as isize > 0 && self.dims.len() > 1 {
                w.offset -= lo * st; // coordinate 0, always inside
                continue;
            }
            w.dims.push(d);
            w.lo.push(lo);
            w.size.push(size);
            w.strides.push(st);
        }
        let mut k = w.dims.len();
        while k >= 2 {
            let (o, i) = (k - 2, k - 1);
            let inner_full = w.lo[i] == 0 && w.size[i] == w.dims[i];
            if inner_full && w.strides[o] == w.strides[i] * w.dims[i] as isize {
                let d = w.dims[i];
                w.dims[o] *= d;
                w.lo[o] *= d as isize;
                w.size[o] *= d;
                w.strides[o] = w.strides[i];
                for v in [&mut w.dims, &mut w.size] {
                    v.remove(i);
                }
                w.lo.remove(i);
                w.strides.remove(i);
            }
            k -= 1;
        }
        w
    }
}

/// A strided index over the fewest dimensions (see [`Window::coalesced`]):
/// `(dims, strides)` with size-1 dimensions dropped and contiguous
/// neighbours merged.
pub fn coalesce_strided(dims: &[usize], strides: &[isize], offset: isize) -> (Vec<usize>, Vec<isize>, isize) {
    let w =
        Window { dims: dims.to_vec(), lo: vec![0; dims.len()], size: dims.to_vec(), strides: strides.to_vec(), offset };
    let c = w.coalesced();
    (c.dims, c.strides, c.offset)
}

/// A literal, as the bits of its dtype (exact, printable, hashable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lit {
    /// The literal's dtype.
    pub dtype: DType,
    /// f32: the `to_bits` in the low 32 bits; f64: `to_bits`; signed
    /// integers: the two's complement value (sign-extended); u32: the value
    /// (zero-extended); bool: 0 or 1.
    pub bits: u64,
}

impl Lit {
    /// Reads element 0 of a one-element tensor as a literal.
    pub fn of_tensor(t: &crate::tensor::Tensor) -> Option<Lit> {
        use crate::tensor::Storage;
        let bits = match t.storage() {
            // f16 constants are widened to f32 before planning
            // (`opt::widen_f16`): none reaches a kernel as a literal.
            Storage::F16(_) => return None,
            Storage::F32(v) => v.first()?.to_bits() as u64,
            Storage::F64(v) => v.first()?.to_bits(),
            Storage::I32(v) => *v.first()? as i64 as u64,
            Storage::I64(v) => *v.first()? as u64,
            Storage::U32(v) => *v.first()? as u64,
            Storage::Bool(v) => *v.first()? as u64,
        };
        Some(Lit { dtype: t.dtype(), bits })
    }
}

impl fmt::Display for Lit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.dtype {
            DType::F16 => write!(f, "{:?}f16", half::f16::from_bits(self.bits as u16)),
            DType::F32 => write!(f, "{:?}f32", f32::from_bits(self.bits as u32)),
            DType::F64 => write!(f, "{:?}f64", f64::from_bits(self.bits)),
            DType::I32 => write!(f, "{}i32", self.bits as i64 as i32),
            DType::I64 => write!(f, "{}i64", self.bits as i64),
            DType::U32 => write!(f, "{}u32", self.bits as u32),
            DType::Bool => write!(f, "{}", self.bits != 0),
        }
    }
}

/// A 32-bit word operation on `i32` registers read as unsigned words
/// (their `u32` bit patterns), giving an `i32` of the result's bits. These
/// have no primitive of their own: they are how the kernel IR spells the
/// counter-based random generator (`ops::random`'s Threefry-2x32), whose
/// words are `u32` (wrapping addition is [`Binary::Add`] on `i32`, the
/// same bits). Shift and rotation amounts are the second operand modulo 32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WordOp {
    /// `a ^ b`.
    Xor,
    /// `a << (b % 32)`.
    Shl,
    /// `a >> (b % 32)`, logical (zeros shifted in).
    Shr,
    /// `a` rotated left by `b % 32` bits.
    Rotl,
}

impl WordOp {
    /// The operation on words, as the interpreter's reference: what every
    /// renderer must compute bit for bit.
    pub fn apply(self, a: u32, b: u32) -> u32 {
        match self {
            WordOp::Xor => a ^ b,
            WordOp::Shl => a.wrapping_shl(b),
            WordOp::Shr => a.wrapping_shr(b),
            WordOp::Rotl => a.rotate_left(b % 32),
        }
    }

    /// The printed name.
    pub fn name(self) -> &'static str {
        match self {
            WordOp::Xor => "xor",
            WordOp::Shl => "shl",
            WordOp::Shr => "shr",
            WordOp::Rotl => "rotl",
        }
    }
}

/// One instruction of a kernel body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Inst {
    /// Reads argument `arg` (an [`Access::Read`] buffer) at `index`.
    Load {
        /// Argument position.
        arg: u32,
        /// Which element.
        index: Index,
    },
    /// A constant.
    Lit(Lit),
    /// An elementwise unary primitive's operation.
    Unary(Unary, Reg),
    /// An elementwise binary primitive's operation (operands of one dtype).
    Binary(Binary, Reg, Reg),
    /// A comparison, giving bool.
    Compare(Compare, Reg, Reg),
    /// `pred ? on_true : on_false`.
    Select(Reg, Reg, Reg),
    /// `a * b + c` rounded once (the `fma` primitive; floats).
    Fma(Reg, Reg, Reg),
    /// Dtype conversion with the `convert` primitive's rules.
    Convert(DType, Reg),
    /// A 32-bit word operation on two `i32` registers (see [`WordOp`]).
    Word(WordOp, Reg, Reg),
    /// The same bits as another dtype of the same width (`i32` <-> `f32`).
    Bitcast(DType, Reg),
    /// The element a load through `index` reads at this point, as an
    /// `i32` (for [`Index::Point`], the point itself): coordinates as
    /// values, how a counter-based generator numbers its outputs and a
    /// gather finds the row of its indices. Not in a row kernel's outer
    /// body (inner bodies number their points `j = i * len + k`); the
    /// verifier checks that every address fits an `i32`.
    Position(Index),
    /// Reads argument `arg` at the element an `i32` register names,
    /// clamped to the buffer (`min(max(addr, 0), len - 1)`): a gather.
    /// The clamp is part of the semantics, so no address computed at run
    /// time reaches outside a buffer whatever the data. Outer bodies of
    /// elementwise kernels only.
    LoadAt {
        /// Argument position (a read buffer of at least one element).
        arg: u32,
        /// The register holding the element index.
        addr: Reg,
    },
    /// Writes a register to argument `arg` (an [`Access::Write`] buffer)
    /// at `index`: element `i` ([`Index::Point`]), or an affine address
    /// ([`Index::Strided`], outer bodies of elementwise kernels only), which
    /// writes part of the buffer: how a concatenation or a pad places an
    /// operand inside its result without a copy through scratch.
    Store {
        /// Argument position.
        arg: u32,
        /// The value stored.
        value: Reg,
        /// Which element: distinct points must store distinct elements.
        index: Index,
    },
    /// Outer body of a row kernel: the combination of an inner body's value
    /// over the row's points (a row value of the inner value's dtype).
    Reduce(Box<Reduction>),
    /// Outer body of a row kernel: runs an inner body (whose only effects
    /// are its stores) at every point of the row. Defines no value.
    Map(Box<Inner>),
    /// Inner body: the value of an outer register (the same at every point
    /// of the row).
    Outer(Reg),
    /// Reduction body: also keeps the value in the row's scratch slot
    /// `slot` (one element per point of the row), so that a later body of
    /// the same row reads it back instead of recomputing it. Defines no value.
    Save {
        /// Scratch slot.
        slot: u32,
        /// The value kept.
        value: Reg,
    },
    /// Inner body after the reduction that saved it: the value kept in
    /// scratch slot `slot` at this point.
    Restore(u32),
    /// Reads argument `arg` where the point lies inside `window`, else
    /// gives `fill` (of the argument's dtype): a pad or one operand of a
    /// concatenation read in place. Outer bodies of elementwise kernels only.
    Window {
        /// Argument position.
        arg: u32,
        /// Which points read which element.
        window: Window,
        /// The value outside the window.
        fill: Reg,
    },
    /// Whether the point lies inside `window`'s box (its `strides` and
    /// `offset` are not used), as bool. Outer bodies of elementwise kernels
    /// only: how a producer inlined at shifted points (see
    /// `loops::Builder::inline_producers`) keeps a window load's fill
    /// outside the box.
    Inside(Window),
}

/// A box of points with an affine map into a buffer: the point with
/// coordinates `c` (row-major over `dims`) lies inside when
/// `lo[k] <= c[k] < lo[k] + size[k]` for every `k`, and then reads element
/// `offset + sum_k (c[k] - lo[k]) * strides[k]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Window {
    /// The logical shape the point index is decomposed over.
    pub dims: Vec<usize>,
    /// First coordinate inside, per dimension (may be negative).
    pub lo: Vec<isize>,
    /// Coordinates inside, per dimension.
    pub size: Vec<usize>,
    /// Elements to step per unit of each coordinate.
    pub strides: Vec<isize>,
    /// Element read at coordinates `lo`.
    pub offset: isize,
}

/// An inner body: `for k in 0..len { body }` at flat points `i * len + k`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Inner {
    /// Points per row.
    pub len: usize,
    /// The per-point program (no `Reduce`, `Map` or nested rows).
    pub body: Vec<Inst>,
}

/// A reduction over the points of a row (see [`Inst::Reduce`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reduction {
    /// The combiner (floating-point dtypes only, for now).
    pub kind: ReduceKind,
    /// The values combined.
    pub inner: Inner,
    /// The inner register combined.
    pub value: Reg,
}

impl Inst {
    /// The same instruction reading `map[r]` for each register `r` it
    /// reads; `None` when `map` misses one of them, and for the row-kernel
    /// instructions (`Reduce`, `Map`, `Outer`, `Save`, `Restore`), whose
    /// registers live in other bodies.
    pub fn remapped(&self, map: &[Reg]) -> Option<Inst> {
        let m = |r: &Reg| map.get(*r as usize).copied();
        Some(match self {
            Inst::Load { .. } | Inst::Lit(_) => self.clone(),
            Inst::Unary(op, a) => Inst::Unary(*op, m(a)?),
            Inst::Binary(op, a, b) => Inst::Binary(*op, m(a)?, m(b)?),
            Inst::Compare(op, a, b) => Inst::Compare(*op, m(a)?, m(b)?),
            Inst::Select(p, a, b) => Inst::Select(m(p)?, m(a)?, m(b)?),
            Inst::Fma(a, b, c) => Inst::Fma(m(a)?, m(b)?, m(c)?),
            Inst::Convert(d, a) => Inst::Convert(*d, m(a)?),
            Inst::Store { arg, value, index } => Inst::Store { arg: *arg, value: m(value)?, index: index.clone() },
            Inst::Window { arg, window, fill } => Inst::Window { arg: *arg, window: window.clone(), fill: m(fill)? },
            Inst::Inside(_) | Inst::Position(_) => self.clone(),
            Inst::Word(op, a, b) => Inst::Word(*op, m(a)?, m(b)?),
            Inst::Bitcast(d, a) => Inst::Bitcast(*d, m(a)?),
            Inst::LoadAt { arg, addr } => Inst::LoadAt { arg: *arg, addr: m(addr)? },
            Inst::Reduce(_) | Inst::Map(_) | Inst::Outer(_) | Inst::Save { .. } | Inst::Restore(_) => return None,
        })
    }

    /// Registers this instruction reads.
    pub fn operands(&self) -> Vec<Reg> {
        match *self {
            // An `Outer` operand lives in the enclosing body, not this one.
            Inst::Load { .. }
            | Inst::Lit(_)
            | Inst::Map(_)
            | Inst::Reduce(_)
            | Inst::Outer(_)
            | Inst::Restore(_)
            | Inst::Inside(_)
            | Inst::Position(_) => vec![],
            Inst::Unary(_, a)
            | Inst::Convert(_, a)
            | Inst::Bitcast(_, a)
            | Inst::LoadAt { addr: a, .. }
            | Inst::Store { value: a, .. }
            | Inst::Save { value: a, .. }
            | Inst::Window { fill: a, .. } => vec![a],
            Inst::Binary(_, a, b) | Inst::Compare(_, a, b) | Inst::Word(_, a, b) => vec![a, b],
            Inst::Select(p, a, b) | Inst::Fma(p, a, b) => vec![p, a, b],
        }
    }
}

/// Cost of a unary operation in simple-operation units (an add, a load):
/// a transcendental function is worth about 16, a square root 4. The
/// executor's parallel split and the row kernels' recompute-or-keep choice
/// both count in these units.
pub fn unary_units(op: Unary) -> usize {
    match op {
        Unary::Exp
        | Unary::Expm1
        | Unary::Log
        | Unary::Log1p
        | Unary::Sin
        | Unary::Cos
        | Unary::Tan
        | Unary::Tanh
        | Unary::Logistic
        | Unary::Erf => 16,
        Unary::ErfInv => 32,
        Unary::Sqrt | Unary::Rsqrt => 4,
        _ => 1,
    }
}

/// Cost of a binary operation in simple-operation units (see
/// [`unary_units`]): a division or remainder 4, `pow` and `atan2` 32.
pub fn binary_units(op: Binary) -> usize {
    match op {
        Binary::Div | Binary::Rem => 4,
        Binary::Pow | Binary::Atan2 => 32,
        _ => 1,
    }
}

/// The instruction's own cost at one point in simple-operation units
/// (literals and references to outer values are free; a reduction or map
/// counts its inner body once per point of the row, see [`Kernel::units`]).
pub fn inst_units(inst: &Inst) -> usize {
    match inst {
        Inst::Lit(_) | Inst::Outer(_) | Inst::Restore(_) => 0,
        Inst::Unary(op, _) => unary_units(*op),
        Inst::Binary(op, _, _) => binary_units(*op),
        Inst::Reduce(r) => r.inner.len.saturating_mul(r.inner.body.iter().map(inst_units).sum::<usize>() + 1),
        Inst::Map(m) => m.len.saturating_mul(m.body.iter().map(inst_units).sum()),
        _ => 1,
    }
}

impl Kernel {
    /// Estimated work of one call over all points, in simple-operation
    /// units (see [`inst_units`]): what the executor weighs against the
    /// cost of splitting the call across threads.
    pub fn units(&self) -> usize {
        self.extent.saturating_mul(self.body.iter().map(inst_units).sum::<usize>().max(1))
    }
}

/// A kernel: `for i in 0..extent { body }`, points independent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Kernel {
    /// A name unique within its translation unit (`k0`, `k1`, ...).
    pub name: String,
    /// Buffer arguments in call order.
    pub args: Vec<Arg>,
    /// Number of points.
    pub extent: usize,
    /// The per-point program.
    pub body: Vec<Inst>,
}

/// A malformed kernel (a bug in the planner that built it, never a user error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("kernel {kernel}, instruction {at}: {msg}")]
pub struct KernelError {
    /// The kernel's name.
    pub kernel: String,
    /// The instruction position.
    pub at: usize,
    /// What is wrong.
    pub msg: String,
}

/// Checks a kernel and returns the dtype of every register of its (outer)
/// body (`None` for stores and maps): operands defined earlier, dtypes as
/// the primitives' shape rules demand, loads from read arguments within
/// bounds, each written argument stored exactly once, with its dtype,
/// either at every point (as many elements as the body storing it has
/// points) or through a strided index that stays in bounds and never
/// reaches one element from two points. Row kernels: inner
/// bodies only in `Reduce`/`Map` of the outer body, `Outer` only in inner
/// bodies, reductions over floating-point values. An f16 register (f16 is
/// a storage type, see `opt::widen_f16`) is only loaded, stored, selected
/// or converted: no arithmetic, comparison or reduction computes on f16, so
/// the renderers need only its moves and conversions.
pub fn verify(k: &Kernel) -> Result<Vec<Option<DType>>, KernelError> {
    let mut stored = vec![false; k.args.len()];
    let mut slots = Vec::new();
    let types = body_types(k, &k.body, None, &mut stored, &mut slots)?;
    for (i, a) in k.args.iter().enumerate() {
        if a.access == Access::Write && !stored[i] {
            return Err(KernelError {
                kernel: k.name.clone(),
                at: k.body.len(),
                msg: format!("written argument {i} is never stored"),
            });
        }
    }
    Ok(types)
}

/// The register dtypes of one body: the outer one (`outer` is `None`), or
/// an inner one of `len` points per row given the outer body's types so
/// far. `stored` marks written arguments, `slots` the dtypes of the
/// scratch slots saved so far (both grow as bodies are checked in order).
pub fn body_types(
    k: &Kernel,
    body: &[Inst],
    outer: Option<(usize, &[Option<DType>])>,
    stored: &mut [bool],
    slots: &mut Vec<DType>,
) -> Result<Vec<Option<DType>>, KernelError> {
    let err = |at: usize, msg: String| KernelError { kernel: k.name.clone(), at, msg };
    let points = match outer {
        None => k.extent,
        Some((len, _)) => k.extent.saturating_mul(len),
    };
    let mut types: Vec<Option<DType>> = Vec::with_capacity(body.len());
    for (at, inst) in body.iter().enumerate() {
        let ty = |r: Reg| -> Result<DType, KernelError> {
            match types.get(r as usize) {
                Some(Some(d)) => Ok(*d),
                Some(None) => Err(err(at, format!("%{r} is a store, not a value"))),
                None => Err(err(at, format!("%{r} is used before it is defined"))),
            }
        };
        let same = |a: Reg, b: Reg| -> Result<DType, KernelError> {
            let (x, y) = (ty(a)?, ty(b)?);
            if x != y {
                return Err(err(at, format!("operands %{a}: {x} and %{b}: {y} differ in dtype")));
            }
            Ok(x)
        };
        let t = match inst {
            Inst::Load { arg, index } => {
                let a = k.args.get(*arg as usize).ok_or_else(|| err(at, format!("no argument {arg}")))?;
                if a.access != Access::Read {
                    return Err(err(at, format!("load from written argument {arg}")));
                }
                check_index(points, a, index).map_err(|m| err(at, m))?;
                Some(a.dtype)
            }
            Inst::Lit(l) => Some(l.dtype),
            Inst::Unary(op, a) => {
                let d = ty(*a)?;
                if !op.accepts(d) || d == DType::F16 {
                    return Err(err(at, format!("{} does not accept {d}", op.name())));
                }
                Some(d)
            }
            Inst::Binary(op, a, b) => {
                let d = same(*a, *b)?;
                if !op.accepts(d) || d == DType::F16 {
                    return Err(err(at, format!("{} does not accept {d}", op.name())));
                }
                Some(d)
            }
            Inst::Compare(_, a, b) => {
                if same(*a, *b)? == DType::F16 {
                    return Err(err(at, "comparison of f16 (f16 computes in f32: convert first)".into()));
                }
                Some(DType::Bool)
            }
            Inst::Select(p, a, b) => {
                if ty(*p)? != DType::Bool {
                    return Err(err(at, format!("select predicate %{p} is not bool")));
                }
                Some(same(*a, *b)?)
            }
            Inst::Fma(a, b, c) => {
                let d = same(*a, *b)?;
                same(*a, *c)?;
                if !d.is_float() || d == DType::F16 {
                    return Err(err(at, format!("fma does not accept {d}")));
                }
                Some(d)
            }
            Inst::Convert(to, a) => {
                ty(*a)?;
                Some(*to)
            }
            Inst::Word(_, a, b) => {
                if same(*a, *b)? != DType::I32 {
                    return Err(err(at, format!("word operation on %{a}: {}, not i32", ty(*a)?)));
                }
                Some(DType::I32)
            }
            Inst::Bitcast(to, a) => {
                let from = ty(*a)?;
                let word = |d: DType| matches!(d, DType::I32 | DType::F32);
                if !word(from) || !word(*to) {
                    return Err(err(at, format!("bitcast from {from} to {to} (i32 and f32 only)")));
                }
                Some(*to)
            }
            Inst::Position(index) => {
                if outer.is_none() && is_row_kernel(k) {
                    return Err(err(at, "a position in a row kernel's outer body".into()));
                }
                check_position(points, index).map_err(|m| err(at, m))?;
                Some(DType::I32)
            }
            Inst::LoadAt { arg, addr } => {
                let a = k.args.get(*arg as usize).ok_or_else(|| err(at, format!("no argument {arg}")))?;
                if a.access != Access::Read || a.len == 0 {
                    return Err(err(at, format!("gather from argument {arg} ({:?}, {} elements)", a.access, a.len)));
                }
                if ty(*addr)? != DType::I32 {
                    return Err(err(at, format!("gather address %{addr} is not i32")));
                }
                if outer.is_some() || is_row_kernel(k) {
                    return Err(err(at, "a gather outside an elementwise kernel".into()));
                }
                Some(a.dtype)
            }
            Inst::Store { arg, value, index } => {
                let d = ty(*value)?;
                let a = k.args.get(*arg as usize).ok_or_else(|| err(at, format!("no argument {arg}")))?;
                if a.access != Access::Write || a.dtype != d {
                    return Err(err(
                        at,
                        format!("store of {d} into argument {arg} ({:?} {} x {})", a.access, a.dtype, a.len),
                    ));
                }
                match index {
                    Index::Point => {}
                    Index::Strided { .. } if outer.is_none() && !is_row_kernel(k) => {}
                    _ => return Err(err(at, format!("store into argument {arg} through {index:?}"))),
                }
                check_index(points, a, index).map_err(|m| err(at, format!("store: {m}")))?;
                if let Index::Strided { dims, strides, .. } = index {
                    if !injective(dims, strides) {
                        return Err(err(at, format!("strided store into argument {arg} writes an element twice")));
                    }
                }
                if std::mem::replace(&mut stored[*arg as usize], true) {
                    return Err(err(at, format!("argument {arg} is stored twice")));
                }
                None
            }
            Inst::Outer(r) => match outer {
                None => return Err(err(at, "`outer` outside an inner body".into())),
                Some((_, ot)) => match ot.get(*r as usize) {
                    Some(Some(d)) => Some(*d),
                    _ => return Err(err(at, format!("outer %{r} is not a value defined before this body"))),
                },
            },
            Inst::Save { slot, value } => {
                let d = ty(*value)?;
                if outer.is_none() {
                    return Err(err(at, "`save` outside a reduction body".into()));
                }
                if *slot as usize != slots.len() {
                    return Err(err(at, format!("slot {slot} saved out of order (next is {})", slots.len())));
                }
                slots.push(d);
                None
            }
            Inst::Window { arg, window, fill } => {
                let a = k.args.get(*arg as usize).ok_or_else(|| err(at, format!("no argument {arg}")))?;
                if a.access != Access::Read || ty(*fill)? != a.dtype {
                    return Err(err(at, format!("window load from argument {arg} with fill %{fill}")));
                }
                if outer.is_some() || is_row_kernel(k) {
                    return Err(err(at, "a window load outside an elementwise kernel".into()));
                }
                check_window(points, a, window).map_err(|m| err(at, m))?;
                Some(a.dtype)
            }
            Inst::Inside(window) => {
                if outer.is_some() || is_row_kernel(k) {
                    return Err(err(at, "an inside test outside an elementwise kernel".into()));
                }
                let n = window.dims.len();
                if window.lo.len() != n || window.size.len() != n || window.dims.iter().product::<usize>() != points {
                    return Err(err(at, format!("box over {:?} does not cover the {points} points", window.dims)));
                }
                Some(DType::Bool)
            }
            Inst::Restore(slot) => match slots.get(*slot as usize) {
                Some(d) if outer.is_some() => Some(*d),
                _ => return Err(err(at, format!("restore of slot {slot}, which no earlier reduction saved"))),
            },
            Inst::Reduce(_) | Inst::Map(_) if outer.is_some() => {
                return Err(err(at, "rows nested inside an inner body".into()));
            }
            Inst::Map(inner) => {
                if inner.len == 0 {
                    return Err(err(at, "a map over empty rows".into()));
                }
                let before = slots.len();
                body_types(k, &inner.body, Some((inner.len, &types)), stored, slots)
                    .map_err(|e| err(at, format!("in map: {}", e.msg)))?;
                if slots.len() != before {
                    return Err(err(at, "a map saves (only reductions keep values)".into()));
                }
                None
            }
            Inst::Reduce(red) => {
                if red.inner.len == 0 {
                    return Err(err(at, "a reduction over empty rows".into()));
                }
                let mut none = vec![false; stored.len()];
                let it = body_types(k, &red.inner.body, Some((red.inner.len, &types)), &mut none, slots)
                    .map_err(|e| err(at, format!("in reduction: {}", e.msg)))?;
                if none.iter().any(|&s| s) {
                    return Err(err(at, "a reduction body stores".into()));
                }
                // i32 reductions come from device forms only (integer
                // reductions and scatter-adds on the GPU, where wrapping sums
                // make the order irrelevant); the CPU's row planner
                // (`rows::row_form`) forms floating-point ones only, which is
                // all the C renderer's combiners take.
                match it.get(red.value as usize) {
                    Some(Some(d)) if (d.is_float() && *d != DType::F16) || matches!(d, DType::I32 | DType::U32) => {
                        Some(*d)
                    }
                    Some(Some(d)) => {
                        return Err(err(at, format!("reduction of {d} (floating-point, i32 or u32 only)")))
                    }
                    _ => return Err(err(at, format!("reduced register %{} is not a value", red.value))),
                }
            }
        };
        types.push(t);
    }
    Ok(types)
}

/// True if the kernel has rows (a `Reduce` or `Map` in its outer body).
fn is_row_kernel(k: &Kernel) -> bool {
    k.body.iter().any(|i| matches!(i, Inst::Reduce(_) | Inst::Map(_)))
}

/// True if distinct coordinates over `dims` reach distinct addresses
/// through `strides`: sorted by magnitude, each stride steps past the whole
/// span of the smaller ones (dimensions of size 1 never move).
fn injective(dims: &[usize], strides: &[isize]) -> bool {
    let mut moving: Vec<(usize, usize)> =
        dims.iter().zip(strides).filter(|(&d, _)| d > 1).map(|(&d, &s)| (s.unsigned_abs(), d)).collect();
    moving.sort_unstable();
    let mut span = 0usize; // the largest address offset the smaller strides reach
    for (s, d) in moving {
        if s <= span {
            return false;
        }
        span = span.saturating_add(s.saturating_mul(d - 1));
    }
    true
}

fn check_window(points: usize, a: &Arg, w: &Window) -> Result<(), String> {
    let n = w.dims.len();
    if w.lo.len() != n || w.size.len() != n || w.strides.len() != n || w.dims.iter().product::<usize>() != points {
        return Err(format!("window over {:?} does not cover the {points} points", w.dims));
    }
    // The box clipped to the points that exist; empty reads nothing.
    let mut span = Vec::with_capacity(n);
    for k in 0..n {
        let first = w.lo[k].max(0);
        let last = (w.lo[k] + w.size[k] as isize).min(w.dims[k] as isize) - 1;
        if last < first {
            return Ok(());
        }
        span.push((first - w.lo[k], last - w.lo[k]));
    }
    let (mut lo, mut hi) = (w.offset as i128, w.offset as i128);
    for ((a, b), &s) in span.iter().zip(&w.strides) {
        let (x, y) = (*a as i128 * s as i128, *b as i128 * s as i128);
        lo += x.min(y);
        hi += x.max(y);
    }
    if lo < 0 || hi >= a.len as i128 {
        return Err(format!("window reaches {lo}..={hi} in a buffer of {} elements", a.len));
    }
    Ok(())
}

/// A position's addresses must fit an `i32` (the register it defines).
fn check_position(points: usize, index: &Index) -> Result<(), String> {
    let fits = |lo: i128, hi: i128| lo >= i128::from(i32::MIN) && hi <= i128::from(i32::MAX);
    match index {
        Index::Point if fits(0, points as i128 - 1) => Ok(()),
        Index::Scalar => Ok(()),
        Index::Point => Err(format!("position over {points} points, beyond i32")),
        Index::Strided { dims, strides, offset } => {
            if dims.len() != strides.len() || dims.iter().product::<usize>() != points {
                return Err(format!("strided position over {dims:?} does not cover the {points} points"));
            }
            let (mut lo, mut hi) = (*offset as i128, *offset as i128);
            for (&d, &s) in dims.iter().zip(strides) {
                let span = (d as i128 - 1).max(0) * s as i128;
                if span < 0 {
                    lo += span;
                } else {
                    hi += span;
                }
            }
            if !fits(lo, hi) {
                return Err(format!("strided position reaches {lo}..={hi}, beyond i32"));
            }
            Ok(())
        }
    }
}

fn check_index(points: usize, a: &Arg, index: &Index) -> Result<(), String> {
    match index {
        Index::Point if a.len == points => Ok(()),
        Index::Point => Err(format!("point load from a buffer of {} elements in a body over {points}", a.len)),
        Index::Scalar if a.len >= 1 => Ok(()),
        Index::Scalar => Err("scalar load from an empty buffer".into()),
        Index::Strided { dims, strides, offset } => {
            if dims.len() != strides.len() || dims.iter().product::<usize>() != points {
                return Err(format!("strided index over {dims:?} does not cover the {points} points"));
            }
            if points == 0 {
                return Ok(());
            }
            // The extreme addresses: each coordinate at 0 or at its end.
            let (mut lo, mut hi) = (*offset as i128, *offset as i128);
            for (&d, &s) in dims.iter().zip(strides) {
                let span = (d as i128 - 1) * s as i128;
                if span < 0 {
                    lo += span;
                } else {
                    hi += span;
                }
            }
            if lo < 0 || hi >= a.len as i128 {
                return Err(format!("strided index reaches {lo}..={hi} in a buffer of {} elements", a.len));
            }
            Ok(())
        }
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel {}(", self.name)?;
        for (i, a) in self.args.iter().enumerate() {
            let dir = match a.access {
                Access::Read => "in",
                Access::Write => "out",
            };
            write!(f, "{}{dir} a{i}: {}[{}]", if i > 0 { ", " } else { "" }, a.dtype, a.len)?;
        }
        writeln!(f, ") over i < {} {{", self.extent)?;
        print_body(f, &self.body, false)?;
        write!(f, "}}")
    }
}

/// Prints a body: outer registers as `%r` indexed by `i`, inner ones as
/// `$r` indexed by `j = i * len + k`.
fn print_body(f: &mut fmt::Formatter<'_>, body: &[Inst], inner: bool) -> fmt::Result {
    let (ind, p, ix) = if inner { ("    ", "$", "j") } else { ("  ", "%", "i") };
    for (r, inst) in body.iter().enumerate() {
        write!(f, "{ind}")?;
        match inst {
            Inst::Store { arg, value, index } => match index {
                Index::Strided { dims, strides, offset } => {
                    writeln!(f, "store a{arg}[{offset} + {ix}{dims:?} . {strides:?}] = {p}{value}")?
                }
                _ => writeln!(f, "store a{arg}[{ix}] = {p}{value}")?,
            },
            Inst::Load { arg, index } => match index {
                Index::Point => writeln!(f, "{p}{r} = load a{arg}[{ix}]")?,
                Index::Scalar => writeln!(f, "{p}{r} = load a{arg}[0]")?,
                Index::Strided { dims, strides, offset } => {
                    writeln!(f, "{p}{r} = load a{arg}[{offset} + {ix}{dims:?} . {strides:?}]")?
                }
            },
            Inst::Lit(l) => writeln!(f, "{p}{r} = {l}")?,
            Inst::Unary(op, a) => writeln!(f, "{p}{r} = {} {p}{a}", op.name())?,
            Inst::Binary(op, a, b) => writeln!(f, "{p}{r} = {} {p}{a}, {p}{b}", op.name())?,
            Inst::Compare(op, a, b) => writeln!(f, "{p}{r} = {} {p}{a}, {p}{b}", op.name())?,
            Inst::Select(c, a, b) => writeln!(f, "{p}{r} = select {p}{c}, {p}{a}, {p}{b}")?,
            Inst::Fma(a, b, c) => writeln!(f, "{p}{r} = fma {p}{a}, {p}{b}, {p}{c}")?,
            Inst::Convert(to, a) => writeln!(f, "{p}{r} = convert[{to}] {p}{a}")?,
            Inst::Word(op, a, b) => writeln!(f, "{p}{r} = {} {p}{a}, {p}{b}", op.name())?,
            Inst::Bitcast(to, a) => writeln!(f, "{p}{r} = bitcast[{to}] {p}{a}")?,
            Inst::Position(index) => match index {
                Index::Point => writeln!(f, "{p}{r} = position {ix}")?,
                Index::Scalar => writeln!(f, "{p}{r} = position 0")?,
                Index::Strided { dims, strides, offset } => {
                    writeln!(f, "{p}{r} = position {offset} + {ix}{dims:?} . {strides:?}")?
                }
            },
            Inst::LoadAt { arg, addr } => writeln!(f, "{p}{r} = load a{arg}[clamp {p}{addr}]")?,
            Inst::Outer(a) => writeln!(f, "{p}{r} = outer %{a}")?,
            Inst::Save { slot, value } => writeln!(f, "save s{slot}[k] = {p}{value}")?,
            Inst::Restore(slot) => writeln!(f, "{p}{r} = restore s{slot}[k]")?,
            Inst::Window { arg, window: w, fill } => writeln!(
                f,
                "{p}{r} = load a{arg}[{} + ({ix}{:?} - {:?}) . {:?}] if inside {:?} else {p}{fill}",
                w.offset, w.dims, w.lo, w.strides, w.size
            )?,
            Inst::Inside(w) => writeln!(f, "{p}{r} = inside {ix}{:?} in {:?} + {:?}", w.dims, w.lo, w.size)?,
            Inst::Map(m) => {
                writeln!(f, "map over j = i * {0} + k, k < {0} {{", m.len)?;
                print_body(f, &m.body, true)?;
                writeln!(f, "{ind}}}")?;
            }
            Inst::Reduce(red) => {
                let name = match red.kind {
                    ReduceKind::Sum => "reduce_sum",
                    ReduceKind::Max => "reduce_max",
                    ReduceKind::Min => "reduce_min",
                    ReduceKind::Prod => "reduce_prod",
                };
                writeln!(f, "{p}{r} = {name} over j = i * {0} + k, k < {0} {{", red.inner.len)?;
                print_body(f, &red.inner.body, true)?;
                writeln!(f, "{ind}}} of ${}", red.value)?;
            }
        }
    }
    Ok(())
}
