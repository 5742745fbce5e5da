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

// ---------------------------------------------------------------------------
// Hostile .npy/.npz files: every one is an error with a message, found with
// work bounded by the file's own size.

/// A version-1.0 `.npy` file: magic, header padded to 64 bytes, then `data`.
fn npy_bytes(header: &str, data: &[u8]) -> Vec<u8> {
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    let pad = (64 - (10 + header.len() + 1) % 64) % 64;
    bytes.extend_from_slice(&((header.len() + pad + 1) as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend(std::iter::repeat_n(b' ', pad));
    bytes.push(b'\n');
    bytes.extend_from_slice(data);
    bytes
}

fn f8_header(shape: &str) -> String {
    format!("{{'descr': '<f8', 'fortran_order': False, 'shape': {shape}, }}")
}

/// The error of reading `bytes` both as a stream and as a file (whose length
/// is checked before the data is read).
fn errors(bytes: &[u8]) -> (String, String) {
    let stream = read_npy(bytes).expect_err("the stream is rejected").to_string();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.npy");
    std::fs::write(&path, bytes).unwrap();
    let file = graft_core::npy::load_npy(&path).expect_err("the file is rejected").to_string();
    (stream, file)
}

#[test]
fn npy_shape_whose_element_count_overflows_is_an_error() {
    // 2^32 * 2^32 wraps to 0 in u64: it must not read as an empty tensor.
    let bytes = npy_bytes(&f8_header("(4294967296, 4294967296)"), &[]);
    let (s, f) = errors(&bytes);
    for e in [s, f] {
        assert!(e.contains("more elements than this machine can address"), "{e}");
        assert!(e.contains("[4294967296, 4294967296]"), "{e}");
    }
    // The byte count overflowing (2^61 f64 elements) is caught as well.
    let (s, _) = errors(&npy_bytes(&f8_header("(2305843009213693952,)"), &[]));
    assert!(s.contains("more elements than this machine can address"), "{s}");
    // A dimension over u64 is a header error.
    assert!(read_npy(&npy_bytes(&f8_header("(18446744073709551616,)"), &[])[..]).is_err());
}

#[test]
fn npy_empty_array_with_absurd_other_dimensions_is_an_error() {
    let (s, _) = errors(&npy_bytes(&f8_header("(0, 4294967296, 4294967296)"), &[]));
    assert!(s.contains("more elements than this machine can address"), "{s}");
    // A legal empty array still reads.
    let t = read_npy(&npy_bytes(&f8_header("(0, 5)"), &[])[..]).unwrap();
    assert_eq!(t.shape(), &[0, 5]);
}

#[test]
fn npy_data_shorter_or_longer_than_the_header_is_an_error() {
    // A terabyte promised, nothing there: an error, not an allocation.
    let (s, f) = errors(&npy_bytes(&f8_header("(1048576, 131072)"), &[]));
    for e in [&s, &f] {
        assert!(e.contains("the data holds 0 bytes") && e.contains("needs 1099511627776"), "{e}");
    }
    // One byte short of three f64s.
    let (s, f) = errors(&npy_bytes(&f8_header("(3,)"), &[0u8; 23]));
    assert!(s.contains("the data holds 23 bytes") && s.contains("needs 24"), "{s}");
    assert!(f.contains("the data holds 23 bytes") && f.contains("needs 24"), "{f}");
    // One byte too many.
    let (s, f) = errors(&npy_bytes(&f8_header("(3,)"), &[0u8; 25]));
    assert!(s.contains("more than the 24 bytes"), "{s}");
    assert!(f.contains("the data holds 25 bytes") && f.contains("needs 24"), "{f}");
    // Exactly right reads.
    let mut data = Vec::new();
    for v in [1.5f64, -2.0, 4.0] {
        data.extend_from_slice(&v.to_le_bytes());
    }
    let t = read_npy(&npy_bytes(&f8_header("(3,)"), &data)[..]).unwrap();
    assert_eq!(t.to_vec::<f64>().unwrap(), vec![1.5, -2.0, 4.0]);
}

#[test]
fn npy_deeply_nested_header_fails_fast() {
    // 22 nested brackets: npyz's parser alone takes seconds on this.
    let nest = format!("{}1{}", "(".repeat(22), ")".repeat(22));
    let bytes = npy_bytes(&f8_header(&nest), &[]);
    assert!(bytes.len() <= 192, "{}", bytes.len());
    let t0 = std::time::Instant::now();
    let (s, f) = errors(&bytes);
    assert!(t0.elapsed() < std::time::Duration::from_secs(1), "{:?}", t0.elapsed());
    for e in [s, f] {
        assert!(e.contains("nests brackets more than 8 deep"), "{e}");
    }
    // Brackets inside quoted strings do not count.
    let quoted = format!("{{'descr': '<f8', 'fortran_order': False, 'shape': (1,), 'x': '{}'}}", "[".repeat(40));
    let t = read_npy(&npy_bytes(&quoted, &1.0f64.to_le_bytes())[..]).unwrap();
    assert_eq!(t.to_vec::<f64>().unwrap(), vec![1.0]);
}

#[test]
fn npy_bad_preambles_are_errors() {
    // Version 2.0 with a 4 GiB header length and nothing after it.
    let mut bytes = b"\x93NUMPY\x02\x00".to_vec();
    bytes.extend_from_slice(&u32::MAX.to_le_bytes());
    let (s, _) = errors(&bytes);
    assert!(s.contains("the header claims 4294967295 bytes; at most 65536"), "{s}");
    // A header shorter than its length says.
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&200u16.to_le_bytes());
    bytes.extend_from_slice(b"{'descr'");
    let (s, _) = errors(&bytes);
    assert!(s.contains("the file ends inside its header"), "{s}");
    // Unknown version, missing magic, empty file, garbage header.
    assert!(read_npy(&b"\x93NUMPY\x09\x00\x10\x00"[..]).unwrap_err().to_string().contains("version 9.0"));
    assert!(read_npy(&b"PK\x03\x04 not npy"[..]).unwrap_err().to_string().contains("magic"));
    assert!(read_npy(&b""[..]).unwrap_err().to_string().contains("not an .npy file"));
    assert!(read_npy(&npy_bytes("{'descr': '<f8', 'shape': (1,) ", &[0; 8])[..]).is_err());
    assert!(read_npy(&npy_bytes("{'descr': '<f8', 'fortran_order': False}", &[0; 8])[..]).is_err());
}

#[test]
fn npy_bool_bytes_other_than_0_and_1_are_an_error() {
    let h = "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }";
    assert_eq!(read_npy(&npy_bytes(h, &[1, 0, 1])[..]).unwrap().to_vec::<bool>().unwrap(), vec![true, false, true]);
    let e = read_npy(&npy_bytes(h, &[1, 7, 1])[..]).unwrap_err().to_string();
    assert!(e.contains("neither 0 nor 1"), "{e}");
}

#[test]
fn npy_big_endian_data_reads() {
    let h = "{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }";
    let mut data = 7i32.to_be_bytes().to_vec();
    data.extend_from_slice(&(-3i32).to_be_bytes());
    assert_eq!(read_npy(&npy_bytes(h, &data)[..]).unwrap().to_vec::<i32>().unwrap(), vec![7, -3]);
}

/// CRC-32 (IEEE), for the stored zip archives below.
fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0xEDB8_8320 } else { c >> 1 };
        }
    }
    !c
}

