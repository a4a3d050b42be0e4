//! `scenes_from` generators under faults (docs/guarantees.md, "Bounds"): a generator that
//! never ends, one cancelled while it runs, one that prints without end. Each ends in a
//! bounded time with its whole process group gone; its output is capped.

use super::*;

/// A suite whose only scenes come from `gen.sh` (the given body), with extra generator
/// keys in `keys`.
fn gen_suite(body: &str, keys: &str) -> Suite {
    let s = Suite::with_logs();
    s.script("gen.sh", &format!("#!/bin/sh\n{body}"));
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nscenes_from:\n  - run: \"./gen.sh\"\n    inputs: [gen.sh]\n{keys}scenes: []\n"
    ));
    s
}

/// A generator past its `timeout`, with a child in the background and one that ignores
/// SIGTERM: exit 4 naming the timeout, no process of its group left.
#[test]
fn a_generator_past_its_timeout_is_killed_with_its_group() {
    let s = gen_suite(
        "sleep 300.61 &\n( trap '' TERM; sleep 300.61 ) &\necho started > logs/gen.started\nsleep 300.61\n",
        "    timeout: 1s\n",
    );
    let r = exec(sr(&s, &["plan"]), secs(60));
    assert!(r.is(4), "{}", r.desc());
    assert!(
        r.stderr
            .contains("scenes_from[0] (`./gen.sh`) did not finish within 1s"),
        "{}",
        r.desc()
    );
    let left = survivors(|| procs_matching("sleep 300.61"), secs(10));
    assert!(left.is_empty(), "the generator's group survived: {left:?}");
}

/// SIGTERM (and SIGINT) to `plan` while a generator runs: exit 2, the generator's whole
/// group gone.
#[test]
fn a_cancelled_generator_leaves_no_process() {
    for (sig, marker) in [
        (libc::SIGTERM, "sleep 300.62"),
        (libc::SIGINT, "sleep 300.63"),
    ] {
        let s = gen_suite(
            &format!("{marker} &\n( trap '' TERM INT; {marker} ) &\necho started > logs/gen.started\n{marker}\n"),
            "",
        );
        let (child, cap) = start(sr(&s, &["plan"]));
        let started = wait_for_file(&s.path("logs/gen.started"), secs(30));
        unsafe { libc::kill(child.id() as i32, sig) };
        let r = finish(child, cap, secs(60));
        assert!(started && r.is(2), "signal {sig}: {}", r.desc());
        let left = survivors(|| procs_matching(marker), secs(10));
        assert!(
            left.is_empty(),
            "signal {sig}: the generator's group survived: {left:?}"
        );
    }
}

/// A generator that prints without end (here: forever): past 64 MiB of output it is
/// killed and the manifest is refused, exit 4 naming the cap; scenerun's memory stays
/// bounded (run under a 4 GiB address-space limit, which 2 GB of output held whole
/// would break).
#[test]
fn a_generators_output_is_capped_at_64_mib() {
    let s = gen_suite("yes endless-generator-line\n", "");
    let mut c = sr(&s, &["plan"]);
    // SAFETY: setrlimit is async-signal-safe and touches only the child's own limits.
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 4 << 30,
                rlim_max: 4 << 30,
            };
            libc::setrlimit(libc::RLIMIT_AS, &lim);
            Ok(())
        });
    }
    let t = Instant::now();
    let r = exec(c, secs(120));
    assert!(r.is(4), "{}", r.desc());
    assert!(
        r.stderr
            .contains("scenes_from[0] (`./gen.sh`) printed more than 64 MiB"),
        "{}",
        r.desc()
    );
    figure(
        "generator_output",
        &format!(
            "a generator printing without end → exit 4 after 64 MiB in {} ms",
            t.elapsed().as_millis()
        ),
    );
    let left = survivors(|| procs_matching("yes endless-generator-line"), secs(10));
    assert!(left.is_empty(), "the generator survived: {left:?}");
}
