//! `graft.nn`'s native half: parameter initialisation through
//! `graft::module::Vars` (the Rust layers' initialisers and per-path
//! Threefry keys), the layer functions of `graft::nn`/`graft::layers` on
//! traced tensors, the optimizers of `graft::optim` and its `Trainer`
//! (one compiled step: forward, backward and update, parameters donated and
//! updated in place). No optimizer, layer or initialiser is defined here.

use crate::convert::{parse_dtype, to_numpy, to_tensor};
use crate::function::closure;
use crate::{graft_err, take_pending, Handle};
use graft::layers::{ConvOpts, PoolOpts};
use graft::module::{Init, Vars};
use graft::optim::{Optimizer, Rule, Schedule, Trainer};
use graft::{Jit, Tensor, Tr};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::path::PathBuf;

type H<'a> = PyRef<'a, Handle>;

fn arg(args: &[f64], i: usize, what: &str) -> PyResult<f64> {
    args.get(i)
        .copied()
        .ok_or_else(|| PyValueError::new_err(format!("the initialiser `{what}` needs {} numbers", i + 1)))
}

/// An initialiser by name and numeric arguments (see `graft.nn.init`).
fn parse_init(kind: &str, a: &[f64]) -> PyResult<Init> {
    Ok(match kind {
        "zeros" => Init::Zeros,
        "ones" => Init::Ones,
        "constant" => Init::Constant(arg(a, 0, kind)?),
        "normal" => Init::Normal { mean: arg(a, 0, kind)?, std: arg(a, 1, kind)? },
        "uniform" => Init::Uniform { lo: arg(a, 0, kind)?, hi: arg(a, 1, kind)? },
        "kaiming_normal" => Init::KaimingNormal { gain: arg(a, 0, kind)? },
        "kaiming_uniform" => Init::KaimingUniform { gain: arg(a, 0, kind)? },
        "xavier_normal" => Init::XavierNormal { gain: arg(a, 0, kind)? },
        "xavier_uniform" => Init::XavierUniform { gain: arg(a, 0, kind)? },
        k => return Err(PyValueError::new_err(format!("graft has no initialiser `{k}`"))),
    })
}

/// Draws parameters `[(dotted name, shape, initialiser, its numbers)]` of
/// one float dtype from `seed`, as `graft::module::Vars::init` does for the
/// Rust layers: a tensor's value depends on the seed and its path only.
#[pyfunction]
fn init_params(
    py: Python<'_>,
    specs: Vec<(String, Vec<usize>, String, Vec<f64>)>,
    dtype: &str,
    seed: i64,
) -> PyResult<Vec<PyObject>> {
    let vars = Vars::new(parse_dtype(dtype)?);
    for (name, shape, kind, args) in &specs {
        let init = parse_init(kind, args)?;
        let r = match name.rsplit_once('.') {
            Some((prefix, last)) => vars.pp(prefix).param(last, shape, init),
            None => vars.param(name, shape, init),
        };
        r.map_err(graft_err)?;
    }
    let tree = vars.init(seed).map_err(graft_err)?;
    let (_, tensors) = tree.flatten();
    tensors.into_iter().map(|t| to_numpy(py, t)).collect()
}

fn checked(t: Tr) -> PyResult<Handle> {
    Handle::checked(t)
}

/// `x @ w.T + b` (PyTorch's layout: `w [out, in]`).
#[pyfunction]
#[pyo3(signature = (x, w, b=None))]
fn linear(x: H<'_>, w: H<'_>, b: Option<H<'_>>) -> PyResult<Handle> {
    checked(graft::nn::linear(&x.tr, &w.tr, b.as_ref().map(|b| &b.tr)))
}

/// Layer normalisation over the trailing dims of `gamma`'s shape.
#[pyfunction]
#[pyo3(signature = (x, gamma, beta=None, eps=1e-5))]
fn layer_norm(x: H<'_>, gamma: H<'_>, beta: Option<H<'_>>, eps: f64) -> PyResult<Handle> {
    checked(graft::nn::layer_norm(&x.tr, &gamma.tr, beta.as_ref().map(|b| &b.tr), eps))
}

/// `F.conv2d` on `[N, C, H, W]` with `w [O, C/groups, kh, kw]`.
#[pyfunction]
#[pyo3(signature = (x, w, b, stride, padding, dilation, groups))]
fn conv2d(
    x: H<'_>,
    w: H<'_>,
    b: Option<H<'_>>,
    stride: Vec<usize>,
    padding: Vec<usize>,
    dilation: Vec<usize>,
    groups: usize,
) -> PyResult<Handle> {
    let opts = ConvOpts::new().stride(stride).padding(padding).dilation(dilation).groups(groups);
    checked(graft::layers::conv2d(&x.tr, &w.tr, b.as_ref().map(|b| &b.tr), &opts))
}

