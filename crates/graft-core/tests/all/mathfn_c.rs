//! Differential test of the C kernel prelude (`src/kernel/prelude.h`)
//! against the Rust kernels: every elementwise op x dtype the interpreter
//! implements (unary, binary, comparisons, select, convert) is run by the
//! interpreter (a one-equation `Func` through `Executable`) and by a C
//! program built from the prelude with `cc -O2 -ffp-contract=off
//! -fno-math-errno` (with `-march=native` at GL = 4, 8, 16, and without it at
//! GL = 8), on the same inputs (specials, subnormals, huge values, random
//! bits; integer edges), and the results must agree bit for bit (a NaN only
//! has to meet a NaN: payloads are not specified).
//!
//! Needs a C compiler (`cc`) on PATH; `GRAFT_SKIP_CC_TESTS=1` skips the test
//! (it prints that it did) where there is none.

use graft_core::half::f16;
use graft_core::ops::binary::{Binary, Compare};
use graft_core::ops::unary::Unary;
use graft_core::{Builder, DType, Executable, Tensor};
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

const PRELUDE: &str = include_str!("../../src/kernel/prelude.h");

/// Points per operand dtype (multiples of 16, the widest GL).
fn npoints(dt: DType) -> usize {
    match dt {
        DType::F32 | DType::F64 => 1 << 18,
        DType::I32 | DType::I64 | DType::U32 => 1 << 15,
        DType::Bool => 1 << 12,
        // Every bit pattern.
        DType::F16 => 1 << 16,
    }
}

/// xorshift64*: deterministic inputs.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A mix of f64 values that stress float kernels: specials, tiny and
/// subnormal, near ±1, large, integers and halves, multiples of pi/4 (the
/// reduction boundaries of sin/cos/tan), moderate uniform values, random bits
/// of the target width (`bits32`: random f32 patterns).
fn float_point(r: &mut Rng, i: usize, bits32: bool) -> f64 {
    let sign = if r.next() & 1 == 0 { 1.0 } else { -1.0 };
    match i % 10 {
        0 => {
            if bits32 {
                f32::from_bits(r.next() as u32) as f64
            } else {
                f64::from_bits(r.next())
            }
        }
        1 => (r.unit() * 2.0 - 1.0) * 10.0,
        2 => {
            let e = if bits32 { r.below(152) as i32 } else { r.below(1080) as i32 };
            sign * (1.0 + r.unit()) * 2f64.powi(-e)
        }
        3 => {
            let k = r.below(64) as f64 - 32.0;
            let ulp = if bits32 { f32::EPSILON as f64 } else { f64::EPSILON };
            sign * (1.0 + k * ulp * if r.next() & 1 == 0 { 1.0 } else { 0.5 })
        }
        4 => {
            let e = if bits32 { r.below(128) as i32 } else { r.below(1024) as i32 };
            sign * (1.0 + r.unit()) * 2f64.powi(e)
        }
        5 => {
            let base =
                [0.0, 8_388_608.0, 16_777_216.0, 2_147_483_648.0, 4_503_599_627_370_496.0, 9.223_372_036_854_776e18];
            let b = base[r.below(base.len() as u64) as usize];
            sign * (b + (r.below(64) as f64 - 32.0) * 0.5)
        }
        6 => {
            let k = r.below(2000) as f64 - 1000.0;
            let off = if r.next() & 1 == 0 { 0.0 } else { (r.unit() - 0.5) * 1e-6 };
            k * std::f64::consts::FRAC_PI_4 + off
        }
        7 => (r.unit() * 2.0 - 1.0) * 100.0,
        8 => {
            let sp = [
                0.0,
                -0.0,
                1.0,
                -1.0,
                0.5,
                -0.5,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::NAN,
                2.0,
                3.0,
                -3.0,
                1e-300,
                1e300,
                88.72283935546875,
                -103.97208,
                709.782712893384,
                -745.1332191019411,
                0.625,
                f64::MAX,
                f64::MIN_POSITIVE,
                5e-324,
                f32::MAX as f64,
                f32::MIN_POSITIVE as f64,
                1e-45,
                2.5,
                -2.5,
                0.49999997,
            ];
            sp[r.below(sp.len() as u64) as usize]
        }
        _ => sign * r.unit(),
    }
}

