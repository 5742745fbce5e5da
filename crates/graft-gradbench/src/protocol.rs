//! GradBench's JSON-lines protocol: the messages an eval sends and the
//! responses a tool writes back (CONTRIBUTING.md, "Protocol", of GradBench).
//!
//! Messages are parsed by hand from a `serde_json::Value` rather than by a
//! derived tagged enum, for two reasons: an unknown `kind` must still be
//! answered (with just its id), and a malformed message must still yield the
//! id it carried, when it carried one, so the error response can name it.
//! Responses are plain serde structs; optional fields are omitted, never
//! written as `null`, because the protocol types declare them optional.
//!
//! Invariant: every response carries the id of the message it answers, or
//! `null` when the line had no readable integer id.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::GbError;

/// A message id. GradBench numbers messages with non-negative integers.
pub type Id = i64;

/// One message from the eval.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// The first message of a session.
    Start {
        /// Message id.
        id: Id,
        /// The eval's name, when it gave one.
        eval: Option<String>,
        /// The eval's configuration, when it gave one.
        config: Option<Value>,
    },
    /// A request to prepare a module.
    Define {
        /// Message id.
        id: Id,
        /// Module name (one per eval: `gmm`, `lse`, ...).
        module: String,
    },
    /// A request to run one function of a module on one input.
    Evaluate {
        /// Message id.
        id: Id,
        /// Module name.
        module: String,
        /// Function name within the module.
        function: String,
        /// The eval-specific input (often an object with `min_runs`/`min_seconds`).
        input: Value,
        /// A short human-readable description of the input.
        description: Option<String>,
    },
    /// The eval's verdict on an earlier `evaluate` response.
    Analysis {
        /// Message id.
        id: Id,
        /// Id of the `evaluate` message that was checked.
        of: Id,
        /// Whether the output was accepted.
        valid: bool,
        /// Why it was rejected, when it was.
        error: Option<String>,
    },
    /// Any other kind: answered with the id alone, as the protocol requires.
    Other {
        /// Message id.
        id: Id,
        /// The kind as sent.
        kind: String,
    },
}

impl Message {
    /// The message id.
    pub fn id(&self) -> Id {
        match self {
            Message::Start { id, .. }
            | Message::Define { id, .. }
            | Message::Evaluate { id, .. }
            | Message::Analysis { id, .. }
            | Message::Other { id, .. } => *id,
        }
    }
}

/// Why a line could not be read as a message, with the id it carried if any.
#[derive(Debug, Clone, PartialEq)]
pub struct BadMessage {
    /// The id found on the line, if one could be read.
    pub id: Option<Id>,
    /// What was wrong.
    pub error: GbError,
}

fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Result<&'a Value, GbError> {
    obj.get(name).ok_or_else(|| GbError::Malformed(format!("missing field `{name}`")))
}

fn string_field(obj: &Map<String, Value>, name: &str) -> Result<String, GbError> {
    match field(obj, name)? {
        Value::String(s) => Ok(s.clone()),
        other => Err(GbError::Malformed(format!("field `{name}` must be a string, found {}", json_kind(other)))),
    }
}

fn opt_string_field(obj: &Map<String, Value>, name: &str) -> Result<Option<String>, GbError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(GbError::Malformed(format!("field `{name}` must be a string, found {}", json_kind(other)))),
    }
}

fn id_field(obj: &Map<String, Value>, name: &str) -> Result<Id, GbError> {
    match field(obj, name)? {
        Value::Number(n) => {
            n.as_i64().ok_or_else(|| GbError::Malformed(format!("field `{name}` must be an integer, found {n}")))
        }
        other => Err(GbError::Malformed(format!("field `{name}` must be an integer, found {}", json_kind(other)))),
    }
}

