//! The serving loop: one JSON line in, one JSON line out, until end of input.
//!
//! Invariants: every non-blank input line gets exactly one response line,
//! written and flushed before the next line is read (the eval waits for it);
//! nothing but responses is written to the output; no message (malformed
//! JSON, invalid UTF-8, unknown module or function, wrong input shape, a
//! backend error or even a backend panic) stops the loop. Only an I/O error on
//! the streams themselves (the eval went away) ends a session early.

use std::collections::HashSet;
use std::io::{self, BufRead, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use serde_json::Value;

use crate::backend::Backend;
use crate::error::GbError;
use crate::protocol::{parse_message, Id, Message, Response, Timing};
use crate::runs::Runs;

/// What happened in a session, for logs and tests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionLog {
    /// Responses written.
    pub responses: usize,
    /// Responses with `success: false`.
    pub failures: usize,
    /// `analysis` verdicts that rejected an output: (evaluate id, reason).
    pub invalid: Vec<(Id, Option<String>)>,
    /// `analysis` verdicts that accepted an output.
    pub valid: usize,
}

/// Serves the GradBench protocol for one backend.
pub struct Server<B: Backend> {
    backend: B,
    defined: HashSet<String>,
    log: SessionLog,
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Runs `f`, turning a panic into `GbError::Panic` so one bad input cannot
/// end the session.
fn guarded<T>(f: impl FnOnce() -> Result<T, GbError>) -> Result<T, GbError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| Err(GbError::Panic(panic_text(&*p))))
}

impl<B: Backend> Server<B> {
    /// A server with nothing defined yet.
    pub fn new(backend: B) -> Server<B> {
        Server { backend, defined: HashSet::new(), log: SessionLog::default() }
    }

    /// The backend (e.g. to inspect its cache).
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The session so far.
    pub fn log(&self) -> &SessionLog {
        &self.log
    }

    /// Answers one input line; `None` for a blank line (not a message).
    pub fn handle_line(&mut self, line: &str) -> Option<Response> {
        if line.trim().is_empty() {
            return None;
        }
        let response = match parse_message(line) {
            Err(bad) => Response::failure(bad.id, &bad.error),
            Ok(msg) => self.handle(msg),
        };
        self.log.responses += 1;
        if response.success == Some(false) {
            self.log.failures += 1;
        }
        Some(response)
    }

    /// Answers one parsed message.
    pub fn handle(&mut self, msg: Message) -> Response {
        match msg {
            Message::Start { id, .. } => Response::start(id, self.backend.tool()),
            Message::Define { id, module } => {
                let start = Instant::now();
                match guarded(|| self.backend.define(&module)) {
                    Ok(()) => {
                        self.defined.insert(module);
                        Response {
                            timings: Some(vec![Timing::new("define", start.elapsed())]),
                            ..Response::defined(id)
                        }
                    }
                    Err(e) => Response::failure(Some(id), &e),
                }
            }
            Message::Evaluate { id, module, function, input, .. } => {
                match guarded(|| self.evaluate(&module, &function, &input)) {
                    Ok((output, timings)) => Response::evaluated(id, output, timings),
                    Err(e) => Response::failure(Some(id), &e),
                }
            }
            Message::Analysis { id, of, valid, error } => {
                if valid {
                    self.log.valid += 1;
                } else {
                    self.log.invalid.push((of, error));
                }
                Response::ack(id)
            }
            Message::Other { id, .. } => Response::ack(id),
        }
    }

    /// Decode, compile (timed once), run under the input's policy (timed per
    /// run), encode.
    fn evaluate(&mut self, module: &str, function: &str, input: &Value) -> Result<(Value, Vec<Timing>), GbError> {
        if !self.defined.contains(module) {
            return Err(GbError::NotDefined(module.to_string()));
        }
        let runs = Runs::from_input(input)?;
        let args = self.backend.decode(module, function, input)?;
        let start = Instant::now();
        let program = self.backend.compile(module, function, &args)?;
        let compile = Timing::new("compile", start.elapsed());
        let backend = &self.backend;
        let (out, mut timings) = runs.repeat(|| backend.run(&program, &args))?;
        timings.insert(0, compile);
        let output = self.backend.encode(module, function, &args, out)?;
        Ok((output, timings))
    }

    /// Serves until end of input. Each response is flushed before the next
    /// line is read. Lines that are not UTF-8 get a malformed-message answer.
    pub fn serve(&mut self, mut input: impl BufRead, mut output: impl Write) -> io::Result<()> {
        let mut buf = Vec::new();
        loop {
            buf.clear();
            if input.read_until(b'\n', &mut buf)? == 0 {
                return Ok(());
            }
            let response = match std::str::from_utf8(&buf) {
                Ok(line) => self.handle_line(line),
                Err(e) => {
                    let err = GbError::Malformed(format!("line is not UTF-8: {e}"));
                    self.log.responses += 1;
                    self.log.failures += 1;
                    Some(Response::failure(None, &err))
                }
            };
            if let Some(r) = response {
                writeln!(output, "{}", r.to_line())?;
                output.flush()?;
            }
        }
    }
}

/// Serves on the process's stdin/stdout until stdin closes, as a tool
/// process does. The eval closing its end early (a broken pipe on stdout) is
/// the end of the session, not a failure. Returns the session log.
pub fn serve_stdio<B: Backend>(backend: B) -> io::Result<SessionLog> {
    let mut server = Server::new(backend);
    match server.serve(io::stdin().lock(), io::stdout().lock()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e),
        _ => Ok(server.log),
    }
}