/// `F.conv1d` on `[N, C, L]` with `w [O, C/groups, k]`.
#[pyfunction]
#[pyo3(signature = (x, w, b, stride, padding, dilation, groups))]
fn conv1d(
    x: H<'_>,
    w: H<'_>,
    b: Option<H<'_>>,
    stride: usize,
    padding: usize,
    dilation: usize,
    groups: usize,
) -> PyResult<Handle> {
    let opts = ConvOpts::new().stride(stride).padding(padding).dilation(dilation).groups(groups);
    checked(graft::layers::conv1d(&x.tr, &w.tr, b.as_ref().map(|b| &b.tr), &opts))
}

/// Batch normalisation in training mode over every axis but axis 1 of
/// `[N, C, ...]`: `(y, batch mean, biased batch variance)` (`graft::nn::batch_norm`).
#[pyfunction]
#[pyo3(signature = (x, gamma=None, beta=None, eps=1e-5))]
fn batch_norm(x: H<'_>, gamma: Option<H<'_>>, beta: Option<H<'_>>, eps: f64) -> PyResult<(Handle, Handle, Handle)> {
    let (y, m, v) =
        graft::nn::batch_norm(&x.tr, gamma.as_ref().map(|g| &g.tr), beta.as_ref().map(|b| &b.tr), None, eps);
    Ok((checked(y)?, checked(m)?, checked(v)?))
}

/// `softmax(q k^T * scale + mask) v` over `[..., L, d]` (`causal`: position
/// `i` attends to `j <= i`; `scale` defaults to `1/sqrt(d)`).
#[pyfunction]
#[pyo3(signature = (q, k, v, causal=false, mask=None, scale=None))]
fn attention(q: H<'_>, k: H<'_>, v: H<'_>, causal: bool, mask: Option<H<'_>>, scale: Option<f64>) -> PyResult<Handle> {
    checked(graft::nn::scaled_dot_product_attention(&q.tr, &k.tr, &v.tr, causal, mask.as_ref().map(|m| &m.tr), scale))
}

