//! `dot_general` on the device: a tiled GEMM in workgroup memory.
//!
//! The product has no kernel-IR form (the CPU calls the `gemm` crate for
//! it, see `kernel::host`), so this is the GPU's own kernel for it. The
//! operands are brought to the canonical batched layouts `A: [B, M, K]`
//! (or `[B, K, M]`, read transposed) and `B: [B, K, N]` (or `[B, N, K]`)
//! by kernel-IR copy kernels when their dimensions are in another order;
//! the common cases (`x @ w`, `x @ w.T`, `x.T @ g`) need no copy.
//!
//! The kernel: a workgroup of 16 x 16 invocations computes a 64 x 64 tile
//! of `C`, each invocation 4 x 4 outputs (rows `ty + 16 r`, columns
//! `tx + 16 c`; fewer for a thin product, see `Gemm::blocks`); the loop over `K` stages 16-deep slices of `A` and `B` in
//! workgroup memory. Sums run in `k` order per output (no split-K), so
//! results differ from the CPU's blocked order only by rounding.

use graft_core::ir::Func;
use graft_core::kernel::{Access, Arg, Index, Inst, Kernel};
use graft_core::ops::linalg::DotGeneral;
use graft_core::{DType, Value};
use std::fmt::Write;

/// Tile edge of `C` per workgroup.
const TILE: usize = 64;
/// Depth of one staged slice of `K`.
const BK: usize = 16;

/// A batched product in canonical form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gemm {
    /// Batch count.
    pub batch: usize,
    /// Rows of `C`.
    pub m: usize,
    /// Columns of `C`.
    pub n: usize,
    /// Contracted length.
    pub k: usize,
    /// `A` is stored `[B, K, M]`.
    pub ta: bool,
    /// `B` is stored `[B, N, K]`.
    pub tb: bool,
    /// Batch `z` reads `A`'s matrix `z % a_period`: `batch` for one matrix
    /// per batch, fewer when matrices repeat (a convolution's batch is
    /// (image, group) and its weights depend on the group only).
    pub a_period: usize,
    /// Element offset of `B`'s first matrix in its buffer.
    pub b_base: usize,
    /// Element offset of `C`'s first matrix in its buffer (a convolution
    /// split over the batch writes each part of its result in place).
    pub c_base: usize,
}

impl Gemm {
    /// A product with one `A` matrix per batch and both operands and the
    /// result at the start of their buffers.
    pub fn plain(batch: usize, m: usize, n: usize, k: usize, ta: bool, tb: bool) -> Gemm {
        Gemm { batch, m, n, k, ta, tb, a_period: batch, b_base: 0, c_base: 0 }
    }

    /// Rows and columns of the register block each invocation computes:
    /// 4 x 4, except that a product with at most 48 rows (or columns) has
    /// one tile in that direction and needs only `ceil(m / 16)` of the
    /// block's rows: a convolution's `[O/groups, positions]` products with
    /// 16 or 32 channels, or a weight gradient's 9 columns, would otherwise
    /// compute up to 16 times the products they store.
    fn blocks(&self) -> (usize, usize) {
        (self.m.div_ceil(16).min(4), self.n.div_ceil(16).min(4))
    }

    /// The first line of either kernel: the batch offsets of `A`, `B` and
    /// `C` (plain products print as before the offsets existed).
    fn bases(&self) -> String {
        let Gemm { m, n, k, .. } = *self;
        let a = if self.a_period == self.batch {
            format!("wid.z * {}u", m * k)
        } else {
            format!("(wid.z % {}u) * {}u", self.a_period, m * k)
        };
        let plus = |base: usize| if base == 0 { String::new() } else { format!("{base}u + ") };
        format!(
            "  let ab = {a}; let bb = {}wid.z * {}u; let cb = {}wid.z * {}u;\n",
            plus(self.b_base),
            k * n,
            plus(self.c_base),
            m * n
        )
    }
}

/// How one `dot_general` runs: optional copies of its operands into a
/// canonical layout (kernels with the values they bind: operand, then a
/// fresh value standing for the copy), then the product.
#[derive(Debug, Clone)]
pub struct GemmPlan {
    /// The product.
    pub gemm: Gemm,
    /// A copy kernel for the lhs, if its layout needs one.
    pub lhs_copy: Option<Kernel>,
    /// A copy kernel for the rhs, if its layout needs one.
    pub rhs_copy: Option<Kernel>,
}