fn float_values(dt: DType, seed: u64, other: Option<&[f64]>) -> Vec<f64> {
    let mut r = Rng(seed);
    let n = npoints(dt);
    let bits32 = dt == DType::F32;
    (0..n)
        .map(|i| {
            let x = float_point(&mut r, i, bits32);
            // Second operands: ties, negations and small integers/halves
            // (pow's integer-exponent cases) a quarter of the time.
            match (other, i % 16) {
                (Some(a), 11) => a[i],
                (Some(a), 12) => -a[i],
                (Some(_), 13) => r.below(21) as f64 - 10.0,
                (Some(_), 14) => (r.below(21) as f64 - 10.0) * 0.5,
                _ => x,
            }
        })
        .collect()
}

fn int_values(dt: DType, seed: u64) -> Vec<i64> {
    let mut r = Rng(seed);
    if dt == DType::U32 {
        // Unsigned edges (2^31 - 1, 2^31, 2^32 - 1, the f32 rounding ties
        // 2^24 + 1 and 2^32 - 128) and small values.
        let m = u32::MAX as i64;
        let edges = [0, 1, 2, 3, m - 1, m, 0x7fff_ffff, 0x8000_0000, 0x8000_0001, 16_777_217, m - 128, m - 127];
        return (0..npoints(dt))
            .map(|i| match i % 4 {
                0 => edges[r.below(edges.len() as u64) as usize],
                1 => r.below(201) as i64,
                _ => r.next() as u32 as i64,
            })
            .collect();
    }
    let (min, max) = if dt == DType::I32 { (i32::MIN as i64, i32::MAX as i64) } else { (i64::MIN, i64::MAX) };
    let edges = [min, min + 1, -2, -1, 0, 1, 2, max - 1, max, 16_777_217, 9_007_199_254_740_993, -16_777_217];
    (0..npoints(dt))
        .map(|i| match i % 4 {
            0 => edges[r.below(edges.len() as u64) as usize],
            1 => r.below(201) as i64 - 100,
            _ => r.next() as i64,
        })
        .map(|v| if dt == DType::I32 { v as i32 as i64 } else { v })
        .collect()
}

fn bool_values(seed: u64, n: usize) -> Vec<bool> {
    let mut r = Rng(seed);
    (0..n).map(|_| r.next() & 1 == 1).collect()
}

fn tensor_of(dt: DType, f: &[f64], i: &[i64], b: &[bool]) -> Tensor {
    let n = npoints(dt);
    match dt {
        DType::F32 => Tensor::from_vec(vec![n], f.iter().map(|&x| x as f32).collect::<Vec<_>>()),
        DType::F64 => Tensor::from_vec(vec![n], f.to_vec()),
        DType::I32 => Tensor::from_vec(vec![n], i.iter().map(|&x| x as i32).collect::<Vec<_>>()),
        DType::I64 => Tensor::from_vec(vec![n], i.to_vec()),
        DType::U32 => Tensor::from_vec(vec![n], i.iter().map(|&x| x as u32).collect::<Vec<_>>()),
        DType::Bool => Tensor::from_vec(vec![n], b[..n].to_vec()),
        // Every pattern; the second operand in another order (selects).
        DType::F16 => {
            let flip = b.first().copied().unwrap_or(false);
            let bits = (0..n as u32).map(|h| if flip { (h * 40_503) as u16 } else { h as u16 });
            Tensor::from_vec(vec![n], bits.map(f16::from_bits).collect::<Vec<_>>())
        }
    }
    .unwrap()
}

/// Raw little-endian bytes of a tensor (bools as 0/1 bytes).
fn bytes_of(t: &Tensor) -> Vec<u8> {
    match t.dtype() {
        DType::F32 => t.to_vec::<f32>().unwrap().iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::F64 => t.to_vec::<f64>().unwrap().iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::I32 => t.to_vec::<i32>().unwrap().iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::I64 => t.to_vec::<i64>().unwrap().iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::U32 => t.to_vec::<u32>().unwrap().iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::Bool => t.to_vec::<bool>().unwrap().iter().map(|&x| x as u8).collect(),
        DType::F16 => t.to_vec::<f16>().unwrap().iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
    }
}

