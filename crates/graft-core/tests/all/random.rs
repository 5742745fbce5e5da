//! Tests of the Threefry-2x32 random primitives: the Random123 known-answer
//! vectors, values produced by JAX (0.10, `jax_threefry_partitionable=True`)
//! for the same keys, position-only dependence (thread count, shape),
//! statistical sanity, and the shape-rule errors.

use graft_core::ops::random::threefry2x32;
use graft_core::{Builder, DType, Executable, IrError, Tensor, TensorType};

fn key(k0: u32, k1: u32) -> Tensor {
    Tensor::vec1(&[k0 as i32, k1 as i32])
}

fn key_type() -> TensorType {
    TensorType::new(DType::I32, vec![2])
}

fn run1(
    key: &Tensor,
    emit: impl FnOnce(&mut Builder, graft_core::Value) -> Result<graft_core::Value, IrError>,
) -> Tensor {
    let mut b = Builder::new("f");
    let k = b.param(key.ty());
    let y = emit(&mut b, k).unwrap();
    let f = b.finish(&[y]).unwrap();
    Executable::new(f).unwrap().run(&[key]).unwrap().remove(0)
}

fn split(k: &Tensor, n: usize) -> Vec<u32> {
    let t = run1(k, |b, k| b.random_split(k, n));
    assert_eq!(t.shape(), &[n, 2]);
    t.to_vec::<i32>().unwrap().into_iter().map(|x| x as u32).collect()
}

fn bits(k: &Tensor, shape: &[usize]) -> Vec<u32> {
    let t = run1(k, |b, k| b.random_bits(k, shape));
    assert_eq!(t.shape(), shape);
    assert_eq!(t.dtype(), DType::I32);
    t.to_vec::<i32>().unwrap().into_iter().map(|x| x as u32).collect()
}

fn uniform(k: &Tensor, shape: &[usize], dtype: DType) -> Tensor {
    let t = run1(k, |b, k| b.random_uniform(k, shape, dtype));
    assert_eq!(t.ty(), TensorType::new(dtype, shape.to_vec()));
    t
}

/// Random123's kat_vectors for threefry2x32_20: (counter, key, result).
#[test]
fn threefry_matches_random123_known_answers() {
    let kat: [([u32; 2], [u32; 2], [u32; 2]); 3] = [
        ([0, 0], [0, 0], [0x6b20_0159, 0x99ba_4efe]),
        ([0xffff_ffff, 0xffff_ffff], [0xffff_ffff, 0xffff_ffff], [0x1cb9_96fc, 0xbb00_2be7]),
        ([0x243f_6a88, 0x85a3_08d3], [0x1319_8a2e, 0x0370_7344], [0xc492_3a9c, 0x483d_f7a0]),
    ];
    for (ctr, k, expected) in kat {
        assert_eq!(threefry2x32(k, ctr), expected, "counter {ctr:08x?} key {k:08x?}");
    }
}

/// JAX's `threefry_2x32((0, 1337), arange(20))` hashes the counter pairs (n, n + 10).
#[test]
fn threefry_matches_jax_hash_values() {
    let jax: [(u32, u32); 10] = [
        (2221762175, 3544324138),
        (1752107825, 1436466838),
        (653745012, 2169858556),
        (1967534793, 2570072943),
        (1395205442, 2387150698),
        (3840423848, 3678370550),
        (2159346757, 2911697663),
        (603508235, 403244401),
        (3319473678, 2560861638),
        (3363866483, 1692360114),
    ];
    for (n, (a, b)) in jax.into_iter().enumerate() {
        assert_eq!(threefry2x32([0, 1337], [n as u32, n as u32 + 10]), [a, b], "counter ({n}, {})", n + 10);
    }
}

