//! Modules: layers and models as plain Rust structs with named parameters
//! (issue 13). A model is built from a [`Vars`] context that gives every
//! tensor a path (`encoder.layers.1.attn.wq`) and an initialiser; the
//! values live apart from the struct, in a [`ParamTree`] drawn by
//! [`Vars::init`] from a Threefry key (the Equinox/Flax split between
//! parameters and the forward function, with candle's `vb.pp(..)` paths).
//! At trace time [`Module::forward`] reads the traced values from a
//! [`Ctx`], which also carries the mode (train or eval), the dropout key
//! and the new values of state tensors such as BatchNorm's running
//! statistics. [`Trainer::for_module`](crate::optim::Trainer::for_module)
//! compiles forward, backward, optimizer and state updates into one step.
//!
//! ```
//! use graft::module::{forward_fn, Activation, Linear, Mode, Module, Sequential, Vars};
//! use graft::optim::{Optimizer, Schedule, Trainer};
//! use graft::{nn, DType, Tensor};
//!
//! let vars = Vars::new(DType::F64);
//! let layers = vars.pp("net");
//! let net = Sequential::new()
//!     .add(Linear::new(&layers.pp(0), 2, 8, true).unwrap())
//!     .add(Activation::Tanh)
//!     .add(Linear::new(&layers.pp(2), 8, 2, true).unwrap());
//! let tree = vars.init(42).unwrap();
//! assert_eq!(tree.numel(), 2 * 8 + 8 + 8 * 2 + 2);
//!
//! // AdamW without decay on biases (the mask keeps matrices only).
//! let opt = Optimizer::adamw(Schedule::Constant(0.05), 1e-2).decay_only(vars.decay_mask());
//! let loss = |m: &Sequential, cx: &graft::module::Ctx, b: &[graft::Tr]| nn::cross_entropy(&m.forward(cx, &b[0]), &b[1], -1);
//! let mut tr = Trainer::for_module(&vars, &tree, net, loss, opt, 0).unwrap();
//! let x = Tensor::from_vec(vec![4, 2], vec![1.0f64, 1.0, -1.0, -1.0, 1.0, -1.0, -1.0, 1.0]).unwrap();
//! let y = Tensor::from_vec(vec![4], vec![0i32, 0, 1, 1]).unwrap();
//! let first = tr.step(&[&x, &y]).unwrap();
//! for _ in 0..300 {
//!     tr.step(&[&x, &y]).unwrap();
//! }
//! assert!(tr.eval(&[&x, &y]).unwrap() < 0.1 * first);
//! ```

mod ctx;
mod init;
pub mod layers;
mod train;
mod tree;
mod tree_io;
mod vars;

pub use ctx::{forward_fn, Ctx, Mode, Module};
pub use init::{fans, Init};
pub use layers::*;
pub use train::RNG_BUFFER;
pub use tree::ParamTree;
pub use tree_io::{tensor_bytes, tensor_from_view, to_safetensors, write_atomically};
pub use vars::{Param, ParamSpec, Role, Vars};
