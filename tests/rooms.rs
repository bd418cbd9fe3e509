//! The rooms of DESIGN.md, checked on the source: which top-level modules
//! each may use, no import cycles between files, no printing or exiting
//! below `run/`, clap only in `cli/`, no spec parser in `report/`.
//!
//! The source is read as text: `crate::a::b` and `super::x` paths are
//! resolved to the files that define those modules. Test code (files named
//! `tests.rs` or `*_tests.rs`, and everything from `#[cfg(test)]` on) is
//! left out: tests may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Which rooms each room may use (besides itself). `run` may use all.
const ALLOWED: &[(&str, &[&str])] = &[
    ("analyze", &["recorder", "units"]),
    ("check", &["engine", "units"]),
    ("cli", &["engine", "harness", "units"]),
    ("engine", &["units"]),
    (
        "harness",
        &["check", "engine", "launch", "recorder", "report", "units"],
    ),
    ("launch", &["engine", "units"]),
    ("recorder", &["engine", "units"]),
    ("report", &["units"]),
    ("units", &[]),
];

/// One source file: its module path and its non-test text.
struct File {
    path: PathBuf,
    module: Vec<String>,
    text: String,
}

fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    parts
}

/// The text without comments and test code.
fn code_of(text: &str) -> String {
    let end = text.find("#[cfg(test)]").unwrap_or(text.len());
    text[..end]
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn files() -> Vec<File> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    walk(&src, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .filter_map(|p| {
            let rel = p.strip_prefix(&src).unwrap().to_path_buf();
            let name = rel.file_name()?.to_string_lossy().into_owned();
            if name == "main.rs" || name == "tests.rs" || name.ends_with("_tests.rs") {
                return None;
            }
            let text = code_of(&std::fs::read_to_string(&p).unwrap());
            Some(File {
                module: module_of(&rel),
                path: rel,
                text,
            })
        })
        .collect()
}

fn ident_at(s: &str) -> Option<&str> {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (end > 0).then(|| &s[..end])
}

/// The comma-separated items of a `{...}` group (`group` starts after the
/// brace), nested groups kept whole.
fn top_level_items(group: &str) -> Vec<&str> {
    let (mut depth, mut from, mut items) = (0usize, 0, Vec::new());
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[from..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    items.push(&group[from..]);
    items
}

/// Module paths `text` refers to, absolute (from the crate root), each
/// as far as it goes (`crate::a::b::Type` gives `[a, b, Type]`).
fn references(text: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    // The module `super` names from this file (`a/b.rs` and `a/b/mod.rs`
    // alike are module `a::b`, whose parent is `a`).
    let parent: Vec<String> = module[..module.len().saturating_sub(1)].to_vec();
    for (start, base) in [("crate::", Vec::new()), ("super::", parent)] {
        let mut rest = text;
        while let Some(i) = rest.find(start) {
            // `crate::` inside a longer identifier (`my_crate::`) is not ours.
            let before = rest[..i].chars().last();
            rest = &rest[i + start.len()..];
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut path = base.clone();
            let mut tail = rest;
            while tail.starts_with("super::") {
                path.pop();
                tail = &tail["super::".len()..];
            }
            let mut heads = vec![(path, tail)];
            while let Some((mut path, mut tail)) = heads.pop() {
                loop {
                    if let Some(group) = tail.strip_prefix('{') {
                        for item in top_level_items(group) {
                            heads.push((path.clone(), item.trim_start()));
                        }
                        break;
                    }
                    match ident_at(tail) {
                        Some(id) if id != "self" => {
                            path.push(id.to_string());
                            tail = &tail[id.len()..];
                            match tail.strip_prefix("::") {
                                Some(t) => tail = t,
                                None => break,
                            }
                        }
                        _ => break,
                    }
                }
                out.push(path);
            }
        }
    }
    out
}

/// The longest prefix of `path` that is a module with a file.
fn resolve(path: &[String], modules: &BTreeMap<Vec<String>, usize>) -> Option<usize> {
    (1..=path.len())
        .rev()
        .find_map(|n| modules.get(&path[..n]).copied())
}

fn graph() -> (Vec<File>, Vec<BTreeSet<usize>>) {
    let files = files();
    let modules: BTreeMap<Vec<String>, usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.module.clone(), i))
        .collect();
    let edges = files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            references(&f.text, &f.module)
                .iter()
                .filter_map(|p| resolve(p, &modules))
                .filter(|&j| j != i)
                .collect()
        })
        .collect();
    (files, edges)
}

#[test]
fn rooms_use_only_what_design_allows() {
    let (files, edges) = graph();
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let mut wrong = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let Some(room) = f.module.first().map(String::as_str) else {
            continue;
        };
        let Some(may) = allowed.get(room) else {
            continue; // run/: everything below
        };
        for &j in &edges[i] {
            let Some(to) = files[j].module.first().map(String::as_str) else {
                continue;
            };
            if to != room && !may.contains(&to) {
                wrong.push(format!("{} uses {to}", f.path.display()));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "outside DESIGN's rooms:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_import_cycles_between_files() {
    let (files, edges) = graph();
    // A module and the modules inside it are one unit: `mod.rs` declares
    // its children and they use what it defines. Cycles between files
    // that are not nested are what this forbids.
    let nested = |a: &[String], b: &[String]| a.starts_with(b) || b.starts_with(a);
    let n = files.len();
    let adj: Vec<Vec<usize>> = (0..n)
        .map(|i| {
            edges[i]
                .iter()
                .copied()
                .filter(|&j| !nested(&files[i].module, &files[j].module))
                .collect()
        })
        .collect();
    // Tarjan's strongly connected components.
    struct T<'a> {
        adj: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        sccs: Vec<Vec<usize>>,
    }
    fn visit(t: &mut T<'_>, v: usize) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in &t.adj[v] {
            match t.index[w] {
                None => {
                    visit(t, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(iw) if t.on[w] => t.low[v] = t.low[v].min(iw),
                _ => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on[w] = false;
                scc.push(w);
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                t.sccs.push(scc);
            }
        }
    }
    let mut t = T {
        adj: &adj,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        sccs: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            visit(&mut t, v);
        }
    }
    let cycles: Vec<String> = t
        .sccs
        .iter()
        .map(|scc| {
            scc.iter()
                .map(|&i| files[i].path.display().to_string())
                .collect::<Vec<_>>()
                .join(" <-> ")
        })
        .collect();
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn only_run_prints_or_exits_and_only_cli_parses_flags() {
    let mut wrong = Vec::new();
    for f in files() {
        let room = f.module.first().map_or("", String::as_str);
        let says = |what: &str| f.text.contains(what);
        if room != "run" {
            for what in [
                "println!",
                "eprintln!",
                "print!(",
                "eprint!(",
                "process::exit",
            ] {
                if says(what) {
                    wrong.push(format!("{}: {what}", f.path.display()));
                }
            }
        }
        if room != "cli" && says("clap::") {
            wrong.push(format!("{}: clap outside cli/", f.path.display()));
        }
        if room == "report" && (says("toml::") || says("fn parse_spec")) {
            wrong.push(format!("{}: a spec parser in report/", f.path.display()));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_reader_finds_references_in_every_form() {
    let m = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    let refs = references(
        "use super::{a, b::{C, d}};\nuse crate::x::y::Z;\nlet q = super::super::e::F;",
        &m("r::s::t"),
    );
    for want in ["r::s::a", "r::s::b::C", "r::s::b::d", "x::y::Z", "r::e::F"] {
        assert!(refs.contains(&m(want)), "{want} in {refs:?}");
    }
}
