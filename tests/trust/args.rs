//! What the command line hands to other programs: `--changed-since` names a revision for
//! `git diff`, never an option of it.

use std::fs;

use super::*;

fn git(s: &Suite, args: &[&str]) {
    let o = std::process::Command::new("git")
        .current_dir(s.dir())
        .args(["-c", "user.email=t@example.com", "-c", "user.name=t"])
        .args(args)
        .output()
        .expect("git runs");
    assert!(o.status.success(), "git {args:?}: {}", show(&o));
}

/// `--changed-since=--output=FILE` would make `git diff` truncate FILE. A revision that
/// starts with `-` is refused (exit 4, naming it), and the file is untouched, whichever
/// way the value is written and whichever command takes the selection.
#[test]
fn changed_since_never_reaches_git_as_an_option() {
    let s = light_suite();
    git(&s, &["init", "-q"]);
    git(&s, &["add", "."]);
    git(&s, &["commit", "-qm", "base"]);
    let v = Victim::new();
    let before = v.snapshot();
    let target = v.path("precious.txt");
    let value = format!("--output={}", target.display());
    for args in [
        vec!["plan".to_string(), format!("--changed-since={value}")],
        vec!["list".to_string(), "--changed-since".into(), value.clone()],
        vec!["warm".to_string(), format!("--changed-since={value}")],
        vec!["list".to_string(), "--changed-since=-p".into()],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run(&s, &args);
        assert_eq!(code(&o), 4, "{args:?}: {}", show(&o));
        // Written as two words, clap itself takes it for an option it does not know.
        let e = stderr(&o);
        assert!(
            e.contains("is not a revision") || e.contains("unexpected argument '--output'"),
            "{args:?}: the message names what is wrong: {}",
            show(&o)
        );
        assert_eq!(v.snapshot(), before, "{args:?}: the victim changed");
    }
    assert_eq!(fs::read_to_string(&target).unwrap(), "do not delete\n");
    // A real revision still works.
    let o = run(
        &s,
        &["list", "--changed-since", "HEAD", "--no-scenes", "pass"],
    );
    assert_eq!(code(&o), 0, "{}", show(&o));
}
