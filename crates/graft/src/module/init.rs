//! Initialisers: how a parameter's first value is drawn. Every draw goes
//! through `graft::random` (Threefry, counter-based), so a seed determines
//! every parameter bit for bit on any machine and thread count.
//!
//! Fans follow PyTorch (`torch.nn.init._calculate_fan_in_and_fan_out`): for
//! a weight `[out, in, *kernel]`, `fan_in = in * prod(kernel)` and
//! `fan_out = out * prod(kernel)`; a vector has `fan_in = fan_out = len`.

use crate::random;
use crate::trace::Tr;
use graft_core::{DType, IrError};

/// How a parameter is initialised.
#[derive(Debug, Clone, PartialEq)]
pub enum Init {
    /// All zeros.
    Zeros,
    /// All ones.
    Ones,
    /// Every element `value`.
    Constant(f64),
    /// `mean + std * N(0, 1)`.
    Normal {
        /// Mean.
        mean: f64,
        /// Standard deviation.
        std: f64,
    },
    /// Uniform in `[lo, hi)`.
    Uniform {
        /// Lower bound.
        lo: f64,
        /// Upper bound.
        hi: f64,
    },
    /// He/Kaiming normal: `N(0, (gain / sqrt(fan_in))^2)`; `gain = sqrt(2)`
    /// for ReLU networks (`kaiming_normal_(mode="fan_in")`).
    KaimingNormal {
        /// The nonlinearity's gain.
        gain: f64,
    },
    /// He/Kaiming uniform: `U(-b, b)` with `b = gain * sqrt(3 / fan_in)`.
    /// PyTorch's default for `Linear` and `Conv` weights is
    /// `gain = 1/sqrt(3)`, i.e. `b = 1/sqrt(fan_in)` ([`Init::torch_default`]).
    KaimingUniform {
        /// The nonlinearity's gain.
        gain: f64,
    },
    /// Glorot/Xavier normal: `N(0, gain^2 * 2 / (fan_in + fan_out))`.
    XavierNormal {
        /// The nonlinearity's gain.
        gain: f64,
    },
    /// Glorot/Xavier uniform: `U(-b, b)`, `b = gain * sqrt(6 / (fan_in + fan_out))`.
    XavierUniform {
        /// The nonlinearity's gain.
        gain: f64,
    },
}

impl Init {
    /// Kaiming normal for ReLU (`gain = sqrt(2)`).
    pub fn kaiming_relu() -> Init {
        Init::KaimingNormal { gain: std::f64::consts::SQRT_2 }
    }

    /// PyTorch's default for `Linear`/`Conv` weights:
    /// `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`.
    pub fn torch_default() -> Init {
        Init::KaimingUniform { gain: 1.0 / 3f64.sqrt() }
    }

    /// Xavier uniform with gain 1.
    pub fn xavier() -> Init {
        Init::XavierUniform { gain: 1.0 }
    }

    /// `U(-1/sqrt(fan_in), 1/sqrt(fan_in))` for a given fan-in: PyTorch's
    /// bias initialiser (the fan-in is the weight's, not the bias's).
    pub fn uniform_fan_in(fan_in: usize) -> Init {
        let b = 1.0 / (fan_in.max(1) as f64).sqrt();
        Init::Uniform { lo: -b, hi: b }
    }

    /// The value of a constant initialiser (filled on the host, no trace
    /// needed); `None` for the random ones.
    pub(crate) fn constant(&self) -> Option<f64> {
        match *self {
            Init::Zeros => Some(0.0),
            Init::Ones => Some(1.0),
            Init::Constant(v) => Some(v),
            _ => None,
        }
    }

    /// Draws a tensor of `shape` with `key` in the trace.
    pub(crate) fn draw(&self, key: &Tr, shape: &[usize], dtype: DType) -> Tr {
        let (fan_in, fan_out) = fans(shape);
        let (fi, fo) = (fan_in.max(1) as f64, fan_out.max(1) as f64);
        let normal = |std: f64, mean: f64| random::normal(key, shape, dtype) * std + mean;
        let uniform = |lo: f64, hi: f64| random::uniform(key, shape, dtype, lo, hi);
        match *self {
            // Constants are filled on the host; a zero-width uniform is the
            // constant for callers that trace one anyway.
            Init::Zeros => uniform(0.0, 0.0),
            Init::Ones => uniform(1.0, 1.0),
            Init::Constant(v) => uniform(v, v),
            Init::Normal { mean, std } => normal(std, mean),
            Init::Uniform { lo, hi } => uniform(lo, hi),
            Init::KaimingNormal { gain } => normal(gain / fi.sqrt(), 0.0),
            Init::KaimingUniform { gain } => {
                let b = gain * (3.0 / fi).sqrt();
                uniform(-b, b)
            }
            Init::XavierNormal { gain } => normal(gain * (2.0 / (fi + fo)).sqrt(), 0.0),
            Init::XavierUniform { gain } => {
                let b = gain * (6.0 / (fi + fo)).sqrt();
                uniform(-b, b)
            }
        }
    }

    /// Checks the initialiser's numbers before anything is traced, so a bad
    /// one is reported with the parameter's name.
    pub(crate) fn check(&self, name: &str) -> Result<(), IrError> {
        let ok = match *self {
            Init::Zeros | Init::Ones => true,
            Init::Constant(v) => v.is_finite(),
            Init::Normal { mean, std } => mean.is_finite() && std.is_finite() && std >= 0.0,
            Init::Uniform { lo, hi } => lo.is_finite() && hi.is_finite() && lo <= hi,
            Init::KaimingNormal { gain }
            | Init::KaimingUniform { gain }
            | Init::XavierNormal { gain }
            | Init::XavierUniform { gain } => gain.is_finite() && gain >= 0.0,
        };
        if ok {
            Ok(())
        } else {
            Err(IrError::invalid("init", format!("`{name}`: invalid initialiser {self:?}")))
        }
    }
}

/// `(fan_in, fan_out)` of a parameter shape, PyTorch's convention.
pub fn fans(shape: &[usize]) -> (usize, usize) {
    match shape {
        [] => (1, 1),
        [n] => (*n, *n),
        [out, inp, kernel @ ..] => {
            let r: usize = kernel.iter().product();
            (inp * r, out * r)
        }
    }
}
