//! JSON <-> tensor conversion, shape checks across fields, and the run
//! policy's parsing, on small hand-written inputs.

use std::time::Duration;

use graft_core::{DType, Tensor};
use graft_gradbench::convert::{f64_tensor, i64_tensor, scalar_json, to_json, to_json_flat, Dim, Dims, Input};
use graft_gradbench::{GbError, Runs};
use serde_json::{json, Value};

#[test]
fn nested_lists_become_row_major_tensors_and_back() {
    let v = json!([[1.0, 2.5, -3.0], [4.0, 5.0, 6e-300]]);
    let t = f64_tensor("x", &v).unwrap();
    assert_eq!(t.shape(), &[2, 3]);
    assert_eq!(t.dtype(), DType::F64);
    assert_eq!(t.to_vec::<f64>().unwrap(), vec![1.0, 2.5, -3.0, 4.0, 5.0, 6e-300]);
    assert_eq!(to_json(&t).unwrap(), v);
    assert_eq!(to_json_flat(&t).unwrap(), json!([1.0, 2.5, -3.0, 4.0, 5.0, 6e-300]));
    // Rank 3 and rank 0.
    let v3 = json!([[[1, 2]], [[3, 4]], [[5, 6]]]);
    let t3 = f64_tensor("y", &v3).unwrap();
    assert_eq!(t3.shape(), &[3, 1, 2]);
    assert_eq!(t3.to_vec::<f64>().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let s = f64_tensor("s", &json!(3.25)).unwrap();
    assert_eq!((s.rank(), s.to_scalar_f64().unwrap()), (0, 3.25));
    assert_eq!(scalar_json(&s).unwrap(), json!(3.25));
    assert_eq!(to_json(&s).unwrap(), json!(3.25));
}

#[test]
fn round_trip_is_exact_for_awkward_doubles() {
    let mut xs = vec![0.1, 1.0 / 3.0, f64::MIN_POSITIVE, f64::MAX, -0.0, 5e-324, 123_456_789.123_456_79];
    // Plus many doubles from random bit patterns (SplitMix64), skipping NaN/inf.
    let mut state = 0x1234_5678_9abc_def0u64;
    while xs.len() < 5000 {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let x = f64::from_bits(z ^ (z >> 31));
        if x.is_finite() {
            xs.push(x);
        }
    }
    let t = Tensor::vec1(&xs);
    let text = serde_json::to_string(&to_json(&t).unwrap()).unwrap();
    let back = f64_tensor("x", &serde_json::from_str::<Value>(&text).unwrap()).unwrap();
    let ys = back.to_vec::<f64>().unwrap();
    for (x, y) in xs.iter().zip(&ys) {
        assert_eq!(x.to_bits(), y.to_bits(), "{x} came back as {y}");
    }
}

#[test]
fn integers_are_i64_tensors_and_reject_fractions() {
    let t = i64_tensor("tri", &json!([[0, 1, 2], [2, 3, -1]])).unwrap();
    assert_eq!(t.dtype(), DType::I64);
    assert_eq!(t.to_vec::<i64>().unwrap(), vec![0, 1, 2, 2, 3, -1]);
    assert_eq!(to_json(&t).unwrap(), json!([[0, 1, 2], [2, 3, -1]]));
    assert_eq!(
        i64_tensor("tri", &json!([[0, 1.5]])).unwrap_err(),
        GbError::input("tri", "element [0][1]: expected an integer, found 1.5")
    );
}

#[test]
fn ragged_and_non_numeric_inputs_name_the_element() {
    assert_eq!(
        f64_tensor("x", &json!([[1, 2], [3, 4], [5]])).unwrap_err().to_string(),
        "input field `x`: ragged array: element [2] has length 1, expected 2 (shape [3, 2])"
    );
    assert_eq!(
        f64_tensor("x", &json!([[1, 2], 3])).unwrap_err().to_string(),
        "input field `x`: element [1] is a number, expected an array of length 2"
    );
    assert_eq!(
        f64_tensor("x", &json!([1, [2]])).unwrap_err().to_string(),
        "input field `x`: element [1]: expected a number, found an array"
    );
    assert_eq!(
        f64_tensor("x", &json!([[1, "a"]])).unwrap_err().to_string(),
        "input field `x`: element [0][1]: expected a number, found a string"
    );
    assert_eq!(
        f64_tensor("x", &json!({})).unwrap_err().to_string(),
        "input field `x`: expected a number, found an object"
    );
}

#[test]
fn empty_lists_take_the_declared_rank() {
    // ht's "simple" variant sends an empty `us`.
    let v = json!({"us": [], "points": [[1.0, 2.0, 3.0]]});
    let input = Input::new(&v).unwrap();
    let mut dims = Dims::new();
    let p = input.f64_tensor("points", &mut dims, &[Dim::Var("n"), Dim::Fixed(3)]).unwrap();
    assert_eq!(p.shape(), &[1, 3]);
    let us = input.f64_tensor("us", &mut Dims::new(), &[Dim::Var("m"), Dim::Fixed(2)]).unwrap();
    assert_eq!(us.shape(), &[0, 2]);
    assert_eq!(us.numel(), 0);
    let e = f64_tensor("e", &json!([[], []])).unwrap();
    assert_eq!(e.shape(), &[2, 0]);
    assert_eq!(to_json(&e).unwrap(), json!([[], []]));
}

#[test]
fn dims_tie_fields_together() {
    let v = json!({"x": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], "mu": [[0.0, 0.0, 0.0]], "alpha": [1.0], "k": 1});
    let input = Input::new(&v).unwrap();
    let mut dims = Dims::new();
    dims.bind("k", input.usize("k").unwrap(), "k").unwrap();
    input.f64_tensor("x", &mut dims, &[Dim::Var("n"), Dim::Var("d")]).unwrap();
    input.f64_tensor("alpha", &mut dims, &[Dim::Var("k")]).unwrap();
    assert_eq!((dims.get("n"), dims.get("d"), dims.get("k")), (Some(3), Some(2), Some(1)));
    assert_eq!(
        input.f64_tensor("mu", &mut dims, &[Dim::Var("k"), Dim::Var("d")]).unwrap_err().to_string(),
        "input field `mu`: dimension d is 3 here but 2 from field `x`"
    );
    assert_eq!(
        input.f64_tensor("x", &mut dims, &[Dim::Var("n"), Dim::Fixed(3)]).unwrap_err().to_string(),
        "input field `x`: expected shape [n, 3], found [3, 2] (axis 1 must be 3)"
    );
    assert_eq!(
        input.f64_tensor("x", &mut dims, &[Dim::Var("n")]).unwrap_err().to_string(),
        "input field `x`: expected shape [n], found [3, 2]"
    );
}