fn size_of(dt: DType) -> usize {
    match dt {
        DType::F32 | DType::I32 | DType::U32 => 4,
        DType::F64 | DType::I64 => 8,
        DType::Bool => 1,
        DType::F16 => 2,
    }
}

fn vty(dt: DType) -> &'static str {
    match dt {
        DType::F32 => "vf32",
        DType::F64 => "vf64",
        DType::I32 => "vi32",
        DType::I64 => "vi64",
        DType::U32 => "vu32",
        DType::Bool => "vbool",
        // Its bits in i32 lanes (the prelude's f16 section).
        DType::F16 => "vi32",
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Un(Unary),
    Bin(Binary),
    Cmp(Compare),
    Sel,
    Conv(DType),
}

#[derive(Clone, Copy, Debug)]
struct Case {
    kind: Kind,
    dt: DType,
}

impl Case {
    fn c_name(&self) -> String {
        use graft_core::Op;
        match self.kind {
            Kind::Un(op) => format!("g_{}_{}", op.name(), self.dt),
            Kind::Bin(op) => format!("g_{}_{}", op.name(), self.dt),
            Kind::Cmp(op) => format!("g_{}_{}", op.name(), self.dt),
            Kind::Sel => format!("g_select_{}", self.dt),
            Kind::Conv(to) => format!("g_convert_{}_{}", self.dt, to),
        }
    }
    /// Input files (`<dtype>_<role>`) and dtypes.
    fn inputs(&self) -> Vec<(String, DType)> {
        let a = (format!("{}_a", self.dt), self.dt);
        let b = (format!("{}_b", self.dt), self.dt);
        match self.kind {
            // Conversions to f16 from a float read the values around f16's
            // rounding boundaries (see `f16_edges`).
            Kind::Conv(DType::F16) if self.dt.is_float() && self.dt != DType::F16 => {
                vec![(format!("{}_h", self.dt), self.dt)]
            }
            Kind::Un(_) | Kind::Conv(_) => vec![a],
            Kind::Bin(_) | Kind::Cmp(_) => vec![a, b],
            Kind::Sel => vec![("pred".to_string(), DType::Bool), a, b],
        }
    }
    fn out_dtype(&self) -> DType {
        match self.kind {
            Kind::Cmp(_) => DType::Bool,
            Kind::Conv(to) => to,
            _ => self.dt,
        }
    }
    /// The interpreter's result on the given inputs.
    fn run_rust(&self, ins: &[&Tensor]) -> Tensor {
        let mut b = Builder::new("f");
        let ps: Vec<_> = ins.iter().map(|t| b.param(t.ty())).collect();
        let y = match self.kind {
            Kind::Un(op) => b.unary(op, ps[0]),
            Kind::Bin(op) => b.binary(op, ps[0], ps[1]),
            Kind::Cmp(op) => b.compare(op, ps[0], ps[1]),
            Kind::Sel => b.select(ps[0], ps[1], ps[2]),
            Kind::Conv(to) => b.convert(ps[0], to),
        }
        .unwrap();
        let f = b.finish(&[y]).unwrap();
        Executable::new(f).unwrap().run(ins).unwrap().remove(0)
    }
}

const DTYPES: [DType; 6] = [DType::F32, DType::F64, DType::I32, DType::I64, DType::U32, DType::Bool];