#[test]
fn primitives_use_the_position_as_counter() {
    // Child 0 of key (0, 0) is the hash of counter (0, 0): the first known answer.
    assert_eq!(split(&key(0, 0), 1), vec![0x6b20_0159, 0x99ba_4efe]);
    assert_eq!(bits(&key(0, 0), &[1]), vec![0x6b20_0159 ^ 0x99ba_4efe]);
    // Every element is threefry(key, (hi(i), lo(i))).
    let k = [0x1319_8a2e, 0x0370_7344];
    let got = split(&key(k[0], k[1]), 5);
    let b = bits(&key(k[0], k[1]), &[5]);
    for i in 0..5u32 {
        let [y0, y1] = threefry2x32(k, [0, i]);
        assert_eq!(&got[2 * i as usize..2 * i as usize + 2], &[y0, y1]);
        assert_eq!(b[i as usize], y0 ^ y1);
    }
}

/// Values printed by JAX 0.10.2 (partitionable Threefry) for `PRNGKey(1337)`.
#[test]
fn matches_jax_partitionable_threefry() {
    let k = key(0, 1337);
    assert_eq!(split(&k, 3), vec![96694167, 2019547449, 1083138232, 4245396309, 823899371, 3873218184]);
    assert_eq!(bits(&k, &[2, 3]), vec![2107422382, 3179609069, 3620153955, 3220540671, 1993702520, 1972190958]);
    let u32s = uniform(&k, &[4], DType::F32).to_vec::<f32>().unwrap();
    // Bit patterns of JAX's 0x1.f672d8p-2, 0x1.7b09f4p-1, 0x1.af8e54p-1, 0x1.7feb18p-1.
    let jax32 = [0x3efb396cu32, 0x3f3d84fa, 0x3f57c72a, 0x3f3ff58c].map(f32::from_bits);
    assert_eq!(u32s, jax32);
    let u64s = uniform(&k, &[4], DType::F64).to_vec::<f64>().unwrap();
    // Bit patterns of 0x1.70dbe5de17f40p-6, 0x1.023d82e3f42e4p-2, 0x1.88dda75f36e48p-3, 0x1.c34a9f0b3c9c8p-2.
    let jax64 = [0x3f970dbe5de17f40u64, 0x3fd023d82e3f42e4, 0x3fc88dda75f36e48, 0x3fdc34a9f0b3c9c8].map(f64::from_bits);
    assert_eq!(u64s, jax64);
    assert_eq!(split(&key(0x1319_8a2e, 0x0370_7344), 2), vec![1095259177, 3512222810, 3520574224, 438507793]);
}

#[test]
fn results_depend_only_on_position_not_shape() {
    let k = key(7, 42);
    let flat = bits(&k, &[12]);
    assert_eq!(bits(&k, &[3, 4]), flat);
    assert_eq!(bits(&k, &[2, 3, 2]), flat);
    assert_eq!(bits(&k, &[5]), flat[..5].to_vec());
    let u = uniform(&k, &[12], DType::F64).to_vec::<f64>().unwrap();
    assert_eq!(uniform(&k, &[4, 3], DType::F64).to_vec::<f64>().unwrap(), u);
    assert_eq!(split(&k, 6)[..6], split(&k, 3)[..]);
}

#[test]
fn rank0_and_empty_shapes() {
    let k = key(1, 2);
    let s = bits(&k, &[]);
    assert_eq!(s, bits(&k, &[1]));
    assert!(bits(&k, &[0, 3]).is_empty());
    assert!(split(&k, 0).is_empty());
    let u = uniform(&k, &[], DType::F32);
    assert_eq!(u.shape(), &[] as &[usize]);
    assert!(uniform(&k, &[4, 0], DType::F64).to_vec::<f64>().unwrap().is_empty());
}

#[test]
fn thread_count_does_not_change_results() {
    let n = 200_003; // several parallel chunks plus a ragged tail
    let k = key(0xdead_beef, 0x0123_4567);
    let run_all = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            (
                bits(&k, &[n]),
                split(&k, n / 2),
                uniform(&k, &[n], DType::F32).to_vec::<f32>().unwrap(),
                uniform(&k, &[n], DType::F64).to_vec::<f64>().unwrap(),
            )
        })
    };
    let one = run_all(1);
    let two = run_all(2);
    assert!(one == two, "results differ between 1 and 2 threads");
    // And they are the per-position hash everywhere, tail included.
    let kw = [0xdead_beef, 0x0123_4567];
    for i in [0, 1, 8191, 8192, 100_000, n - 1] {
        let [y0, y1] = threefry2x32(kw, [0, i as u32]);
        assert_eq!(one.0[i], y0 ^ y1);
    }
    for i in [0, 4095, 4096, n / 2 - 1] {
        let [y0, y1] = threefry2x32(kw, [0, i as u32]);
        assert_eq!(&one.1[2 * i..2 * i + 2], &[y0, y1]);
    }
}

