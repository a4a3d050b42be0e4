//! The compiler shims of a device run and the compiler each stands for. Invariant: the
//! compiler a shim runs is the one its caller's `PATH` would have found without the
//! shims (the scene's own `PATH`, not the outer run's), and it is keyed by its content
//! and by what its `--version` printed, asked before the lock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::base::notice::ShimMissing;
use crate::cache::Store;

/// The directory of a device run's compiler shims.
pub fn shim_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("bin")
}

/// Where the shims of a device run find each compiler's identity.
fn identities_path(run_dir: &Path) -> PathBuf {
    shim_dir(run_dir).join(".identities.json")
}

/// Where the shims of a device run log each compile.
pub fn log_path(run_dir: &Path) -> PathBuf {
    run_dir.join("compiles.jsonl")
}

/// `path` without the shim directory `shims` (as the caller would have had it without
/// the shims).
pub fn without_shims(path: &str, shims: &Path) -> String {
    path.split(':')
        .filter(|d| Path::new(d) != shims)
        .collect::<Vec<_>>()
        .join(":")
}

/// The first executable regular file named `name` in the directories of `path`, as a
/// shell's lookup finds it (not resolved further: a driver may choose its mode by its
/// name).
pub fn find_on(path: &str, name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// How a compiler is named in the identity table: its name and the file its path
/// resolves to (symlinks followed: `cc` and `gcc` may be one file that prints its name).
pub fn identity_name(name: &str, real: &Path) -> String {
    let file = std::fs::canonicalize(real).unwrap_or_else(|_| real.to_path_buf());
    format!("{name}\t{}", file.display())
}

/// What a device run's shims know about their compilers: identity by `identity_name`.
pub fn identities(path: &Path) -> BTreeMap<String, String> {
    crate::base::fsutil::read_capped(path, crate::base::fsutil::Cap::DEPFILE)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Write a shim for each of `compile_cache.compilers` into the run's `bin/`: a script
/// that hands its arguments to `scenerun cc` with its name. `paths`: the `PATH` of each
/// lane and device step of the run (shims first); each compiler found on any of them is
/// identified here, before the lock (`<compiler> --version`, through `identity`), and
/// kept in the identity table the shims read. The compilers left without a shim, with
/// why: on none of the `PATH`s (a test that runs one fails as it would without
/// scenerun), or no identity (its compiles run without the cache). `report`: the device
/// run's socket (`cache::witness`), told each entry a compile keeps.
pub fn write_shims<'a>(
    manifest: &crate::manifest::Manifest,
    store: &Store,
    run_dir: &Path,
    paths: impl IntoIterator<Item = &'a str>,
    report: Option<&Path>,
) -> anyhow::Result<Vec<(String, ShimMissing)>> {
    use std::os::unix::fs::PermissionsExt;
    if manifest.compile_cache.is_empty() {
        return Ok(Vec::new());
    }
    let q = |p: &Path| crate::base::template::quote(&p.to_string_lossy()).into_owned();
    let dir = shim_dir(run_dir);
    let infra = |e: std::io::Error, p: &Path| {
        crate::base::error::infra(format!("cannot write the compiler shim {}", p.display()), e)
    };
    std::fs::create_dir_all(&dir).map_err(|e| infra(e, &dir))?;
    let me = std::env::current_exe().map_err(|e| infra(e, &dir))?;
    let mut paths: Vec<String> = paths.into_iter().map(|p| without_shims(p, &dir)).collect();
    if paths.is_empty() {
        paths.push(super::inherited_path(manifest));
    }
    paths.sort();
    paths.dedup();
    let mut table = BTreeMap::new();
    let mut missing = Vec::new();
    for name in &manifest.compile_cache {
        let mut found = Vec::new();
        for real in paths.iter().filter_map(|p| find_on(p, name)) {
            if !found.contains(&real) {
                found.push(real);
            }
        }
        if found.is_empty() {
            missing.push((name.clone(), ShimMissing::NotOnPath));
            continue;
        }
        let mut unidentified = None;
        for real in &found {
            let version = format!("{} --version", q(real));
            let timeout = crate::base::identity::DEFAULT_TIMEOUT;
            match crate::base::identity::run(&version, &manifest.dir, &manifest.env, timeout) {
                Ok(out) => {
                    let id = blake3::hash(&out).to_hex().to_string();
                    table.insert(identity_name(name, real), id);
                }
                Err(e) => {
                    unidentified = Some(ShimMissing::NoIdentity {
                        error: format!("{e}"),
                    })
                }
            }
        }
        if let Some(why) = unidentified.filter(|_| found.len() == 1) {
            missing.push((name.clone(), why));
            continue;
        }
        let mut line = format!(
            "exec {} cc --cc-name {} --cc-cache {} --cc-base {} --cc-shims {} --cc-log {}",
            q(&me),
            crate::base::template::quote(name),
            q(&store.root),
            q(&manifest.dir),
            q(&dir),
            q(&log_path(run_dir)),
        );
        if let Some(k) = manifest
            .signing
            .verify_key
            .filter(|_| manifest.signing.local)
        {
            let text = crate::manifest::signing::ed25519_text(&k);
            line.push_str(&format!(
                " --cc-verify-key {}",
                crate::base::template::quote(&text)
            ));
        }
        if let Some(socket) = report {
            line.push_str(&format!(" --cc-report {}", q(socket)));
        }
        let shim = dir.join(name);
        std::fs::write(&shim, format!("#!/bin/sh\n{line} -- \"$@\"\n"))
            .and_then(|()| std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)))
            .map_err(|e| infra(e, &shim))?;
    }
    let ids = identities_path(run_dir);
    std::fs::write(&ids, serde_json::to_vec(&table)?).map_err(|e| infra(e, &ids))?;
    Ok(missing)
}

/// The identity table of the run whose shims are in `shims`.
pub fn table_of(shims: &Path) -> BTreeMap<String, String> {
    identities(&shims.join(".identities.json"))
}