/// Values that probe conversions to f16 from `dt` (f32 or f64): every
/// finite f16 value, every midpoint between neighbours (the ties) and the
/// `dt` values just either side of each (from f64, through f32 they would
/// round to the tie: the double rounding `ops/cast.rs` avoids), the
/// overflow threshold 65520 and the subnormal range's edges, then the
/// general mix of [`float_point`] to fill `npoints(dt)`.
fn f16_edges(dt: DType, seed: u64) -> Vec<f64> {
    let next = |x: f64, up: bool| -> f64 {
        if dt == DType::F32 {
            let b = (x as f32).to_bits();
            f32::from_bits(if (x > 0.0) == up { b + 1 } else { b - 1 }) as f64
        } else {
            let b = x.to_bits();
            f64::from_bits(if (x > 0.0) == up { b + 1 } else { b - 1 })
        }
    };
    let mut finite: Vec<f64> =
        (0..=u16::MAX).map(f16::from_bits).filter(|h| h.is_finite()).map(|h| h.to_f64()).collect();
    finite.sort_by(f64::total_cmp);
    finite.dedup();
    let mut v = finite.clone();
    for w in finite.windows(2) {
        let mid = (w[0] + w[1]) / 2.0;
        v.push(mid);
        if mid != 0.0 {
            v.push(next(mid, true));
            v.push(next(mid, false));
        }
    }
    for x in [65520.0, 65519.996, 2f64.powi(-25), 2f64.powi(-24), 2f64.powi(-26), 2f64.powi(-14)] {
        v.extend([x, -x, next(x, true), next(x, false)]);
    }
    let n = npoints(dt);
    let mut r = Rng(seed);
    let mut i = 0;
    while v.len() < n {
        v.push(float_point(&mut r, i, dt == DType::F32));
        i += 1;
    }
    v.truncate(n);
    v
}

/// Ops whose Rust kernels still call libm (no C version yet), with the
/// dtypes they do it for: f64 `atan2` and `pow` (std `atan2`, `powf`; the
/// f32 versions are graft's own, `mathfn::atan2_f32`, `mathfn::pow_f32`).
/// Everything else is compared.
pub(crate) const PENDING_UN: [Unary; 0] = [];
pub(crate) const PENDING_BIN: [(Binary, DType); 2] = [(Binary::Pow, DType::F64), (Binary::Atan2, DType::F64)];

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for dt in DTYPES {
        for op in Unary::ALL {
            if op.accepts(dt) && !PENDING_UN.contains(&op) {
                v.push(Case { kind: Kind::Un(op), dt });
            }
        }
        for op in Binary::ALL {
            if op.accepts(dt) && !PENDING_BIN.contains(&(op, dt)) {
                v.push(Case { kind: Kind::Bin(op), dt });
            }
        }
        for op in Compare::ALL {
            v.push(Case { kind: Kind::Cmp(op), dt });
        }
        v.push(Case { kind: Kind::Sel, dt });
        for to in DTYPES.into_iter().chain([DType::F16]) {
            v.push(Case { kind: Kind::Conv(to), dt });
        }
    }
    // f16, a storage type in kernels: only selects and conversions.
    v.push(Case { kind: Kind::Sel, dt: DType::F16 });
    for to in DTYPES.into_iter().chain([DType::F16]) {
        v.push(Case { kind: Kind::Conv(to), dt: DType::F16 });
    }
    v
}

