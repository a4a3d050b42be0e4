//! The discrete-event simulation: jobs arrive, ask one FIFO lock queue for cards, take
//! all of a request's cards at once (as task-submit does), hold them, and release them.
//! Pure: no I/O, no clock; the same jobs give the same outcome bit for bit.
//!
//! Invariants: cards are granted strictly in request order (the head of the queue
//! waits for enough free cards and nothing passes it); at one instant releases come
//! before requests, and requests in the order they were made, so a job asking exactly
//! when another releases finds the card free; never more cards busy than the pool has.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// One acquisition: how long the cards are held, and how much of that is device work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Segment {
    pub secs: f64,
    pub device_secs: f64,
}

/// One job: when it arrives, how many cards each of its acquisitions takes, how long
/// it works before it first asks for the lock (warm work outside the lock), and its
/// acquisitions in order; the next is asked for as soon as the previous is released,
/// at the back of the queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub arrival: f64,
    pub cards: u32,
    pub before: f64,
    pub holds: Vec<Segment>,
}

/// Why a simulation cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error("a job needs {cards} cards at once, but the pool has {pool}: it could never start")]
    TooBig { cards: u32, pool: u32 },
    #[error(
        "jobs must come in arrival order (job {job} arrives at {at}s, before the one ahead of it)"
    )]
    OutOfOrder { job: usize, at: f64 },
}

/// The queue length and cards busy from `at` until the next point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub at: f64,
    pub queued: u32,
    pub busy: u32,
}

/// What one simulation measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Per job, in arrival order: seconds queued for the lock, over all its acquisitions.
    pub waits: Vec<f64>,
    /// Sum of the jobs' wall times (arrival to last release).
    pub wall_secs: f64,
    /// Card-seconds held, and card-seconds of device work in them.
    pub held_card_secs: f64,
    pub device_card_secs: f64,
    pub acquisitions: u64,
    /// The last release (time 0 is the simulation's start).
    pub makespan: f64,
    /// Arrivals, grants and releases processed.
    pub events: u64,
    /// Every change of queue length or cards busy, when asked for.
    pub timeline: Vec<Point>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    Release,
    Request,
}

/// A pending event: earliest first; at one time releases first, then by order made.
#[derive(Debug, Clone, Copy)]
struct Event {
    at: f64,
    class: Class,
    seq: u64,
    slot: usize,
}
crate::device::packing::packer::order_from_cmp!(Event);
impl Ord for Event {
    fn cmp(&self, o: &Self) -> Ordering {
        o.at.total_cmp(&self.at)
            .then(o.class.cmp(&self.class))
            .then(o.seq.cmp(&self.seq))
    }
}

/// A job in the system.
#[derive(Debug)]
struct Active {
    job: Job,
    index: usize,
    next: usize,
    asked_at: f64,
    wait: f64,
}

/// The simulation's state: pool, queue, pending events, jobs in flight.
struct Sim {
    pool: u32,
    free: u32,
    now: f64,
    seq: u64,
    events: BinaryHeap<Event>,
    queue: VecDeque<usize>,
    slots: Vec<Option<Active>>,
    spare: Vec<usize>,
    out: Outcome,
    record: bool,
}

impl Sim {
    fn push(&mut self, at: f64, class: Class, slot: usize) {
        self.seq += 1;
        self.events.push(Event {
            at,
            class,
            seq: self.seq,
            slot,
        });
    }

    fn admit(&mut self, job: Job, index: usize) -> Result<(), SimError> {
        if job.cards > self.pool && !job.holds.is_empty() {
            return Err(SimError::TooBig {
                cards: job.cards,
                pool: self.pool,
            });
        }
        let ask = job.arrival + job.before;
        let active = Active {
            job,
            index,
            next: 0,
            asked_at: ask,
            wait: 0.0,
        };
        let slot = match self.spare.pop() {
            Some(s) => {
                self.slots[s] = Some(active);
                s
            }
            None => {
                self.slots.push(Some(active));
                self.slots.len() - 1
            }
        };
        self.push(ask, Class::Request, slot);
        Ok(())
    }

    fn active(&mut self, slot: usize) -> &mut Active {
        self.slots[slot].as_mut().expect("slot holds a job")
    }

    /// A job asks for its next acquisition, or is done.
    fn request(&mut self, slot: usize) {
        let now = self.now;
        let a = self.active(slot);
        if a.next == a.job.holds.len() {
            self.finish(slot);
            return;
        }
        a.asked_at = now;
        self.queue.push_back(slot);
    }

    fn release(&mut self, slot: usize) {
        let cards = self.active(slot).job.cards;
        self.free += cards;
        self.out.makespan = self.now;
        self.request(slot);
    }

    fn finish(&mut self, slot: usize) {
        let a = self.slots[slot].take().expect("slot holds a job");
        self.out.wall_secs += self.now - a.job.arrival;
        self.out.waits[a.index] = a.wait;
        self.out.makespan = self.out.makespan.max(self.now);
        self.spare.push(slot);
    }

    /// Grant the head of the queue while its cards are free.
    fn grant(&mut self) {
        while let Some(&slot) = self.queue.front() {
            let now = self.now;
            let a = self.slots[slot].as_mut().expect("queued job");
            if a.job.cards > self.free {
                return;
            }
            self.queue.pop_front();
            let seg = a.job.holds[a.next];
            a.next += 1;
            a.wait += now - a.asked_at;
            let cards = a.job.cards;
            self.free -= cards;
            self.out.acquisitions += 1;
            self.out.events += 1;
            self.out.held_card_secs += seg.secs * cards as f64;
            self.out.device_card_secs += seg.device_secs * cards as f64;
            self.push(now + seg.secs, Class::Release, slot);
        }
    }