/// Plans a `dot_general` of f32 operands (`None` for other dtypes, or a
/// batch beyond one dispatch dimension).
pub fn plan(func: &Func, p: &DotGeneral, lhs: Value, rhs: Value, out: Value) -> Option<GemmPlan> {
    let (lt, rt) = (func.ty(lhs), func.ty(rhs));
    if lt.dtype != DType::F32 || rt.dtype != DType::F32 || func.ty(out).dtype != DType::F32 {
        return None;
    }
    let lfree: Vec<usize> =
        (0..lt.shape.len()).filter(|d| !p.lhs_batch.contains(d) && !p.lhs_contract.contains(d)).collect();
    let rfree: Vec<usize> =
        (0..rt.shape.len()).filter(|d| !p.rhs_batch.contains(d) && !p.rhs_contract.contains(d)).collect();
    let prod = |shape: &[usize], dims: &[usize]| dims.iter().map(|&d| shape[d]).product::<usize>();
    let batch = prod(&lt.shape, &p.lhs_batch);
    let m = prod(&lt.shape, &lfree);
    let k = prod(&lt.shape, &p.lhs_contract);
    let n = prod(&rt.shape, &rfree);
    if batch > 65535 || batch == 0 || m == 0 || n == 0 {
        return None;
    }
    let limit = i32::MAX as usize;
    if [batch * m * k, batch * k * n, batch * m * n].iter().any(|&x| x > limit) {
        return None;
    }
    let cat = |a: &[usize], b: &[usize], c: &[usize]| -> Vec<usize> { a.iter().chain(b).chain(c).copied().collect() };
    let identity = |perm: &[usize]| perm.iter().enumerate().all(|(i, &d)| i == d);
    // lhs: [batch, free, contract] as is, [batch, contract, free] read transposed, else a copy.
    let l_norm = cat(&p.lhs_batch, &lfree, &p.lhs_contract);
    let l_tr = cat(&p.lhs_batch, &p.lhs_contract, &lfree);
    let (ta, lhs_copy) = if identity(&l_norm) {
        (false, None)
    } else if identity(&l_tr) {
        (true, None)
    } else {
        (false, Some(permute_kernel(&lt.shape, &l_norm, "gemm_lhs")?))
    };
    let r_norm = cat(&p.rhs_batch, &p.rhs_contract, &rfree);
    let r_tr = cat(&p.rhs_batch, &rfree, &p.rhs_contract);
    let (tb, rhs_copy) = if identity(&r_norm) {
        (false, None)
    } else if identity(&r_tr) {
        (true, None)
    } else {
        (false, Some(permute_kernel(&rt.shape, &r_norm, "gemm_rhs")?))
    };
    Some(GemmPlan { gemm: Gemm::plain(batch, m, n, k, ta, tb), lhs_copy, rhs_copy })
}

/// A kernel-IR copy of an f32 tensor of `shape` into the order `perm` (a
/// transpose: one strided load and a store per point).
fn permute_kernel(shape: &[usize], perm: &[usize], name: &str) -> Option<Kernel> {
    let n: usize = shape.iter().product();
    let mut row = vec![1isize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        row[d] = row[d + 1] * shape[d + 1] as isize;
    }
    let dims: Vec<usize> = perm.iter().map(|&d| shape[d]).collect();
    let strides: Vec<isize> = perm.iter().map(|&d| row[d]).collect();
    let k = Kernel {
        name: name.to_string(),
        args: vec![
            Arg { dtype: DType::F32, len: n, access: Access::Read },
            Arg { dtype: DType::F32, len: n, access: Access::Write },
        ],
        extent: n,
        body: vec![
            Inst::Load { arg: 0, index: Index::Strided { dims, strides, offset: 0 } },
            Inst::Store { arg: 1, value: 0, index: Index::Point },
        ],
    };
    graft_core::kernel::verify(&k).ok()?;
    Some(k)
}

impl Gemm {
    /// Workgroups to dispatch.
    pub fn workgroups(&self) -> [u32; 3] {
        [self.n.div_ceil(TILE) as u32, self.m.div_ceil(TILE) as u32, self.batch as u32]
    }

