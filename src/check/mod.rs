//! Deterministic inputs, expected outputs, NaN/Inf scans and verdicts.
//!
//! Every rank fills its send buffer with [`fill_input`] under one [`Rule`];
//! after the collective each rank checks its receive buffer with [`verify`].
//! Inputs are built so that any order of reduction gives bit-identical
//! results (see `data` for how, per type and operator), so a check is a
//! bit-for-bit comparison; float Avg alone is allowed 2 ULP. Nothing here
//! times anything or does I/O.

mod data;
mod verify;

pub mod device;

pub use data::{fill_input, format_elem, poison, premul_refusal, Rule};
pub use verify::{verify, verify_input, BadElem, Verdict};

#[cfg(test)]
mod tests;