/// A zip archive with uncompressed ("stored") members.
fn stored_zip(members: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in members {
        let offset = out.len() as u32;
        let (crc, len, nlen) = (crc32(data), data.len() as u32, name.len() as u16);
        let mut common = Vec::new();
        common.extend_from_slice(&20u16.to_le_bytes()); // version needed
        common.extend_from_slice(&0u16.to_le_bytes()); // flags
        common.extend_from_slice(&0u16.to_le_bytes()); // method: stored
        common.extend_from_slice(&0u32.to_le_bytes()); // time, date
        common.extend_from_slice(&crc.to_le_bytes());
        common.extend_from_slice(&len.to_le_bytes());
        common.extend_from_slice(&len.to_le_bytes());
        common.extend_from_slice(&nlen.to_le_bytes());
        common.extend_from_slice(&0u16.to_le_bytes()); // extra length
        out.extend_from_slice(b"PK\x03\x04");
        out.extend_from_slice(&common);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);
        central.extend_from_slice(b"PK\x01\x02");
        central.extend_from_slice(&20u16.to_le_bytes()); // version made by
        central.extend_from_slice(&common);
        central.extend_from_slice(&[0u8; 6]); // comment length, disk, internal attrs
        central.extend_from_slice(&0u32.to_le_bytes()); // external attrs
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let (cd_offset, cd_len) = (out.len() as u32, central.len() as u32);
    out.extend_from_slice(&central);
    out.extend_from_slice(b"PK\x05\x06");
    out.extend_from_slice(&[0u8; 4]); // disk numbers
    out.extend_from_slice(&(members.len() as u16).to_le_bytes());
    out.extend_from_slice(&(members.len() as u16).to_le_bytes());
    out.extend_from_slice(&cd_len.to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

#[test]
fn npz_members_get_the_npy_checks_and_are_named() {
    let good = npy_bytes(&f8_header("(1,)"), &2.5f64.to_le_bytes());
    let ok = read_npz(std::io::Cursor::new(stored_zip(&[("a.npy", good.clone())]))).unwrap();
    assert_eq!(ok.len(), 1);
    assert_eq!(ok[0].0, "a");
    assert_eq!(ok[0].1.to_vec::<f64>().unwrap(), vec![2.5]);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (npy_bytes(&f8_header("(4294967296, 4294967296)"), &[]), "more elements than this machine can address"),
        (npy_bytes(&f8_header("(1048576, 131072)"), &[]), "the data holds 0 bytes"),
        (npy_bytes(&f8_header(&format!("{}1{}", "[".repeat(22), "]".repeat(22))), &[]), "nests brackets"),
        (b"garbage".to_vec(), "not an .npy file"),
    ];
    for (bad, want) in cases {
        let zip = stored_zip(&[("a.npy", good.clone()), ("b.npy", bad)]);
        let e = read_npz(std::io::Cursor::new(zip)).unwrap_err().to_string();
        assert!(e.contains("array `b`") && e.contains(want), "{want}: {e}");
    }
    assert!(read_npz(std::io::Cursor::new(b"not a zip".to_vec())).is_err());
}

#[test]
fn large_i64_values_print_exactly() {
    // Through f64 these would print as ...992 and -9223372036854775808.
    let t = Tensor::vec1(&[9_007_199_254_740_993i64, -9_223_372_036_854_775_807, i64::MAX]);
    assert_eq!(t.to_string(), "[    9007199254740993 -9223372036854775807  9223372036854775807]");
    assert_eq!(Tensor::scalar(i32::MIN).to_string(), "-2147483648");
}