/// The C program: the prelude, one loop per case over whole vectors, and a
/// `main(dir)` that reads `dir/<input>.bin` and writes `dir/out_<k>.bin`.
fn c_program(cases: &[Case]) -> String {
    let mut s = String::from("#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n");
    s.push_str(PRELUDE);
    s.push_str(
        r#"
static vbool ldb(const unsigned char* p) { vu8 t; memcpy(&t, p, GL); return -__builtin_convertvector(t, vi32); }
static void stb(unsigned char* p, vbool v) { vu8 t = __builtin_convertvector(v & 1, vu8); memcpy(p, &t, GL); }
static vi32 ldh(const unsigned char* p) { vu16 t; memcpy(&t, p, sizeof t); return __builtin_convertvector(t, vi32); }
static void sth(unsigned char* p, vi32 v) { vu16 t = __builtin_convertvector(v, vu16); memcpy(p, &t, sizeof t); }
typedef void (*kern)(size_t, unsigned char**, unsigned char*);
static unsigned char* load(const char* dir, const char* name, size_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    FILE* f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    unsigned char* p = malloc(bytes);
    if (fread(p, 1, bytes, f) != bytes) { fprintf(stderr, "short read %s\n", path); exit(2); }
    fclose(f);
    return p;
}
static void run(const char* dir, int k, kern f, size_t n, size_t osz, int nin, const char* i0, const char* i1, const char* i2, size_t s0, size_t s1, size_t s2) {
    unsigned char* in[3] = {0, 0, 0};
    const char* names[3] = {i0, i1, i2};
    size_t sz[3] = {s0, s1, s2};
    for (int j = 0; j < nin; j++) in[j] = load(dir, names[j], n * sz[j]);
    unsigned char* o = malloc(n * osz);
    f(n, in, o);
    char path[4096];
    snprintf(path, sizeof path, "%s/out_%d.bin", dir, k);
    FILE* fo = fopen(path, "wb");
    if (!fo || fwrite(o, 1, n * osz, fo) != n * osz) { perror(path); exit(2); }
    fclose(fo);
    for (int j = 0; j < nin; j++) free(in[j]);
    free(o);
}
"#,
    );
    for (k, c) in cases.iter().enumerate() {
        let ins = c.inputs();
        let _ = writeln!(s, "static void k{k}(size_t n, unsigned char** in, unsigned char* o) {{");
        let _ = writeln!(s, "    for (size_t i = 0; i < n; i += GL) {{");
        let mut args = Vec::new();
        for (j, (_, dt)) in ins.iter().enumerate() {
            if *dt == DType::Bool {
                let _ = writeln!(s, "        vbool a{j} = ldb(in[{j}] + i);");
            } else if *dt == DType::F16 {
                let _ = writeln!(s, "        vi32 a{j} = ldh(in[{j}] + i * 2);");
            } else {
                let sz = size_of(*dt);
                let _ = writeln!(s, "        {} a{j}; memcpy(&a{j}, in[{j}] + i * {sz}, sizeof a{j});", vty(*dt));
            }
            args.push(format!("a{j}"));
        }
        let od = c.out_dtype();
        let _ = writeln!(s, "        {} r = {}({});", vty(od), c.c_name(), args.join(", "));
        if od == DType::Bool {
            let _ = writeln!(s, "        stb(o + i, r);");
        } else if od == DType::F16 {
            let _ = writeln!(s, "        sth(o + i * 2, r);");
        } else {
            let _ = writeln!(s, "        memcpy(o + i * {}, &r, sizeof r);", size_of(od));
        }
        s.push_str("    }\n}\n");
    }
    s.push_str("int main(int argc, char** argv) {\n    if (argc < 2) return 2;\n");
    for (k, c) in cases.iter().enumerate() {
        let ins = c.inputs();
        let name = |j: usize| ins.get(j).map_or("0".to_string(), |(n, _)| format!("\"{n}\""));
        let size = |j: usize| ins.get(j).map_or(0, |(_, d)| size_of(*d));
        let _ = writeln!(
            s,
            "    run(argv[1], {k}, k{k}, {}, {}, {}, {}, {}, {}, {}, {}, {});",
            npoints(c.dt),
            size_of(c.out_dtype()),
            ins.len(),
            name(0),
            name(1),
            name(2),
            size(0),
            size(1),
            size(2)
        );
    }
    s.push_str("    return 0;\n}\n");
    s
}

/// Compares C output bytes with the interpreter's, element by element.
fn compare(case: &Case, variant: &str, c: &[u8], rust: &[u8], ins: &[&Tensor]) -> Result<(), String> {
    let od = case.out_dtype();
    let sz = size_of(od);
    if c.len() != rust.len() {
        return Err(format!("{} [{variant}]: {} bytes from C, {} from Rust", case.c_name(), c.len(), rust.len()));
    }
    let is_nan = |b: &[u8]| match od {
        DType::F32 => f32::from_le_bytes(b.try_into().unwrap()).is_nan(),
        DType::F64 => f64::from_le_bytes(b.try_into().unwrap()).is_nan(),
        DType::F16 => f16::from_bits(u16::from_le_bytes(b.try_into().unwrap())).is_nan(),
        _ => false,
    };
    let show = |b: &[u8]| -> String {
        match od {
            DType::F32 => format!("{:e}", f32::from_le_bytes(b.try_into().unwrap())),
            DType::F64 => format!("{:e}", f64::from_le_bytes(b.try_into().unwrap())),
            DType::I32 => format!("{}", i32::from_le_bytes(b.try_into().unwrap())),
            DType::I64 => format!("{}", i64::from_le_bytes(b.try_into().unwrap())),
            DType::U32 => format!("{}", u32::from_le_bytes(b.try_into().unwrap())),
            DType::Bool => format!("{}", b[0]),
            DType::F16 => {
                let h = u16::from_le_bytes(b.try_into().unwrap());
                format!("{:e} [{h:#06x}]", f16::from_bits(h).to_f32())
            }
        }
    };
    let mut bad = Vec::new();
    let mut count = 0;
    for (i, (cb, rb)) in c.chunks(sz).zip(rust.chunks(sz)).enumerate() {
        if cb == rb || (is_nan(cb) && is_nan(rb)) {
            continue;
        }
        count += 1;
        if bad.len() < 5 {
            let args: Vec<String> = ins.iter().map(|t| t.slice_elem_string(i)).collect();
            bad.push(format!("  at {i}: args ({}): C {} vs Rust {}", args.join(", "), show(cb), show(rb)));
        }
    }
    if count == 0 {
        Ok(())
    } else {
        Err(format!("{} [{variant}]: {count} mismatches\n{}", case.c_name(), bad.join("\n")))
    }
}

