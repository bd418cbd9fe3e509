//! The embedded kernel sources and the entry points every variant defines.

use std::sync::OnceLock;

/// The kernel sources, in the order they are concatenated.
pub const SOURCES: [(&str, &str); 5] = [
    (
        "kernels/prelude.cuh",
        include_str!("../../../../../kernels/prelude.cuh"),
    ),
    (
        "kernels/abi.cuh",
        include_str!("../../../../../kernels/abi.cuh"),
    ),
    (
        "kernels/elem.cuh",
        include_str!("../../../../../kernels/elem.cuh"),
    ),
    (
        "kernels/data.cu",
        include_str!("../../../../../kernels/data.cu"),
    ),
    (
        "kernels/collective.cu",
        include_str!("../../../../../kernels/collective.cu"),
    ),
];

/// The kernels every variant's PTX must define: a variant lacking one
/// counts as failed.
pub const ENTRY_POINTS: [&str; 5] = [
    "cb_collective",
    "cb_fill",
    "cb_fill_at",
    "cb_poison",
    "cb_verify",
];

/// The entry points the compile check requires.
pub fn required_entry_points() -> &'static [&'static str] {
    &ENTRY_POINTS
}

/// The sources as one translation unit, each file introduced by a `#line`
/// directive so NVRTC's diagnostics name the file and line.
pub fn source() -> &'static str {
    static SOURCE: OnceLock<String> = OnceLock::new();
    SOURCE.get_or_init(|| {
        let mut s = String::new();
        for (name, text) in SOURCES {
            s.push_str(&format!("#line 1 \"{name}\"\n"));
            s.push_str(text);
            if !text.ends_with('\n') {
                s.push('\n');
            }
        }
        s
    })
}
