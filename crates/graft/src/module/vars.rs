//! The naming and initialising context modules are built from (candle's
//! `VarBuilder` with path prefixes): `vars.pp("encoder").pp("layers").pp(1)`
//! names everything registered through it `encoder.layers.1.*`. Building a
//! module registers each of its tensors once (path, shape, dtype,
//! initialiser, role) and hands back a [`Param`] handle; nothing is
//! allocated until [`Vars::init`] draws the whole tree from one key.

use super::init::Init;
use super::tree::ParamTree;
use crate::error::Error;
use crate::function::jit_n;
use crate::trace::Tr;
use graft_core::composite::random::key_words;
use graft_core::{DType, IrError, Tensor, TensorType};
use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt::Display;
use std::rc::Rc;

/// What a registered tensor is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Trained: differentiated and updated by the optimizer.
    Trainable,
    /// Model state (BatchNorm's running statistics): read by the forward
    /// pass, updated by the training step from what the forward pass
    /// returns, never differentiated and never seen by the optimizer.
    State,
}

/// One registered tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamSpec {
    /// Full path name (`encoder.layers.1.attn.wq`).
    pub name: String,
    /// Static shape.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
    /// How it is initialised.
    pub init: Init,
    /// Trainable parameter or state.
    pub role: Role,
}

impl ParamSpec {
    /// The tensor type.
    pub fn ty(&self) -> TensorType {
        TensorType::new(self.dtype, self.shape.clone())
    }
}

/// A handle to a registered tensor: its name and its position among all
/// registered tensors (the position is what a traced forward pass reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    pub(crate) name: Rc<str>,
    pub(crate) index: usize,
}

impl Param {
    /// The full path name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

#[derive(Debug, Default)]
struct Registry {
    specs: Vec<ParamSpec>,
    names: HashSet<String>,
    uses_rng: bool,
}

/// A path prefix into a shared registry of parameters.
///
/// ```
/// use graft::module::{Init, Vars};
/// use graft::DType;
/// let vars = Vars::new(DType::F32);
/// let enc = vars.pp("encoder").pp("layers").pp(1);
/// let w = enc.param("wq", &[4, 4], Init::xavier()).unwrap();
/// assert_eq!(w.name(), "encoder.layers.1.wq");
/// // The same path twice is an error, not a silent alias.
/// assert!(enc.param("wq", &[4, 4], Init::Zeros).is_err());
/// let tree = vars.init(0).unwrap();
/// assert_eq!(tree.names(), ["encoder.layers.1.wq"]);
/// ```
#[derive(Debug, Clone)]
pub struct Vars {
    reg: Rc<RefCell<Registry>>,
    prefix: String,
    dtype: DType,
}

impl Vars {
    /// An empty registry whose parameters have float type `dtype`.
    pub fn new(dtype: DType) -> Vars {
        Vars { reg: Rc::default(), prefix: String::new(), dtype }
    }

    /// A child context: names registered through it start with
    /// `prefix.name.` (`pp` for "push prefix", as in candle).
    pub fn pp(&self, name: impl Display) -> Vars {
        let name = name.to_string();
        let prefix = if self.prefix.is_empty() { name } else { format!("{}.{name}", self.prefix) };
        Vars { reg: self.reg.clone(), prefix, dtype: self.dtype }
    }

    /// The float type new parameters get.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// This context's path prefix (empty at the root).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn full_name(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    fn register(&self, name: &str, shape: &[usize], init: Init, role: Role) -> Result<Param, Error> {
        let full = self.full_name(name);
        let bad_name = name.is_empty() || name.split('.').any(str::is_empty);
        if bad_name {
            return Err(IrError::invalid("vars", format!("`{full}`: a parameter name needs non-empty parts")).into());
        }
        init.check(&full)?;
        let mut reg = self.reg.borrow_mut();
        if !reg.names.insert(full.clone()) {
            return Err(IrError::invalid("vars", format!("`{full}` is registered twice")).into());
        }
        let index = reg.specs.len();
        reg.specs.push(ParamSpec { name: full.clone(), shape: shape.to_vec(), dtype: self.dtype, init, role });
        Ok(Param { name: full.into(), index })
    }

