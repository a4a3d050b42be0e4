//! Signed records: with `verify_key` set, only records signed by the matching private key
//! are used; an unsigned or badly signed record is a miss with a warning.

use std::fs;

use ed25519_dalek::SigningKey;

use super::server::{Nginx, TOKEN};
use super::{b64, checkout, fleet_suite, ok, remote_yaml, run, runs};
use crate::common::{code, show, stderr};

const SEED: [u8; 32] = [7; 32];

fn keys(seed: [u8; 32]) -> (String, String) {
    let sk = SigningKey::from_bytes(&seed);
    (
        format!("ed25519:{}", b64(&seed)),
        format!("ed25519:{}", b64(sk.verifying_key().as_bytes())),
    )
}

fn signed_yaml(url: &str) -> String {
    let (_, public) = keys(SEED);
    remote_yaml(
        url,
        &format!("    verify_key: \"{public}\"\n    sign_key_env: SCENERUN_SIGNING_KEY\n"),
    )
}

#[test]
fn signed_records_are_used_and_unsigned_or_altered_ones_are_not() {
    let ngx = Nginx::start();
    let (secret, _) = keys(SEED);
    let a = fleet_suite(2, &signed_yaml(&ngx.url()), 100);
    // A job without the signing key uploads nothing (readers would ignore it) and says so.
    let o = run(
        &a,
        &["warm", "--remote-write"],
        &[("SCENERUN_REMOTE_TOKEN", TOKEN)],
    );
    ok(&o);
    assert!(stderr(&o).contains("holds no signing key"), "{}", show(&o));
    assert!(ngx.stored("ac").is_empty());
    // The trusted job signs; its local hits are written through to the remote.
    let o = run(
        &a,
        &["warm", "--remote-write"],
        &[
            ("SCENERUN_REMOTE_TOKEN", TOKEN),
            ("SCENERUN_SIGNING_KEY", &secret),
        ],
    );
    ok(&o);
    assert_eq!(runs(&a), (2, 2, 2), "nothing rebuilt: {}", show(&o));
    let records = ngx.stored("ac");
    assert_eq!(records.len(), 6);
    assert!(fs::read_to_string(&records[0])
        .unwrap()
        .contains("\"signature\":\"ed25519:"));

    let b = checkout(&a);
    let o = run(&b, &["warm"], &[]);
    ok(&o);
    assert_eq!(runs(&b), (0, 0, 0), "{}", show(&o));

    // One record altered on the server (its kind's file listing kept valid): its
    // signature no longer verifies, so that step is built locally, with a warning.
    let victim = records
        .iter()
        .find(|p| {
            fs::read_to_string(p)
                .unwrap()
                .contains("\"kind\":\"kernel\"")
        })
        .unwrap();
    let text = fs::read_to_string(victim).unwrap();
    fs::write(
        victim,
        text.replacen("\"duration_secs\":", "\"duration_secs\":1", 1),
    )
    .unwrap();
    let c = checkout(&a);
    let o = run(&c, &["warm"], &[]);
    ok(&o);
    assert!(stderr(&o).contains("does not verify"), "{}", show(&o));
    assert_eq!(runs(&c), (1, 0, 0), "{}", show(&o));
}

#[test]
fn unsigned_records_are_a_miss_when_a_verify_key_is_set() {
    let ngx = Nginx::start();
    // The writer has no verify_key: it uploads unsigned records.
    let a = fleet_suite(2, &remote_yaml(&ngx.url(), "    write: true\n"), 100);
    ok(&run(&a, &["warm"], &[("SCENERUN_REMOTE_TOKEN", TOKEN)]));
    assert_eq!(ngx.stored("ac").len(), 6);
    let b = checkout(&a);
    fs::write(
        b.path("scenes.yaml"),
        fs::read_to_string(b.path("scenes.yaml")).unwrap().replace(
            &remote_yaml(&ngx.url(), "    write: true\n"),
            &signed_yaml(&ngx.url()),
        ),
    )
    .unwrap();
    let o = run(&b, &["warm"], &[]);
    ok(&o);
    assert_eq!(runs(&b), (2, 2, 2), "{}", show(&o));
    assert!(stderr(&o).contains("is not signed"), "{}", show(&o));
    // The same records are fine for a reader that does not ask for signatures.
    let c = checkout(&a);
    ok(&run(&c, &["warm"], &[]));
    assert_eq!(runs(&c), (0, 0, 0));
}

#[test]
fn a_signing_key_that_does_not_match_the_verify_key_is_refused() {
    let (other, _) = keys([9; 32]);
    let a = fleet_suite(1, &signed_yaml("http://127.0.0.1:9/x"), 10);
    let o = run(
        &a,
        &["warm", "--remote-write"],
        &[("SCENERUN_SIGNING_KEY", &other)],
    );
    assert_eq!(code(&o), 4, "{}", show(&o));
    assert!(stderr(&o).contains("does not match"), "{}", show(&o));
    let o = run(
        &a,
        &["warm", "--remote-write"],
        &[("SCENERUN_SIGNING_KEY", "ed25519:short")],
    );
    assert_eq!(code(&o), 4, "{}", show(&o));
}

