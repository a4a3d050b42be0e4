//! Signed local entries (docs/cache-trust.md, "Signed entries"): by default whoever can
//! write the cache dir is trusted — an entry copied under another key, its record's key
//! rewritten, is served as a hit. With `signing.verify_key` (or the deprecated
//! `cache.verify_key`), only entries signed by the key in `signing.key_env` are: the
//! forgery is a miss and is rebuilt.

use std::fs;

use base64::Engine;

use super::*;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A signing key and its public half, as the manifest and the environment take them.
pub(crate) fn keypair(seed: u8) -> (String, String) {
    let sk = ed25519_dalek::SigningKey::from_bytes(&[seed; 32]);
    (
        format!("ed25519:{}", b64(&[seed; 32])),
        format!("ed25519:{}", b64(sk.verifying_key().as_bytes())),
    )
}

/// Two scenes whose fixtures differ; `signing`: the manifest's signing lines.
fn two_fixture_suite(signing: &str) -> Suite {
    let s = Suite::with_logs();
    s.script(
        "gen.sh",
        "#!/bin/sh\necho \"$2\" >> logs/gen.log\necho \"$2\" > \"$1/data.txt\"\n",
    );
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\n{signing}scenes:\n  - name: s0\n    fixture:\n      run: \"./gen.sh {{out}} zero\"\n      inputs: [gen.sh]\n  - name: s1\n    fixture:\n      run: \"./gen.sh {{out}} one\"\n      inputs: [gen.sh]\n"
    ));
    s
}

fn run_env(s: &Suite, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = scenerun_process();
    c.current_dir(s.dir())
        .arg("--manifest")
        .arg(s.path("scenes.yaml"))
        .args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    run_bounded(c, Duration::from_secs(120))
}

/// Replace s1's fixture entry by a copy of s0's whose record names s1's key: what
/// anyone who can write the cache can do.
fn forge(s: &Suite) {
    let entries = entry_dirs(&s.path("cache"));
    let dirs: Vec<&PathBuf> = entries
        .iter()
        .filter(|((k, _), _)| k == "fixture")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(dirs.len(), 2);
    let zero = dirs
        .iter()
        .find(|d| fs::read_to_string(d.join("out/data.txt")).unwrap() == "zero\n")
        .unwrap();
    let one = dirs.iter().find(|d| *d != zero).unwrap();
    let one_key = one.file_name().unwrap().to_str().unwrap().to_string();
    let zero_key = zero.file_name().unwrap().to_str().unwrap().to_string();
    let st = std::process::Command::new("rm")
        .arg("-rf")
        .arg(one)
        .status()
        .unwrap();
    assert!(st.success());
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(zero)
        .arg(one)
        .status()
        .unwrap();
    assert!(st.success());
    let meta = one.join("meta.json");
    let text = fs::read_to_string(&meta)
        .unwrap()
        .replace(&zero_key, &one_key);
    fs::write(&meta, text).unwrap();
}

#[test]
fn by_default_whoever_writes_the_cache_is_trusted_and_signing_closes_that() {
    // The default: the forgery is served (documented, as ccache and Bazel's disk cache).
    let s = two_fixture_suite("");
    let o = run(&s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    forge(&s);
    let o = run(&s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 2, "served: the default trust");

    // Signed: the same forgery is a miss, rebuilt.
    let (private, public) = keypair(7);
    let s = two_fixture_suite(&format!(
        "  verify_key: \"{public}\"\n  sign_key_env: MY_ENTRY_KEY\n"
    ));
    let key = [("MY_ENTRY_KEY", private.as_str())];
    let o = run_env(&s, &["warm"], &key);
    assert_eq!(code(&o), 0, "{}", show(&o));
    forge(&s);
    let o = run_env(&s, &["plan"], &[]);
    assert_eq!(code(&o), 0, "a reader needs no key: {}", show(&o));
    assert!(
        stdout(&o).contains("not signed") || stdout(&o).contains("signature"),
        "{}",
        show(&o)
    );
    let o = run_env(&s, &["warm"], &key);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(
        s.count("logs/gen.log"),
        3,
        "the forgery was rebuilt: {}",
        show(&o)
    );
    let o = run_env(&s, &["warm"], &key);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 3, "and its rebuild is a hit");
}

