//! Counter-based random numbers: Threefry-2x32 with 20 rounds (Salmon et
//! al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; the Random123
//! reference), the generator JAX uses.
//!
//! Keys are `i32[2]` tensors holding the two u32 key words `(k0, k1)` as bit
//! patterns (JAX's `PRNGKey(seed)` is `(0, seed)` for a seed below 2^32;
//! building keys from seeds is left to the composite layer). A key tensor
//! `i32[K..., 2]` holds one key per leading index; the result then has the
//! leading dims `K...` and block `k` is exactly what key `k` alone gives
//! (this is how vmap gives a batched key independent per-example streams).
//!
//! Every output element is a pure function of the key and its row-major
//! position `i` (a u64 counter): `(y0, y1) = threefry2x32(key, (hi32(i),
//! lo32(i)))`. So results never depend on the thread count or on how the
//! work is split, and they match JAX with `jax_threefry_partitionable`
//! (its default since 0.5):
//!
//! - `random_split[n]`: child key `i` is `(y0, y1)`;
//! - `random_bits[shape]`: element `i` is `y0 ^ y1` (as an i32 bit pattern);
//! - `random_fold_in(key, data)`: the key `(y0, y1)` hashed at the counter
//!   `(0, data)` (`data`'s i32 bit pattern as a u32), JAX's
//!   `random.fold_in` (its `threefry_2x32(key, threefry_seed(data))`: a
//!   32-bit seed `s` is the counter pair `(0, s)`). So `fold_in(k, d)` is
//!   child `d` of `split(k, n)` for any `n > d`;
//! - `random_uniform[shape, dtype]`: f32 takes the top 23 bits of `y0 ^ y1`
//!   as the mantissa of a float in `[1, 2)` and subtracts 1; f64 takes the
//!   top 52 bits of `(y0 << 32) | y1` the same way. Results lie in `[0, 1)`
//!   on a grid of `2^-23` (f32) or `2^-52` (f64); 0 is possible, 1 is not.
//!
//! Kernel-IR form ([`eqn_kernel`], through `kernel::lower::eqn_kernels`):
//! one point per output element, Threefry spelled in the IR's 32-bit word
//! operations by [`threefry_ir`] (the same operations in the same order as
//! [`threefry2x32`]), with the counter from the point's position. The GPU
//! backend renders it to WGSL and compiled loops to C, so random draws are
//! the same bits on every backend. f64 uniforms and more than `i32::MAX`
//! outputs keep the Rust kernel.

use super::kernel::{input, output, worth_parallel, CHUNK};
use super::{check, Op};
use crate::dtype::DType;
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Eqn, Func, Value};
use crate::kernel::ir::{Access, Arg, Index, Inst, Kernel, Lit, Reg, WordOp};
use crate::ops::binary::{Binary, Compare};
use crate::ops::Prim;
use crate::tensor::Tensor;
use crate::types::{fmt_list, TensorType};
use rayon::prelude::*;

/// Threefry's key-schedule parity constant (Skein's `C240` for 32-bit words).
const PARITY: u32 = 0x1BD1_1BDA;
/// Threefry-2x32 rotation distances, cycled every 8 rounds.
const ROTATIONS: [u32; 8] = [13, 15, 26, 6, 17, 29, 16, 24];

/// The Threefry-2x32 block function with 20 rounds: hashes a counter under a key.
///
/// Four rounds of add-rotate-xor per block, with the extended key schedule
/// `(k0, k1, k0 ^ k1 ^ PARITY)` injected before the first round and after
/// every block (the `s`-th injection also adds `s` to the second word).
pub fn threefry2x32(key: [u32; 2], counter: [u32; 2]) -> [u32; 2] {
    let ks = [key[0], key[1], PARITY ^ key[0] ^ key[1]];
    let mut x0 = counter[0].wrapping_add(ks[0]);
    let mut x1 = counter[1].wrapping_add(ks[1]);
    for block in 0..5usize {
        let rot = &ROTATIONS[(block % 2) * 4..(block % 2) * 4 + 4];
        for &r in rot {
            x0 = x0.wrapping_add(x1);
            x1 = x1.rotate_left(r);
            x1 ^= x0;
        }
        let s = block + 1;
        x0 = x0.wrapping_add(ks[s % 3]);
        x1 = x1.wrapping_add(ks[(s + 1) % 3]).wrapping_add(s as u32);
    }
    [x0, x1]
}

