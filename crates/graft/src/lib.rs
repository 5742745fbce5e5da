//! graft: the public API.
