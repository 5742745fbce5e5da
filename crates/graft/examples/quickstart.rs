//! graft quickstart: trace a small MLP classifier, compile it, train it with
//! `value_and_grad` and plain gradient descent on a synthetic two-moons-like
//! problem generated in-process, and print the loss falling and the accuracy.
//!
//! Run with `cargo run --release --example quickstart`.

use graft::{jit_n, nn, DType, Tensor, TensorType, Tr, Wrt};

const N: usize = 256;
const HIDDEN: usize = 32;
const CLASSES: usize = 2;

/// Two interleaved half circles with a little deterministic jitter.
fn dataset() -> (Tensor, Tensor) {
    let mut xs = Vec::with_capacity(N * 2);
    let mut ys = Vec::with_capacity(N);
    for i in 0..N {
        let class = i % 2;
        let t = std::f64::consts::PI * (i / 2) as f64 / (N / 2) as f64;
        let jitter = 0.1 * ((i as f64 * 12.9898).sin() * 43758.5453).fract();
        let (x, y) = if class == 0 { (t.cos(), t.sin()) } else { (1.0 - t.cos(), 0.5 - t.sin()) };
        xs.push(x + jitter);
        xs.push(y - jitter);
        ys.push(class as i32);
    }
    (Tensor::from_vec(vec![N, 2], xs).expect("N*2 values"), Tensor::from_vec(vec![N], ys).expect("N labels"))
}

/// The model: x -> linear -> tanh -> linear -> logits.
fn logits(p: &[Tr], x: &Tr) -> Tr {
    let h = nn::linear(x, &p[0], Some(&p[1])).tanh();
    nn::linear(&h, &p[2], Some(&p[3]))
}

/// Large buffers on cache lines, as graft's own binaries do.
#[global_allocator]
static ALLOC: graft::CacheAligned = graft::CacheAligned;

fn main() -> Result<(), graft::Error> {
    let (x, y) = dataset();
    // Parameters initialised by graft's counter-based RNG (explicit key).
    let init = jit_n("init", |v: &[Tr]| {
        let keys = graft::random::split(&graft::random::key(&v[0], 0), 2);
        let w1 = graft::random::normal(&keys[0], &[HIDDEN, 2], DType::F32) * 0.8;
        let w2 = graft::random::normal(&keys[1], &[CLASSES, HIDDEN], DType::F32) * (1.0 / (HIDDEN as f64).sqrt());
        vec![w1, v[0].zeros(&[HIDDEN], DType::F32), w2, v[0].zeros(&[CLASSES], DType::F32)]
    });
    let dummy = Tensor::scalar(0.0f32);
    let mut params = init.call(&[&dummy])?;

    // loss(w1, b1, w2, b2, x, y) = cross_entropy(logits, y); gradient w.r.t. the parameters.
    let loss = jit_n("loss", |v: &[Tr]| nn::cross_entropy(&logits(&v[..4], &v[4].convert(DType::F32)), &v[5], -1));
    let step = loss.value_and_grad(Wrt::Positions(vec![0, 1, 2, 3]));
    let sgd = jit_n("sgd", |v: &[Tr]| &v[0] - &(&v[1] * 0.5));
    let predict = jit_n("predict", |v: &[Tr]| logits(&v[..4], &v[4].convert(DType::F32)).argmax(-1));

    let x32 = x.cast(DType::F32);
    println!("graft quickstart: 2-{HIDDEN}-{CLASSES} MLP on {N} points, full-batch gradient descent");
    for epoch in 0..=300 {
        let mut args: Vec<&Tensor> = params.iter().collect();
        args.push(&x32);
        args.push(&y);
        let out = step.call(&args)?;
        if epoch % 50 == 0 {
            println!("step {epoch:>3}  loss {:.4}", out[0].to_scalar_f64()?);
        }
        params = params
            .iter()
            .zip(&out[1..])
            .map(|(p, g)| sgd.call(&[p, g]).map(|mut r| r.remove(0)))
            .collect::<Result<_, _>>()?;
    }
    let mut args: Vec<&Tensor> = params.iter().collect();
    args.push(&x32);
    let pred = predict.call(&args)?.remove(0);
    let correct = pred.to_f64_vec().iter().zip(y.to_f64_vec()).filter(|(p, t)| *p == t).count();
    println!("accuracy {:.1}% ({correct}/{N})", 100.0 * correct as f64 / N as f64);
    println!("first predictions: {}", pred.reshape(vec![N])?.to_string().chars().take(60).collect::<String>());
    let ir = loss.trace(&[
        TensorType::new(DType::F32, vec![HIDDEN, 2]),
        TensorType::new(DType::F32, vec![HIDDEN]),
        TensorType::new(DType::F32, vec![CLASSES, HIDDEN]),
        TensorType::new(DType::F32, vec![CLASSES]),
        TensorType::new(DType::F32, vec![N, 2]),
        TensorType::new(DType::I32, vec![N]),
    ])?;
    let g = graft::ad::grad(&ir, &Wrt::Positions(vec![0, 1, 2, 3]))?;
    println!("the traced loss is {} primitive equations, its expanded gradient {}", ir.eqns.len(), g.eqns.len());
    Ok(())
}