    fn note(&mut self) {
        if !self.record {
            return;
        }
        let p = Point {
            at: self.now,
            queued: self.queue.len() as u32,
            busy: self.pool - self.free,
        };
        match self.out.timeline.last_mut() {
            Some(last) if last.at == p.at => *last = p,
            Some(last) if last.queued == p.queued && last.busy == p.busy => {}
            _ => self.out.timeline.push(p),
        }
    }
}

/// Run `jobs` (in arrival order; `count` of them, for sizing) through a pool of `pool`
/// cards. With `record`, the outcome keeps every change of queue length and cards busy.
pub fn simulate(
    pool: u32,
    count: usize,
    jobs: impl IntoIterator<Item = Job>,
    record: bool,
) -> Result<Outcome, SimError> {
    let mut sim = Sim {
        pool,
        free: pool,
        now: 0.0,
        seq: 0,
        events: BinaryHeap::new(),
        queue: VecDeque::new(),
        slots: Vec::new(),
        spare: Vec::new(),
        out: Outcome {
            waits: Vec::with_capacity(count),
            ..Outcome::default()
        },
        record,
    };
    let mut jobs = jobs.into_iter().enumerate().peekable();
    let mut last_arrival = f64::NEG_INFINITY;
    loop {
        // The next arrival joins when nothing pending comes before it (an arrival is
        // made after every event already pending at its time).
        let arrival_first = match (jobs.peek(), sim.events.peek()) {
            (Some((_, j)), Some(e)) => j.arrival < e.at,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if arrival_first {
            let (index, job) = jobs.next().expect("peeked");
            if job.arrival < last_arrival || !job.arrival.is_finite() {
                return Err(SimError::OutOfOrder {
                    job: index,
                    at: job.arrival,
                });
            }
            last_arrival = job.arrival;
            sim.out.waits.push(0.0);
            sim.out.events += 1;
            sim.now = job.arrival;
            sim.admit(job, index)?;
            continue;
        }
        let Some(e) = sim.events.pop() else { break };
        sim.now = e.at;
        match e.class {
            Class::Release => {
                sim.out.events += 1;
                sim.release(e.slot);
            }
            Class::Request => sim.request(e.slot),
        }
        sim.grant();
        sim.note();
    }
    Ok(sim.out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(arrival: f64, cards: u32, holds: &[f64]) -> Job {
        Job {
            arrival,
            cards,
            before: 0.0,
            holds: holds
                .iter()
                .map(|&s| Segment {
                    secs: s,
                    device_secs: s,
                })
                .collect(),
        }
    }

    #[test]
    fn the_head_of_the_queue_waits_for_all_its_cards_and_nothing_passes_it() {
        // Pool of 2: a one-card job holds a card until 10; a two-card job arrives at 1
        // and must wait until 10; a one-card job arriving at 2 could run on the free
        // card but queues behind the head (FIFO).
        let jobs = vec![
            job(0.0, 1, &[10.0]),
            job(1.0, 2, &[5.0]),
            job(2.0, 1, &[1.0]),
        ];
        let o = simulate(2, 3, jobs, true).unwrap();
        assert_eq!(o.waits, vec![0.0, 9.0, 13.0]);
        assert_eq!(o.makespan, 16.0);
        assert_eq!(o.acquisitions, 3);
        assert!(o.timeline.iter().all(|p| p.busy <= 2));
        // Queue length: 1 from t=1, 2 from t=2, 1 from t=10 (head granted), 0 at 15.
        let queued: Vec<(f64, u32)> = o.timeline.iter().map(|p| (p.at, p.queued)).collect();
        assert!(
            queued.contains(&(2.0, 2)) && queued.contains(&(10.0, 1)),
            "{queued:?}"
        );
    }

    #[test]
    fn a_job_requeues_at_the_back_between_acquisitions() {
        // One card; job 0 has two acquisitions of 2 s; job 1 arrives at 1 s. Job 0's
        // second acquisition queues behind job 1.
        let jobs = vec![job(0.0, 1, &[2.0, 2.0]), job(1.0, 1, &[3.0])];
        let o = simulate(1, 2, jobs, false).unwrap();
        assert_eq!(o.waits, vec![3.0, 1.0]);
        assert_eq!(o.wall_secs, 7.0 + 4.0);
        assert_eq!(o.makespan, 7.0);
    }

    #[test]
    fn work_before_the_lock_delays_the_request_not_the_queue() {
        let mut a = job(0.0, 1, &[1.0]);
        a.before = 5.0;
        let o = simulate(1, 2, vec![a, job(1.0, 1, &[1.0])], false).unwrap();
        assert_eq!(o.waits, vec![0.0, 0.0]);
        assert_eq!(o.wall_secs, 6.0 + 1.0);
    }

    #[test]
    fn a_release_and_a_request_at_one_instant_hand_the_card_over() {
        let jobs = (0..5).map(|i| job(i as f64 * 2.0, 1, &[2.0]));
        let o = simulate(1, 5, jobs, false).unwrap();
        assert!(o.waits.iter().all(|&w| w == 0.0), "{:?}", o.waits);
        assert_eq!(o.held_card_secs / o.makespan, 1.0);
    }

    #[test]
    fn refuses_a_job_bigger_than_the_pool_and_arrivals_out_of_order() {
        assert_eq!(
            simulate(2, 1, vec![job(0.0, 3, &[1.0])], false),
            Err(SimError::TooBig { cards: 3, pool: 2 })
        );
        assert!(matches!(
            simulate(2, 2, vec![job(1.0, 1, &[1.0]), job(0.5, 1, &[1.0])], false),
            Err(SimError::OutOfOrder { job: 1, .. })
        ));
    }
}
