//! The `ba` eval (bundle adjustment) as `graft gradbench` serves it:
//! recorded GradBench lines through the real server (numbers checked
//! against the golden C++ tool's output for ba1's data), the program's
//! residuals against a reference written here, its Jacobian blocks against
//! central finite differences of its own objective on distinct cameras,
//! points and weights (one camera with a zero rotation, the Rodrigues
//! branch), and bad inputs.

use graft_core::Tensor;
use graft_gradbench::{Backend, LangBackend, TensorArgs};
use serde_json::{json, Value};

use crate::lang_util;
use lang_util::session;

fn nums(v: &Value) -> Vec<f64> {
    v.as_array().expect("array").iter().map(|x| x.as_f64().expect("number")).collect()
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array().expect("array").iter().map(|x| x.as_i64().expect("integer")).collect()
}

fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}[{i}]: graft {g} vs {w}");
    }
}

/// ba1's compressed input (GradBench's `ba1_n49_m7776_p31843.txt`) with
/// other counts: the golden tool's values do not depend on n, m, p.
fn ba1(function: &str, id: usize, n: usize, m: usize, p: usize) -> String {
    json!({"id": id, "kind": "evaluate", "module": "ba", "function": function, "input": {
        "n": n, "m": m, "p": p,
        "cam": [-0.758453, -1.109613, -0.845551, 34.556073, 39.676747, 53.881673, 419.194514, 5.864426, -8.51887,
                0.087812, 0.002739],
        "x": [7.203245, 0.001144, 3.023326], "w": 0.417022, "feat": [271.760969, 834.209256],
        "min_runs": 2, "min_seconds": 0}})
    .to_string()
}

/// The golden C++ tool's Jacobian values for ba1 (GradBench's `manual`
/// tool): observation 0's x row, its y row, then d w_err / d w.
const BA1_VALS: [f64; 31] = [
    -461.4463210015993,
    178.8679280144455,
    -19.423916472206248,
    -3.0615983420410315,
    6.392457556226442,
    -3.340282281299017,
    0.26476024920703156,
    0.417022,
    0.0,
    243.62824566083003,
    676.4867782658688,
    3.0615983420410315,
    -6.392457556226442,
    3.340282281299017,
    0.24299878163378708,
    -803.7436233648792,
    -309.5954175234488,
    604.7802846625028,
    -15.049628170340545,
    6.248486312079824,
    3.2194799516049235,
    0.8381960857313306,
    0.0,
    0.417022,
    771.2949451366334,
    2141.6680611599554,
    15.049628170340545,
    -6.248486312079824,
    -3.2194799516049235,
    -0.16538160078960118,
    -0.834044,
];

#[test]
fn ba_session_reproduces_the_golden_tool() {
    let rs = session(&[
        r#"{"id": 0, "kind": "start", "eval": "ba"}"#.to_string(),
        r#"{"id": 1, "kind": "define", "module": "ba"}"#.to_string(),
        ba1("objective", 2, 3, 4, 20),
        ba1("jacobian", 3, 3, 4, 20),
        ba1("jacobian", 4, 2, 1, 2),
    ]);
    assert!(rs.iter().all(|r| r["success"] != false), "{rs:?}");
    let obj = &rs[2]["output"];
    assert_close(
        "reproj_error",
        &nums(&obj["reproj_error"]["elements"]),
        &[0.10133583791450886, -0.06896776592424401],
        1e-9,
    );
    assert_eq!(obj["reproj_error"]["repeated"], json!(20));
    assert_close("w_err", &[obj["w_err"]["element"].as_f64().unwrap()], &[1.0 - 0.417022 * 0.417022], 1e-15);
    assert_eq!(obj["w_err"]["repeated"], json!(20));
    let names: Vec<&str> = rs[2]["timings"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["compile", "evaluate", "evaluate"]);

    // n = 3, m = 4, p = 20: camera columns 0..10, point columns 33..35,
    // weight columns 45..64; 60 rows of 15 then 20 rows of 1.
    let jac = &rs[3]["output"];
    let mut rows: Vec<i64> = (0..30).map(|r| 15 * r).collect();
    rows.push(31 * 20);
    assert_eq!(ints(&jac["rows"]), rows);
    let row: Vec<i64> = (0..11).chain([33, 34, 35, 45]).collect();
    let mut cols = [row.clone(), row].concat();
    cols.push(64);
    assert_eq!(ints(&jac["cols"]), cols);
    assert_close("vals", &nums(&jac["vals"]), &BA1_VALS, 1e-9);

    // p = 2: only 3p + 1 = 7 row pointers exist (4 rows of 15, 2 of 1).
    let small = &rs[4]["output"];
    assert_eq!(ints(&small["rows"]), [0, 15, 30, 45, 60, 61, 62, 62]);
    let row: Vec<i64> = (0..11).chain([22, 23, 24, 25]).collect();
    let mut cols = [row.clone(), row].concat();
    cols.push(26);
    assert_eq!(ints(&small["cols"]), cols);
    assert_close("vals", &nums(&small["vals"]), &BA1_VALS, 1e-9);
}