#[test]
fn scalar_fields_and_nested_objects() {
    let v = json!({"n": 5, "gamma": 1.5, "neg": -2, "flag": true,
                   "data": {"model": {"bone_count": 22, "is_mirrored": false}}});
    let input = Input::new(&v).unwrap();
    assert_eq!(input.usize("n").unwrap(), 5);
    assert_eq!(input.f64("gamma").unwrap(), 1.5);
    assert_eq!(input.f64("n").unwrap(), 5.0);
    assert!(input.bool("flag").unwrap());
    assert_eq!(
        input.usize("neg").unwrap_err().to_string(),
        "input field `neg`: expected a non-negative integer, found -2"
    );
    assert_eq!(input.i64("gamma").unwrap_err().to_string(), "input field `gamma`: expected an integer, found 1.5");
    assert_eq!(input.bool("n").unwrap_err().to_string(), "input field `n`: expected a boolean, found a number");
    let data = input.object("data", "data").unwrap();
    let model = data.object("model", "data.model").unwrap();
    assert_eq!(model.usize("bone_count").unwrap(), 22);
    assert_eq!(model.get("parents").unwrap_err().to_string(), "input field `data.model.parents`: missing");
    assert_eq!(data.object("missing", "data.missing").unwrap_err().to_string(), "input field `data.missing`: missing");
    assert_eq!(input.object("n", "n").unwrap_err().to_string(), "input field `n`: expected an object, found a number");
}

