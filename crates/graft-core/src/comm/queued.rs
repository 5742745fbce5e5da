//! [`Queued`]: a communicator whose collectives run on a background thread,
//! one at a time, in the order they were called or started.
//!
//! Why one thread for every collective, not only the background ones: ranks
//! stay matched only if each rank issues its collectives in the same order.
//! Were a synchronous `all_gather` on the caller's thread allowed to
//! overtake an `all_reduce` started earlier and still queued, two ranks
//! could enter different collectives and hang (or, under MPI, mix their
//! messages). With one queue, the order of calls is the order on the wire,
//! and a transport that is not thread-safe (MPI initialised as
//! `Serialized`) is only ever entered by this thread.

use super::{CommError, Communicator, Pending, PendingState, ReduceOp};
use crate::tensor::Storage;
use crate::types::TensorType;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

type Job = Box<dyn FnOnce(&dyn Communicator) + Send>;

/// Wraps a communicator so that its collectives run on a background thread
/// (see the module doc); `all_reduce_start` returns at once.
pub struct Queued {
    inner: Arc<dyn Communicator>,
    jobs: Mutex<Sender<Job>>,
}

impl Queued {
    /// Starts the background thread for `inner`. The thread ends when the
    /// `Queued` is dropped (after the collectives already queued).
    pub fn new(inner: Arc<dyn Communicator>) -> Result<Queued, CommError> {
        let (tx, rx) = channel::<Job>();
        let worker = inner.clone();
        std::thread::Builder::new()
            .name(format!("graft-comm-{}", inner.rank()))
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    job(&*worker);
                }
            })
            .map_err(|e| CommError::Transport {
                op: "start".into(),
                msg: format!("could not start the communication thread: {e}"),
            })?;
        Ok(Queued { inner, jobs: Mutex::new(tx) })
    }

    /// Queues `f` and returns where its result will arrive.
    fn submit<R: Send + 'static>(
        &self,
        op: &str,
        f: impl FnOnce(&dyn Communicator) -> Result<R, CommError> + Send + 'static,
    ) -> Receiver<Result<R, CommError>> {
        let (tx, rx) = channel();
        let job: Job = Box::new(move |c| {
            // The caller may have stopped waiting (an error elsewhere); the
            // collective still ran, which is what keeps the ranks matched.
            let _ = tx.send(f(c));
        });
        let sent = self.jobs.lock().unwrap_or_else(|e| e.into_inner()).send(job);
        if let Err(std::sync::mpsc::SendError(job)) = sent {
            // The thread is gone: nothing can run the collective any more.
            drop(job);
            let (tx, rx) = channel();
            let _ = tx.send(Err(CommError::Transport {
                op: op.to_string(),
                msg: "the communication thread has ended".into(),
            }));
            return rx;
        }
        rx
    }

    /// Queues `f` and waits for it.
    fn call<R: Send + 'static>(
        &self,
        op: &str,
        f: impl FnOnce(&dyn Communicator) -> Result<R, CommError> + Send + 'static,
    ) -> Result<R, CommError> {
        self.submit(op, f).recv().unwrap_or_else(|_| {
            Err(CommError::Transport {
                op: op.to_string(),
                msg: "the communication thread ended before answering".into(),
            })
        })
    }
}

impl Communicator for Queued {
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn all_reduce(&self, op: ReduceOp, ty: &TensorType, x: &Storage) -> Result<Storage, CommError> {
        self.all_reduce_start(op, ty, x.clone()).wait()
    }

    fn all_gather(&self, ty: &TensorType, x: &Storage) -> Result<Storage, CommError> {
        let (ty, x) = (ty.clone(), x.clone());
        self.call("all_gather", move |c| c.all_gather(&ty, &x))
    }

    fn permute(&self, ty: &TensorType, x: &Storage, pairs: &[(usize, usize)]) -> Result<Storage, CommError> {
        let (ty, x, pairs) = (ty.clone(), x.clone(), pairs.to_vec());
        self.call("ppermute", move |c| c.permute(&ty, &x, &pairs))
    }

    fn all_reduce_start(&self, op: ReduceOp, ty: &TensorType, x: Storage) -> Pending {
        let name = format!("all_reduce({op:?})");
        let ty = ty.clone();
        let rx = self.submit(&name, move |c| c.all_reduce(op, &ty, &x));
        Pending(PendingState::Queued { op: name, rx })
    }
}
