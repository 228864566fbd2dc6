//! The launcher crate's modules, drawn from their imports: no circle between modules of which
//! neither contains the other (a parent declaring its children, and a child naming its parent's
//! items, are one module's inside). The circles still there are listed, so a new one fails
//! this test and one mended must leave the list.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Circles not mended yet (issue 36), each as the modules on it. None since stop 41: the
/// signals and terminals PID 1, the launch and the command's start share are in
/// `jail::signals`, and the waiter is given the lock's release at its start
/// (`placeholders::release_for_waiter`) rather than naming the module that owns the locks.
const KNOWN_CIRCLES: &[&[&str]] = &[];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `src/a/b.rs` -> `a::b`, `src/a/mod.rs` -> `a`; `lib.rs` and `main.rs` are the root, "".
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts.join("::")
}

fn contains(outer: &str, inner: &str) -> bool {
    outer.is_empty() || inner == outer || inner.starts_with(&format!("{outer}::"))
}

/// The longest known module a path names (`jail::init::spawn` -> `jail::init`).
fn named_module(path: &[&str], modules: &BTreeSet<String>) -> Option<String> {
    (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|m| modules.contains(m))
}

/// Each module and the modules it names with `crate::` or `super::` paths, brace lists
/// included, other than its ancestors and descendants.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(&src, f)).collect();
    let mut graph = BTreeMap::new();
    for f in &files {
        let me = module_of(&src, f);
        // What `super` means in this file: the parent of its module (`a/b.rs` and `a/b/mod.rs`
        // are both `a::b`, whose `super` is `a`).
        let parent: Vec<&str> = {
            let mut p: Vec<&str> = me.split("::").filter(|s| !s.is_empty()).collect();
            p.pop();
            p
        };
        // A test module of a file of its own (`plan/tests.rs`) may reach anywhere too.
        if me.split("::").any(|c| c == "tests") {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        // Only the code above the unit tests: a test may reach anywhere.
        let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
        let mut uses = BTreeSet::new();
        let mut take = |base: &[&str], rest: &str| {
            let mut add = |tail: &str| {
                let mut path: Vec<&str> = base.to_vec();
                path.extend(tail.split("::").map(str::trim).filter(|s| !s.is_empty() && *s != "self"));
                if let Some(m) = named_module(&path, &modules) {
                    if !contains(&m, &me) && !contains(&me, &m) {
                        uses.insert(m);
                    }
                }
            };
            if let Some(list) = rest.strip_prefix('{') {
                list[..list.find('}').unwrap_or(0)].split(',').for_each(|p| add(p.trim()));
            } else {
                add(rest.split(|c: char| !c.is_alphanumeric() && c != '_' && c != ':').next().unwrap_or_default());
            }
        };
        for (i, _) in text.match_indices("crate::") {
            take(&[], &text[i + "crate::".len()..]);
        }
        for (i, _) in text.match_indices("super::") {
            // `super::super::x` is read from its first `super`.
            if text[..i].ends_with("super::") {
                continue;
            }
            let mut base = parent.clone();
            let mut rest = &text[i + "super::".len()..];
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            take(&base, rest);
        }
        graph.insert(me, uses);
    }
    graph
}

/// Every circle, as the sorted set of its modules (strongly connected components of more than
/// one module).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<Vec<String>> {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(m) = todo.pop() {
            for d in graph.get(&m).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    todo.push(d.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> = graph.keys().map(|m| (m, reach(m))).collect();
    let mut out = BTreeSet::new();
    for (m, r) in &reaches {
        let mut circle: Vec<String> =
            r.iter().filter(|o| reaches.get(o).is_some_and(|back| back.contains(*m))).cloned().collect();
        if !circle.is_empty() {
            if !circle.contains(m) {
                circle.push((*m).clone());
            }
            circle.sort();
            out.insert(circle);
        }
    }
    out
}

#[test]
fn the_launchers_modules_import_no_new_circle() {
    let graph = graph();
    assert!(graph.contains_key("jail::init") && graph.contains_key("net::parse::peek"), "{:?}", graph.keys());
    let found = circles(&graph);
    let known: BTreeSet<Vec<String>> = KNOWN_CIRCLES
        .iter()
        .map(|c| {
            let mut v: Vec<String> = c.iter().map(|s| s.to_string()).collect();
            v.sort();
            v
        })
        .collect();
    let new: Vec<_> = found.difference(&known).collect();
    assert!(new.is_empty(), "new import circles (modules on each): {new:?}");
    let mended: Vec<_> = known.difference(&found).collect();
    assert!(mended.is_empty(), "circles mended: take them out of KNOWN_CIRCLES: {mended:?}");
}

