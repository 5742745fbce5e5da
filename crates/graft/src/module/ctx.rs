//! The traced side of a model: [`Module::forward`] reads its parameters
//! from a [`Ctx`], which holds the traced values of the whole parameter
//! tree (in registration order), the mode (train or eval), the random key
//! dropout draws from, and the new values of state tensors (BatchNorm's
//! running statistics) that the forward pass computes in training.

use super::vars::{Param, ParamSpec, Role, Vars};
use crate::function::{jit_n, Jit};
use crate::random;
use crate::trace::{fail_without_operand, Tr};
use graft_core::IrError;
use std::cell::RefCell;

/// Training or evaluation: selects batch or running statistics in
/// BatchNorm and turns Dropout on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Batch statistics (and running-statistics updates), dropout on.
    Train,
    /// Running statistics, dropout off.
    Eval,
}

/// A layer or a model: a plain struct holding [`Param`] handles (made by
/// [`Vars`] when it was built) and its configuration; the parameters'
/// values come from the [`Ctx`] at trace time. Errors (a wrong input
/// shape) poison the trace and are returned where it is compiled or run.
pub trait Module {
    /// The output for input `x`.
    fn forward(&self, cx: &Ctx, x: &Tr) -> Tr;
}

impl<M: Module + ?Sized> Module for Box<M> {
    fn forward(&self, cx: &Ctx, x: &Tr) -> Tr {
        (**self).forward(cx, x)
    }
}

impl<M: Module + ?Sized> Module for std::rc::Rc<M> {
    fn forward(&self, cx: &Ctx, x: &Tr) -> Tr {
        (**self).forward(cx, x)
    }
}

/// What a forward pass sees: the traced parameter tree, the mode, a key.
#[derive(Debug)]
pub struct Ctx {
    specs: Vec<ParamSpec>,
    values: Vec<Tr>,
    mode: Mode,
    key: RefCell<Option<Tr>>,
    updates: RefCell<Vec<Option<Tr>>>,
}

impl Ctx {
    /// A context over `values`, the traced tensors of every spec in
    /// registration order (`vars.specs()`; what [`Vars::init`] returns,
    /// flattened). A count or type that does not match is reported when a
    /// parameter is read.
    pub fn new(specs: Vec<ParamSpec>, values: &[Tr], mode: Mode) -> Ctx {
        let n = specs.len();
        Ctx { specs, values: values.to_vec(), mode, key: RefCell::new(None), updates: RefCell::new(vec![None; n]) }
    }

    /// The same context drawing random numbers (dropout) from `key` (`i32[2]`).
    pub fn with_key(self, key: Tr) -> Ctx {
        *self.key.borrow_mut() = Some(key);
        self
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether this is a training pass.
    pub fn training(&self) -> bool {
        self.mode == Mode::Train
    }

    /// The traced value of a parameter or state tensor (a poisoned handle,
    /// whose error the trace returns, if the values do not match the specs).
    pub fn get(&self, p: &Param) -> Tr {
        let err = |msg: String| {
            let e = IrError::invalid("module", msg);
            match self.values.first() {
                Some(v) => v.lift(|_, _| Err(e)),
                None => fail_without_operand(e),
            }
        };
        if self.values.len() != self.specs.len() {
            return err(format!(
                "the forward pass got {} tensors for a model of {} (parameters and state, in registration order)",
                self.values.len(),
                self.specs.len()
            ));
        }
        let (Some(spec), Some(v)) = (self.specs.get(p.index), self.values.get(p.index)) else {
            return err(format!("`{}` does not belong to this model", p.name()));
        };
        if spec.name != p.name() {
            return err(format!("`{}` does not belong to this model", p.name()));
        }
        match v.ty() {
            Some(t) if t != spec.ty() => err(format!("`{}` should be {}, got {t}", spec.name, spec.ty())),
            _ => v.clone(),
        }
    }

    /// A fresh key for one random draw: the context's key is split into
    /// the one returned and the one kept for the next draw, so every
    /// dropout layer gets an independent mask. Without a key this is a
    /// poisoned handle (training with dropout needs one).
    pub fn next_key(&self, like: &Tr) -> Tr {
        let mut k = self.key.borrow_mut();
        match k.take() {
            Some(key) => {
                let mut two = random::split(&key, 2);
                let use_now = two.pop().unwrap_or_else(|| key.clone());
                *k = Some(two.pop().unwrap_or(key));
                use_now
            }
            None => like.lift(|_, _| {
                Err(IrError::invalid("module", "a training pass that draws random numbers (dropout) needs a key"))
            }),
        }
    }

    /// Records the new value of a state tensor (returned by the training
    /// step; the parameter's type must not change).
    pub fn set_state(&self, p: &Param, value: Tr) {
        let ok = self.specs.get(p.index).is_some_and(|s| s.role == Role::State && s.name == p.name());
        let value = if ok {
            value
        } else {
            value.lift(|_, _| Err(IrError::invalid("module", format!("`{}` is not a state tensor", p.name()))))
        };
        if let Some(slot) = self.updates.borrow_mut().get_mut(p.index) {
            *slot = Some(value);
        }
    }

    /// The state tensors after this pass, in registration order: the
    /// recorded new value, or the input value where none was recorded.
    pub fn new_state(&self) -> Vec<Tr> {
        let ups = self.updates.borrow();
        self.specs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.role == Role::State)
            .filter_map(|(i, _)| ups[i].clone().or_else(|| self.values.get(i).cloned()))
            .collect()
    }