    /// Floating-point operations of one product (2 per multiply-add).
    pub fn flops(&self) -> f64 {
        2.0 * self.batch as f64 * self.m as f64 * self.n as f64 * self.k as f64
    }

    /// The WGSL source (bindings: A, B, C) of the kernel without
    /// workgroup memory: each invocation reads its 4 rows of `A` and 4
    /// columns of `B` straight from the buffers (same grid and outputs per
    /// invocation as [`Gemm::wgsl`], same `k` order). For CPU adapters
    /// (lavapipe), where workgroup barriers are costly and the CPU's caches
    /// do the staging.
    pub fn wgsl_direct(&self) -> String {
        let Gemm { m, n, k, ta, tb, .. } = *self;
        let mut s = String::with_capacity(4096);
        let _ = writeln!(s, "// gemm (direct) [{}x{m}x{k}] x [{k}x{n}] (ta={ta}, tb={tb})", self.batch);
        s.push_str("@group(0) @binding(0) var<storage, read> a: array<f32>;\n");
        s.push_str("@group(0) @binding(1) var<storage, read> b: array<f32>;\n");
        s.push_str("@group(0) @binding(2) var<storage, read_write> c: array<f32>;\n");
        s.push_str("@compute @workgroup_size(16, 16)\n");
        s.push_str("fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {\n");
        let _ = writeln!(s, "  let m0 = wid.y * {TILE}u; let n0 = wid.x * {TILE}u;");
        s.push_str(&self.bases());
        s.push_str("  let tx = lid.x; let ty = lid.y;\n");
        let (rows, cols) = self.blocks();
        for r in 0..rows.max(cols) {
            // Rows and columns past the edge read row/column 0 (in range) and are not stored.
            if r < rows {
                let _ = writeln!(s, "  let gm{r} = select(0u, m0 + ty + {}u, m0 + ty + {}u < {m}u);", 16 * r, 16 * r);
            }
            if r < cols {
                let _ = writeln!(s, "  let gn{r} = select(0u, n0 + tx + {}u, n0 + tx + {}u < {n}u);", 16 * r, 16 * r);
            }
        }
        accumulators(&mut s, rows, cols);
        let _ = writeln!(s, "  for (var kk = 0u; kk < {k}u; kk = kk + 1u) {{");
        for r in 0..rows.max(cols) {
            let a_at = if ta { format!("kk * {m}u + gm{r}") } else { format!("gm{r} * {k}u + kk") };
            let b_at = if tb { format!("gn{r} * {k}u + kk") } else { format!("kk * {n}u + gn{r}") };
            if r < rows {
                let _ = writeln!(s, "    let x{r} = a[ab + {a_at}];");
            }
            if r < cols {
                let _ = writeln!(s, "    let y{r} = b[bb + {b_at}];");
            }
        }
        fma_block(&mut s, "    ", rows, cols);
        s.push_str("  }\n");
        store_block(&mut s, m, n, rows, cols);
        s
    }

