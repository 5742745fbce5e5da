//! NumPy-compatible `.npy` / `.npz` input and output. Writing, and the zip
//! container of `.npz`, go through the `npyz` crate; reading is done here,
//! with work bounded by the file's own size, never by what its header
//! claims (npyz's header parser takes time exponential in bracket nesting,
//! and its element count wraps on overflow):
//!
//! - the header is at most [`MAX_HEADER_BYTES`] long and is parsed by a
//!   linear recursive-descent parser of the Python-literal subset headers
//!   use, nesting brackets at most [`MAX_HEADER_NESTING`] deep;
//! - the element count and byte size are products checked for overflow
//!   (every dimension counted as at least 1, so that strides fit too);
//! - the data must hold exactly the bytes the header promises: a file's
//!   length is compared before anything is allocated; data read from a
//!   stream or an archive member grows its buffer fallibly, chunk by chunk,
//!   so a short stream is an error after allocating no more than it held.
//!
//! Supported element types: `<f2 <f4 <f8 <i4 <i8 <u4 |b1` (and big-endian variants
//! on read). Fortran-ordered arrays are read and re-laid out row-major.
//! Any other dtype is an error naming it; nothing is silently cast.

use crate::dtype::DType;
use crate::tensor::{Element, Storage, Tensor, TensorError};
use crate::types::strides_of;
use npyz::WriterBuilder;
use std::io::{Read, Seek, Write};
use std::path::Path;

/// The longest `.npy` header accepted, in bytes (NumPy's own reader refuses
/// headers over 10 000 bytes unless told otherwise).
pub const MAX_HEADER_BYTES: usize = 65_536;

/// The deepest nesting of brackets (`(`, `[`, `{`) accepted in a header. A
/// plain array's header nests 2 deep (`{... 'shape': (2, 3)}`).
pub const MAX_HEADER_NESTING: usize = 8;

fn io_err(e: impl std::fmt::Display) -> TensorError {
    TensorError::Npy(e.to_string())
}

fn npy_err(msg: impl Into<String>) -> TensorError {
    TensorError::Npy(msg.into())
}

/// Reads one array from `.npy` bytes.
pub fn read_npy(reader: impl Read) -> Result<Tensor, TensorError> {
    read_npy_checked(reader, None)
}

/// Reads the magic string, version and header text (bounded); returns the
/// header text and the number of bytes before the data.
fn read_prefix(reader: &mut impl Read) -> Result<(Vec<u8>, u64), TensorError> {
    let mut magic = [0u8; 8];
    reader.read_exact(&mut magic).map_err(|_| npy_err("not an .npy file (too short for the magic string)"))?;
    if &magic[..6] != b"\x93NUMPY" {
        return Err(npy_err("not an .npy file (the magic string `\\x93NUMPY` is missing)"));
    }
    let short = |_| npy_err("the file ends inside its header length");
    let (header_len, before) = match magic[6] {
        1 => {
            let mut b = [0u8; 2];
            reader.read_exact(&mut b).map_err(short)?;
            (u16::from_le_bytes(b) as usize, 10)
        }
        2 | 3 => {
            let mut b = [0u8; 4];
            reader.read_exact(&mut b).map_err(short)?;
            (u32::from_le_bytes(b) as usize, 12)
        }
        v => return Err(npy_err(format!("unsupported .npy format version {v}.{}", magic[7]))),
    };
    if header_len > MAX_HEADER_BYTES {
        return Err(npy_err(format!("the header claims {header_len} bytes; at most {MAX_HEADER_BYTES} are accepted")));
    }
    let mut header = vec![0u8; header_len];
    reader
        .read_exact(&mut header)
        .map_err(|_| npy_err(format!("the file ends inside its header ({header_len} bytes promised)")))?;
    Ok((header, (before + header_len) as u64))
}