#[test]
fn bad_remote_settings_are_manifest_errors() {
    let a = fleet_suite(
        1,
        "  remote:\n    url: \"ftp://cache\"\n    verify_key: \"ed25519:AAAA\"\n    timeout: 0s\n    max_upload: lots\n    token_env: \"BAD NAME\"\n    colour: blue\n",
        10,
    );
    let o = run(&a, &["plan"], &[]);
    assert_eq!(code(&o), 4, "{}", show(&o));
    let err = stderr(&o);
    for needle in [
        "cache.remote.url",
        "cache.remote.verify_key",
        "cache.remote.timeout",
        "cache.remote.max_upload",
        "cache.remote.token_env",
        "colour",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    // `$VAR` in the URL: unset means no remote (a fork without the secret builds locally).
    let b = fleet_suite(1, "  remote:\n    url: \"$SCENERUN_TEST_UNSET_URL\"\n", 10);
    ok(&run(&b, &["warm"], &[]));
    assert_eq!(runs(&b).0, 1);
}

/// One scheme (docs/cache-trust.md, "Signed entries"): the signature a writer's local
/// entry carries is the very one its remote record carries, and a reader that holds no
/// key publishes a downloaded entry with it, so the reader's own local verification
/// serves it with the same key. Written as the `signing:` block and as the deprecated
/// keys of `cache:` and `cache.remote` (one pair in both places).
#[test]
fn one_key_signs_the_local_entry_and_the_remote_record_verifies_with_it() {
    let (_, public) = keys(SEED);
    let remote_url = Nginx::start();
    let block = |local: bool| {
        let verify = if local { "[local, remote]" } else { "[remote]" };
        format!(
            "{}signing:\n  verify_key: \"{public}\"\n  key_env: SCENERUN_SIGNING_KEY\n  verify: {verify}\n",
            remote_yaml(&remote_url.url(), "")
        )
    };
    one_scheme(&remote_url, &block, false);
    let ngx = Nginx::start();
    let old = |local: bool| {
        let pair = format!("verify_key: \"{public}\"\n");
        format!(
            "{}  sign_key_env: SCENERUN_SIGNING_KEY\n{}",
            if local {
                format!("  {pair}")
            } else {
                String::new()
            },
            remote_yaml(
                &ngx.url(),
                &format!("    {pair}    sign_key_env: SCENERUN_SIGNING_KEY\n")
            )
        )
    };
    one_scheme(&ngx, &old, true);
}

/// The scenario of `one_key_signs_...` with `config(local)`: the manifest's signing
/// lines, verifying local entries too when `local`.
fn one_scheme(ngx: &Nginx, config: &dyn Fn(bool) -> String, deprecated: bool) {
    let (secret, _) = keys(SEED);
    let a = fleet_suite(2, &config(true), 100);
    let o = run(
        &a,
        &["warm", "--remote-write"],
        &[
            ("SCENERUN_REMOTE_TOKEN", TOKEN),
            ("SCENERUN_SIGNING_KEY", &secret),
        ],
    );
    ok(&o);
    assert_eq!(
        stderr(&o).contains("deprecated"),
        deprecated,
        "{}",
        show(&o)
    );
    let local = crate::common::entry_dirs(&a.path("cache"));
    let records = ngx.stored("ac");
    assert_eq!(records.len(), 6);
    for path in &records {
        let rec: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
        let id = (
            rec["kind"].as_str().unwrap().to_string(),
            rec["key"].as_str().unwrap().to_string(),
        );
        let meta: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(local[&id].join("meta.json")).unwrap())
                .unwrap();
        assert!(rec["signature"].is_string(), "{rec}");
        assert_eq!(rec["signature"], meta["signature"], "{id:?}");
    }
    // A reader without the key downloads everything (remote records verified)...
    let b = checkout(&a);
    let text = fs::read_to_string(b.path("scenes.yaml")).unwrap();
    let with = |local: bool| text.replace(&config(true), &config(local));
    fs::write(b.path("scenes.yaml"), with(false)).unwrap();
    let o = run(&b, &["warm"], &[]);
    ok(&o);
    assert_eq!(runs(&b), (0, 0, 0), "{}", show(&o));
    // ...and the entries it published, never signed by it, are served under local
    // verification with the one key: nothing is rebuilt, nothing is refused.
    fs::write(b.path("scenes.yaml"), with(true)).unwrap();
    let o = run(&b, &["warm"], &[]);
    ok(&o);
    assert_eq!(runs(&b), (0, 0, 0), "{}", show(&o));
    let o = run(&b, &["device", "--no-lock"], &[]);
    ok(&o);
    assert_eq!(runs(&b), (0, 0, 0), "{}", show(&o));
}
