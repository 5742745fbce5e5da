//! Linear, Embedding, Dropout, the activations, Flatten and Sequential.

use crate::error::Error;
use crate::module::ctx::{Ctx, Module};
use crate::module::init::{fans, Init};
use crate::module::vars::{Param, Vars};
use crate::nn;
use crate::trace::Tr;
use graft_core::IrError;

/// `y = x @ weight.T + bias` (PyTorch's `nn.Linear`): `weight [out, in]`,
/// `bias [out]`; PyTorch's initialisation (`U(±1/sqrt(in))` for both).
#[derive(Debug, Clone)]
pub struct Linear {
    /// `[out_features, in_features]`.
    pub weight: Param,
    /// `[out_features]`, if the layer has a bias.
    pub bias: Option<Param>,
}

impl Linear {
    /// Registers `weight` (and `bias`) under `vars` with PyTorch's initialisation.
    pub fn new(vars: &Vars, in_features: usize, out_features: usize, bias: bool) -> Result<Linear, Error> {
        let b = bias.then(|| Init::uniform_fan_in(in_features));
        Linear::with_init(vars, in_features, out_features, Init::torch_default(), b)
    }

    /// With explicit initialisers (`bias_init: None` for no bias).
    pub fn with_init(
        vars: &Vars,
        in_features: usize,
        out_features: usize,
        weight_init: Init,
        bias_init: Option<Init>,
    ) -> Result<Linear, Error> {
        let weight = vars.param("weight", &[out_features, in_features], weight_init)?;
        let bias = bias_init.map(|i| vars.param("bias", &[out_features], i)).transpose()?;
        Ok(Linear { weight, bias })
    }
}

impl Module for Linear {
    fn forward(&self, cx: &Ctx, x: &Tr) -> Tr {
        let b = self.bias.as_ref().map(|b| cx.get(b));
        nn::linear(x, &cx.get(&self.weight), b.as_ref())
    }
}

/// A lookup table `weight [num_embeddings, dim]` (PyTorch's
/// `nn.Embedding`, initialised `N(0, 1)`); the input is integer ids.
#[derive(Debug, Clone)]
pub struct Embedding {
    /// `[num_embeddings, dim]`.
    pub weight: Param,
}

impl Embedding {
    /// Registers `weight`.
    pub fn new(vars: &Vars, num_embeddings: usize, dim: usize) -> Result<Embedding, Error> {
        Ok(Embedding { weight: vars.param("weight", &[num_embeddings, dim], Init::Normal { mean: 0.0, std: 1.0 })? })
    }
}

impl Module for Embedding {
    fn forward(&self, cx: &Ctx, ids: &Tr) -> Tr {
        nn::embedding(&cx.get(&self.weight), ids)
    }
}

/// Inverted dropout: in training each element is zeroed with probability
/// `rate` and the rest scaled by `1 / (1 - rate)`, drawing from the
/// context's key; the identity in evaluation.
#[derive(Debug, Clone)]
pub struct Dropout {
    rate: f64,
}

impl Dropout {
    /// A dropout layer (`rate` in `[0, 1)`); tells `vars` the model needs a key.
    pub fn new(vars: &Vars, rate: f64) -> Result<Dropout, Error> {
        if !(0.0..1.0).contains(&rate) {
            return Err(IrError::invalid("dropout", format!("rate must be in [0, 1), got {rate}")).into());
        }
        if rate > 0.0 {
            vars.use_rng();
        }
        Ok(Dropout { rate })
    }

    /// The drop probability.
    pub fn rate(&self) -> f64 {
        self.rate
    }
}

impl Module for Dropout {
    fn forward(&self, cx: &Ctx, x: &Tr) -> Tr {
        if cx.training() && self.rate > 0.0 {
            nn::dropout(&cx.next_key(x), x, self.rate, true)
        } else {
            x.clone()
        }
    }
}

/// Elementwise activations as modules (for [`Sequential`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    /// `x`
    Identity,
    /// `max(x, 0)`
    Relu,
    /// Exact GELU (`x Φ(x)`).
    Gelu,
    /// GELU's tanh approximation.
    GeluTanh,
    /// `x sigmoid(x)`
    Silu,
    /// `tanh(x)`
    Tanh,
    /// `1 / (1 + e^-x)`
    Sigmoid,
    /// `log(1 + e^x)`
    Softplus,
    /// `x` for `x >= 0`, `slope x` otherwise (`jax.nn.leaky_relu`).
    LeakyRelu(f64),
    /// `x` for `x > 0`, `alpha (e^x - 1)` otherwise.
    Elu(f64),
}

impl Activation {
    /// Applies the activation.
    pub fn apply(&self, x: &Tr) -> Tr {
        match *self {
            Activation::Identity => x.clone(),
            Activation::Relu => x.relu(),
            Activation::Gelu => x.gelu(),
            Activation::GeluTanh => x.gelu_approx(),
            Activation::Silu => x.silu(),
            Activation::Tanh => x.tanh(),
            Activation::Sigmoid => x.sigmoid(),
            Activation::Softplus => x.softplus(),
            Activation::LeakyRelu(slope) => x.leaky_relu(slope),
            Activation::Elu(alpha) => x.elu(alpha),
        }
    }
}

impl Module for Activation {
    fn forward(&self, _cx: &Ctx, x: &Tr) -> Tr {
        self.apply(x)
    }
}

/// Flattens every axis after the first (`[N, ...] -> [N, prod(...)]`),
/// between a convolutional stack and a linear head.
#[derive(Debug, Clone, Copy, Default)]
pub struct Flatten;

impl Module for Flatten {
    fn forward(&self, _cx: &Ctx, x: &Tr) -> Tr {
        x.flatten_range(1, -1)
    }
}

/// Modules applied in order. Parameter paths come from the [`Vars`] each
/// layer was built with, by convention `vars.pp(i)` for the `i`-th layer.
///
/// ```
/// use graft::module::{Activation, Linear, Sequential, Vars};
/// use graft::DType;
/// let vars = Vars::new(DType::F32);
/// let layers = vars.pp("mlp");
/// let mlp = Sequential::new()
///     .add(Linear::new(&layers.pp(0), 4, 8, true).unwrap())
///     .add(Activation::Relu)
///     .add(Linear::new(&layers.pp(2), 8, 2, true).unwrap());
/// assert_eq!(mlp.len(), 3);
/// assert_eq!(vars.names(), ["mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias"]);
/// ```
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Module>>,
}

impl std::fmt::Debug for Sequential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sequential({} layers)", self.layers.len())
    }
}

impl Sequential {
    /// No layers (the identity).
    pub fn new() -> Sequential {
        Sequential::default()
    }

    /// Appends a layer.
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, layer: impl Module + 'static) -> Sequential {
        self.layers.push(Box::new(layer));
        self
    }

    /// Appends a layer in place.
    pub fn push(&mut self, layer: impl Module + 'static) {
        self.layers.push(Box::new(layer));
    }

    /// Number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether there are no layers.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
}

impl Module for Sequential {
    fn forward(&self, cx: &Ctx, x: &Tr) -> Tr {
        self.layers.iter().fold(x.clone(), |h, l| l.forward(cx, &h))
    }
}

/// The fan-in PyTorch's bias initialiser uses for a weight of this shape.
pub(crate) fn fan_in(shape: &[usize]) -> usize {
    fans(shape).0
}
