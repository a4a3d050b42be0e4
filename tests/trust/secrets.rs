//! Secrets never reach a child (docs/remote-cache.md, "Secrets"): the remote cache's
//! token (`token_env`) and signing key (`sign_key_env`) are scenerun's to use, not its
//! steps': a fixture that ran `env` put the private key into an uploaded blob.

use std::fs;

use super::*;

const TOKEN: &str = "tok-3f9a1c-secret";
// A readable key (32 bytes): scenerun reads it once per run, for the local store and the
// remote alike, and refuses one it cannot read.
const KEY: &str = "ed25519:c2VjcmV0LXNpZ25pbmcta2V5LXNlZWQteHh4eHh4eHg=";
const DEFAULT_TOKEN: &str = "default-token-77e1";

/// Every kind of child scenerun starts — a compile, its toolchain's identity, a fixture
/// and a golden (and their identity), a `prepare` step, a `scenes_from` generator, a
/// device step, a lane, the lock command — writes its environment to `logs/`. None may
/// hold the token or the key, under whatever name the manifest gives them; the
/// manifest's own `env` still arrives.
#[test]
fn token_and_signing_key_never_reach_a_child() {
    let s = dumping_suite(
        "    url: \"http://127.0.0.1:9/never\"\n    token_env: MY_CACHE_TOKEN\n    sign_key_env: MY_SIGNING_KEY\n",
    );
    let with_secrets = |args: &[&str]| {
        let mut c = scenerun_process();
        c.current_dir(s.dir())
            .env("MY_CACHE_TOKEN", TOKEN)
            .env("MY_SIGNING_KEY", KEY)
            .env("SCENERUN_REMOTE_TOKEN", DEFAULT_TOKEN)
            .arg("--manifest")
            .arg(s.path("scenes.yaml"))
            .arg("--no-remote")
            .args(args);
        run_bounded(c, Duration::from_secs(120))
    };
    let o = with_secrets(&["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let o = with_secrets(&["device"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let leaks = leaks_in_dumps(&s, &[TOKEN, KEY, DEFAULT_TOKEN]);
    assert!(leaks.is_empty(), "secrets reached children: {leaks:?}");
}

/// Every kind of child that dumps its environment (see `dumping_suite`) ran; what it
/// got of `secrets`.
fn leaks_in_dumps(s: &Suite, secrets: &[&str]) -> Vec<String> {
    let mut seen = Vec::new();
    let mut leaks = Vec::new();
    for e in fs::read_dir(s.path("logs")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(who) = name.strip_prefix("env.") else {
            continue;
        };
        let who = who.rsplit_once('.').map_or(who, |(w, _)| w).to_string();
        let text = fs::read_to_string(e.path()).unwrap();
        assert!(text.contains("VISIBLE=shown-to-steps"), "{who}: {text}");
        for secret in secrets {
            if text.contains(secret) {
                leaks.push(format!("{who} got {secret}"));
            }
        }
        seen.push(who);
    }
    seen.sort();
    seen.dedup();
    for want in [
        "compile",
        "toolchain-identity",
        "fixture",
        "fixture-identity",
        "golden",
        "prepare",
        "generator",
        "device",
        "generated-device",
        "lane",
        "lock",
    ] {
        assert!(seen.iter().any(|w| w == want), "no {want} ran: {seen:?}");
    }
    leaks
}

/// A suite with every kind of child, each dumping its environment into `logs/`, and
/// `remote` as the body of `cache.remote`.
fn dumping_suite(remote: &str) -> Suite {
    let s = Suite::with_logs();
    s.write("kernels/k.c", "int k;\n");
    s.script(
        "dump.sh",
        "#!/bin/sh\n# dump.sh NAME [OUT]: record the environment, make OUT.\nenv > \"logs/env.$1.$$\"\n[ -n \"$2\" ] && { mkdir -p \"$2\" 2>/dev/null; echo x > \"$2/f\" 2>/dev/null || echo x > \"$2\"; }\nexit 0\n",
    );
    s.script(
        "gen.sh",
        "#!/bin/sh\nenv > logs/env.generator.$$\necho '- name: g'\necho '  device:'\necho '    run: ./dump.sh generated-device'\n",
    );
    s.script(
        "lock.sh",
        "#!/bin/sh\nenv > logs/env.lock.$$\nTASK_DEVICE=0 exec sh -c \"$1\"\n",
    );
    s.script(
        "lane.sh",
        "#!/bin/sh\nenv > logs/env.lane.$$\nwhile IFS= read -r l; do n=$(printf '%s' \"$l\" | sed -n 's/.*\"scene\":\"\\([^\"]*\\)\".*/\\1/p'); printf '{\"scene\":\"%s\",\"event\":\"end\",\"outcome\":\"passed\"}\\n' \"$n\" >> \"$2\"; done < \"$1\"\n",
    );
    s.manifest(
        &format!("version: 1\nenv:\n  VISIBLE: shown-to-steps\ncache:\n  dir: cache\n  remote:\n{remote}toolchains:\n  dump:\n    compile: \"./dump.sh compile {{out}}\"\n    identity: \"./dump.sh toolchain-identity; echo v1\"\nlock:\n  submit: \"./lock.sh {{run}}\"\nlanes:\n  l:\n    run: \"./lane.sh {{scenes}} {{results}}\"\nprepare:\n  - name: p\n    run: \"./dump.sh prepare\"\nscenes_from:\n  - run: \"./gen.sh\"\n    inputs: [gen.sh]\nscenes:\n  - name: s\n    kernels:\n      - name: k\n        toolchain: dump\n        source: kernels/k.c\n    fixture:\n      run: \"./dump.sh fixture {{out}}\"\n      identity: \"./dump.sh fixture-identity; echo v1\"\n    golden:\n      run: \"./dump.sh golden {{out}}\"\n    device:\n      run: \"./dump.sh device\"\n  - name: in-lane\n    device:\n      lane: l\n"),
    );
    s
}

const URL_PASSWORD: &str = "PW-7d2e-userinfo";
const FLAG_PASSWORD: &str = "PW-c41b-env-url";

/// A password in the remote cache's URL — from `$SCENERUN_REMOTE_URL`, or from a
/// variable the manifest's `url: "$VAR"` names — is scenerun's to send, never a child's
/// to see: no child's environment, no output line, and no file scenerun writes (the
/// kept manifest, reports, records, the cache) holds it.
#[test]
fn a_password_in_the_remote_url_never_reaches_a_child_a_log_or_a_file() {
    let s = dumping_suite("    url: \"$SCENE_CACHE_URL\"\n");
    let mut outputs = String::new();
    for (env_url, args) in [
        (false, &["warm"][..]),
        (false, &["device"]),
        (true, &["warm"]),
        (true, &["device"]),
    ] {
        let mut c = scenerun_process();
        c.current_dir(s.dir())
            .env(
                "SCENE_CACHE_URL",
                format!("http://ci:{URL_PASSWORD}@127.0.0.1:9/never"),
            )
            .arg("--manifest")
            .arg(s.path("scenes.yaml"))
            .args(args);
        if env_url {
            c.env(
                "SCENERUN_REMOTE_URL",
                format!("http://ci:{FLAG_PASSWORD}@127.0.0.1:9/never"),
            );
        }
        let o = run_bounded(c, Duration::from_secs(120));
        assert_eq!(code(&o), 0, "{args:?}: {}", show(&o));
        outputs.push_str(&show(&o));
    }
    let secrets = [URL_PASSWORD, FLAG_PASSWORD];
    let mut leaks = leaks_in_dumps(&s, &secrets);
    for secret in secrets {
        if outputs.contains(secret) {
            leaks.push(format!("scenerun's output holds {secret}"));
        }
    }
    // Every file under the suite but the children's own dumps.
    let mut todo = vec![s.dir().to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                todo.push(p);
            } else if ft.is_file() && !p.starts_with(s.path("logs")) {
                let bytes = fs::read(&p).unwrap();
                let text = String::from_utf8_lossy(&bytes);
                for secret in secrets {
                    if text.contains(secret) {
                        leaks.push(format!("{} holds {secret}", p.display()));
                    }
                }
            }
        }
    }
    assert!(leaks.is_empty(), "the password leaked: {leaks:#?}");
}