    /// The WGSL source (bindings: A, B, C).
    pub fn wgsl(&self) -> String {
        let Gemm { m, n, k, ta, tb, .. } = *self;
        let mut s = String::with_capacity(4096);
        let _ =
            writeln!(s, "// gemm [{}x{m}x{k}] x [{k}x{n}] (ta={ta}, tb={tb}), tiles {TILE}x{TILE}x{BK}", self.batch);
        s.push_str("@group(0) @binding(0) var<storage, read> a: array<f32>;\n");
        s.push_str("@group(0) @binding(1) var<storage, read> b: array<f32>;\n");
        s.push_str("@group(0) @binding(2) var<storage, read_write> c: array<f32>;\n");
        let _ = writeln!(s, "var<workgroup> ta_: array<f32, {}>;", TILE * BK);
        let _ = writeln!(s, "var<workgroup> tb_: array<f32, {}>;", TILE * BK);
        s.push_str("@compute @workgroup_size(16, 16)\n");
        s.push_str("fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {\n");
        let _ = writeln!(s, "  let m0 = wid.y * {TILE}u; let n0 = wid.x * {TILE}u;");
        s.push_str(&self.bases());
        s.push_str("  let tx = lid.x; let ty = lid.y; let t = ty * 16u + tx;\n");
        // Sixteen accumulators in registers (fewer for a thin product), the
        // inner products unrolled.
        let (rows, cols) = self.blocks();
        accumulators(&mut s, rows, cols);
        let _ = writeln!(s, "  for (var k0 = 0u; k0 < {k}u; k0 = k0 + {BK}u) {{");
        // Stage A's slice as [kk][mm] and B's as [kk][nn]; neighbouring
        // invocations read neighbouring addresses of the stored layout.
        let _ = writeln!(s, "    for (var l = 0u; l < {}u; l = l + 1u) {{", TILE * BK / 256);
        s.push_str("      let e = t + l * 256u;\n");
        if ta {
            let _ = writeln!(s, "      let mm = e % {TILE}u; let kk = e / {TILE}u;");
        } else {
            let _ = writeln!(s, "      let kk = e % {BK}u; let mm = e / {BK}u;");
        }
        s.push_str("      let gm = m0 + mm; let gk = k0 + kk;\n      var v = 0.0;\n");
        let a_at = if ta { format!("gk * {m}u + gm") } else { format!("gm * {k}u + gk") };
        let _ = writeln!(s, "      if (gm < {m}u && gk < {k}u) {{ v = a[ab + {a_at}]; }}");
        let _ = writeln!(s, "      ta_[kk * {TILE}u + mm] = v;");
        if tb {
            let _ = writeln!(s, "      let kb = e % {BK}u; let nn = e / {BK}u;");
        } else {
            let _ = writeln!(s, "      let nn = e % {TILE}u; let kb = e / {TILE}u;");
        }
        s.push_str("      let gn = n0 + nn; let gkb = k0 + kb;\n      var w = 0.0;\n");
        let b_at = if tb { format!("gn * {k}u + gkb") } else { format!("gkb * {n}u + gn") };
        let _ = writeln!(s, "      if (gn < {n}u && gkb < {k}u) {{ w = b[bb + {b_at}]; }}");
        let _ = writeln!(s, "      tb_[kb * {TILE}u + nn] = w;");
        s.push_str("    }\n    workgroupBarrier();\n");
        let _ = writeln!(s, "    for (var kk = 0u; kk < {BK}u; kk = kk + 1u) {{");
        let _ = writeln!(s, "      let o = kk * {TILE}u;");
        for r in 0..rows.max(cols) {
            if r < rows {
                let _ = writeln!(s, "      let x{r} = ta_[o + ty + {}u];", 16 * r);
            }
            if r < cols {
                let _ = writeln!(s, "      let y{r} = tb_[o + tx + {}u];", 16 * r);
            }
        }
        fma_block(&mut s, "      ", rows, cols);
        s.push_str("    }\n    workgroupBarrier();\n  }\n");
        store_block(&mut s, m, n, rows, cols);
        s
    }
}

/// The register block's accumulators, `rows x cols` of them.
fn accumulators(s: &mut String, rows: usize, cols: usize) {
    for r in 0..rows {
        for q in 0..cols {
            let _ = writeln!(s, "  var c{r}{q}: f32 = 0.0;");
        }
    }
}

/// The register block's multiply-adds (`c_rq += x_r * y_q`), shared by both
/// GEMM kernels.
fn fma_block(s: &mut String, indent: &str, rows: usize, cols: usize) {
    for r in 0..rows {
        for q in 0..cols {
            let _ = writeln!(s, "{indent}c{r}{q} = c{r}{q} + x{r} * y{q};");
        }
    }
}

/// Stores the register block (rows 16 apart, columns 16 apart) where it
/// lies inside the `m x n` result, and closes the kernel's function.
fn store_block(s: &mut String, m: impl std::fmt::Display, n: impl std::fmt::Display, rows: usize, cols: usize) {
    for r in 0..rows {
        for q in 0..cols {
            let _ = writeln!(
                s,
                "  {{ let gm = m0 + ty + {}u; let gn = n0 + tx + {}u; if (gm < {m}u && gn < {n}u) {{ c[cb + gm * {n}u + gn] = c{r}{q}; }} }}",
                16 * r,
                16 * q
            );
        }
    }
    s.push_str("}\n");
}