#[test]
fn uniform_statistics() {
    let n = 100_000;
    for (dtype, seed) in [(DType::F32, 3u32), (DType::F64, 4)] {
        let u = uniform(&key(0, seed), &[n], dtype).to_f64_vec();
        let grid = if dtype == DType::F32 { 2f64.powi(23) } else { 2f64.powi(52) };
        for &x in &u {
            assert!((0.0..1.0).contains(&x), "{x} outside [0, 1)");
            assert_eq!((x * grid).fract(), 0.0, "{x} is not on the 2^-mantissa grid");
        }
        let mean = u.iter().sum::<f64>() / n as f64;
        let var = u.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        // Standard errors: mean 0.00091, variance 0.00024; allow ~5 sigma.
        assert!((mean - 0.5).abs() < 0.0046, "{dtype}: mean {mean}");
        assert!((var - 1.0 / 12.0).abs() < 0.0012, "{dtype}: variance {var}");
        // Ten equal buckets, each within 5 sigma of n/10 (sigma = 94.9).
        let mut buckets = [0usize; 10];
        for &x in &u {
            buckets[(x * 10.0) as usize] += 1;
        }
        for c in buckets {
            assert!((c as f64 - 10_000.0).abs() < 475.0, "{dtype}: buckets {buckets:?}");
        }
    }
}

#[test]
fn every_bit_is_fair() {
    let n = 100_000;
    let b = bits(&key(9, 9), &[n]);
    for bit in 0..32 {
        let ones = b.iter().filter(|&&x| x >> bit & 1 == 1).count() as f64 / n as f64;
        // sigma = 0.00158
        assert!((ones - 0.5).abs() < 0.008, "bit {bit}: frequency {ones}");
    }
}

#[test]
fn split_children_are_distinct_and_independent() {
    let parent = [5u32, 6];
    let kids = split(&key(parent[0], parent[1]), 64);
    let mut pairs: Vec<(u32, u32)> = kids.chunks(2).map(|c| (c[0], c[1])).collect();
    assert!(!pairs.contains(&(parent[0], parent[1])));
    pairs.sort();
    pairs.dedup();
    assert_eq!(pairs.len(), 64, "split children repeat");
    // Children give different streams, and no child reproduces the parent's.
    let parent_stream = bits(&key(parent[0], parent[1]), &[8]);
    let streams: Vec<Vec<u32>> = pairs.iter().map(|&(a, b)| bits(&key(a, b), &[8])).collect();
    for (i, s) in streams.iter().enumerate() {
        assert_ne!(s, &parent_stream);
        for t in &streams[i + 1..] {
            assert_ne!(s, t);
        }
    }
    // Splitting a child again gives yet other keys.
    let grandkids = split(&key(pairs[0].0, pairs[0].1), 2);
    assert!(!kids.contains(&grandkids[0]) || !kids.contains(&grandkids[1]));
}

fn expect_type_error(e: IrError, prim: &str) -> String {
    let IrError::Type(te) = &e else { panic!("expected a type error, got {e:?}") };
    assert_eq!(te.prim, prim);
    te.expected.clone()
}

