//! NumPy-style printing and `.npy`/`.npz` round trips.

use graft_core::npy::{read_npy, read_npz, write_npy, write_npz};
use graft_core::{DType, Tensor, TensorType};

#[test]
fn prints_like_numpy() {
    let t = Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.5, 3.0, -4.0, 0.125, 6.0]).unwrap();
    assert_eq!(t.to_string(), "[[ 1.     2.5    3.   ]\n [-4.     0.125  6.   ]]");
    assert_eq!(Tensor::vec1(&[1.0f64, 2.0, 3.0]).to_string(), "[1. 2. 3.]");
    assert_eq!(Tensor::scalar(2.5f32).to_string(), "2.5");
    assert_eq!(Tensor::vec1(&[1i32, -20, 300]).to_string(), "[  1 -20 300]");
    assert_eq!(Tensor::vec1(&[true, false]).to_string(), "[ True False]");
    assert_eq!(Tensor::vec1(&[1e-5f64, 1.0]).to_string(), "[1.e-05 1.e+00]");
    assert_eq!(Tensor::vec1(&[1e-5f64, 2.5]).to_string(), "[1.0e-05 2.5e+00]");
    assert_eq!(Tensor::vec1(&[0.1f64, 0.25, 1e9]).to_string(), "[1.0e-01 2.5e-01 1.0e+09]");
    assert_eq!(Tensor::vec1(&[1.0f32 / 3.0, 2.0]).to_string(), "[0.33333334 2.        ]");
    let big = Tensor::from_fn(&TensorType::new(DType::I64, vec![2000]), |i| i as f64);
    assert_eq!(big.to_string(), "[   0    1    2 ... 1997 1998 1999]");
    let cube = Tensor::from_fn(&TensorType::new(DType::I32, vec![2, 2, 2]), |i| i as f64);
    assert_eq!(cube.to_string(), "[[[0 1]\n  [2 3]]\n\n [[4 5]\n  [6 7]]]");
}

#[test]
fn npy_round_trips_every_dtype() {
    let tensors = vec![
        Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap(),
        Tensor::from_vec(vec![3], vec![1.5f64, -2.0, 1e300]).unwrap(),
        Tensor::from_vec(vec![2, 1], vec![7i32, -8]).unwrap(),
        Tensor::from_vec(vec![1, 2, 2], vec![1i64 << 40, 2, 3, -4]).unwrap(),
        Tensor::from_vec(vec![2], vec![true, false]).unwrap(),
        Tensor::scalar(3.25f64),
        Tensor::from_vec(vec![0, 4], Vec::<f32>::new()).unwrap(),
    ];
    for t in &tensors {
        let mut bytes = Vec::new();
        write_npy(&mut bytes, t).unwrap();
        assert_eq!(&read_npy(&bytes[..]).unwrap(), t);
    }
    let named: Vec<(String, Tensor)> = tensors.iter().enumerate().map(|(i, t)| (i.to_string(), t.clone())).collect();
    let mut buf = std::io::Cursor::new(Vec::new());
    write_npz(&mut buf, &named).unwrap();
    buf.set_position(0);
    let back = read_npz(buf).unwrap();
    assert_eq!(back, named);
}

#[test]
fn npy_rejects_unsupported_dtypes_with_a_message() {
    // A valid .npy header for dtype <u2 (uint16), shape (1,).
    let header = "{'descr': '<u2', 'fortran_order': False, 'shape': (1,), }";
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    let pad = 64 - (10 + header.len() + 1) % 64;
    let hlen = header.len() + pad + 1;
    bytes.extend_from_slice(&(hlen as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend(std::iter::repeat_n(b' ', pad));
    bytes.push(b'\n');
    bytes.extend_from_slice(&[1, 0]);
    let err = read_npy(&bytes[..]).unwrap_err().to_string();
    assert!(err.contains("unsupported npy dtype"), "{err}");
    assert!(read_npy(&b"not an npy file"[..]).is_err());
}

#[test]
fn reads_fortran_order() {
    let header = "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }";
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    let pad = 64 - (10 + header.len() + 1) % 64;
    bytes.extend_from_slice(&((header.len() + pad + 1) as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend(std::iter::repeat_n(b' ', pad));
    bytes.push(b'\n');
    // Column-major data of [[1,2,3],[4,5,6]].
    for v in [1i32, 4, 2, 5, 3, 6] {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    let t = read_npy(&bytes[..]).unwrap();
    assert_eq!(t.to_vec::<i32>().unwrap(), vec![1, 2, 3, 4, 5, 6]);
}