/// Emits [`threefry2x32`] into a kernel body: the key and counter words are
/// `i32` registers holding `u32` bit patterns, and the result's two words
/// are returned as registers. The same operations in the same order as the
/// Rust function (wrapping adds as `i32` adds, rotations as
/// [`WordOp::Rotl`]), so every backend that renders the kernel IR draws
/// exactly the interpreter's bits: this is the generator's one definition
/// in kernel-IR form, next to its Rust kernel.
pub(crate) fn threefry_ir(body: &mut Vec<Inst>, key: [Reg; 2], counter: [Reg; 2]) -> [Reg; 2] {
    let mut push = |i: Inst| {
        body.push(i);
        (body.len() - 1) as Reg
    };
    let word = |w: u32| Inst::Lit(Lit { dtype: DType::I32, bits: w as i32 as i64 as u64 });
    let parity = push(word(PARITY));
    let k01 = push(Inst::Word(WordOp::Xor, key[0], key[1]));
    let ks2 = push(Inst::Word(WordOp::Xor, parity, k01));
    let ks = [key[0], key[1], ks2];
    let rot: Vec<Reg> = ROTATIONS.iter().map(|&r| push(word(r))).collect();
    let mut x0 = push(Inst::Binary(Binary::Add, counter[0], ks[0]));
    let mut x1 = push(Inst::Binary(Binary::Add, counter[1], ks[1]));
    for block in 0..5usize {
        for &r in &rot[(block % 2) * 4..(block % 2) * 4 + 4] {
            x0 = push(Inst::Binary(Binary::Add, x0, x1));
            x1 = push(Inst::Word(WordOp::Rotl, x1, r));
            x1 = push(Inst::Word(WordOp::Xor, x1, x0));
        }
        let s = block + 1;
        x0 = push(Inst::Binary(Binary::Add, x0, ks[s % 3]));
        x1 = push(Inst::Binary(Binary::Add, x1, ks[(s + 1) % 3]));
        let sw = push(word(s as u32));
        x1 = push(Inst::Binary(Binary::Add, x1, sw));
    }
    [x0, x1]
}

