//! What runs where inside the lock: one packer over the granted ids for plain scenes
//! and lane processes, the queue of jobs (retries, device-fault reruns and handed-back
//! lane scenes join it as new jobs), the free ids and the running jobs. Pure
//! bookkeeping, tested by simulation: it starts no process and sees the run only
//! through its events. Invariant: no two running jobs hold one id, and a quarantined id
//! is never free again.

use std::collections::{BTreeSet, HashMap};

use super::packer::{self, Packer, Unit};
use crate::device::events::{Event, FollowUp};
use crate::device::Frozen;

/// A job's place in the queue: what it runs and which ids it should avoid (a retry
/// goes to other ids when some are free).
struct Queued {
    unit: Unit,
    avoid: Vec<usize>,
}

/// A job to start now: its unit on these granted-id slots.
#[derive(Debug, PartialEq)]
pub struct Start {
    pub job: usize,
    pub unit: Unit,
    pub slots: Vec<usize>,
}

/// What runs where: one packer over the granted ids for plain scenes and lane
/// processes, the queue of jobs (retries, device-fault reruns and handed-back lane
/// scenes join it as new jobs), the free ids and the running jobs. Pure bookkeeping: it
/// starts no process and sees the run only through its events.
pub struct Scheduler<'a> {
    frozen: &'a Frozen,
    granted: &'a [String],
    jobs: Vec<packer::Job>,
    queue: Vec<Queued>,
    packer: Packer,
    free: BTreeSet<usize>,
    /// Running job → its slots.
    running: HashMap<usize, Vec<usize>>,
    exclusive_running: usize,
    /// The estimate of a scene without history.
    mean: f64,
    /// Lane scenes to try again, by the job they came from (one fresh process for them
    /// once that job is done).
    lane_again: HashMap<usize, Vec<usize>>,
}

