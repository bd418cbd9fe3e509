//! Deterministic inputs, expected outputs, NaN/Inf scans and verdicts.
