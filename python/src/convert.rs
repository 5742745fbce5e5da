//! NumPy arrays <-> graft tensors, and dtype names.

use graft::{DType, Tensor, TensorType};
use graft_core::tensor::Storage;
use numpy::{PyArray1, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

/// NumPy's name for a graft dtype.
pub(crate) fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F16 => "float16",
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::U32 => "uint32",
        DType::Bool => "bool",
    }
}

/// A graft dtype from NumPy's name (or graft's: `f32`, ...).
pub(crate) fn parse_dtype(name: &str) -> PyResult<DType> {
    Ok(match name {
        "float16" | "f16" => DType::F16,
        "float32" | "f32" => DType::F32,
        "float64" | "f64" => DType::F64,
        "int32" | "i32" => DType::I32,
        "int64" | "i64" => DType::I64,
        "uint32" | "u32" => DType::U32,
        "bool" => DType::Bool,
        other => {
            return Err(PyTypeError::new_err(format!(
                "graft has no dtype `{other}` (it has float16, float32, float64, int32, int64, uint32 and bool)"
            )))
        }
    })
}

/// A tensor type from `(shape, dtype name)`.
pub(crate) fn tensor_type(shape: Vec<usize>, dtype: &str) -> PyResult<TensorType> {
    Ok(TensorType::new(parse_dtype(dtype)?, shape))
}

fn collect<T: numpy::Element + Copy>(a: &Bound<'_, PyUntypedArray>) -> PyResult<Vec<T>> {
    let a = a.downcast::<PyArrayDyn<T>>()?.readonly();
    // `as_slice` also accepts Fortran order (memory order is then not
    // row-major), so only a C-contiguous array is copied as one slice.
    Ok(match a.as_slice() {
        Ok(s) if a.is_c_contiguous() => s.to_vec(),
        _ => a.as_array().iter().copied().collect(),
    })
}

/// Copies a NumPy array into a tensor. `what` names the argument for the
/// error when the dtype is not one graft has.
pub(crate) fn to_tensor(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Tensor> {
    let a = obj.downcast::<PyUntypedArray>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what}: expected a NumPy array, got {}",
            obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
        ))
    })?;
    let shape = a.shape().to_vec();
    let dt = a.dtype();
    let name: String = dt.str()?.to_string();
    let storage = match name.as_str() {
        "float16" => Storage::F16(collect::<graft_core::half::f16>(a)?),
        "float32" => Storage::F32(collect::<f32>(a)?),
        "float64" => Storage::F64(collect::<f64>(a)?),
        "int32" => Storage::I32(collect::<i32>(a)?),
        "int64" => Storage::I64(collect::<i64>(a)?),
        "uint32" => Storage::U32(collect::<u32>(a)?),
        "bool" => Storage::Bool(collect::<bool>(a)?),
        other => {
            return Err(PyTypeError::new_err(format!(
                "{what}: graft has no dtype {other} (it has float16, float32, float64, int32, int64, uint32 and bool)"
            )))
        }
    };
    Tensor::from_storage(shape, storage).map_err(|e| PyValueError::new_err(format!("{what}: {e}")))
}

/// Moves a tensor into a NumPy array (the buffer is handed over, not copied).
pub(crate) fn to_numpy(py: Python<'_>, t: Tensor) -> PyResult<PyObject> {
    let shape = t.shape().to_vec();
    fn shaped<T: numpy::Element>(py: Python<'_>, v: Vec<T>, shape: Vec<usize>) -> PyResult<PyObject> {
        Ok(PyArray1::from_vec(py, v).reshape(shape)?.into_any().unbind())
    }
    match t.into_storage() {
        Storage::F16(v) => shaped(py, v, shape),
        Storage::F32(v) => shaped(py, v, shape),
        Storage::F64(v) => shaped(py, v, shape),
        Storage::I32(v) => shaped(py, v, shape),
        Storage::I64(v) => shaped(py, v, shape),
        Storage::U32(v) => shaped(py, v, shape),
        Storage::Bool(v) => shaped(py, v, shape),
    }
}