impl<'a> Scheduler<'a> {
    /// The `runnable` frozen scenes as jobs on the granted ids, through the packing
    /// builder `--plan` uses.
    pub fn new(frozen: &'a Frozen, granted: &'a [String], runnable: &[usize]) -> Scheduler<'a> {
        let (units, jobs) = super::input::packing(
            runnable.iter().map(|&i| frozen.scenes[i].device()),
            &frozen.lanes,
            &frozen.lane_startup,
            granted.len(),
        );
        let queue = units
            .into_iter()
            .map(|u| Queued {
                unit: match u {
                    Unit::Scene(i) => Unit::Scene(runnable[i]),
                    Unit::Lane { lane, scenes } => Unit::Lane {
                        lane,
                        scenes: scenes.into_iter().map(|i| runnable[i]).collect(),
                    },
                },
                avoid: Vec::new(),
            })
            .collect();
        let mean = packer::mean_estimate(jobs.iter().map(|j| Some(j.estimate)));
        Scheduler {
            frozen,
            granted,
            packer: Packer::new(&jobs),
            jobs,
            queue,
            free: (0..granted.len()).collect(),
            running: HashMap::new(),
            exclusive_running: 0,
            mean,
            lane_again: HashMap::new(),
        }
    }

    /// Take out the queued jobs that no longer fit on the `healthy` ids; the scenes
    /// they would have run.
    pub fn take_unfit(&mut self, healthy: usize) -> Vec<usize> {
        self.packer
            .take_unfit(&self.jobs, healthy)
            .into_iter()
            .flat_map(|j| self.queue[j].unit.scenes())
            .collect()
    }

    /// Every queued job that can start now, in the packer's order, with the ids it takes.
    pub fn start_ready(&mut self) -> Vec<Start> {
        let mut out = Vec::new();
        while let Some(j) = self.packer.next(
            &self.jobs,
            self.free.len(),
            self.running.len(),
            self.exclusive_running > 0,
        ) {
            let slots =
                packer::take_ids(&mut self.free, self.jobs[j].devices, &self.queue[j].avoid)
                    .expect("the packer checked the free ids");
            if self.jobs[j].exclusive {
                self.exclusive_running += 1;
            }
            self.running.insert(j, slots.clone());
            out.push(Start {
                job: j,
                unit: self.queue[j].unit.clone(),
                slots,
            });
        }
        out
    }

    /// Every queued job, in the order the packing simulation starts them on the granted
    /// ids (the first wave first).
    pub fn planned_order(&self) -> Vec<Unit> {
        let mut placed = packer::simulate(&self.jobs, self.granted.len());
        placed.sort_by(|a, b| a.start.total_cmp(&b.start).then(a.job.cmp(&b.job)));
        placed
            .into_iter()
            .map(|p| self.queue[p.job].unit.clone())
            .collect()
    }

    /// How many jobs it has had (the first ones and those queued again since).
    #[cfg(test)]
    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    /// Nothing runs (so nothing more will happen).
    pub fn idle(&self) -> bool {
        self.running.is_empty()
    }

    /// What an event means for the queue and the ids: faulty ids are never free again;
    /// an attempt that `follow` says is not final runs again; a job that is done frees
    /// its healthy ids and hands back its lane scenes.
    pub fn on_event(&mut self, ev: &Event, follow: FollowUp, quarantined: &BTreeSet<usize>) {
        match ev {
            Event::Fault { slots } => {
                for s in slots {
                    self.free.remove(s);
                }
            }
            Event::Attempt { scene, attempt } if follow.requeues() => {
                let avoid: Vec<usize> = attempt
                    .devices
                    .iter()
                    .filter_map(|d| self.granted.iter().position(|g| g == d))
                    .collect();
                self.requeue(*scene, avoid);
            }
            Event::Done { job, handback } => {
                let slots = self
                    .running
                    .remove(job)
                    .expect("a finished job was running");
                self.packer.finished(&self.jobs, *job);
                if self.jobs[*job].exclusive {
                    self.exclusive_running -= 1;
                }
                self.free
                    .extend(slots.iter().filter(|s| !quarantined.contains(s)));
                if let Unit::Lane { lane, .. } = &self.queue[*job].unit {
                    let lane = lane.clone();
                    let again = self.lane_again.remove(job).unwrap_or_default();
                    self.requeue_lane(&lane, again, slots);
                    self.requeue_lane(&lane, handback.clone(), Vec::new());
                }
            }
            _ => {}
        }
    }

    /// Run `scene` again, away from the slots `avoid` when others are free: a plain
    /// scene as a job of its own now; a lane scene in one fresh process with the others
    /// of its process, once that process is done.
    fn requeue(&mut self, scene: usize, avoid: Vec<usize>) {
        let s = &self.frozen.scenes[scene];
        if s.lane().is_some() {
            let from = self
                .running
                .iter()
                .find(|(_, slots)| **slots == avoid)
                .map(|(j, _)| *j)
                .unwrap_or(usize::MAX);
            self.lane_again.entry(from).or_default().push(scene);
            return;
        }
        let d = s.device();
        self.push(
            packer::Job {
                devices: d.devices,
                exclusive: d.exclusive,
                estimate: d.estimate.unwrap_or(self.mean),
                order: d.order,
            },
            Unit::Scene(scene),
            avoid,
        );
    }

    /// Run `scenes` of `lane` in one fresh process (nothing when there are none).
    fn requeue_lane(&mut self, lane: &str, scenes: Vec<usize>, avoid: Vec<usize>) {
        if scenes.is_empty() {
            return;
        }
        let estimate = scenes
            .iter()
            .map(|&i| self.frozen.scenes[i].device().estimate.unwrap_or(self.mean))
            .sum();
        // The scenes of one lane process share their order.
        let job = packer::Job {
            devices: self.frozen.lanes[lane].devices as usize,
            exclusive: false,
            estimate,
            order: self.frozen.scenes[scenes[0]].device().order,
        };
        let unit = Unit::Lane {
            lane: lane.to_string(),
            scenes,
        };
        self.push(job, unit, avoid);
    }

    fn push(&mut self, job: packer::Job, unit: Unit, avoid: Vec<usize>) {
        self.jobs.push(job);
        self.queue.push(Queued { unit, avoid });
        self.packer.push(&self.jobs, self.jobs.len() - 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::events::{AttemptOutcome, Outcome};
    use crate::device::testing::{attempt, frozen, in_lane, plain};

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| i.to_string()).collect()
    }

    #[test]
    fn start_ready_fills_the_free_ids_longest_first_and_done_frees_them() {
        let t = tempfile::tempdir().unwrap();
        let f = frozen(
            t.path(),
            vec![
                plain("short", 1, false, 1.0),
                plain("long", 1, false, 9.0),
                plain("mid", 1, false, 5.0),
            ],
        );
        let granted = ids(2);
        let mut s = Scheduler::new(&f, &granted, &[0, 1, 2]);
        let first = s.start_ready();
        let units: Vec<&Unit> = first.iter().map(|st| &st.unit).collect();
        assert_eq!(units, [&Unit::Scene(1), &Unit::Scene(2)]);
        assert_eq!(first[0].slots, [0]);
        assert_eq!(first[1].slots, [1]);
        assert!(s.start_ready().is_empty(), "no id is free");
        let done = Event::Done {
            job: first[1].job,
            handback: Vec::new(),
        };
        s.on_event(&done, FollowUp::Final, &BTreeSet::new());
        let next = s.start_ready();
        assert_eq!(next.len(), 1);
        assert_eq!(
            (&next[0].unit, &next[0].slots[..]),
            (&Unit::Scene(0), &[1][..])
        );
        assert!(!s.idle());
    }

    #[test]
    fn an_exclusive_scene_waits_for_the_pool_to_drain_and_runs_alone() {
        let t = tempfile::tempdir().unwrap();
        let f = frozen(
            t.path(),
            vec![plain("alone", 1, true, 9.0), plain("other", 1, false, 1.0)],
        );
        let granted = ids(2);
        let mut s = Scheduler::new(&f, &granted, &[0, 1]);
        let first = s.start_ready();
        assert_eq!(first.len(), 1, "the exclusive scene runs alone");
        assert_eq!(first[0].unit, Unit::Scene(0));
        let done = Event::Done {
            job: first[0].job,
            handback: Vec::new(),
        };
        s.on_event(&done, FollowUp::Final, &BTreeSet::new());
        assert_eq!(s.start_ready()[0].unit, Unit::Scene(1));
    }

    #[test]
    fn a_retry_is_requeued_away_from_its_ids_and_faulty_ids_stay_taken() {
        let t = tempfile::tempdir().unwrap();
        let f = frozen(t.path(), vec![plain("a", 1, false, 1.0)]);
        let granted = ids(2);
        let mut s = Scheduler::new(&f, &granted, &[0]);
        let first = s.start_ready();
        assert_eq!(first[0].slots, [0]);
        let failed = Event::Attempt {
            scene: 0,
            attempt: attempt(AttemptOutcome::Test(Outcome::Failed), &["0"]),
        };
        s.on_event(&failed, FollowUp::Retry, &BTreeSet::new());
        // The retry waits for nothing: id 1 is free, and it avoids id 0.
        let retry = s.start_ready();
        assert_eq!(
            (&retry[0].unit, &retry[0].slots[..]),
            (&Unit::Scene(0), &[1][..])
        );
        // Id 1 turns out faulty: once its job is done it is not free again.
        let quarantined: BTreeSet<usize> = [1].into();
        s.on_event(
            &Event::Fault { slots: vec![1] },
            FollowUp::Final,
            &quarantined,
        );
        let done = |job| Event::Done {
            job,
            handback: Vec::new(),
        };
        s.on_event(&done(retry[0].job), FollowUp::Final, &quarantined);
        s.on_event(&done(first[0].job), FollowUp::Final, &quarantined);
        assert!(s.idle());
        assert_eq!(s.free, [0].into());
    }

    #[test]
    fn jobs_too_wide_for_the_healthy_ids_are_taken_out() {
        let t = tempfile::tempdir().unwrap();
        let f = frozen(
            t.path(),
            vec![plain("wide", 2, false, 9.0), plain("narrow", 1, false, 1.0)],
        );
        let granted = ids(2);
        let mut s = Scheduler::new(&f, &granted, &[0, 1]);
        assert_eq!(s.take_unfit(1), [0]);
        assert_eq!(s.start_ready()[0].unit, Unit::Scene(1));
    }

    #[test]
    fn lane_scenes_run_again_in_one_fresh_process_once_theirs_is_done() {
        let t = tempfile::tempdir().unwrap();
        let f = frozen(
            t.path(),
            vec![
                in_lane("x", "l", 1.0),
                in_lane("y", "l", 1.0),
                in_lane("z", "l", 1.0),
            ],
        );
        let granted = ids(1);
        let mut s = Scheduler::new(&f, &granted, &[0, 1, 2]);
        let first = s.start_ready();
        let Unit::Lane { lane, scenes } = &first[0].unit else {
            panic!("a lane process: {first:?}");
        };
        assert_eq!((lane.as_str(), &scenes[..]), ("l", &[0, 1, 2][..]));
        // y failed and may be retried; z was handed back (never started).
        let failed = Event::Attempt {
            scene: 1,
            attempt: attempt(AttemptOutcome::Test(Outcome::Failed), &["0"]),
        };
        s.on_event(&failed, FollowUp::Retry, &BTreeSet::new());
        assert!(s.start_ready().is_empty(), "not before its process is done");
        let done = Event::Done {
            job: first[0].job,
            handback: vec![2],
        };
        s.on_event(&done, FollowUp::Final, &BTreeSet::new());
        let again: Vec<Unit> = s.start_ready().into_iter().map(|st| st.unit).collect();
        assert_eq!(
            again,
            [Unit::Lane {
                lane: "l".into(),
                scenes: vec![1]
            }]
        );
        let done = Event::Done {
            job: s.running.keys().copied().next().unwrap(),
            handback: Vec::new(),
        };
        s.on_event(&done, FollowUp::Final, &BTreeSet::new());
        let last: Vec<Unit> = s.start_ready().into_iter().map(|st| st.unit).collect();
        assert_eq!(
            last,
            [Unit::Lane {
                lane: "l".into(),
                scenes: vec![2]
            }]
        );
    }
}