/// A short name for a JSON value's kind, for error messages.
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Parses one line of the eval's output into a message.
pub fn parse_message(line: &str) -> Result<Message, BadMessage> {
    let value: Value = serde_json::from_str(line)
        .map_err(|e| BadMessage { id: None, error: GbError::Malformed(format!("invalid JSON: {e}")) })?;
    let Value::Object(obj) = value else {
        return Err(BadMessage {
            id: None,
            error: GbError::Malformed(format!("a message must be a JSON object, found {}", json_kind(&value))),
        });
    };
    let id = id_field(&obj, "id").map_err(|error| BadMessage { id: None, error })?;
    let bad = |error| BadMessage { id: Some(id), error };
    let kind = string_field(&obj, "kind").map_err(bad)?;
    let msg = match kind.as_str() {
        "start" => Message::Start {
            id,
            eval: opt_string_field(&obj, "eval").map_err(bad)?,
            config: obj.get("config").cloned(),
        },
        "define" => Message::Define { id, module: string_field(&obj, "module").map_err(bad)? },
        "evaluate" => Message::Evaluate {
            id,
            module: string_field(&obj, "module").map_err(bad)?,
            function: string_field(&obj, "function").map_err(bad)?,
            input: field(&obj, "input").map_err(bad)?.clone(),
            description: opt_string_field(&obj, "description").map_err(bad)?,
        },
        "analysis" => Message::Analysis {
            id,
            of: id_field(&obj, "of").map_err(bad)?,
            valid: match field(&obj, "valid").map_err(bad)? {
                Value::Bool(b) => *b,
                other => {
                    return Err(bad(GbError::Malformed(format!(
                        "field `valid` must be a boolean, found {}",
                        json_kind(other)
                    ))))
                }
            },
            error: opt_string_field(&obj, "error").map_err(bad)?,
        },
        _ => Message::Other { id, kind },
    };
    Ok(msg)
}

/// A named duration. By GradBench convention `"evaluate"` is one run of the
/// function itself, excluding JSON decoding and encoding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Timing {
    /// What was timed (`"evaluate"`, `"compile"`, ...); need not be unique.
    pub name: String,
    /// How long it took.
    pub nanoseconds: u64,
}

impl Timing {
    /// A timing from a name and a `Duration` (saturating at u64::MAX ns, ~584 years).
    pub fn new(name: impl Into<String>, d: std::time::Duration) -> Timing {
        Timing { name: name.into(), nanoseconds: u64::try_from(d.as_nanos()).unwrap_or(u64::MAX) }
    }
}

/// One response line. Field order follows the protocol's examples.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Response {
    /// Id of the message answered (`null` when it had none).
    pub id: Option<Id>,
    /// The tool's name (start responses only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Whether define/evaluate succeeded (absent for start, analysis, other kinds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub success: Option<bool>,
    /// The function's result (successful evaluate only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Subtask timings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<Vec<Timing>>,
    /// What went wrong (failed define/evaluate, or an unreadable message).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Response {
    /// A response carrying only the id (analysis and unknown kinds).
    pub fn ack(id: Id) -> Response {
        Response { id: Some(id), tool: None, success: None, output: None, timings: None, error: None }
    }

    /// The answer to `start`.
    pub fn start(id: Id, tool: &str) -> Response {
        Response { tool: Some(tool.to_string()), ..Response::ack(id) }
    }

    /// A successful define.
    pub fn defined(id: Id) -> Response {
        Response { success: Some(true), ..Response::ack(id) }
    }

    /// A successful evaluate.
    pub fn evaluated(id: Id, output: Value, timings: Vec<Timing>) -> Response {
        Response { success: Some(true), output: Some(output), timings: Some(timings), ..Response::ack(id) }
    }

    /// A failure (define, evaluate or an unreadable message).
    pub fn failure(id: Option<Id>, error: &GbError) -> Response {
        Response { id, tool: None, success: Some(false), output: None, timings: None, error: Some(error.to_string()) }
    }

    /// The response as one JSON line (without the newline).
    pub fn to_line(&self) -> String {
        // Serialising a struct of strings, numbers and `Value`s cannot fail:
        // every map key is a string and no custom Serialize impl is involved.
        serde_json::to_string(self).expect("internal error: a Response always serialises to JSON")
    }
}
