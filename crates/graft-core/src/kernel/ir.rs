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
//! Semantics every backend must keep (see ARCHITECTURE.md, "Native
//! kernels"): each ALU instruction computes exactly what its primitive's
//! interpreter kernel computes for one element, bit for bit (NaN payloads
//! aside); no floating-point contraction or reassociation; points are
//! independent, so any split of `0..extent` into ranges gives the same
//! result.

use crate::dtype::DType;
use crate::ops::binary::{Binary, Compare};
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
    /// Written at every point (and never read).
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

/// A literal, as the bits of its dtype (exact, printable, hashable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lit {
    /// The literal's dtype.
    pub dtype: DType,
    /// f32: the `to_bits` in the low 32 bits; f64: `to_bits`; integers:
    /// the two's complement value (sign-extended); bool: 0 or 1.
    pub bits: u64,
}

impl Lit {
    /// Reads element 0 of a one-element tensor as a literal.
    pub fn of_tensor(t: &crate::tensor::Tensor) -> Option<Lit> {
        use crate::tensor::Storage;
        let bits = match t.storage() {
            Storage::F32(v) => v.first()?.to_bits() as u64,
            Storage::F64(v) => v.first()?.to_bits(),
            Storage::I32(v) => *v.first()? as i64 as u64,
            Storage::I64(v) => *v.first()? as u64,
            Storage::Bool(v) => *v.first()? as u64,
        };
        Some(Lit { dtype: t.dtype(), bits })
    }
}

impl fmt::Display for Lit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.dtype {
            DType::F32 => write!(f, "{:?}f32", f32::from_bits(self.bits as u32)),
            DType::F64 => write!(f, "{:?}f64", f64::from_bits(self.bits)),
            DType::I32 => write!(f, "{}i32", self.bits as i64 as i32),
            DType::I64 => write!(f, "{}i64", self.bits as i64),
            DType::Bool => write!(f, "{}", self.bits != 0),
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
    /// Dtype conversion with the `convert` primitive's rules.
    Convert(DType, Reg),
    /// Writes a register to argument `arg` (an [`Access::Write`] buffer) at `i`.
    Store {
        /// Argument position.
        arg: u32,
        /// The value stored.
        value: Reg,
    },
}

impl Inst {
    /// Registers this instruction reads.
    pub fn operands(&self) -> Vec<Reg> {
        match *self {
            Inst::Load { .. } | Inst::Lit(_) => vec![],
            Inst::Unary(_, a) | Inst::Convert(_, a) | Inst::Store { value: a, .. } => vec![a],
            Inst::Binary(_, a, b) | Inst::Compare(_, a, b) => vec![a, b],
            Inst::Select(p, a, b) => vec![p, a, b],
        }
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

/// Checks a kernel and returns the dtype of every register (`None` for
/// stores): operands defined earlier, dtypes as the primitives' shape
/// rules demand, loads from read arguments within bounds, each written
/// argument stored exactly once, with its dtype and `extent` elements.
pub fn verify(k: &Kernel) -> Result<Vec<Option<DType>>, KernelError> {
    let err = |at: usize, msg: String| KernelError { kernel: k.name.clone(), at, msg };
    let mut types: Vec<Option<DType>> = Vec::with_capacity(k.body.len());
    let mut stored = vec![false; k.args.len()];
    for (at, inst) in k.body.iter().enumerate() {
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
                check_index(k, a, index).map_err(|m| err(at, m))?;
                Some(a.dtype)
            }
            Inst::Lit(l) => Some(l.dtype),
            Inst::Unary(op, a) => {
                let d = ty(*a)?;
                if !op.accepts(d) {
                    return Err(err(at, format!("{} does not accept {d}", op.name())));
                }
                Some(d)
            }
            Inst::Binary(op, a, b) => {
                let d = same(*a, *b)?;
                if !op.accepts(d) {
                    return Err(err(at, format!("{} does not accept {d}", op.name())));
                }
                Some(d)
            }
            Inst::Compare(_, a, b) => {
                same(*a, *b)?;
                Some(DType::Bool)
            }
            Inst::Select(p, a, b) => {
                if ty(*p)? != DType::Bool {
                    return Err(err(at, format!("select predicate %{p} is not bool")));
                }
                Some(same(*a, *b)?)
            }
            Inst::Convert(to, a) => {
                ty(*a)?;
                Some(*to)
            }
            Inst::Store { arg, value } => {
                let d = ty(*value)?;
                let a = k.args.get(*arg as usize).ok_or_else(|| err(at, format!("no argument {arg}")))?;
                if a.access != Access::Write || a.dtype != d || a.len != k.extent {
                    return Err(err(
                        at,
                        format!("store of {d} into argument {arg} ({:?} {} x {})", a.access, a.dtype, a.len),
                    ));
                }
                if std::mem::replace(&mut stored[*arg as usize], true) {
                    return Err(err(at, format!("argument {arg} is stored twice")));
                }
                None
            }
        };
        types.push(t);
    }
    for (i, a) in k.args.iter().enumerate() {
        if a.access == Access::Write && !stored[i] {
            return Err(err(k.body.len(), format!("written argument {i} is never stored")));
        }
    }
    Ok(types)
}

fn check_index(k: &Kernel, a: &Arg, index: &Index) -> Result<(), String> {
    match index {
        Index::Point if a.len == k.extent => Ok(()),
        Index::Point => Err(format!("point load from a buffer of {} elements in a kernel over {}", a.len, k.extent)),
        Index::Scalar if a.len >= 1 => Ok(()),
        Index::Scalar => Err("scalar load from an empty buffer".into()),
        Index::Strided { dims, strides, offset } => {
            if dims.len() != strides.len() || dims.iter().product::<usize>() != k.extent {
                return Err(format!("strided index over {dims:?} does not cover the extent {}", k.extent));
            }
            if k.extent == 0 {
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
        for (r, inst) in self.body.iter().enumerate() {
            write!(f, "  ")?;
            match inst {
                Inst::Store { arg, value } => writeln!(f, "store a{arg}[i] = %{value}")?,
                Inst::Load { arg, index } => match index {
                    Index::Point => writeln!(f, "%{r} = load a{arg}[i]")?,
                    Index::Scalar => writeln!(f, "%{r} = load a{arg}[0]")?,
                    Index::Strided { dims, strides, offset } => {
                        writeln!(f, "%{r} = load a{arg}[{offset} + i{dims:?} . {strides:?}]")?
                    }
                },
                Inst::Lit(l) => writeln!(f, "%{r} = {l}")?,
                Inst::Unary(op, a) => writeln!(f, "%{r} = {} %{a}", op.name())?,
                Inst::Binary(op, a, b) => writeln!(f, "%{r} = {} %{a}, %{b}", op.name())?,
                Inst::Compare(op, a, b) => writeln!(f, "%{r} = {} %{a}, %{b}", op.name())?,
                Inst::Select(p, a, b) => writeln!(f, "%{r} = select %{p}, %{a}, %{b}")?,
                Inst::Convert(to, a) => writeln!(f, "%{r} = convert[{to}] %{a}")?,
            }
        }
        write!(f, "}}")
    }
}