    /// The key left after every draw of this pass (`None` without a key).
    pub fn final_key(&self) -> Option<Tr> {
        self.key.borrow().clone()
    }
}

/// The forward pass as a traced function of the parameter tree: inputs
/// are the tree's tensors in registration order, then (in training, when
/// the model draws random numbers) an `i32[2]` key, then `x`; outputs are
/// the module's output and, in training, the new state tensors in
/// registration order and the next key. The functional form of a model,
/// to differentiate (`.grad(..)`), `vmap` or call directly.
///
/// ```
/// use graft::module::{forward_fn, Linear, Mode, Vars};
/// use graft::{DType, Tensor};
/// let vars = Vars::new(DType::F64);
/// let fc = Linear::new(&vars.pp("fc"), 3, 2, true).unwrap();
/// let tree = vars.init(0).unwrap();
/// let f = forward_fn(&vars, &fc, Mode::Eval);
/// let x = Tensor::from_vec(vec![1, 3], vec![1.0f64, 2.0, 3.0]).unwrap();
/// let mut ins: Vec<&Tensor> = tree.tensors().iter().collect();
/// ins.push(&x);
/// let y = f.call(&ins).unwrap();
/// let (w, b) = (tree.get("fc.weight").unwrap().to_f64_vec(), tree.get("fc.bias").unwrap().to_f64_vec());
/// let want0 = w[0] + 2.0 * w[1] + 3.0 * w[2] + b[0];
/// assert!((y[0].to_f64_vec()[0] - want0).abs() < 1e-12);
/// ```
pub fn forward_fn<'a, M: Module + ?Sized>(
    vars: &Vars,
    module: &'a M,
    mode: Mode,
) -> Jit<impl Fn(&[Tr]) -> Vec<Tr> + 'a> {
    let specs = vars.specs();
    let keyed = mode == Mode::Train && vars.uses_rng();
    jit_n("forward", move |xs: &[Tr]| -> Vec<Tr> {
        let n = specs.len();
        let k = usize::from(keyed);
        let Some(x) = xs.get(n + k) else {
            let e = IrError::invalid("forward", format!("expected {} inputs (the tree's tensors, then x)", n + k + 1));
            return vec![match xs.first() {
                Some(v) => v.lift(|_, _| Err(e)),
                None => fail_without_operand(e),
            }];
        };
        let mut cx = Ctx::new(specs.clone(), &xs[..n], mode);
        if keyed {
            cx = cx.with_key(xs[n].clone());
        }
        let mut out = vec![module.forward(&cx, x)];
        if mode == Mode::Train {
            out.extend(cx.new_state());
            out.extend(cx.final_key());
        }
        out
    })
}