#[test]
fn without_the_signing_key_a_warm_that_adds_entries_is_refused() {
    let (private, public) = keypair(9);
    let s = two_fixture_suite(&format!(
        "  verify_key: \"{public}\"\n  sign_key_env: MY_ENTRY_KEY\n"
    ));
    let o = run_env(&s, &["warm"], &[]);
    assert_eq!(code(&o), 4, "{}", show(&o));
    assert!(stderr(&o).contains("$MY_ENTRY_KEY"), "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 0, "nothing built");
    // With the key all is built; then a warm without it has nothing to add: fine.
    let o = run_env(&s, &["warm"], &[("MY_ENTRY_KEY", &private)]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let o = run_env(&s, &["warm"], &[]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    // A key that is not the verify key's other half: exit 4 before anything runs.
    let (other, _) = keypair(10);
    let o = run_env(&s, &["warm"], &[("MY_ENTRY_KEY", &other)]);
    assert_eq!(code(&o), 4, "{}", show(&o));
    assert!(stderr(&o).contains("does not match"), "{}", show(&o));
}

/// `signing:` is the one block: it signs and verifies with no warning. The old keys of
/// `cache:` and `cache.remote` still work, each with a deprecation warning naming the
/// key to write; two that disagree, or one beside the block, are manifest errors.
#[test]
fn the_old_signing_keys_are_aliases_with_a_warning_and_disagreeing_ones_are_errors() {
    let (private, public) = keypair(7);
    let (_, other) = keypair(8);
    let key = [("MY_ENTRY_KEY", private.as_str())];
    let block = format!("signing:\n  verify_key: \"{public}\"\n  key_env: MY_ENTRY_KEY\n");
    let old = format!("  verify_key: \"{public}\"\n  sign_key_env: MY_ENTRY_KEY\n");
    for (signing, warned) in [(&block, false), (&old, true)] {
        let s = two_fixture_suite(signing);
        let o = run_env(&s, &["warm"], &key);
        assert_eq!(code(&o), 0, "{}", show(&o));
        let err = stderr(&o);
        assert_eq!(err.contains("deprecated"), warned, "{}", show(&o));
        if warned {
            for said in [
                "`cache.verify_key` is deprecated",
                "`cache.sign_key_env` is deprecated",
                "write `signing.key_env`",
            ] {
                assert!(err.contains(said), "{said}: {}", show(&o));
            }
        }
        forge(&s);
        let o = run_env(&s, &["plan"], &[]);
        assert_eq!(code(&o), 0, "{}", show(&o));
        assert!(stdout(&o).contains("signature"), "{}", show(&o));
    }
    for (signing, said) in [
        (
            format!("  verify_key: \"{public}\"\n  remote:\n    verify_key: \"{other}\"\n"),
            "write one `signing.verify_key`",
        ),
        (
            "  sign_key_env: A_KEY\n  remote:\n    sign_key_env: B_KEY\n".to_string(),
            "write one `signing.key_env`",
        ),
        (
            "  sign_key_env: A_KEY\nsigning:\n  key_env: A_KEY\n".to_string(),
            "replaced by the top-level `signing:` block",
        ),
        (
            "signing:\n  key_env: A_KEY\n  verify: [everywhere]\n".to_string(),
            "`everywhere` is not a place to verify",
        ),
        (
            "signing:\n  verify: [local]\n".to_string(),
            "no `signing.verify_key` to verify with",
        ),
    ] {
        let s = two_fixture_suite(&signing);
        let o = run_env(&s, &["plan"], &[]);
        assert_eq!(code(&o), 4, "{signing}: {}", show(&o));
        assert!(stderr(&o).contains(said), "{said}: {}", show(&o));
    }
}