fn recurrent_weights(w: &[H<'_>]) -> PyResult<graft::module::RecurrentWeights> {
    match w {
        [ih, hh, bih, bhh] => Ok(graft::module::RecurrentWeights {
            weight_ih: ih.tr.clone(),
            weight_hh: hh.tr.clone(),
            bias_ih: bih.tr.clone(),
            bias_hh: bhh.tr.clone(),
        }),
        _ => Err(PyValueError::new_err(format!(
            "a recurrent layer takes [weight_ih, weight_hh, bias_ih, bias_hh], got {} tensors",
            w.len()
        ))),
    }
}

/// One `nn.LSTM` layer (batch first) over `x [B, T, I]` with weights
/// `[weight_ih, weight_hh, bias_ih, bias_hh]` from `(h0, c0)` (zeros when
/// not given): `(outputs [B, T, H], h_T, c_T)` (`graft::module::lstm`).
#[pyfunction]
#[pyo3(signature = (x, weights, h0=None, c0=None))]
fn lstm(x: H<'_>, weights: Vec<H<'_>>, h0: Option<H<'_>>, c0: Option<H<'_>>) -> PyResult<(Handle, Handle, Handle)> {
    let w = recurrent_weights(&weights)?;
    let state = match (&h0, &c0) {
        (Some(h), Some(c)) => Some((&h.tr, &c.tr)),
        (None, None) => None,
        _ => return Err(PyValueError::new_err("lstm takes both h0 and c0, or neither")),
    };
    let (y, h, c) = graft::module::lstm(&x.tr, &w, state);
    Ok((checked(y)?, checked(h)?, checked(c)?))
}

/// One `nn.GRU` layer (batch first) over `x [B, T, I]` with weights
/// `[weight_ih, weight_hh, bias_ih, bias_hh]` from `h0` (zeros when not
/// given): `(outputs [B, T, H], h_T)` (`graft::module::gru`).
#[pyfunction]
#[pyo3(signature = (x, weights, h0=None))]
fn gru(x: H<'_>, weights: Vec<H<'_>>, h0: Option<H<'_>>) -> PyResult<(Handle, Handle)> {
    let w = recurrent_weights(&weights)?;
    let (y, h) = graft::module::gru(&x.tr, &w, h0.as_ref().map(|h| &h.tr));
    Ok((checked(y)?, checked(h)?))
}

/// `F.max_pool2d`/`F.avg_pool2d` (`op`: `max` or `avg`).
#[pyfunction]
fn pool2d(op: &str, x: H<'_>, kernel: Vec<usize>, stride: Vec<usize>, padding: Vec<usize>) -> PyResult<Handle> {
    let opts = PoolOpts::new().stride(stride).padding(padding);
    let t = match op {
        "max" => graft::layers::max_pool2d(&x.tr, kernel, &opts),
        "avg" => graft::layers::avg_pool2d(&x.tr, kernel, &opts),
        _ => return Err(PyValueError::new_err(format!("graft has no pooling `{op}`"))),
    };
    checked(t)
}

/// Rows of `table` at integer `ids`.
#[pyfunction]
fn embedding(table: H<'_>, ids: H<'_>) -> PyResult<Handle> {
    checked(graft::layers::embedding(&table.tr, &ids.tr))
}

/// Inverted dropout with an explicit key.
#[pyfunction]
fn dropout(key: H<'_>, x: H<'_>, rate: f64, training: bool) -> PyResult<Handle> {
    if !(0.0..1.0).contains(&rate) {
        return Err(PyValueError::new_err(format!("a dropout rate is in [0, 1), got {rate}")));
    }
    checked(graft::layers::dropout(&key.tr, &x.tr, rate, training))
}

/// Mean losses: `mse(pred, target)`, `cross_entropy(logits, int labels)`
/// (over the last axis), `bce_logits(logits, targets)`.
#[pyfunction]
fn loss(op: &str, a: H<'_>, b: H<'_>) -> PyResult<Handle> {
    let t = match op {
        "mse" => graft::nn::mse(&a.tr, &b.tr),
        "cross_entropy" => graft::nn::cross_entropy(&a.tr, &b.tr, -1),
        "bce_logits" => graft::nn::binary_cross_entropy_with_logits(&a.tr, &b.tr),
        _ => return Err(PyValueError::new_err(format!("graft has no loss `{op}`"))),
    };
    checked(t)
}

/// A learning-rate schedule by name (optax's schedules).
fn schedule(kind: &str, a: &[f64], boundaries: Vec<(u64, f64)>) -> PyResult<Schedule> {
    let need = |n: usize| {
        if a.len() == n {
            Ok(())
        } else {
            Err(PyValueError::new_err(format!("the schedule `{kind}` takes {n} numbers, got {}", a.len())))
        }
    };
    let steps = |x: f64, what: &str| {
        if x >= 0.0 && x.fract() == 0.0 {
            Ok(x as u64)
        } else {
            Err(PyValueError::new_err(format!("the schedule's {what} must be a whole number of steps, got {x}")))
        }
    };
    Ok(match kind {
        "constant" => {
            need(1)?;
            Schedule::Constant(a[0])
        }
        "piecewise" => {
            need(1)?;
            Schedule::Piecewise { init: a[0], boundaries }
        }
        "cosine" => {
            need(3)?;
            Schedule::Cosine { init: a[0], steps: steps(a[1], "decay_steps")?, alpha: a[2] }
        }
        "warmup_cosine" => {
            need(5)?;
            Schedule::WarmupCosine {
                init: a[0],
                peak: a[1],
                warmup: steps(a[2], "warmup_steps")?,
                steps: steps(a[3], "decay_steps")?,
                end: a[4],
            }
        }
        k => return Err(PyValueError::new_err(format!("graft has no schedule `{k}`"))),
    })
}

/// A `graft::optim::Optimizer`: an update rule, a learning-rate schedule,
/// optional global-norm clipping and decoupled weight decay on the
/// parameters named in `decay` (all when `None`).
#[pyclass(unsendable, module = "graft._graft", name = "Optimizer")]
pub struct PyOptimizer {
    opt: Optimizer,
}

#[pymethods]
impl PyOptimizer {
    #[new]
    #[pyo3(signature = (rule, hyper, schedule_kind, schedule_args, boundaries, clip=None, weight_decay=0.0, decay=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        rule: &str,
        hyper: Vec<f64>,
        schedule_kind: &str,
        schedule_args: Vec<f64>,
        boundaries: Vec<(u64, f64)>,
        clip: Option<f64>,
        weight_decay: f64,
        decay: Option<Vec<String>>,
    ) -> PyResult<PyOptimizer> {
        let h = |i: usize| {
            hyper
                .get(i)
                .copied()
                .ok_or_else(|| PyValueError::new_err(format!("`{rule}` needs {} hyperparameters", i + 1)))
        };
        let rule = match rule {
            "sgd" => Rule::Sgd,
            "momentum" => Rule::Momentum { beta: h(0)?, nesterov: false },
            "nesterov" => Rule::Momentum { beta: h(0)?, nesterov: true },
            "adam" => Rule::Adam { b1: h(0)?, b2: h(1)?, eps: h(2)? },
            "rmsprop" => Rule::RmsProp { decay: h(0)?, eps: h(1)? },
            "adagrad" => Rule::Adagrad { initial: h(0)?, eps: h(1)? },
            "lion" => Rule::Lion { b1: h(0)?, b2: h(1)? },
            r => return Err(PyValueError::new_err(format!("graft has no optimizer `{r}`"))),
        };
        if let Some(c) = clip {
            if c.is_nan() || c <= 0.0 {
                return Err(PyValueError::new_err(format!("a clipping norm must be positive, got {c}")));
            }
        }
        let mut opt = Optimizer {
            rule,
            lr: schedule(schedule_kind, &schedule_args, boundaries)?,
            clip_global_norm: None,
            weight_decay,
            decay_mask: None,
        };
        if let Some(c) = clip {
            opt = opt.clip(c);
        }
        if let Some(names) = decay {
            let set: std::collections::HashSet<String> = names.into_iter().collect();
            opt = opt.decay_only(move |n: &str| set.contains(n));
        }
        Ok(PyOptimizer { opt })
    }

    /// Optimizer-state tensors per parameter.
    #[getter]
    fn n_state(&self) -> usize {
        self.opt.n_state()
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.opt)
    }
}

