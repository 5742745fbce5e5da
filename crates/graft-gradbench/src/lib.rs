//! graft as a GradBench tool: the protocol side, independent of how the
//! evals' functions are written.
//!
//! GradBench (the cross-tool AD benchmark) runs an *eval* process and a
//! *tool* process joined by JSON lines: the eval sends `start`, `define`,
//! `evaluate` and `analysis` messages; the tool answers each with one line.
//! This crate is everything on the tool's side except the functions
//! themselves:
//!
//! - [`protocol`]: message and response types;
//! - [`server`]: the serving loop, which answers every line and never stops
//!   on a bad one (failures become `success: false` with an `error` string);
//! - [`runs`]: the `min_runs` / `min_seconds` timing policy;
//! - [`convert`]: nested JSON lists <-> [`graft_core::Tensor`], with shape checks;
//! - [`memory`]: the memory budget that refuses inputs too large to run;
//! - [`backend`]: the [`Backend`] trait a tool implements (decode, compile
//!   once per shape, run, encode) and the per-shape [`ProgramCache`].
//!
//! docs/gradbench.md describes each eval's functions, inputs and outputs.
//!
//! ```
//! use graft_gradbench::{Server, protocol::Response};
//! # use graft_gradbench::{Backend, GbError};
//! # use std::sync::Arc;
//! # struct NoModules;
//! # impl Backend for NoModules {
//! #     type Args = (); type Program = (); type Output = ();
//! #     fn tool(&self) -> &str { "graft" }
//! #     fn define(&mut self, m: &str) -> Result<(), GbError> { Err(GbError::UnknownModule(m.into())) }
//! #     fn decode(&mut self, _: &str, _: &str, _: &serde_json::Value) -> Result<(), GbError> { Ok(()) }
//! #     fn compile(&mut self, _: &str, _: &str, _: &()) -> Result<Arc<()>, GbError> { Ok(Arc::new(())) }
//! #     fn run(&self, _: &(), _: &()) -> Result<(), GbError> { Ok(()) }
//! #     fn encode(&self, _: &str, _: &str, _: &(), _: ()) -> Result<serde_json::Value, GbError> { Ok(serde_json::Value::Null) }
//! # }
//! let mut server = Server::new(NoModules);
//! let input = "{\"id\": 0, \"kind\": \"start\"}\n{\"id\": 1, \"kind\": \"define\", \"module\": \"gmm\"}\n";
//! let mut out = Vec::new();
//! server.serve(input.as_bytes(), &mut out).unwrap();
//! let out = String::from_utf8(out).unwrap();
//! assert_eq!(out, "{\"id\":0,\"tool\":\"graft\"}\n{\"id\":1,\"success\":false,\"error\":\"unknown module `gmm`\"}\n");
//! ```

pub mod backend;
pub mod convert;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod lang;
pub mod memory;
pub mod protocol;
pub mod runs;
pub mod server;

pub use backend::{Backend, ProgramCache, ShapeKey, TensorArgs};
pub use error::GbError;
pub use lang::LangBackend;
pub use protocol::{Message, Response, Timing};
pub use runs::Runs;
pub use server::{serve_stdio, Server, SessionLog};
