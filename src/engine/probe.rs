//! Which GPU and communication libraries this machine has, found without
//! loading any of their symbols (a missing library is a fact, not a panic).

/// A library family and the first of its names that loads, if any.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Library {
    pub name: &'static str,
    pub found: Option<String>,
}

/// Sonames tried, newest first: CUDA 12 and 13 installs both work.
pub const CANDIDATES: [(&str, &[&str]); 3] = [
    ("cuda driver", &["libcuda.so.1", "libcuda.so"]),
    (
        "nvrtc",
        &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"],
    ),
    ("nccl", &["libnccl.so.2", "libnccl.so"]),
];

/// Whether `soname` can be loaded by the dynamic linker.
pub fn loadable(soname: &str) -> bool {
    use libloading::os::unix::{Library, RTLD_LAZY, RTLD_LOCAL};
    // SAFETY: opening a system library runs its initialisers, as loading
    // it for use would; nothing from it is called, and it is closed at once.
    match unsafe { Library::open(Some(soname), RTLD_LAZY | RTLD_LOCAL) } {
        Ok(lib) => {
            drop(lib);
            true
        }
        Err(e) => {
            tracing::debug!(soname, error = %e, "not loadable");
            false
        }
    }
}

/// Every library family with what was found.
pub fn libraries() -> Vec<Library> {
    CANDIDATES
        .iter()
        .map(|(name, sonames)| {
            let found = sonames.iter().find(|s| loadable(s)).map(|s| s.to_string());
            tracing::debug!(library = name, tried = ?sonames, found = ?found, "library probe");
            Library { name, found }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libc_is_loadable_and_nonsense_is_not() {
        assert!(loadable("libc.so.6"));
        assert!(!loadable("libdefinitely-not-here.so.9"));
        assert!(!loadable("bad\0name"));
        assert_eq!(libraries().len(), 3);
    }
}