    /// Registers a trainable parameter `prefix.name`.
    pub fn param(&self, name: &str, shape: &[usize], init: Init) -> Result<Param, Error> {
        self.register(name, shape, init, Role::Trainable)
    }

    /// Registers a non-trainable state tensor `prefix.name` (running
    /// statistics): carried and updated by the training step, never
    /// differentiated or optimised.
    pub fn state(&self, name: &str, shape: &[usize], init: Init) -> Result<Param, Error> {
        self.register(name, shape, init, Role::State)
    }

    /// Records that the model draws random numbers in training (dropout),
    /// so a training step carries a key for it.
    pub fn use_rng(&self) {
        self.reg.borrow_mut().uses_rng = true;
    }

    /// Whether some module asked for random numbers ([`Vars::use_rng`]).
    pub fn uses_rng(&self) -> bool {
        self.reg.borrow().uses_rng
    }

    /// Every registered tensor, in registration order (the whole registry,
    /// whatever this context's prefix).
    pub fn specs(&self) -> Vec<ParamSpec> {
        self.reg.borrow().specs.clone()
    }

    /// Every registered name in order.
    pub fn names(&self) -> Vec<String> {
        self.reg.borrow().specs.iter().map(|s| s.name.clone()).collect()
    }

    /// The usual weight-decay mask for [`Optimizer::decay_only`](crate::optim::Optimizer::decay_only):
    /// decay the trainable tensors of rank 2 and more (matrices, kernels,
    /// embeddings) and not the vectors (biases, norm scales and shifts),
    /// which is what "no decay on biases and norm weights" means for every
    /// layer here. The set is taken now: register the model first.
    pub fn decay_mask(&self) -> impl Fn(&str) -> bool + 'static {
        let decayed: HashSet<String> = self
            .reg
            .borrow()
            .specs
            .iter()
            .filter(|s| s.role == Role::Trainable && s.shape.len() >= 2)
            .map(|s| s.name.clone())
            .collect();
        move |name: &str| decayed.contains(name)
    }

    /// Draws every registered tensor from the Threefry key of `seed`.
    /// Each random initialiser draws with its own key, the seed's key with
    /// a 64-bit hash of the parameter's path mixed into its words (Flax
    /// folds module names into its keys for the same reason), so a tensor's value depends
    /// on the seed and its path only: adding or removing other layers does
    /// not change it. Constant initialisers are filled directly. The same
    /// seed gives the same tree, bit for bit.
    pub fn init(&self, seed: i64) -> Result<ParamTree, Error> {
        let specs = self.specs();
        let random: Vec<&ParamSpec> = specs.iter().filter(|s| s.init.constant().is_none()).collect();
        let mut drawn = Vec::new();
        if !random.is_empty() {
            let n = random.len();
            let draw = jit_n("init", |v: &[Tr]| -> Vec<Tr> {
                let row = |i: usize| v[0].slice_axis(0, Some(i as isize), Some(i as isize + 1), 1).reshape(&[2]);
                random.iter().enumerate().map(|(i, s)| s.init.draw(&row(i), &s.shape, s.dtype)).collect()
            });
            let words: Vec<i32> = random.iter().flat_map(|s| path_key(seed, &s.name)).collect();
            let keys = Tensor::from_vec(vec![n, 2], words)?;
            drawn = draw.call(&[&keys])?;
        }
        let mut drawn = drawn.into_iter();
        let mut tree = ParamTree::new();
        for s in &specs {
            let t = match s.init.constant() {
                Some(v) => Tensor::full(&s.ty(), v),
                None => drawn.next().ok_or_else(|| IrError::invalid("init", "internal error: too few draws"))?,
            };
            tree.insert(s.name.clone(), t)?;
        }
        Ok(tree)
    }
}

/// The key words of one parameter: the seed's key with the FNV-1a hash of
/// its path XORed in (distinct paths give distinct Threefry keys, hence
/// independent streams).
fn path_key(seed: i64, path: &str) -> [i32; 2] {
    let h = path.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    let [k0, k1] = key_words(seed);
    [k0 ^ (h >> 32) as u32 as i32, k1 ^ h as u32 as i32]
}