/// The kernel of a random equation (`random_bits`, `random_uniform` in
/// f32, `random_split`, `random_fold_in`) and the values its arguments
/// bind to: one point per output element, which loads its key's words,
/// takes its counter from its position ([`Inst::Position`]: the row-major
/// index within its key's block; the high counter word is 0, since
/// positions are `i32`) and hashes with [`threefry_ir`]. `None` where the
/// kernel IR has no form for it (f64 uniforms, more than `i32::MAX`
/// outputs, no keys): the equation then runs this file's Rust kernel.
pub(crate) fn eqn_kernel(func: &Func, eqn: &Eqn, name: &str) -> Option<(Kernel, Vec<Value>)> {
    let (&key, &out) = (eqn.inputs.first()?, eqn.outputs.first()?);
    let ot = func.ty(out);
    let n = ot.numel();
    let nkeys = func.ty(key).numel() / 2;
    if n == 0 || nkeys == 0 {
        return None;
    }
    let mut args = vec![Arg { dtype: DType::I32, len: 2 * nkeys, access: Access::Read }];
    let mut binds = vec![key];
    let mut body: Vec<Inst> = Vec::new();
    let push = |body: &mut Vec<Inst>, i: Inst| {
        body.push(i);
        (body.len() - 1) as Reg
    };
    // `dims` splits the points into (key, position within the key's
    // block[, word]); `key_stride` steps between keys' words.
    let load_key = |body: &mut Vec<Inst>, dims: &[usize]| -> [Reg; 2] {
        let mut strides = vec![0isize; dims.len()];
        strides[0] = 2;
        let at = |body: &mut Vec<Inst>, offset: isize| {
            push(
                body,
                Inst::Load { arg: 0, index: Index::Strided { dims: dims.to_vec(), strides: strides.clone(), offset } },
            )
        };
        [at(body, 0), at(body, 1)]
    };
    let zero = |body: &mut Vec<Inst>| push(body, Inst::Lit(Lit { dtype: DType::I32, bits: 0 }));
    let value = match &eqn.prim {
        Prim::RandomBits(_) | Prim::RandomUniform(_) => {
            let per = n / nkeys;
            let dims = [nkeys, per];
            let k = load_key(&mut body, &dims);
            let hi = zero(&mut body);
            let lo =
                push(&mut body, Inst::Position(Index::Strided { dims: dims.to_vec(), strides: vec![0, 1], offset: 0 }));
            let [y0, y1] = threefry_ir(&mut body, k, [hi, lo]);
            let bits = push(&mut body, Inst::Word(WordOp::Xor, y0, y1));
            match &eqn.prim {
                Prim::RandomUniform(u) if u.dtype == DType::F32 => {
                    // `f32::from_bits(((y0 ^ y1) >> 9) | 0x3f80_0000) - 1.0`, as the kernel.
                    let nine = push(&mut body, Inst::Lit(Lit { dtype: DType::I32, bits: 9 }));
                    let mant = push(&mut body, Inst::Word(WordOp::Shr, bits, nine));
                    let one_bits = push(&mut body, Inst::Lit(Lit { dtype: DType::I32, bits: 0x3f80_0000 }));
                    let m = push(&mut body, Inst::Binary(Binary::Or, mant, one_bits));
                    let f = push(&mut body, Inst::Bitcast(DType::F32, m));
                    let one = push(&mut body, Inst::Lit(Lit { dtype: DType::F32, bits: 1.0f32.to_bits() as u64 }));
                    push(&mut body, Inst::Binary(Binary::Sub, f, one))
                }
                Prim::RandomUniform(_) => return None,
                _ => bits,
            }
        }
        Prim::RandomSplit(p) => {
            // Child `c`'s words are `(y0, y1)` of counter `c`.
            let dims = [nkeys, p.n, 2];
            let k = load_key(&mut body, &dims);
            let hi = zero(&mut body);
            let lo = push(
                &mut body,
                Inst::Position(Index::Strided { dims: dims.to_vec(), strides: vec![0, 1, 0], offset: 0 }),
            );
            let [y0, y1] = threefry_ir(&mut body, k, [hi, lo]);
            let w = push(
                &mut body,
                Inst::Position(Index::Strided { dims: dims.to_vec(), strides: vec![0, 0, 1], offset: 0 }),
            );
            let first = push(&mut body, Inst::Compare(Compare::Eq, w, hi));
            push(&mut body, Inst::Select(first, y0, y1))
        }
        Prim::RandomFoldIn(_) => {
            // The key's words hashed at the counter `(0, data)`.
            let data = *eqn.inputs.get(1)?;
            args.push(Arg { dtype: DType::I32, len: nkeys, access: Access::Read });
            binds.push(data);
            let dims = [nkeys, 2];
            let k = load_key(&mut body, &dims);
            let hi = zero(&mut body);
            let lo = push(
                &mut body,
                Inst::Load { arg: 1, index: Index::Strided { dims: dims.to_vec(), strides: vec![1, 0], offset: 0 } },
            );
            let [y0, y1] = threefry_ir(&mut body, k, [hi, lo]);
            let w =
                push(&mut body, Inst::Position(Index::Strided { dims: dims.to_vec(), strides: vec![0, 1], offset: 0 }));
            let first = push(&mut body, Inst::Compare(Compare::Eq, w, hi));
            push(&mut body, Inst::Select(first, y0, y1))
        }
        _ => return None,
    };
    let oarg = args.len() as u32;
    args.push(Arg { dtype: ot.dtype, len: n, access: Access::Write });
    binds.push(out);
    body.push(Inst::Store { arg: oarg, value, index: Index::Point });
    let k = Kernel { name: name.to_string(), args, extent: n, body };
    crate::kernel::ir::verify(&k).ok()?;
    Some((k, binds))
}

/// The hash of row-major position `i` under `key` (the u64 counter split hi, lo).
#[inline]
fn hash_at(key: [u32; 2], i: usize) -> [u32; 2] {
    let i = i as u64;
    threefry2x32(key, [(i >> 32) as u32, i as u32])
}

/// `out[i] = f(i)`, split across threads when large; values depend only on `i`.
fn fill_indexed<T: Send>(out: &mut [T], f: impl Fn(usize) -> T + Sync) {
    if worth_parallel(out.len()) {
        out.par_chunks_mut(CHUNK).enumerate().for_each(|(t, chunk)| {
            for (j, o) in chunk.iter_mut().enumerate() {
                *o = f(t * CHUNK + j);
            }
        });
    } else {
        for (i, o) in out.iter_mut().enumerate() {
            *o = f(i);
        }
    }
}

/// Splits a key into `n` independent child keys (`i32[n, 2]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RandomSplit {
    /// Number of child keys.
    pub n: usize,
}

/// Uniform random bits (`i32[shape]`, every bit pattern equally likely).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RandomBits {
    /// Output shape.
    pub shape: Vec<usize>,
}

/// A key derived from a key and run-time integer data (JAX's `fold_in`):
/// operands `key: i32[K..., 2]`, `data: i32[K...]`; result `i32[K..., 2]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RandomFoldIn;