/// ADBench's projection, written independently of the program.
fn reference(cam: &[f64], x: &[f64], w: f64, feat: &[f64]) -> [f64; 2] {
    let (r, c) = (&cam[0..3], &cam[3..6]);
    let p = [x[0] - c[0], x[1] - c[1], x[2] - c[2]];
    let cross =
        |a: &[f64], b: &[f64]| [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
    let sq: f64 = r.iter().map(|v| v * v).sum();
    let q = if sq != 0.0 {
        let th = sq.sqrt();
        let k = [r[0] / th, r[1] / th, r[2] / th];
        let kp = cross(&k, &p);
        let t = (k[0] * p[0] + k[1] * p[1] + k[2] * p[2]) * (1.0 - th.cos());
        [0, 1, 2].map(|i| p[i] * th.cos() + kp[i] * th.sin() + k[i] * t)
    } else {
        let rp = cross(r, &p);
        [0, 1, 2].map(|i| p[i] + rp[i])
    };
    let (u, v) = (q[0] / q[2], q[1] / q[2]);
    let rsq = u * u + v * v;
    let l = 1.0 + cam[9] * rsq + cam[10] * rsq * rsq;
    [w * (u * l * cam[6] + cam[7] - feat[0]), w * (v * l * cam[6] + cam[8] - feat[1])]
}

/// Distinct cameras (camera 1 has a zero rotation), points, weights and
/// features; observation i uses camera i mod n and point (3i + 1) mod m.
fn distinct(n: usize, m: usize, p: usize) -> TensorArgs {
    let mut cams = Vec::new();
    for j in 0..n {
        let s = j as f64;
        let r = if j == 1 { [0.0; 3] } else { [0.3 + 0.1 * s, -0.2 * s, 0.5 - 0.05 * s] };
        cams.extend(r);
        cams.extend([0.5 * s, -0.3, 0.2 * s - 1.0, 2.0 + 0.1 * s, 0.1, -0.2, 0.05, -0.01 * s]);
    }
    let pts: Vec<f64> = (0..3 * m).map(|k| [1.5, -0.7, 4.0][k % 3] + 0.1 * (k / 3) as f64).collect();
    let w: Vec<f64> = (0..p).map(|i| 0.5 + 0.05 * i as f64).collect();
    let feats: Vec<f64> = (0..2 * p).map(|k| 0.1 * k as f64 - 0.3).collect();
    TensorArgs {
        tensors: vec![
            Tensor::from_vec(vec![n, 11], cams).unwrap(),
            Tensor::from_vec(vec![m, 3], pts).unwrap(),
            Tensor::from_vec(vec![p], w).unwrap(),
            Tensor::from_vec(vec![p, 2], feats).unwrap(),
            Tensor::from_vec(vec![p], (0..p).map(|i| (i % n) as i32).collect::<Vec<_>>()).unwrap(),
            Tensor::from_vec(vec![p], (0..p).map(|i| ((3 * i + 1) % m) as i32).collect::<Vec<_>>()).unwrap(),
        ],
        statics: vec![],
    }
}

fn run(b: &mut LangBackend, function: &str, args: &TensorArgs) -> Vec<Vec<f64>> {
    let prog = b.compile("ba", function, args).expect("entry compiles");
    let out = b.run(&prog, args).expect("entry runs");
    out.iter().map(|t| t.as_slice::<f64>().expect("f64 result").to_vec()).collect()
}

fn with(args: &TensorArgs, t: usize, k: usize, h: f64) -> TensorArgs {
    let mut a = args.clone();
    let mut data = a.tensors[t].as_slice::<f64>().unwrap().to_vec();
    data[k] += h;
    a.tensors[t] = Tensor::from_vec(a.tensors[t].shape().to_vec(), data).unwrap();
    a
}

#[test]
fn ba_residuals_match_the_reference_and_blocks_match_finite_differences() {
    let (n, m, p) = (3, 4, 7);
    let args = distinct(n, m, p);
    let mut b = LangBackend::new();
    b.define("ba").expect("ba defines");
    let obj = run(&mut b, "objective", &args);
    let data = |t: usize| args.tensors[t].as_slice::<f64>().unwrap().to_vec();
    let (cams, pts, w, feats) = (data(0), data(1), data(2), data(3));
    let cam_of = |i: usize| i % n;
    let pt_of = |i: usize| (3 * i + 1) % m;
    for i in 0..p {
        let want = reference(&cams[11 * cam_of(i)..][..11], &pts[3 * pt_of(i)..][..3], w[i], &feats[2 * i..][..2]);
        assert_close(&format!("residual {i}"), &obj[0][2 * i..2 * i + 2], &want, 1e-12);
        assert_close(&format!("w_err {i}"), &[obj[1][i]], &[1.0 - w[i] * w[i]], 1e-15);
    }

    let jac = run(&mut b, "jacobian", &args);
    assert_eq!((jac[0].len(), jac[1].len()), (30 * p, p));
    for i in 0..p {
        // Parameter j of observation i: (tensor, element) of the input.
        let param = |j: usize| match j {
            0..=10 => (0, 11 * cam_of(i) + j),
            11..=13 => (1, 3 * pt_of(i) + j - 11),
            _ => (2, i),
        };
        for j in 0..15 {
            let (t, k) = param(j);
            let h = 1e-6 * (1.0 + data(t)[k].abs());
            let up = run(&mut b, "objective", &with(&args, t, k, h));
            let down = run(&mut b, "objective", &with(&args, t, k, -h));
            for row in 0..2 {
                let fd = (up[0][2 * i + row] - down[0][2 * i + row]) / (2.0 * h);
                let got = jac[0][30 * i + 15 * row + j];
                assert!((got - fd).abs() <= 1e-5 * (1.0 + fd.abs()), "obs {i} row {row} param {j}: {got} vs {fd}");
            }
        }
        let h = 1e-6;
        let fd = (run(&mut b, "objective", &with(&args, 2, i, h))[1][i]
            - run(&mut b, "objective", &with(&args, 2, i, -h))[1][i])
            / (2.0 * h);
        assert_close(&format!("d w_err {i}"), &[jac[1][i]], &[fd], 1e-8);
        assert_close(&format!("d w_err {i} exact"), &[jac[1][i]], &[-2.0 * w[i]], 1e-15);
    }
    // The zero-rotation camera (1) goes through the other Rodrigues branch;
    // its derivatives are finite and checked above.
    assert!(jac[0].iter().all(|v| v.is_finite()));
}

#[test]
fn ba_rejects_bad_inputs_and_goes_on() {
    let good = ba1("objective", 0, 2, 2, 3);
    let bad = |id: usize, edit: &dyn Fn(&mut Value)| {
        let mut v: Value = serde_json::from_str(&good).unwrap();
        v["id"] = json!(id);
        edit(&mut v["input"]);
        v.to_string()
    };
    let rs = session(&[
        r#"{"id": 0, "kind": "define", "module": "ba"}"#.to_string(),
        bad(1, &|i| i["cam"] = json!([1, 2, 3])),
        bad(2, &|i| i["x"] = json!([[1, 2, 3]])),
        bad(3, &|i| i["feat"] = json!([1, 2, 3])),
        bad(4, &|i| i["n"] = json!(0)),
        bad(5, &|i| i["w"] = json!([1])),
        bad(6, &|i| {
            i.as_object_mut().unwrap().remove("p");
        }),
        bad(7, &|i| i["m"] = json!(-1)),
        r#"{"id": 8, "kind": "evaluate", "module": "ba", "function": "hessian", "input": {}}"#.to_string(),
        bad(9, &|_| {}),
    ]);
    let error_of = |r: &Value| -> String {
        assert_eq!(r["success"], false, "expected a failure: {r}");
        r["error"].as_str().expect("error string").to_string()
    };
    for (id, field) in [(1, "cam"), (2, "x"), (3, "feat"), (4, "n"), (5, "w"), (6, "p"), (7, "m")] {
        assert!(error_of(&rs[id]).contains(&format!("`{field}`")), "{}", rs[id]);
    }
    assert!(error_of(&rs[8]).contains("hessian"));
    assert_eq!(rs[9]["success"], true);
    assert_eq!(rs[9]["output"]["reproj_error"]["repeated"], json!(3));
}