#[test]
fn shape_errors_are_structured() {
    let mut b = Builder::new("f");
    let fkey = b.param(TensorType::new(DType::F32, vec![2]));
    let long = b.param(TensorType::new(DType::I32, vec![3]));
    let good = b.param(key_type());
    let msg = expect_type_error(b.random_split(fkey, 2).unwrap_err(), "random_split[n=2]");
    assert!(msg.contains("i32[2]"), "{msg}");
    expect_type_error(b.random_bits(long, &[3]).unwrap_err(), "random_bits[shape=(3)]");
    expect_type_error(b.random_uniform(fkey, &[3], DType::F32).unwrap_err(), "random_uniform[shape=(3), dtype=f32]");
    let msg = expect_type_error(
        b.random_uniform(good, &[2], DType::I32).unwrap_err(),
        "random_uniform[shape=(2), dtype=i32]",
    );
    assert!(msg.contains("floating-point"), "{msg}");
    let e = b.emit(graft_core::ops::random::RandomBits { shape: vec![2] }, &[good, good]).unwrap_err();
    expect_type_error(e, "random_bits[shape=(2)]");
    let e = b.emit(graft_core::ops::random::RandomSplit { n: 2 }, &[]).unwrap_err();
    expect_type_error(e, "random_split[n=2]");
}

#[test]
fn printed_form() {
    let mut b = Builder::new("rng");
    let k = b.param(key_type());
    let ks = b.random_split(k, 2).unwrap();
    let u = b.random_uniform(k, &[2, 3], DType::F64).unwrap();
    let r = b.random_bits(k, &[4]).unwrap();
    let f = b.finish(&[ks, u, r]).unwrap();
    assert_eq!(
        f.to_string(),
        "func @rng(%0: i32[2]) -> (i32[2,2], f64[2,3], i32[4]) {\n  \
         %1 = random_split[n=2] %0 : i32[2,2]\n  \
         %2 = random_uniform[shape=(2,3), dtype=f64] %0 : f64[2,3]\n  \
         %3 = random_bits[shape=(4)] %0 : i32[4]\n  \
         return %1, %2, %3\n}\n"
    );
}

#[test]
fn key_batched_keys_give_each_key_its_own_stream() {
    let keys = Tensor::from_vec(vec![3usize, 2], vec![0i32, 42, 7, -3, 123456, 9]).unwrap();
    let mut b = Builder::new("f");
    let k = b.param(TensorType::new(DType::I32, vec![3, 2]));
    let bits = b.random_bits(k, &[4, 5]).unwrap();
    let u = b.random_uniform(k, &[7], DType::F64).unwrap();
    let s = b.random_split(k, 2).unwrap();
    let f = b.finish(&[bits, u, s]).unwrap();
    assert_eq!(f.output_types()[0], TensorType::new(DType::I32, vec![3, 4, 5]));
    let out = graft_core::exec::run_func(f, &[&keys]).unwrap();
    for i in 0..3 {
        let mut b = Builder::new("g");
        let k = b.param(key_type());
        let bits = b.random_bits(k, &[4, 5]).unwrap();
        let u = b.random_uniform(k, &[7], DType::F64).unwrap();
        let s = b.random_split(k, 2).unwrap();
        let g = b.finish(&[bits, u, s]).unwrap();
        let key = Tensor::vec1(&keys.to_vec::<i32>().unwrap()[2 * i..2 * i + 2]);
        let want = graft_core::exec::run_func(g, &[&key]).unwrap();
        for (o, w) in out.iter().zip(&want) {
            let n = w.numel();
            assert_eq!(&o.to_f64_vec()[i * n..(i + 1) * n], &w.to_f64_vec()[..], "key {i}");
        }
    }
}

/// `fold_in(key, data)` against `jax.random.fold_in` (JAX 0.10.2, recorded
/// with `jax.random.key_data(jax.random.fold_in(jax.random.PRNGKey(seed), d))`
/// viewed as int32).
#[test]
fn fold_in_matches_jax() {
    let jax: [(u32, i32, [i32; 2]); 7] = [
        (0, 0, [1797259609, -1715843330]),
        (0, 1, [928981903, -841280227]),
        (42, 7, [-1747954385, 1371500959]),
        (42, 123456, [793847391, 18989694]),
        (1, -1, [1173147676, -268657475]),        // data 4294967295
        (7, i32::MIN, [-1450435635, -698391940]), // data 2^31
        (42, -1, [-1896430451, -403990582]),      // jnp.int32(-1)
    ];
    for (seed, d, want) in jax {
        let mut b = Builder::new("f");
        let k = b.param(key_type());
        let dv = b.param(TensorType::new(DType::I32, vec![]));
        let y = graft_core::composite::random::fold_in(&mut b, k, dv).unwrap();
        let f = b.finish(&[y]).unwrap();
        let out = graft_core::exec::run_func(f, &[&key(0, seed), &Tensor::scalar(d)]).unwrap();
        assert_eq!(out[0].to_vec::<i32>().unwrap(), want, "seed {seed}, data {d}");
    }
}

