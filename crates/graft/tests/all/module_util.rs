//! Shared helpers of the module tests: deterministic data, running a
//! module's forward pass, and gradients against central differences.

use graft::module::{forward_fn, Ctx, Mode, Module, ParamTree, Vars};
use graft::{jit_n, Tensor, Tr, Wrt};

/// Deterministic pseudo-random numbers in [-1, 1) (SplitMix64).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        2.0 * ((z >> 11) as f64 / (1u64 << 53) as f64) - 1.0
    }
    pub fn vec(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.next()).collect()
    }
    pub fn tensor(&mut self, shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_vec(shape.to_vec(), self.vec(n)).unwrap()
    }
}

/// A tree with every tensor replaced by random numbers (so tests do not
/// depend on the initialisers, and norms get non-trivial scales); state
/// tensors named `running_var` stay positive.
pub fn random_tree(vars: &Vars, seed: u64) -> ParamTree {
    let mut rng = Rng(seed);
    let mut t = ParamTree::new();
    for s in vars.specs() {
        let mut x = rng.tensor(&s.shape);
        if s.name.ends_with("running_var") {
            x = Tensor::from_vec(s.shape.clone(), x.to_f64_vec().iter().map(|v| 1.5 + v).collect::<Vec<_>>()).unwrap();
        }
        t.insert(s.name.clone(), x).unwrap();
    }
    t
}

/// The module's output (first output of [`forward_fn`]) in eval mode.
pub fn run<M: Module + ?Sized>(vars: &Vars, m: &M, tree: &ParamTree, x: &Tensor) -> Result<Tensor, graft::Error> {
    let f = forward_fn(vars, m, Mode::Eval);
    let mut ins: Vec<&Tensor> = tree.tensors().iter().collect();
    ins.push(x);
    Ok(f.call(&ins)?.remove(0))
}

pub fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}[{i}]: got {g}, want {w}");
    }
}

/// Checks the gradient of `sum(forward(x) * r)` (random `r`) with respect
/// to every tensor of the tree (and `x` if `x_float`) against central
/// differences, in f64, in the given mode.
pub fn check_grads<M: Module + ?Sized>(vars: &Vars, m: &M, tree: &ParamTree, x: &Tensor, mode: Mode, x_float: bool) {
    let specs = vars.specs();
    let n = specs.len();
    let y = run(vars, m, tree, x).unwrap();
    let r = Rng(99).tensor(y.shape());
    let f = jit_n("objective", |v: &[Tr]| {
        let cx = Ctx::new(specs.clone(), &v[..n], mode);
        (m.forward(&cx, &v[n]) * &v[n + 1]).sum(())
    });
    let wrt: Vec<usize> = (0..n).chain(x_float.then_some(n)).collect();
    let mut ins: Vec<Tensor> = tree.tensors().to_vec();
    ins.push(x.clone());
    ins.push(r);
    let refs: Vec<&Tensor> = ins.iter().collect();
    let grads = f.grad(Wrt::Positions(wrt.clone())).call(&refs).unwrap();
    let eval = |ins: &[Tensor]| f.call(&ins.iter().collect::<Vec<_>>()).unwrap()[0].to_scalar_f64().unwrap();
    let h = 1e-6;
    for (g, &pos) in grads.iter().zip(&wrt) {
        let base = ins[pos].to_f64_vec();
        let name = specs.get(pos).map_or("x".to_string(), |s| s.name.clone());
        let got = g.to_f64_vec();
        for k in 0..base.len() {
            let mut plus = ins.clone();
            let mut minus = ins.clone();
            let mut v = base.clone();
            v[k] += h;
            plus[pos] = Tensor::from_vec(ins[pos].shape().to_vec(), v.clone()).unwrap();
            v[k] -= 2.0 * h;
            minus[pos] = Tensor::from_vec(ins[pos].shape().to_vec(), v).unwrap();
            let fd = (eval(&plus) - eval(&minus)) / (2.0 * h);
            assert!(
                (got[k] - fd).abs() <= 1e-6 * (1.0 + fd.abs()),
                "d/d {name}[{k}]: autodiff {} vs differences {fd}",
                got[k]
            );
        }
    }
}