/// Floats uniform in `[0, 1)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RandomUniform {
    /// Output shape.
    pub shape: Vec<usize>,
    /// Output dtype (f32 or f64).
    pub dtype: DType,
}

/// Checks the single key operand and returns its leading key-batch dims:
/// a key is `i32[2]`, and `i32[K..., 2]` holds one key per index of `K...`
/// (the form vmap produces for a batched key).
fn check_key(op: &impl Op, ins: &[TensorType]) -> Result<Vec<usize>, TypeError> {
    check::arity(op, ins, 1)?;
    let k = &ins[0];
    if k.dtype != DType::I32 || k.shape.last() != Some(&2) {
        return Err(check::err(
            op,
            ins,
            "expected a key of type i32[2] (two u32 key words as bit patterns), or i32[K..., 2] holding one key per leading index",
        ));
    }
    Ok(k.shape[..k.rank() - 1].to_vec())
}

/// The leading dims followed by `shape`.
fn with_lead(lead: Vec<usize>, shape: &[usize]) -> Vec<usize> {
    let mut s = lead;
    s.extend_from_slice(shape);
    s
}

/// Calls `fill(key, block)` for every key of a (possibly key-batched) key
/// tensor and its block of the output (blocks are contiguous, in key order).
fn per_key<T>(key: &Tensor, out: &mut [T], mut fill: impl FnMut([u32; 2], &mut [T])) -> Result<(), ExecError> {
    let words = input::<i32>(key)?;
    let n_keys = words.len() / 2;
    if n_keys == 0 {
        return Ok(());
    }
    let per = out.len() / n_keys;
    if per == 0 {
        return Ok(());
    }
    for (w, block) in words.chunks_exact(2).zip(out.chunks_mut(per)) {
        fill([w[0] as u32, w[1] as u32], block);
    }
    Ok(())
}

impl Op for RandomSplit {
    fn name(&self) -> &'static str {
        "random_split"
    }

    fn params(&self) -> String {
        format!("n={}", self.n)
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        let lead = check_key(self, ins)?;
        Ok(vec![TensorType::new(DType::I32, with_lead(lead, &[self.n, 2]))])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        per_key(ins[0], output::<i32>(&mut outs[0])?, |key, out| {
            // Child `i` is words `2i, 2i+1`; CHUNK is even, so chunks hold whole children.
            let body = |chunk: &mut [i32], first: usize| {
                for (j, w) in chunk.chunks_exact_mut(2).enumerate() {
                    let [y0, y1] = hash_at(key, first + j);
                    w[0] = y0 as i32;
                    w[1] = y1 as i32;
                }
            };
            if worth_parallel(out.len()) {
                out.par_chunks_mut(CHUNK).enumerate().for_each(|(t, chunk)| body(chunk, t * CHUNK / 2));
            } else {
                body(out, 0);
            }
        })
    }
}

impl Op for RandomFoldIn {
    fn name(&self) -> &'static str {
        "random_fold_in"
    }

    fn params(&self) -> String {
        String::new()
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 2)?;
        let lead = check_key(self, &ins[..1]).map_err(|_| {
            check::err(self, ins, "expected a key of type i32[2], or i32[K..., 2] holding one key per leading index")
        })?;
        let d = &ins[1];
        if d.dtype != DType::I32 || d.shape != lead {
            return Err(check::err(
                self,
                ins,
                format!("expected i32 data of shape {} (one integer per key)", fmt_list(&lead)),
            ));
        }
        Ok(vec![ins[0].clone()])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let words = input::<i32>(ins[0])?;
        let data = input::<i32>(ins[1])?;
        let out = output::<i32>(&mut outs[0])?;
        for ((w, &d), o) in words.chunks_exact(2).zip(data).zip(out.chunks_exact_mut(2)) {
            let [y0, y1] = threefry2x32([w[0] as u32, w[1] as u32], [0, d as u32]);
            o[0] = y0 as i32;
            o[1] = y1 as i32;
        }
        Ok(())
    }
}

impl Op for RandomBits {
    fn name(&self) -> &'static str {
        "random_bits"
    }

    fn params(&self) -> String {
        format!("shape={}", fmt_list(&self.shape))
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        let lead = check_key(self, ins)?;
        Ok(vec![TensorType::new(DType::I32, with_lead(lead, &self.shape))])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        per_key(ins[0], output::<i32>(&mut outs[0])?, |key, out| {
            fill_indexed(out, |i| {
                let [y0, y1] = hash_at(key, i);
                (y0 ^ y1) as i32
            })
        })
    }
}