/// A value of the Python-literal subset `.npy` headers are written in.
enum Py {
    Str(String),
    Bool(bool),
    /// `None` when the magnitude does not fit in a u64.
    Int {
        negative: bool,
        value: Option<u64>,
    },
    Seq(Vec<Py>),
    Dict(Vec<(Py, Py)>),
    None,
}

/// A recursive-descent parser of one header, linear in its length, nesting
/// at most [`MAX_HEADER_NESTING`] deep.
struct HeaderParser<'a> {
    s: &'a [u8],
    pos: usize,
    depth: usize,
}

impl HeaderParser<'_> {
    fn err(&self, what: &str) -> TensorError {
        npy_err(format!("the header is not a valid Python literal ({what} at byte {})", self.pos))
    }

    fn ws(&mut self) {
        while self.s.get(self.pos).is_some_and(|c| c.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.s.get(self.pos) == Some(&c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn keyword(&mut self, k: &str) -> bool {
        if self.s[self.pos..].starts_with(k.as_bytes()) {
            self.pos += k.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Result<Py, TensorError> {
        self.ws();
        let Some(&c) = self.s.get(self.pos) else {
            return Err(self.err("unexpected end"));
        };
        match c {
            b'\'' | b'"' => self.string(c),
            b'(' | b'[' | b'{' => {
                self.depth += 1;
                if self.depth > MAX_HEADER_NESTING {
                    return Err(npy_err(format!("the header nests brackets more than {MAX_HEADER_NESTING} deep")));
                }
                self.pos += 1;
                let close = match c {
                    b'(' => b')',
                    b'[' => b']',
                    _ => b'}',
                };
                let v = if c == b'{' { self.dict()? } else { Py::Seq(self.items(close)?) };
                self.depth -= 1;
                Ok(v)
            }
            b'-' | b'0'..=b'9' => self.int(),
            _ if self.keyword("True") => Ok(Py::Bool(true)),
            _ if self.keyword("False") => Ok(Py::Bool(false)),
            _ if self.keyword("None") => Ok(Py::None),
            _ => Err(self.err("unexpected character")),
        }
    }

    fn string(&mut self, quote: u8) -> Result<Py, TensorError> {
        self.pos += 1;
        let start = self.pos;
        while let Some(&c) = self.s.get(self.pos) {
            if c == quote {
                let text = String::from_utf8_lossy(&self.s[start..self.pos]).into_owned();
                self.pos += 1;
                return Ok(Py::Str(text));
            }
            self.pos += if c == b'\\' { 2 } else { 1 };
        }
        Err(self.err("unterminated string"))
    }

    fn int(&mut self) -> Result<Py, TensorError> {
        let negative = self.s[self.pos] == b'-';
        if negative {
            self.pos += 1;
        }
        let start = self.pos;
        let mut value = Some(0u64);
        while let Some(&c) = self.s.get(self.pos).filter(|c| c.is_ascii_digit()) {
            value = value.and_then(|v| v.checked_mul(10)).and_then(|v| v.checked_add(u64::from(c - b'0')));
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.err("expected digits"));
        }
        // Python 2 wrote long integers with a suffix: `(3L,)`.
        if matches!(self.s.get(self.pos), Some(b'L' | b'l')) {
            self.pos += 1;
        }
        Ok(Py::Int { negative, value })
    }

    /// Comma-separated values up to `close` (a trailing comma allowed).
    fn items(&mut self, close: u8) -> Result<Vec<Py>, TensorError> {
        let mut out = Vec::new();
        loop {
            if self.eat(close) {
                return Ok(out);
            }
            out.push(self.value()?);
            if !self.eat(b',') {
                return if self.eat(close) { Ok(out) } else { Err(self.err("expected `,` or a closing bracket")) };
            }
        }
    }

    fn dict(&mut self) -> Result<Py, TensorError> {
        let mut out = Vec::new();
        loop {
            if self.eat(b'}') {
                return Ok(Py::Dict(out));
            }
            let k = self.value()?;
            if !self.eat(b':') {
                return Err(self.err("expected `:`"));
            }
            out.push((k, self.value()?));
            if !self.eat(b',') {
                return if self.eat(b'}') { Ok(Py::Dict(out)) } else { Err(self.err("expected `,` or `}`")) };
            }
        }
    }
}

/// What a validated header says about the data that follows it.
struct Layout {
    shape: Vec<usize>,
    dtype: DType,
    big_endian: bool,
    fortran: bool,
    numel: usize,
    bytes: u64,
}

/// Parses and validates a header: a dict with `descr` (one of the supported
/// dtypes), `fortran_order` and `shape` (whose element count and byte size
/// must be addressable).
fn layout(header: &[u8]) -> Result<Layout, TensorError> {
    let mut p = HeaderParser { s: header, pos: 0, depth: 0 };
    let dict = p.value()?;
    p.ws();
    if p.pos != header.len() {
        return Err(p.err("trailing text"));
    }
    let Py::Dict(entries) = dict else {
        return Err(npy_err("the header is not a Python dict"));
    };
    let get = |key: &str| {
        entries
            .iter()
            .find(|(k, _)| matches!(k, Py::Str(s) if s == key))
            .map(|(_, v)| v)
            .ok_or_else(|| npy_err(format!("the header has no `{key}`")))
    };
    let ts: npyz::TypeStr = match get("descr")? {
        Py::Str(d) => d.parse().map_err(|e| npy_err(format!("unsupported npy dtype `{d}` ({e})")))?,
        _ => return Err(npy_err("unsupported npy dtype: structured arrays are not tensors")),
    };
    let dtype = match (ts.type_char(), ts.size_field()) {
        (npyz::TypeChar::Float, 2) => DType::F16,
        (npyz::TypeChar::Float, 4) => DType::F32,
        (npyz::TypeChar::Float, 8) => DType::F64,
        (npyz::TypeChar::Int, 4) => DType::I32,
        (npyz::TypeChar::Int, 8) => DType::I64,
        (npyz::TypeChar::Uint, 4) => DType::U32,
        (npyz::TypeChar::Bool, 1) => DType::Bool,
        _ => {
            return Err(npy_err(format!(
                "unsupported npy dtype `{ts}` (graft reads f16, f32, f64, i32, i64, u32, bool)"
            )))
        }
    };
    let fortran = match get("fortran_order")? {
        Py::Bool(b) => *b,
        _ => return Err(npy_err("the header's `fortran_order` is not True or False")),
    };
    let Py::Seq(dims) = get("shape")? else {
        return Err(npy_err("the header's `shape` is not a tuple"));
    };
    let mut written = Vec::with_capacity(dims.len());
    for d in dims {
        match d {
            Py::Int { negative: false, value: Some(v) } => written.push(*v),
            Py::Int { negative: false, value: None } => {
                return Err(npy_err("the header's shape has a dimension over 2^64"))
            }
            _ => return Err(npy_err("the header's shape holds something other than non-negative integers")),
        }
    }
    let too_big = || npy_err(format!("the header's shape {written:?} has more elements than this machine can address"));
    let mut shape = Vec::with_capacity(written.len());
    let mut numel: usize = 1;
    // Every dimension counted as at least 1: the strides of an empty array
    // with huge other dimensions must fit as well.
    let mut extent: usize = 1;
    for &d in &written {
        let d = usize::try_from(d).map_err(|_| too_big())?;
        shape.push(d);
        numel = numel.checked_mul(d).ok_or_else(too_big)?;
        extent = extent.checked_mul(d.max(1)).ok_or_else(too_big)?;
    }
    let bytes = extent
        .checked_mul(dtype.size_bytes())
        .filter(|&b| b <= isize::MAX as usize)
        .map(|_| numel * dtype.size_bytes())
        .ok_or_else(too_big)?;
    Ok(Layout {
        shape,
        dtype,
        big_endian: ts.endianness() == npyz::Endianness::Big,
        fortran,
        numel,
        bytes: bytes as u64,
    })
}

/// Reads an `.npy` stream whose total length, when known (a file's), lets
/// the data length be checked before anything is allocated.
fn read_npy_checked(mut reader: impl Read, total_len: Option<u64>) -> Result<Tensor, TensorError> {
    let (header, before) = read_prefix(&mut reader)?;
    let l = layout(&header)?;
    let known = match total_len {
        Some(total) => {
            let data = total.saturating_sub(before);
            if data != l.bytes {
                return Err(length_mismatch(&l, data));
            }
            true
        }
        None => false,
    };
    let storage = match l.dtype {
        DType::F16 => Storage::F16(read_data(&mut reader, &l, known)?),
        DType::F32 => Storage::F32(read_data(&mut reader, &l, known)?),
        DType::F64 => Storage::F64(read_data(&mut reader, &l, known)?),
        DType::I32 => Storage::I32(read_data(&mut reader, &l, known)?),
        DType::I64 => Storage::I64(read_data(&mut reader, &l, known)?),
        DType::U32 => Storage::U32(read_data(&mut reader, &l, known)?),
        DType::Bool => Storage::Bool(read_data(&mut reader, &l, known)?),
    };
    let t = Tensor::from_storage(l.shape.clone(), storage)?;
    if l.fortran && l.shape.len() > 1 {
        Ok(fortran_to_c(&t))
    } else {
        Ok(t)
    }
}

fn length_mismatch(l: &Layout, got: u64) -> TensorError {
    npy_err(format!(
        "the data holds {got} bytes but the header (shape {:?}, dtype {}) needs {}",
        l.shape, l.dtype, l.bytes
    ))
}

/// An element type as stored in an `.npy` file.
trait Raw: Element {
    const SIZE: usize;
    /// `None` for bytes that are not a value of the type (a bool other than 0 or 1).
    fn decode(b: &[u8], big_endian: bool) -> Option<Self>;
}

macro_rules! raw_num {
    ($($t:ty),*) => {$(
        impl Raw for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn decode(b: &[u8], big_endian: bool) -> Option<$t> {
                let a: [u8; std::mem::size_of::<$t>()] = b.try_into().ok()?;
                Some(if big_endian { <$t>::from_be_bytes(a) } else { <$t>::from_le_bytes(a) })
            }
        }
    )*};
}
raw_num!(half::f16, f32, f64, i32, i64, u32);

impl Raw for bool {
    const SIZE: usize = 1;
    fn decode(b: &[u8], _: bool) -> Option<bool> {
        match b {
            [0] => Some(false),
            [1] => Some(true),
            _ => None,
        }
    }
}

/// Reads exactly `l.numel` elements and checks that nothing follows them.
/// With `known` (the length was checked against the header) the vector is
/// reserved at once; otherwise it grows with the data actually read. Every
/// reservation is fallible.
fn read_data<T: Raw>(reader: &mut impl Read, l: &Layout, known: bool) -> Result<Vec<T>, TensorError> {
    const CHUNK: usize = 1 << 16;
    let oom = |n: usize| npy_err(format!("cannot allocate {} bytes for the array's data", n.saturating_mul(T::SIZE)));
    let mut out: Vec<T> = Vec::new();
    if known {
        out.try_reserve_exact(l.numel).map_err(|_| oom(l.numel))?;
    }
    let mut buf = vec![0u8; CHUNK * T::SIZE];
    let mut read_bytes: u64 = 0;
    while out.len() < l.numel {
        let want = (l.numel - out.len()).min(CHUNK) * T::SIZE;
        let got = fill(reader, &mut buf[..want])?;
        read_bytes += got as u64;
        if got < want {
            return Err(length_mismatch(l, read_bytes));
        }
        out.try_reserve(want / T::SIZE).map_err(|_| oom(out.len() + want / T::SIZE))?;
        for b in buf[..want].chunks_exact(T::SIZE) {
            out.push(T::decode(b, l.big_endian).ok_or_else(|| npy_err("a bool element is neither 0 nor 1"))?);
        }
    }
    let mut extra = [0u8; 1];
    if fill(reader, &mut extra)? > 0 {
        return Err(npy_err(format!(
            "the data holds more than the {} bytes the header (shape {:?}, dtype {}) needs",
            l.bytes, l.shape, l.dtype
        )));
    }
    Ok(out)
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
fn fill(reader: &mut impl Read, buf: &mut [u8]) -> Result<usize, TensorError> {
    let mut n = 0;
    while n < buf.len() {
        match reader.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err(e)),
        }
    }
    Ok(n)
}

/// Re-lays out data read in Fortran (column-major) order as row-major.
fn fortran_to_c(t: &Tensor) -> Tensor {
    let shape = t.shape().to_vec();
    let c_strides = strides_of(&shape);
    let mut f_strides = vec![1usize; shape.len()];
    for i in 1..shape.len() {
        f_strides[i] = f_strides[i - 1] * shape[i - 1];
    }
    let src_index = |i: usize| -> usize {
        let mut rem = i;
        let mut j = 0;
        for (cs, fs) in c_strides.iter().zip(&f_strides) {
            j += (rem / cs) * fs;
            rem %= cs;
        }
        j
    };
    fn permute<T: Element>(src: &[T], n: usize, f: impl Fn(usize) -> usize) -> Vec<T> {
        (0..n).map(|i| src[f(i)]).collect()
    }
    let n = t.numel();
    let data = match t.storage() {
        Storage::F16(v) => Storage::F16(permute(v, n, src_index)),
        Storage::F32(v) => Storage::F32(permute(v, n, src_index)),
        Storage::F64(v) => Storage::F64(permute(v, n, src_index)),
        Storage::I32(v) => Storage::I32(permute(v, n, src_index)),
        Storage::I64(v) => Storage::I64(permute(v, n, src_index)),
        Storage::U32(v) => Storage::U32(permute(v, n, src_index)),
        Storage::Bool(v) => Storage::Bool(permute(v, n, src_index)),
    };
    Tensor::from_storage(shape, data).expect("internal error: a permutation keeps the element count")
}

/// Writes one array as `.npy` bytes (little-endian, C order).
pub fn write_npy(writer: impl Write, t: &Tensor) -> Result<(), TensorError> {
    let shape: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
    fn go<T: Element + npyz::AutoSerialize>(w: impl Write, shape: &[u64], data: &[T]) -> Result<(), TensorError> {
        let mut out = npyz::WriteOptions::new().default_dtype().shape(shape).writer(w).begin_nd().map_err(io_err)?;
        out.extend(data.iter().copied()).map_err(io_err)?;
        out.finish().map_err(io_err)
    }
    match t.storage() {
        Storage::F16(v) => go(writer, &shape, v),
        Storage::F32(v) => go(writer, &shape, v),
        Storage::F64(v) => go(writer, &shape, v),
        Storage::I32(v) => go(writer, &shape, v),
        Storage::I64(v) => go(writer, &shape, v),
        Storage::U32(v) => go(writer, &shape, v),
        Storage::Bool(v) => go(writer, &shape, v),
    }
}

/// Reads a `.npy` file.
pub fn load_npy(path: impl AsRef<Path>) -> Result<Tensor, TensorError> {
    let path = path.as_ref();
    let f = std::fs::File::open(path).map_err(|e| TensorError::Npy(format!("{}: {e}", path.display())))?;
    let len = f.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
    read_npy_checked(std::io::BufReader::new(f), len)
}

/// Writes a `.npy` file.
pub fn save_npy(path: impl AsRef<Path>, t: &Tensor) -> Result<(), TensorError> {
    let path = path.as_ref();
    let f = std::fs::File::create(path).map_err(|e| TensorError::Npy(format!("{}: {e}", path.display())))?;
    let mut w = std::io::BufWriter::new(f);
    write_npy(&mut w, t)?;
    w.flush().map_err(io_err)
}

/// Writes named arrays into an `.npz` archive (uncompressed, like `np.savez`).
pub fn write_npz<W: Write + Seek>(writer: W, arrays: &[(String, Tensor)]) -> Result<(), TensorError> {
    let mut npz = npyz::npz::NpzWriter::new(writer);
    for (name, t) in arrays {
        let shape: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
        macro_rules! put {
            ($ty:ty, $v:expr) => {{
                let mut w = npz
                    .array::<$ty>(name, Default::default())
                    .map_err(io_err)?
                    .default_dtype()
                    .shape(&shape)
                    .begin_nd()
                    .map_err(io_err)?;
                w.extend($v.iter().copied()).map_err(io_err)?;
                w.finish().map_err(io_err)?;
            }};
        }
        match t.storage() {
            Storage::F16(v) => put!(half::f16, v),
            Storage::F32(v) => put!(f32, v),
            Storage::F64(v) => put!(f64, v),
            Storage::I32(v) => put!(i32, v),
            Storage::I64(v) => put!(i64, v),
            Storage::U32(v) => put!(u32, v),
            Storage::Bool(v) => put!(bool, v),
        }
    }
    npz.zip_writer().finish().map_err(io_err)?;
    Ok(())
}

/// Reads every array of an `.npz` archive, in archive order. Each member
/// goes through the same checks as a `.npy` file (its data streamed, so a
/// member whose header promises more than it holds is an error, not an
/// allocation of what it promises).
pub fn read_npz<R: Read + Seek>(reader: R) -> Result<Vec<(String, Tensor)>, TensorError> {
    let mut npz = npyz::npz::NpzArchive::new(reader).map_err(io_err)?;
    // Archive (central directory) order, which is the order `np.savez` wrote.
    let zip = npz.zip_archive();
    let mut out = Vec::new();
    for i in 0..zip.len() {
        let entry = zip.by_index(i).map_err(io_err)?;
        let Some(name) = npyz::npz::array_name_from_file_name(entry.name()).map(str::to_string) else {
            continue;
        };
        let t = read_npy_checked(entry, None).map_err(|e| match e {
            TensorError::Npy(m) => npy_err(format!("array `{name}`: {m}")),
            other => other,
        })?;
        out.push((name, t));
    }
    Ok(out)
}

/// Writes an `.npz` file.
pub fn save_npz(path: impl AsRef<Path>, arrays: &[(String, Tensor)]) -> Result<(), TensorError> {
    let path = path.as_ref();
    let f = std::fs::File::create(path).map_err(|e| TensorError::Npy(format!("{}: {e}", path.display())))?;
    write_npz(std::io::BufWriter::new(f), arrays)
}

/// Reads an `.npz` file.
pub fn load_npz(path: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>, TensorError> {
    let path = path.as_ref();
    let f = std::fs::File::open(path).map_err(|e| TensorError::Npy(format!("{}: {e}", path.display())))?;
    read_npz(std::io::BufReader::new(f))
}

/// What the `npy` fuzz target (`fuzz/`) runs: the bytes read as an `.npy`
/// file and as an `.npz` archive. Must return (with an error or a tensor)
/// on any input, never panic, abort or allocate what the header merely
/// claims. Not part of the API.
#[doc(hidden)]
pub fn fuzz_read(data: &[u8]) {
    if let Ok(t) = read_npy(data) {
        let _ = crate::format::format_tensor(&t);
    }
    let _ = read_npz(std::io::Cursor::new(data));
}

#[cfg(test)]
mod fuzz_regressions {
    /// Every input in `fuzz/regressions/npy/` (see `fuzz/README.md`).
    #[test]
    fn npy_regressions_replay() {
        crate::fuzzing::replay_regressions("npy", super::fuzz_read);
    }
}
