//! The crates' modules import one another in one direction: no module reaches, through the
//! modules it uses, back to itself. Read from the `crate::` paths of each module's code (not
//! its comments or unit tests), with a name the crate root re-exports counted as its module.
//! The files of one module (`run/`'s, which split one run's methods by concern) are one node.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Module → the modules its code names.
type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn every_crates_modules_import_in_one_direction() {
    for root in ["sim/src", "models/src", "src"] {
        let graph = import_graph(Path::new(env!("CARGO_MANIFEST_DIR")).join(root).as_path());
        assert!(graph.len() > 3, "{root}: {graph:?}");
        if let Some(circle) = find_circle(&graph) {
            panic!(
                "{root}: the modules {} import one another in a circle",
                circle.join(" -> ")
            );
        }
    }
}

/// The circle finder finds a circle, and only one that is there.
#[test]
fn a_circle_is_found() {
    let graph = |edges: &[(&str, &str)]| {
        let mut graph = Graph::new();
        for (from, to) in edges {
            graph
                .entry(from.to_string())
                .or_default()
                .insert(to.to_string());
        }
        graph
    };
    let circle = find_circle(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]));
    assert_eq!(circle.unwrap(), ["a", "b", "c", "a"]);
    assert_eq!(
        find_circle(&graph(&[("a", "b"), ("a", "c"), ("b", "c")])),
        None
    );
}

/// The import graph of the crate whose sources are under `root`.
fn import_graph(root: &Path) -> Graph {
    let lib = fs::read_to_string(root.join("lib.rs")).expect("the crate has a lib.rs");
    let modules = top_modules(root);
    let reexported = reexports(&lib, &modules);
    let mut graph = Graph::new();
    for module in &modules {
        let mut named = BTreeSet::new();
        for file in module_files(root, module) {
            let source = fs::read_to_string(&file).expect("a source file reads");
            for name in crate_paths(&code_of(&source)) {
                let target = if modules.contains(&name) {
                    Some(name)
                } else {
                    reexported.get(&name).cloned()
                };
                named.extend(target.filter(|target| target != module));
            }
        }
        graph.insert(module.clone(), named);
    }
    graph
}

/// The crate's top-level modules: its files and directories under `root` but the root's own.
fn top_modules(root: &Path) -> BTreeSet<String> {
    let entries = fs::read_dir(root).expect("the source directory lists");
    entries
        .map(|entry| entry.expect("an entry").path())
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?.to_string();
            let module = match name.strip_suffix(".rs") {
                Some(stem) => stem.to_string(),
                None if path.is_dir() => name,
                None => return None,
            };
            (!matches!(module.as_str(), "lib" | "main")).then_some(module)
        })
        .collect()
}

/// The files of `module`: `module.rs` and every file under `module/`.
fn module_files(root: &Path, module: &str) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let file = root.join(format!("{module}.rs"));
    if file.exists() {
        files.push(file);
    }
    let mut directories = vec![root.join(module)];
    while let Some(directory) = directories.pop() {
        let Ok(entries) = fs::read_dir(&directory) else {
            continue;
        };
        for path in entries.map(|entry| entry.expect("an entry").path()) {
            if path.is_dir() {
                directories.push(path);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The names `lib.rs` re-exports from a module (`pub use module::{A, B};`), by that module.
fn reexports(lib: &str, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for statement in lib.split(';') {
        let Some(path) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, items)) = path.split_once("::") else {
            continue;
        };
        if !modules.contains(module) {
            continue;
        }
        for item in items.trim_matches(|c| c == '{' || c == '}').split(',') {
            let item = item.trim();
            let name = item.rsplit(" as ").next().unwrap_or(item).trim();
            if !name.is_empty() {
                names.insert(name.to_string(), module.to_string());
            }
        }
    }
    names
}

/// A file's code: its lines without comments, and without its unit tests (from
/// `#[cfg(test)]` on).
fn code_of(source: &str) -> String {
    let mut code = String::new();
    for line in source.lines() {
        let line = line.trim();
        if line == "#[cfg(test)]" {
            break;
        }
        if !line.starts_with("//") {
            code.push_str(line);
            code.push('\n');
        }
    }
    code
}

/// The names right after each `crate::` in `code`: `crate::run::Ctx` names `run`, and
/// `crate::{Invariant, Violation}` names both.
fn crate_paths(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (_, rest) in code
        .match_indices("crate::")
        .map(|(at, _)| code.split_at(at + 7))
    {
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            names.extend(group.split(',').map(|item| identifier(item.trim())));
        } else {
            names.push(identifier(rest));
        }
    }
    names.retain(|name| !name.is_empty());
    names
}

/// The identifier `text` starts with.
fn identifier(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// A circle of `graph`, as the modules on it with the first again at the end, if any.
fn find_circle(graph: &Graph) -> Option<Vec<String>> {
    let mut done = BTreeSet::new();
    for start in graph.keys() {
        let mut path = Vec::new();
        if let Some(circle) = walk(graph, start, &mut path, &mut done) {
            return Some(circle);
        }
    }
    None
}

/// Depth first from `node` along `path`; `done` holds the modules from which no circle goes.
fn walk(
    graph: &Graph,
    node: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(at) = path.iter().position(|on| on == node) {
        let mut circle = path[at..].to_vec();
        circle.push(node.to_string());
        return Some(circle);
    }
    if done.contains(node) {
        return None;
    }
    path.push(node.to_string());
    for next in graph.get(node).into_iter().flatten() {
        if let Some(circle) = walk(graph, next, path, done) {
            return Some(circle);
        }
    }
    path.pop();
    done.insert(node.to_string());
    None
}