#[test]
fn outputs_json_cannot_carry_are_errors() {
    let t = Tensor::vec1(&[1.0f64, f64::NAN]);
    assert_eq!(to_json(&t).unwrap_err(), GbError::Output("NaN cannot be written as JSON (not finite)".into()));
    let t = Tensor::vec1(&[f64::INFINITY]);
    assert!(to_json_flat(&t).is_err());
    assert_eq!(
        scalar_json(&Tensor::vec1(&[1.0f64, 2.0])).unwrap_err().to_string(),
        "output: expected one number, found a tensor of shape [2]"
    );
    // Integer and boolean tensors keep their JSON types (ba's rows/cols are ints).
    assert_eq!(to_json(&Tensor::vec1(&[3i32, -4])).unwrap(), json!([3, -4]));
    assert_eq!(to_json(&Tensor::vec1(&[true, false])).unwrap(), json!([true, false]));
    assert_eq!(to_json(&Tensor::vec1(&[0.5f32])).unwrap(), json!([0.5]));
}

#[test]
fn run_policy_is_read_from_the_input() {
    let r = Runs::from_input(&json!({"x": [1], "min_runs": 3, "min_seconds": 0.25})).unwrap();
    assert_eq!((r.min_runs, r.min_time), (3, Duration::from_millis(250)));
    // Missing fields keep their defaults; a non-object input (hello) runs once.
    assert_eq!(Runs::from_input(&json!({"min_runs": 4})).unwrap(), Runs { min_runs: 4, min_time: Duration::ZERO });
    assert_eq!(Runs::from_input(&json!(1.5)).unwrap(), Runs::once());
    assert_eq!(Runs::from_input(&json!({"min_seconds": 2})).unwrap().min_time, Duration::from_secs(2));
    // The bounds themselves are accepted.
    let r = Runs::from_input(&json!({"min_runs": 1_000_000, "min_seconds": 3600})).unwrap();
    assert_eq!((r.min_runs, r.min_time), (1_000_000, Duration::from_secs(3600)));
    for (bad, msg) in [
        (json!({"min_runs": 1.5}), "run policy: `min_runs` must be a non-negative integer, found 1.5"),
        (json!({"min_runs": null}), "run policy: `min_runs` must be a non-negative integer, found null"),
        (json!({"min_seconds": 1e300}), "run policy: `min_seconds` must be at most 3600, found 1e+300"),
        (
            json!({"min_seconds": -1}),
            "run policy: `min_seconds` must be a finite non-negative number of seconds, found -1",
        ),
        (json!({"min_runs": 1000001}), "run policy: `min_runs` must be at most 1000000, found 1000001"),
    ] {
        assert_eq!(Runs::from_input(&bad).unwrap_err().to_string(), msg);
    }
}

#[test]
fn repeat_counts_runs_and_stops_on_the_first_error() {
    let mut n = 0;
    let (last, timings) = Runs { min_runs: 4, min_time: Duration::ZERO }
        .repeat(|| {
            n += 1;
            Ok::<_, GbError>(n)
        })
        .unwrap();
    assert_eq!((last, timings.len()), (4, 4));
    assert!(timings.iter().all(|t| t.name == "evaluate"));
    let mut calls = 0;
    let err = Runs { min_runs: 10, min_time: Duration::ZERO }
        .repeat(|| {
            calls += 1;
            if calls == 3 {
                Err(GbError::Backend("boom".into()))
            } else {
                Ok(())
            }
        })
        .unwrap_err();
    assert_eq!((err, calls), (GbError::Backend("boom".into()), 3));
    // A run too fast for the clock still makes progress towards min_time.
    let (_, timings) =
        Runs { min_runs: 0, min_time: Duration::from_micros(20) }.repeat(|| Ok::<_, GbError>(())).unwrap();
    assert!(!timings.is_empty() && timings.len() <= 20_000);
}
