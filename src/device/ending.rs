//! How a device run ended, decided in one place for the inner run, `--no-lock` and the
//! outer: which scenes infrastructure cut short (interrupted, the lock lost, an artifact
//! that vanished while the phase ran), and the exit code that follows (docs/device.md).

use super::{Frozen, Infra, Results, SceneOutcome, SceneResult};
use crate::base::exit::Exit;

/// Mark the scenes whose ending infrastructure decided, after the run: never-started or
/// killed scenes of a cancelled run, and failed scenes whose artifacts are gone now (a
/// `cache clean` during the phase is not the scene's failure; an artifact another
/// scene's step changed in place is the suite's, and stays a failure).
pub fn classify(frozen: &Frozen, results: &mut Results, lost: bool, interrupted: bool) {
    let no_healthy = results.no_healthy_device;
    for (r, s) in results.scenes.iter_mut().zip(&frozen.scenes) {
        if r.infra.is_some() || r.outcome.passed() || r.outcome == SceneOutcome::FailedInWarm {
            continue;
        }
        if matches!(r.outcome, SceneOutcome::NotRun | SceneOutcome::Interrupted) {
            r.infra = if lost {
                Some(Infra::LockLost)
            } else if interrupted {
                Some(Infra::Interrupted)
            } else if no_healthy {
                Some(Infra::NoHealthyDevice)
            } else {
                r.infra
            };
            continue;
        }
        // An artifact changed in place is the suite's own doing (a device step wrote
        // into the cache entry it shares): the scene failed, as its message says.
        let gone = match super::recheck::scene(frozen, s) {
            Err(super::recheck::Gone::Changed { .. }) | Ok(()) => None,
            Err(g) => Some(g),
        };
        if let Some(why) = gone.map(|g| g.to_string()) {
            r.message = Some(match &r.message {
                Some(m) if !m.contains(&why) => format!("{why} (the step: {m})"),
                _ => why,
            });
            r.infra = Some(Infra::ArtifactMissing);
        }
    }
}

/// Results for a grant that cannot be used: nothing ran.
pub fn refused(frozen: &Frozen, why: String) -> Results {
    let now = super::unix_now();
    let scenes = frozen
        .scenes
        .iter()
        .map(|s| {
            let (outcome, message, infra) = match (&s.warm_failure, &s.verdict) {
                (Some(w), _) => (SceneOutcome::FailedInWarm, w.to_string(), None),
                (None, Some(v)) => (v.outcome, v.message.clone().unwrap_or_default(), None),
                (None, None) => (SceneOutcome::NotRun, why.clone(), Some(Infra::BadDeviceIds)),
            };
            SceneResult {
                infra,
                ..SceneResult::unrun(s, outcome, Some(message))
            }
        })
        .collect();
    Results {
        version: super::RESULTS_VERSION,
        granted: Vec::new(),
        started: now,
        ended: now,
        busy_secs: 0.0,
        device_secs_used: 0.0,
        scenes,
        infra_error: Some(why),
        lanes: Vec::new(),
        startup_secs: 0.0,
        quarantined: Vec::new(),
        no_healthy_device: false,
    }
}

/// The exit code the results call for (an interrupt of the caller itself is checked
/// by the caller).
pub fn exit_of(results: &Results) -> Exit {
    exit_of_scenes(
        results.infra_error.is_some(),
        results.scenes.iter().map(|s| (s.outcome, s.infra)),
    )
}

/// Infrastructure beats an interrupt, an interrupt beats a failed scene.
pub fn exit_of_scenes(
    infra_error: bool,
    scenes: impl Iterator<Item = (SceneOutcome, Option<Infra>)>,
) -> Exit {
    let mut exit = if infra_error { Exit::Infra } else { Exit::Ok };
    for (outcome, infra) in scenes {
        let e = match infra {
            Some(Infra::Interrupted) => Exit::Interrupted,
            Some(_) => Exit::Infra,
            None if outcome.passed() => Exit::Ok,
            None => Exit::Failed,
        };
        exit = match (exit, e) {
            (Exit::Infra, _) | (_, Exit::Infra) => Exit::Infra,
            (a, b) => a.max(b),
        };
    }
    exit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes() {
        use crate::base::verdict::Outcome::*;
        use SceneOutcome::*;
        let e = |v: Vec<(SceneOutcome, Option<Infra>)>| exit_of_scenes(false, v.into_iter());
        assert_eq!(e(vec![(Test(Passed), None)]), Exit::Ok);
        assert_eq!(
            e(vec![(Test(Passed), None), (Test(Failed), None)]),
            Exit::Failed
        );
        assert_eq!(
            e(vec![
                (Test(Failed), None),
                (NotRun, Some(Infra::Interrupted))
            ]),
            Exit::Interrupted
        );
        assert_eq!(
            e(vec![
                (NotRun, Some(Infra::Interrupted)),
                (Test(Failed), Some(Infra::ArtifactMissing))
            ]),
            Exit::Infra
        );
        assert_eq!(exit_of_scenes(true, std::iter::empty()), Exit::Infra);
    }
}
