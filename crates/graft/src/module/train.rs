//! Training a module with [`Trainer`]: the trainable tensors of the tree
//! become the trainer's named parameters (so AdamW's decay mask sees their
//! paths), and the state tensors, plus a Threefry key when the model
//! draws random numbers, become its buffers, carried and returned by the
//! compiled step but never differentiated or optimised.

use super::ctx::{Ctx, Mode};
use super::tree::ParamTree;
use super::vars::{ParamSpec, Role, Vars};
use crate::error::Error;
use crate::function::jit_n;
use crate::optim::{Optimizer, Trainer};
use crate::trace::Tr;
use graft_core::composite::random::key_words;
use graft_core::{IrError, Tensor};
use std::rc::Rc;

/// The buffer name of the dropout key a module trainer carries (not a
/// parameter path: `@` never comes out of [`Vars::pp`] by convention).
pub const RNG_BUFFER: &str = "@rng";

/// Checks that `tree` holds exactly the registered tensors at their types.
fn check_tree(specs: &[ParamSpec], tree: &ParamTree) -> Result<(), Error> {
    let mut problems = Vec::new();
    for s in specs {
        match tree.get(&s.name) {
            Err(_) => problems.push(format!("`{}` is missing (the model has {})", s.name, s.ty())),
            Ok(t) if t.ty() != s.ty() => problems.push(format!("`{}` is {}, the model has {}", s.name, t.ty(), s.ty())),
            Ok(_) => {}
        }
    }
    for n in tree.names() {
        if !specs.iter().any(|s| &s.name == n) {
            problems.push(format!("`{n}` is not a tensor of this model"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(IrError::invalid("trainer", format!("the tree does not match the model:\n  {}", problems.join("\n  ")))
            .into())
    }
}

/// The traced tensors of every spec in registration order, from the
/// trainable ones and the state ones in their own orders.
fn in_spec_order(specs: &[ParamSpec], params: &[Tr], state: &[Tr]) -> Vec<Tr> {
    let (mut p, mut s) = (params.iter(), state.iter());
    specs.iter().filter_map(|sp| if sp.role == Role::Trainable { p.next() } else { s.next() }).cloned().collect()
}

impl Trainer {
    /// A trainer for a module: `loss(&model, &cx, batch)` returns the
    /// scalar loss, reading parameters through `cx` (built in training mode
    /// for [`Trainer::step`], in evaluation mode for [`Trainer::eval`]).
    /// `tree` is the starting point ([`Vars::init`]); `seed` makes the
    /// dropout key, advanced by the step. Parameter names are the tree's
    /// paths, so `optimizer.decay_only(vars.decay_mask())` reaches them.
    /// The trainer keeps the model; pass an `Rc` to keep using it too (for
    /// [`forward_fn`](super::forward_fn) on [`Trainer::tree`], say).
    ///
    /// ```
    /// use graft::module::{Linear, Module, Vars};
    /// use graft::optim::{Optimizer, Schedule, Trainer};
    /// use graft::{nn, DType, Tensor};
    /// let vars = Vars::new(DType::F64);
    /// let model = Linear::new(&vars.pp("fc"), 2, 1, true).unwrap();
    /// let tree = vars.init(0).unwrap();
    /// let opt = Optimizer::sgd(Schedule::Constant(0.1));
    /// let mut tr = Trainer::for_module(&vars, &tree, model, |m: &Linear, cx, b| nn::mse(&m.forward(cx, &b[0]), &b[1]), opt, 0).unwrap();
    /// let x = Tensor::from_vec(vec![4, 2], vec![0.0f64, 1.0, 1.0, 0.0, 1.0, 1.0, 2.0, 1.0]).unwrap();
    /// let y = Tensor::from_vec(vec![4, 1], vec![1.0f64, -1.0, 0.0, -1.0]).unwrap();
    /// let first = tr.step(&[&x, &y]).unwrap();
    /// for _ in 0..300 { tr.step(&[&x, &y]).unwrap(); }
    /// assert!(tr.eval(&[&x, &y]).unwrap() < first * 0.1);
    /// assert_eq!(tr.names(), ["fc.weight", "fc.bias"]);
    /// ```
    pub fn for_module<M, L>(
        vars: &Vars,
        tree: &ParamTree,
        model: impl Into<Rc<M>>,
        loss: L,
        optimizer: Optimizer,
        seed: i64,
    ) -> Result<Trainer, Error>
    where
        M: 'static,
        L: Fn(&M, &Ctx, &[Tr]) -> Tr + 'static,
    {
        let specs = vars.specs();
        check_tree(&specs, tree)?;
        let model: Rc<M> = model.into();
        let loss = Rc::new(loss);
        let mut names = Vec::new();
        let mut params = Vec::new();
        let mut buffer_names = Vec::new();
        let mut buffers = Vec::new();
        for s in &specs {
            let t = tree.get(&s.name)?.clone();
            match s.role {
                Role::Trainable => {
                    names.push(s.name.clone());
                    params.push(t);
                }
                Role::State => {
                    buffer_names.push(s.name.clone());
                    buffers.push(t);
                }
            }
        }
        // Always the buffered step, also with no buffers: it evaluates
        // with the loss in evaluation mode, and its gradient is bitwise the
        // plain trainer's (tested).
        let (n, n_state) = (params.len(), buffers.len());
        let keyed = vars.uses_rng();
        if keyed {
            buffer_names.push(RNG_BUFFER.to_string());
            buffers.push(Tensor::from_vec(vec![2], key_words(seed).to_vec())?);
        }
        let nb = n_state + usize::from(keyed);
        let (specs2, model2, loss2) = (specs.clone(), model.clone(), loss.clone());
        let train = jit_n("module_loss", move |xs: &[Tr]| -> Vec<Tr> {
            let split = (n + nb).min(xs.len());
            let (ins, batch) = xs.split_at(split);
            let values = in_spec_order(&specs, &ins[..n.min(ins.len())], &ins[n.min(ins.len())..]);
            let mut cx = Ctx::new(specs.clone(), &values, Mode::Train);
            if keyed {
                if let Some(k) = ins.last() {
                    cx = cx.with_key(k.clone());
                }
            }
            let mut out = vec![loss(&model, &cx, batch)];
            out.extend(cx.new_state());
            out.extend(cx.final_key());
            out
        });
        let eval = jit_n("module_eval", move |xs: &[Tr]| {
            let split = (n + nb).min(xs.len());
            let (ins, batch) = xs.split_at(split);
            let values = in_spec_order(&specs2, &ins[..n.min(ins.len())], &ins[n.min(ins.len())..]);
            let cx = Ctx::new(specs2.clone(), &values, Mode::Eval);
            loss2(&model2, &cx, batch)
        });
        Trainer::with_buffers(train, eval, names, params, buffer_names, buffers, optimizer)
    }

    /// The current parameters and state as a tree in `vars`' registration
    /// order (the dropout key is not part of it).
    pub fn tree(&self, vars: &Vars) -> Result<ParamTree, Error> {
        let mut tree = ParamTree::new();
        for s in vars.specs() {
            let found = match s.role {
                Role::Trainable => self.names().iter().position(|n| *n == s.name).map(|i| &self.params[i]),
                Role::State => self.buffer_names().iter().position(|n| *n == s.name).map(|i| &self.buffers[i]),
            };
            let t = found.ok_or_else(|| IrError::invalid("trainer", format!("`{}` is not trained here", s.name)))?;
            tree.insert(s.name.clone(), t.clone())?;
        }
        Ok(tree)
    }
}