trait ElemString {
    fn slice_elem_string(&self, i: usize) -> String;
}
impl ElemString for Tensor {
    fn slice_elem_string(&self, i: usize) -> String {
        match self.dtype() {
            DType::F32 => {
                let v = self.to_vec::<f32>().unwrap()[i];
                format!("{v:e} [{:#010x}]", v.to_bits())
            }
            DType::F64 => {
                let v = self.to_vec::<f64>().unwrap()[i];
                format!("{v:e} [{:#018x}]", v.to_bits())
            }
            DType::I32 => format!("{}", self.to_vec::<i32>().unwrap()[i]),
            DType::I64 => format!("{}", self.to_vec::<i64>().unwrap()[i]),
            DType::U32 => format!("{}", self.to_vec::<u32>().unwrap()[i]),
            DType::Bool => format!("{}", self.to_vec::<bool>().unwrap()[i]),
            DType::F16 => {
                let h = self.to_vec::<f16>().unwrap()[i];
                format!("{h} [{:#06x}]", h.to_bits())
            }
        }
    }
}

fn cc_available() -> bool {
    Command::new("cc").arg("--version").output().map(|o| o.status.success()).unwrap_or(false)
}

fn compile(dir: &Path, src: &str, gl: usize, native: bool) -> Result<std::path::PathBuf, String> {
    let tag = format!("gl{gl}{}", if native { "_native" } else { "" });
    let c = dir.join(format!("{tag}.c"));
    std::fs::write(&c, format!("#define GL {gl}\n{src}")).unwrap();
    let exe = dir.join(&tag);
    let mut cmd = Command::new("cc");
    cmd.args([
        "-O2",
        "-ffp-contract=off",
        "-fno-math-errno",
        "-std=gnu11",
        "-Wall",
        "-Wno-unused-function",
        "-Wno-psabi",
    ]);
    if native {
        cmd.arg("-march=native");
    }
    // -lm: fmaf/fma on a CPU without FMA instructions (the baseline build).
    cmd.arg("-o").arg(&exe).arg(&c).arg("-lm");
    let out = cmd.output().map_err(|e| format!("running cc: {e}"))?;
    if !out.status.success() {
        return Err(format!("cc failed for {tag}:\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    let warnings = String::from_utf8_lossy(&out.stderr);
    if warnings.contains("warning") {
        return Err(format!("cc warnings for {tag}:\n{warnings}"));
    }
    Ok(exe)
}

#[test]
fn c_prelude_matches_rust_kernels_bitwise() {
    if !cc_available() {
        if std::env::var("GRAFT_SKIP_CC_TESTS").as_deref() == Ok("1") {
            eprintln!("mathfn_c: skipped (no `cc` on PATH and GRAFT_SKIP_CC_TESTS=1)");
            return;
        }
        panic!(
            "mathfn_c needs a C compiler: `cc` is not on PATH. Install one (gcc or clang), \
             or set GRAFT_SKIP_CC_TESTS=1 to skip this test."
        );
    }
    let cases = cases();
    let dir = tempfile::tempdir().unwrap();

    // Inputs, shared by every case of a dtype.
    let mut inputs: std::collections::HashMap<String, Tensor> = Default::default();
    for (k, dt) in DTYPES.iter().enumerate() {
        let seed = 0x9e37_79b9_7f4a_7c15 ^ (k as u64 * 7919 + 1);
        let fa = float_values(*dt, seed, None);
        let fb = float_values(*dt, seed.wrapping_mul(31), Some(&fa));
        let ia = int_values(*dt, seed);
        let mut ib = int_values(*dt, seed.wrapping_mul(31));
        // Pairs of edges (MIN / -1, x / 0, ties) in a tenth of the points.
        for (i, b) in ib.iter_mut().enumerate() {
            if i % 10 == 3 {
                *b = ia[i];
            }
        }
        let ba = bool_values(seed, npoints(*dt));
        let bb = bool_values(seed ^ 0x55, npoints(*dt));
        inputs.insert(format!("{dt}_a"), tensor_of(*dt, &fa, &ia, &ba));
        inputs.insert(format!("{dt}_b"), tensor_of(*dt, &fb, &ib, &bb));
        if dt.is_float() {
            inputs.insert(format!("{dt}_h"), tensor_of(*dt, &f16_edges(*dt, seed ^ 0xf16), &ia, &ba));
        }
    }
    inputs.insert("f16_a".into(), tensor_of(DType::F16, &[], &[], &[false]));
    inputs.insert("f16_b".into(), tensor_of(DType::F16, &[], &[], &[true]));
    inputs.insert("pred".into(), Tensor::from_vec(vec![1 << 18], bool_values(7, 1 << 18)).unwrap());
    for (name, t) in &inputs {
        std::fs::write(dir.path().join(format!("{name}.bin")), bytes_of(t)).unwrap();
    }

    // Interpreter results.
    let args_of = |c: &Case| -> Vec<Tensor> {
        c.inputs()
            .iter()
            .map(|(name, dt)| {
                let t = &inputs[name];
                let n = npoints(c.dt);
                if t.numel() == n {
                    t.clone()
                } else {
                    assert_eq!(*dt, DType::Bool);
                    Tensor::from_vec(vec![n], t.to_vec::<bool>().unwrap()[..n].to_vec()).unwrap()
                }
            })
            .collect()
    };
    let rust: Vec<Vec<u8>> = cases
        .iter()
        .map(|c| {
            let args = args_of(c);
            let refs: Vec<&Tensor> = args.iter().collect();
            bytes_of(&c.run_rust(&refs))
        })
        .collect();

    // Build the C variants two at a time, then run each and compare.
    let src = c_program(&cases);
    let variants = [(4, true), (8, true), (16, true), (8, false)];
    let exes: Vec<(String, std::path::PathBuf)> = std::thread::scope(|s| {
        let hs: Vec<_> = variants
            .iter()
            .map(|&(gl, native)| {
                let (d, src) = (dir.path(), &src);
                s.spawn(move || {
                    let tag = format!("GL={gl}{}", if native { " -march=native" } else { "" });
                    (tag, compile(d, src, gl, native))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).map(|(t, r)| (t, r.unwrap_or_else(|e| panic!("{e}")))).collect()
    });
    let mut failures = Vec::new();
    for (tag, exe) in &exes {
        let out = Command::new(exe).arg(dir.path()).output().unwrap();
        assert!(out.status.success(), "{tag}: C program failed: {}", String::from_utf8_lossy(&out.stderr));
        for (k, c) in cases.iter().enumerate() {
            let path = dir.path().join(format!("out_{k}.bin"));
            let cbytes = std::fs::read(&path).unwrap();
            let args = args_of(c);
            let refs: Vec<&Tensor> = args.iter().collect();
            if let Err(e) = compare(c, tag, &cbytes, &rust[k], &refs) {
                failures.push(e);
            }
            std::fs::remove_file(path).unwrap();
        }
    }
    eprintln!("mathfn_c: {} cases x {} builds compared", cases.len(), exes.len());
    assert!(failures.is_empty(), "{} C/Rust mismatches:\n{}", failures.len(), failures.join("\n"));
}