#[test]
fn the_reader_sees_a_circle_where_there_is_one() {
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    g.insert("d".to_string(), BTreeSet::from(["a".to_string()]));
    let got = circles(&g);
    assert_eq!(got, BTreeSet::from([vec!["a".to_string(), "b".to_string(), "c".to_string()]]));
}

/// The graph seen `depth` names deep: each module stands for its ancestor that many names
/// down (`plan::mounts` is `plan` at depth 1, `net::supervisor::inject` is `net::supervisor` at
/// depth 2), and arrows within one such module, or between it and its own parent, are left out.
/// A circle between two wings passes unseen in the finest graph when one end of it is a wing's
/// root module (`plan` declares `plan::mounts`, and a parent's arrows to its children are
/// inside it).
fn collapsed(graph: &BTreeMap<String, BTreeSet<String>>, depth: usize) -> BTreeMap<String, BTreeSet<String>> {
    let cut = |m: &str| m.split("::").take(depth).collect::<Vec<_>>().join("::");
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, uses) in graph {
        let from = cut(m);
        let entry = out.entry(from.clone()).or_default();
        for u in uses {
            let to = cut(u);
            if !contains(&to, &from) && !contains(&from, &to) {
                entry.insert(to);
            }
        }
    }
    out
}

#[test]
fn no_circle_between_parts_or_wings() {
    let graph = graph();
    for depth in [1, 2] {
        let found = circles(&collapsed(&graph, depth));
        assert!(found.is_empty(), "import circles between modules {depth} names deep: {found:?}");
    }
}

/// The launcher crate's parts, each row above the next: a part names only parts of the rows
/// below its own (docs/architecture.md draws them). Data flows one way, from the commands
/// through the session to the jail and the network, which read the plan the policy made; the
/// jail and the network are siblings that never name each other; the leaves name nothing.
const LAYERS: &[&[&str]] = &[
    &["launch", "doctor", "allow"],
    &["show", "cli", "session"],
    &["slurm"],
    &["jail", "net"],
    &["plan"],
    &["policy", "host", "netrules"],
    &["secret"],
    &["audit", "gitconfig", "glob", "random", "status", "stub", "test_pause", "timing"],
];

/// The network's wings: the two modes' servers, then what they share, then the shared
/// configuration and audit.
const NET_LAYERS: &[&[&str]] = &[
    &["net::supervisor", "net::proxy"],
    &["net::control", "net::cluster", "net::dns", "net::parse", "net::stack", "net::udp", "net::packet"],
    &["net::audit", "net::config"],
];

/// Every arrow of `graph` between two modules under `root` (the crate's top: "") goes down
/// `layers`; every module there has its row.
fn arrows_go_down(graph: &BTreeMap<String, BTreeSet<String>>, root: &str, layers: &[&[&str]]) -> Vec<String> {
    let row = |m: &str| layers.iter().position(|r| r.contains(&m));
    let under = |m: &str| !m.is_empty() && m != root && contains(root, m);
    let mut wrong = vec![];
    for (from, uses) in graph.iter().filter(|(m, _)| under(m)) {
        let Some(a) = row(from) else {
            wrong.push(format!("{from} has no row: add it to its layer"));
            continue;
        };
        for to in uses.iter().filter(|u| under(u)) {
            match row(to) {
                Some(b) if b > a => {}
                Some(_) => wrong.push(format!("{from} -> {to} goes against the layers")),
                None => wrong.push(format!("{to} has no row: add it to its layer")),
            }
        }
    }
    wrong
}

#[test]
fn arrows_go_down_the_layers() {
    let graph = graph();
    let wrong = arrows_go_down(&collapsed(&graph, 1), "", LAYERS);
    assert!(wrong.is_empty(), "{wrong:#?}");
    let wrong = arrows_go_down(&collapsed(&graph, 2), "net", NET_LAYERS);
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_layer_check_sees_an_arrow_upward() {
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string(), "d".to_string()]));
    let layers: &[&[&str]] = &[&["a"], &["b", "c"]];
    let got = arrows_go_down(&g, "", layers);
    assert_eq!(
        got,
        ["b -> c goes against the layers", "c -> a goes against the layers", "d has no row: add it to its layer"]
    );
}