/// `--changed-since` runs `git`: a wrapper first on `PATH` logs the environment each
/// `git` gets. Neither the remote token nor the signing key may be in it.
#[test]
fn git_for_changed_since_gets_no_secret() {
    let real_git = std::process::Command::new("sh")
        .args(["-c", "command -v git"])
        .output()
        .unwrap();
    let real_git = String::from_utf8_lossy(&real_git.stdout).trim().to_string();
    assert!(!real_git.is_empty(), "this test needs git on PATH");
    let s = light_suite();
    let text = s.read("scenes.yaml").replace(
        "cache:\n  dir: cache\n",
        "cache:\n  dir: cache\n  sign_key_env: MY_SIGNING_KEY\n",
    );
    s.manifest(&text);
    for args in [
        &["init", "-q"][..],
        &["add", "."],
        &["commit", "-qm", "base"],
    ] {
        let st = std::process::Command::new(&real_git)
            .current_dir(s.dir())
            .args(["-c", "user.email=t@example.com", "-c", "user.name=t"])
            .args(args)
            .status()
            .unwrap();
        assert!(st.success());
    }
    s.script(
        "wrap/git",
        &format!(
            "#!/bin/sh\nenv > \"{}/logs/git-env.$$\"\nexec {real_git} \"$@\"\n",
            s.dir().display()
        ),
    );
    let (private, _) = super::signed::keypair(3);
    let mut c = scenerun_process();
    c.current_dir(s.dir())
        .env(
            "PATH",
            format!(
                "{}:{}",
                s.path("wrap").display(),
                std::env::var("PATH").unwrap()
            ),
        )
        .env("SCENERUN_REMOTE_TOKEN", DEFAULT_TOKEN)
        .env("MY_SIGNING_KEY", &private)
        .arg("--manifest")
        .arg(s.path("scenes.yaml"))
        .args(["plan", "--changed-since", "HEAD", "--no-scenes", "pass"]);
    let o = run_bounded(c, Duration::from_secs(120));
    assert_eq!(code(&o), 0, "{}", show(&o));
    let dumps: Vec<String> = fs::read_dir(s.path("logs"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("git-env."))
        .map(|e| fs::read_to_string(e.path()).unwrap())
        .collect();
    assert!(
        dumps.len() >= 2,
        "git ran through the wrapper: {}",
        dumps.len()
    );
    for d in &dumps {
        for (name, secret) in [
            ("SCENERUN_REMOTE_TOKEN", DEFAULT_TOKEN),
            ("MY_SIGNING_KEY", private.as_str()),
        ] {
            assert!(
                !d.contains(secret) && !d.contains(&format!("{name}=")),
                "git got {name}: {d}"
            );
        }
    }
}