/// `fold_in(k, d)` is child `d` of `split(k, n)`: both hash the counter `(0, d)`.
#[test]
fn fold_in_is_the_split_child() {
    let k = key(0, 42);
    let children = split(&k, 5);
    for d in 0..5i32 {
        let got = run1(&k, |b, k| {
            let dv = b.constant(Tensor::scalar(d))?;
            b.random_fold_in(k, dv)
        });
        let got: Vec<u32> = got.to_vec::<i32>().unwrap().into_iter().map(|x| x as u32).collect();
        assert_eq!(got, children[2 * d as usize..2 * d as usize + 2], "child {d}");
    }
}

#[test]
fn fold_in_i64_data_uses_the_low_word_and_errors_are_structured() {
    let mut b = Builder::new("f");
    let k = b.param(key_type());
    let d = b.param(TensorType::new(DType::I64, vec![]));
    let y = graft_core::composite::random::fold_in(&mut b, k, d).unwrap();
    let f = b.finish(&[y]).unwrap();
    let out = graft_core::exec::run_func(f, &[&key(0, 42), &Tensor::scalar((5i64 << 32) + 7)]).unwrap();
    assert_eq!(out[0].to_vec::<i32>().unwrap(), [-1747954385, 1371500959]);

    let mut b = Builder::new("g");
    let k = b.param(key_type());
    let fd = b.param(TensorType::new(DType::F32, vec![]));
    let vd = b.param(TensorType::new(DType::I32, vec![3]));
    let msg = expect_type_error(b.random_fold_in(k, fd).unwrap_err(), "random_fold_in");
    assert!(msg.contains("i32 data of shape ()"), "{msg}");
    expect_type_error(b.random_fold_in(k, vd).unwrap_err(), "random_fold_in");
    expect_type_error(b.random_fold_in(vd, vd).unwrap_err(), "random_fold_in");
    let e = graft_core::composite::random::fold_in(&mut b, k, fd).unwrap_err();
    assert!(e.to_string().contains("rank-0 i32 or i64"), "{e}");
}

/// Under vmap, batched data (and/or keys) give one key per example, each
/// what the unbatched primitive gives (JAX's `vmap(fold_in)` values).
#[test]
fn fold_in_under_vmap_matches_jax() {
    let mut b = Builder::new("f");
    let k = b.param(key_type());
    let d = b.param(TensorType::new(DType::I32, vec![]));
    let y = b.random_fold_in(k, d).unwrap();
    let f = b.finish(&[y]).unwrap();
    let v = graft_core::batch::vmap_func(&f, &[None, Some(0)], &[Some(0)], 3).unwrap();
    let data = Tensor::vec1(&[0i32, 1, 2]);
    let out = graft_core::exec::run_func(v, &[&key(0, 0), &data]).unwrap();
    assert_eq!(
        out[0].to_vec::<i32>().unwrap(),
        [1797259609, -1715843330, 928981903, -841280227, -148943191, -1576124287]
    );
    // Both batched: key i with data i.
    let v2 = graft_core::batch::vmap_func(&f, &[Some(0), Some(0)], &[Some(0)], 2).unwrap();
    let keys = Tensor::from_vec(vec![2usize, 2], vec![0i32, 42, 0, 42]).unwrap();
    let out = graft_core::exec::run_func(v2, &[&keys, &Tensor::vec1(&[7i32, 123456])]).unwrap();
    assert_eq!(out[0].to_vec::<i32>().unwrap(), [-1747954385, 1371500959, 793847391, 18989694]);
}
