//! NumPy-compatible `.npy` / `.npz` input and output, through the `npyz`
//! crate (no hand-written header parser).
//!
//! Supported element types: `<f4 <f8 <i4 <i8 |b1` (and big-endian variants
//! on read). Fortran-ordered arrays are read and re-laid out row-major.
//! Any other dtype is an error naming it; nothing is silently cast.

use crate::dtype::DType;
use crate::tensor::{Element, Storage, Tensor, TensorError};
use crate::types::strides_of;
use npyz::WriterBuilder;
use std::io::{Read, Seek, Write};
use std::path::Path;

fn io_err(e: impl std::fmt::Display) -> TensorError {
    TensorError::Npy(e.to_string())
}

/// Reads one array from `.npy` bytes.
pub fn read_npy(reader: impl Read) -> Result<Tensor, TensorError> {
    from_npy_file(npyz::NpyFile::new(reader).map_err(io_err)?)
}

fn from_npy_file<R: Read>(file: npyz::NpyFile<R>) -> Result<Tensor, TensorError> {
    let shape: Vec<usize> = file.shape().iter().map(|&d| d as usize).collect();
    let fortran = file.order() == npyz::Order::Fortran;
    let dtype = match file.dtype() {
        npyz::DType::Plain(ts) => match (ts.type_char(), ts.size_field()) {
            (npyz::TypeChar::Float, 4) => DType::F32,
            (npyz::TypeChar::Float, 8) => DType::F64,
            (npyz::TypeChar::Int, 4) => DType::I32,
            (npyz::TypeChar::Int, 8) => DType::I64,
            (npyz::TypeChar::Bool, 1) => DType::Bool,
            _ => {
                return Err(TensorError::Npy(format!(
                    "unsupported npy dtype `{ts}` (graft reads f32, f64, i32, i64, bool)"
                )))
            }
        },
        other => {
            return Err(TensorError::Npy(format!(
                "unsupported npy dtype {other:?} (structured arrays are not tensors)"
            )))
        }
    };
    let storage = match dtype {
        DType::F32 => Storage::F32(file.into_vec::<f32>().map_err(io_err)?),
        DType::F64 => Storage::F64(file.into_vec::<f64>().map_err(io_err)?),
        DType::I32 => Storage::I32(file.into_vec::<i32>().map_err(io_err)?),
        DType::I64 => Storage::I64(file.into_vec::<i64>().map_err(io_err)?),
        DType::Bool => Storage::Bool(file.into_vec::<bool>().map_err(io_err)?),
    };
    let t = Tensor::from_storage(shape.clone(), storage)?;
    if fortran && shape.len() > 1 {
        Ok(fortran_to_c(&t))
    } else {
        Ok(t)
    }
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
        Storage::F32(v) => Storage::F32(permute(v, n, src_index)),
        Storage::F64(v) => Storage::F64(permute(v, n, src_index)),
        Storage::I32(v) => Storage::I32(permute(v, n, src_index)),
        Storage::I64(v) => Storage::I64(permute(v, n, src_index)),
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
        Storage::F32(v) => go(writer, &shape, v),
        Storage::F64(v) => go(writer, &shape, v),
        Storage::I32(v) => go(writer, &shape, v),
        Storage::I64(v) => go(writer, &shape, v),
        Storage::Bool(v) => go(writer, &shape, v),
    }
}

/// Reads a `.npy` file.
pub fn load_npy(path: impl AsRef<Path>) -> Result<Tensor, TensorError> {
    let path = path.as_ref();
    let f = std::fs::File::open(path).map_err(|e| TensorError::Npy(format!("{}: {e}", path.display())))?;
    read_npy(std::io::BufReader::new(f))
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
            Storage::F32(v) => put!(f32, v),
            Storage::F64(v) => put!(f64, v),
            Storage::I32(v) => put!(i32, v),
            Storage::I64(v) => put!(i64, v),
            Storage::Bool(v) => put!(bool, v),
        }
    }
    npz.zip_writer().finish().map_err(io_err)?;
    Ok(())
}

/// Reads every array of an `.npz` archive, in archive order.
pub fn read_npz<R: Read + Seek>(reader: R) -> Result<Vec<(String, Tensor)>, TensorError> {
    let mut npz = npyz::npz::NpzArchive::new(reader).map_err(io_err)?;
    // Archive (central directory) order, which is the order `np.savez` wrote.
    let zip = npz.zip_archive();
    let mut names = Vec::with_capacity(zip.len());
    for i in 0..zip.len() {
        let entry = zip.by_index(i).map_err(io_err)?;
        if let Some(name) = npyz::npz::array_name_from_file_name(entry.name()) {
            names.push(name.to_string());
        }
    }
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let file =
            npz.by_name(&name).map_err(io_err)?.ok_or_else(|| TensorError::Npy(format!("missing array {name}")))?;
        out.push((name, from_npy_file(file)?));
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
