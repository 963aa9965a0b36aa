//! Layers point down (README, "Layering"): `api` → `core` → `store` and
//! `provider`, with `model` below both. Nothing below the API may reach up
//! into `api` or into the application state (`app`), so the core can be
//! used and tested without HTTP.

use std::path::{Path, PathBuf};

/// Files and folders below the API.
const BELOW_API: &[&str] = &[
    "src/core",
    "src/store",
    "src/provider",
    "src/webhooks",
    "src/smtp",
    "src/mime",
    "src/model",
    "src/server",
    "src/auth.rs",
];

/// Still reaching up: none (kept so that an exception is a visible edit).
const ALLOWED: &[&str] = &[];

fn rust_files(at: &Path, out: &mut Vec<PathBuf>) {
    if at.is_file() {
        if at.extension().is_some_and(|e| e == "rs") {
            out.push(at.to_path_buf());
        }
        return;
    }
    for entry in std::fs::read_dir(at).unwrap_or_else(|e| panic!("{}: {e}", at.display())) {
        rust_files(&entry.unwrap().path(), out);
    }
}

/// What in `source` reaches up: a path through `crate::api` or
/// `crate::app` (also inside a grouped `use crate::{…}`), or `AppState`.
fn upward_references(source: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (n, line) in source.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let named = ["crate::api", "crate::app", "AppState"]
            .iter()
            .any(|p| code.contains(p));
        if named {
            found.push(format!("line {}: {}", n + 1, line.trim()));
        }
    }
    // Grouped imports: `use crate::{api, ...}` over one or more lines.
    let mut rest = source;
    while let Some(at) = rest.find("crate::{") {
        let group = &rest[at + "crate::{".len()..];
        let end = group.find("};").unwrap_or(group.len());
        let names = group[..end]
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .collect::<Vec<_>>();
        if names.iter().any(|n| *n == "api" || *n == "app") {
            found.push(format!("grouped import: crate::{{{}}}", &group[..end]));
        }
        rest = &group[end..];
    }
    found
}

#[test]
fn nothing_below_the_api_imports_the_api_or_the_app() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for place in BELOW_API {
        rust_files(&root.join(place), &mut files);
    }
    assert!(files.len() > 40, "found only {} files", files.len());
    let mut offences = Vec::new();
    let mut allowed_seen = Vec::new();
    for file in &files {
        let rel = file
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let source = std::fs::read_to_string(file).unwrap();
        let found = upward_references(&source);
        if ALLOWED.contains(&rel.as_str()) {
            if !found.is_empty() {
                allowed_seen.push(rel);
            }
            continue;
        }
        offences.extend(found.into_iter().map(|f| format!("{rel}: {f}")));
    }
    assert!(offences.is_empty(), "reaching up:\n{}", offences.join("\n"));
    // An allowance no longer needed is taken out of the list.
    for allowed in ALLOWED {
        assert!(
            allowed_seen.iter().any(|s| s == allowed),
            "{allowed} no longer reaches up: remove it from ALLOWED"
        );
    }
}

#[test]
fn the_check_sees_every_kind_of_upward_reference() {
    for bad in [
        "use crate::api::metrics::Metrics;",
        "use crate::app::AppState;",
        "fn f(s: &AppState) {}",
        "use crate::{\n    api::extract,\n    store::Db,\n};",
        "use crate::{app, store};",
    ] {
        assert!(!upward_references(bad).is_empty(), "{bad}");
    }
    for fine in [
        "use crate::store::{Db, RowExt};",
        "// see crate::api for the routes",
        "use crate::{core::apply, store};",
    ] {
        assert!(upward_references(fine).is_empty(), "{fine}");
    }
}