fn tensors(args: &[Bound<'_, PyAny>], what: &str) -> PyResult<Vec<Tensor>> {
    args.iter().enumerate().map(|(i, a)| to_tensor(a, &format!("{what} {i}"))).collect()
}

fn arrays(py: Python<'_>, ts: &[Tensor]) -> PyResult<Vec<PyObject>> {
    ts.iter().map(|t| to_numpy(py, t.clone())).collect()
}

/// `graft::optim::Trainer` over Python losses: `train(params + buffers +
/// batch) -> [loss] + buffers'` and `eval(params + buffers + batch) ->
/// [loss]`, both traced once per input types. The step runs forward,
/// backward and the optimizer update as one compiled function, with the
/// parameters, optimizer state and buffers donated to it. Unsendable (the
/// traced losses are bound to the thread that made it); a step runs with
/// the GIL released.
#[pyclass(unsendable, module = "graft._graft", name = "Trainer")]
pub struct PyTrainer {
    tr: Trainer,
}

fn with_pending<T>(r: Result<T, graft::Error>) -> PyResult<T> {
    r.map_err(graft_err)
}

#[pymethods]
impl PyTrainer {
    #[new]
    #[pyo3(signature = (train, eval, names, params, buffer_names, buffers, optimizer))]
    fn new(
        train: Py<PyAny>,
        eval: Py<PyAny>,
        names: Vec<String>,
        params: Vec<Bound<'_, PyAny>>,
        buffer_names: Vec<String>,
        buffers: Vec<Bound<'_, PyAny>>,
        optimizer: PyRef<'_, PyOptimizer>,
    ) -> PyResult<PyTrainer> {
        let params = tensors(&params, "parameter")?;
        if let Some((n, t)) = names.iter().zip(&params).find(|(_, t)| !t.dtype().is_float()) {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "parameter `{n}` is {}: a trained parameter must be a float array",
                t.ty()
            )));
        }
        let buffers = tensors(&buffers, "buffer")?;
        let tr = Trainer::with_buffers(
            Jit::new("train_loss", closure(train)),
            Jit::new("eval_loss", closure(eval)),
            names,
            params,
            buffer_names,
            buffers,
            optimizer.opt.clone(),
        )
        .map_err(graft_err)?;
        Ok(PyTrainer { tr })
    }

    /// One step on the batch arrays (in the loss's input order): returns
    /// the loss before the update. The GIL is held while the step is
    /// traced (on its first call: the loss is Python) and released while it
    /// runs (`Trainer::begin_step`/`StepJob::run`/`finish_step`), so other
    /// Python threads run meanwhile.
    fn step(&mut self, py: Python<'_>, batch: Vec<Bound<'_, PyAny>>) -> PyResult<f64> {
        let batch = tensors(&batch, "batch input")?;
        let refs: Vec<&Tensor> = batch.iter().collect();
        take_pending();
        let job = with_pending(self.tr.begin_step(&refs))?;
        let done = py.allow_threads(move || {
            let refs: Vec<&Tensor> = batch.iter().collect();
            job.run(&refs)
        });
        with_pending(self.tr.finish_step(done))
    }

    /// The loss at the current parameters (evaluation mode), no update;
    /// compiled with the GIL held (tracing calls Python), run with it released.
    fn eval(&self, py: Python<'_>, batch: Vec<Bound<'_, PyAny>>) -> PyResult<f64> {
        let batch = tensors(&batch, "batch input")?;
        let refs: Vec<&Tensor> = batch.iter().collect();
        take_pending();
        let c = with_pending(self.tr.eval_compiled(&refs))?;
        let ins: Vec<&Tensor> = self.tr.params.iter().chain(&self.tr.buffers).chain(batch.iter()).collect();
        let out = with_pending(py.allow_threads(|| c.call(&ins)))?;
        let loss = out.first().map(|l| l.to_scalar_f64()).transpose().map_err(graft_err)?;
        Ok(loss.unwrap_or(f64::NAN))
    }

    /// Averages the gradients of `parts` micro-batches per step.
    fn accumulate(&mut self, parts: usize) -> PyResult<()> {
        self.tr.accumulate(parts).map_err(graft_err)
    }

    /// Parameter names, in order.
    #[getter]
    fn names(&self) -> Vec<String> {
        self.tr.names().to_vec()
    }

    /// Buffer names, in order.
    #[getter]
    fn buffer_names(&self) -> Vec<String> {
        self.tr.buffer_names().to_vec()
    }

    /// Copies of the parameters, in `names` order.
    #[getter]
    fn params(&self, py: Python<'_>) -> PyResult<Vec<PyObject>> {
        arrays(py, &self.tr.params)
    }

    /// Copies of the optimizer state (`n_state` per parameter, in order).
    #[getter]
    fn state(&self, py: Python<'_>) -> PyResult<Vec<PyObject>> {
        arrays(py, &self.tr.state)
    }

    /// Copies of the buffers, in `buffer_names` order.
    #[getter]
    fn buffers(&self, py: Python<'_>) -> PyResult<Vec<PyObject>> {
        arrays(py, &self.tr.buffers)
    }

    /// Steps taken.
    #[getter]
    fn count(&self) -> u64 {
        self.tr.count
    }

    /// Replaces the parameters (each of its old type).
    fn set_params(&mut self, params: Vec<Bound<'_, PyAny>>) -> PyResult<()> {
        let new = tensors(&params, "parameter")?;
        if new.len() != self.tr.params.len() {
            return Err(PyValueError::new_err(format!(
                "{} parameters given, the trainer has {}",
                new.len(),
                self.tr.params.len()
            )));
        }
        let bad: Vec<String> = self
            .tr
            .names()
            .iter()
            .zip(self.tr.params.iter().zip(&new))
            .filter(|(_, (a, b))| a.ty() != b.ty())
            .map(|(n, (a, b))| format!("`{n}` is {}, given {}", a.ty(), b.ty()))
            .collect();
        if !bad.is_empty() {
            return Err(PyValueError::new_err(format!("the parameters do not match:\n  {}", bad.join("\n  "))));
        }
        self.tr.params = new;
        Ok(())
    }

    /// Saves parameters, optimizer state, buffers and step count to a
    /// safetensors file (written to a temporary file, then renamed).
    fn save(&self, path: PathBuf) -> PyResult<()> {
        self.tr.save_checkpoint(&path).map_err(graft_err)
    }

    /// Restores a checkpoint written by `save` for the same parameters and
    /// optimizer; every mismatch is listed and the trainer is left as it was.
    fn load(&mut self, path: PathBuf) -> PyResult<()> {
        self.tr.load_checkpoint(&path).map_err(graft_err)
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(init_params, m)?)?;
    m.add_function(wrap_pyfunction!(linear, m)?)?;
    m.add_function(wrap_pyfunction!(layer_norm, m)?)?;
    m.add_function(wrap_pyfunction!(conv2d, m)?)?;
    m.add_function(wrap_pyfunction!(pool2d, m)?)?;
    m.add_function(wrap_pyfunction!(conv1d, m)?)?;
    m.add_function(wrap_pyfunction!(batch_norm, m)?)?;
    m.add_function(wrap_pyfunction!(attention, m)?)?;
    m.add_function(wrap_pyfunction!(lstm, m)?)?;
    m.add_function(wrap_pyfunction!(gru, m)?)?;
    m.add_function(wrap_pyfunction!(embedding, m)?)?;
    m.add_function(wrap_pyfunction!(dropout, m)?)?;
    m.add_function(wrap_pyfunction!(loss, m)?)?;
    m.add_class::<PyOptimizer>()?;
    m.add_class::<PyTrainer>()?;
    Ok(())
}
