//! Composite ops: a library of higher-level operations written over the primitives.