impl Op for RandomUniform {
    fn name(&self) -> &'static str {
        "random_uniform"
    }

    fn params(&self) -> String {
        format!("shape={}, dtype={}", fmt_list(&self.shape), self.dtype)
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        let lead = check_key(self, ins)?;
        if !self.dtype.is_float() {
            return Err(check::err(
                self,
                ins,
                format!("expected a floating-point dtype (f32 or f64), got {}", self.dtype),
            ));
        }
        Ok(vec![TensorType::new(self.dtype, with_lead(lead, &self.shape))])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let out = &mut outs[0];
        match out.dtype() {
            DType::F32 => per_key(ins[0], output::<f32>(out)?, |key, out| {
                fill_indexed(out, |i| {
                    let [y0, y1] = hash_at(key, i);
                    f32::from_bits(((y0 ^ y1) >> 9) | 0x3f80_0000) - 1.0
                })
            }),
            DType::F64 => per_key(ins[0], output::<f64>(out)?, |key, out| {
                fill_indexed(out, |i| {
                    let [y0, y1] = hash_at(key, i);
                    let bits = (u64::from(y0) << 32) | u64::from(y1);
                    f64::from_bits((bits >> 12) | 0x3ff0_0000_0000_0000) - 1.0
                })
            }),
            d => Err(super::kernel::unsupported(self.name(), d)),
        }
    }
}

impl Builder {
    /// `n` independent child keys of `key` (`i32[n, 2]`).
    pub fn random_split(&mut self, key: Value, n: usize) -> Result<Value, IrError> {
        self.emit1(RandomSplit { n }, &[key])
    }

    /// The key `key` with `data` (an i32 scalar, or one per key of a
    /// key-batched key) folded in, as JAX's `random.fold_in`.
    pub fn random_fold_in(&mut self, key: Value, data: Value) -> Result<Value, IrError> {
        self.emit1(RandomFoldIn, &[key, data])
    }

    /// Uniform random bits of the given shape (`i32`).
    pub fn random_bits(&mut self, key: Value, shape: &[usize]) -> Result<Value, IrError> {
        self.emit1(RandomBits { shape: shape.to_vec() }, &[key])
    }

    /// Floats uniform in `[0, 1)` of the given shape and float dtype.
    pub fn random_uniform(&mut self, key: Value, shape: &[usize], dtype: DType) -> Result<Value, IrError> {
        self.emit1(RandomUniform { shape: shape.to_vec(), dtype }, &[key])
    }
}

// Random primitives take integer keys, so no tangent ever reaches them; their
// outputs are constants with respect to every differentiable input.
macro_rules! no_derivative {
    ($($t:ty),*) => {$(
        impl crate::ad::Diff for $t {
            fn jvp(&self, _b: &mut Builder, _cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
                Ok(vec![None])
            }
            fn transpose(&self, _b: &mut Builder, _cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
                Err(crate::ad::not_linear(self.name()))
            }
        }
    )*};
}
no_derivative!(RandomSplit, RandomFoldIn, RandomBits, RandomUniform);

// Batching rules: only reached with a batched key (an unbatched key is
// shared by every example: the driver copies the equation unchanged, so all
// examples draw the same numbers). A batched key gives independent
// per-example streams: its batch dim moves to the front, where the
// primitives take it as a leading key dim, and example `i` draws exactly
// what the unbatched primitive draws with key `i`.
mod batching {
    use super::*;
    use crate::batch::helpers::move_bdim;
    use crate::batch::{Batch, BatchCx, Batched};

    fn keyed(b: &mut Builder, op: impl Into<crate::ops::Prim>, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
        let d = cx.bdims[0].expect("internal error: a one-operand batching rule runs only on a batched operand");
        let key = move_bdim(b, cx.args[0], d, 0)?;
        Ok(vec![(b.emit1(op, &[key])?, Some(0))])
    }

    impl Batch for RandomSplit {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            keyed(b, *self, cx)
        }
    }

    // Either operand may be batched: both get the batch dim in front (the
    // unbatched one broadcast), a leading key dim of the primitive.
    impl Batch for RandomFoldIn {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let args = crate::batch::helpers::all_to_front(b, cx)?;
            Ok(vec![(b.emit1(RandomFoldIn, &args)?, Some(0))])
        }
    }

    impl Batch for RandomBits {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            keyed(b, self.clone(), cx)
        }
    }

    impl Batch for RandomUniform {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            keyed(b, self.clone(), cx)
        }
    }
}
