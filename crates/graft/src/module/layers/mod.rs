//! The layers, each a plain struct of [`Param`](super::Param) handles
//! implementing [`Module`](super::Module), with PyTorch's parameter names,
//! layouts and default initialisation (so weights can be compared or
//! exchanged with PyTorch by name).

mod attention;
mod basic;
mod conv;
mod norm;
mod recurrent;

pub use attention::{MultiHeadAttention, TransformerBlock};
pub use basic::{Activation, Dropout, Embedding, Flatten, Linear, Sequential};
pub use conv::{Conv, Conv1d, Conv2d, ConvTranspose2d};
pub use norm::{BatchNorm, GroupNorm, LayerNorm};
pub use recurrent::{gru, lstm, Gru, Lstm, RecurrentWeights};
