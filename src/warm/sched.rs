//! The warm scheduler's decisions, kept pure so they can be tested and benchmarked:
//! longest remaining path first (from history; unknown steps count as the mean),
//! `threads` slots per step out of `-j` (a hint wider than the runner is clamped to it),
//! `memory` against a budget, and a step bigger than the budget runs alone rather than
//! never.
//!
//! A wide step is never starved by narrow ones: when the most urgent ready step does
//! not fit yet, the slots it waits for are reserved for it (EASY backfilling, as batch
//! schedulers do it). A narrower step may start meanwhile only if, by the estimates, it
//! ends before the reserved step could start, or holds only slots and memory the
//! reserved step will not need then. Time is the caller's clock, passed in (`now`, in
//! seconds): the decisions stay pure.

/// One unit of work (one unique artifact).
#[derive(Debug, Clone)]
pub struct Task {
    pub estimate: f64,
    pub threads: usize,
    pub memory: u64,
    /// Tasks that must finish first.
    pub deps: Vec<usize>,
}

pub struct Scheduler {
    tasks: Vec<Task>,
    slots: usize,
    budget: u64,
    priority: Vec<f64>,
    waiting_on: Vec<usize>,
    dependents: Vec<Vec<usize>>,
    /// Ready tasks, most urgent last (cheap to remove); re-sorted only after a push.
    ready: Vec<usize>,
    ready_sorted: bool,
    free_slots: usize,
    used_memory: u64,
    /// Running tasks and when each started (the caller's clock).
    running: Vec<(usize, f64)>,
    alone_running: bool,
}

/// When the most urgent ready task can start by the estimates, and what it leaves
/// free then (slots, memory) for a narrower task that would still be running.
struct Reservation {
    at: f64,
    spare_slots: usize,
    spare_memory: u64,
}

impl Scheduler {
    pub fn new(tasks: Vec<Task>, slots: usize, budget: u64) -> Scheduler {
        let n = tasks.len();
        let slots = slots.max(1);
        let mut dependents = vec![Vec::new(); n];
        for (i, t) in tasks.iter().enumerate() {
            for &d in &t.deps {
                dependents[d].push(i);
            }
        }
        // Longest path from each task to the end (tasks form a DAG; deps point back).
        let mut priority = vec![f64::NAN; n];
        fn prio(i: usize, tasks: &[Task], dependents: &[Vec<usize>], memo: &mut [f64]) -> f64 {
            if !memo[i].is_nan() {
                return memo[i];
            }
            let tail = dependents[i]
                .iter()
                .map(|&d| prio(d, tasks, dependents, memo))
                .fold(0.0, f64::max);
            memo[i] = tasks[i].estimate + tail;
            memo[i]
        }
        for i in 0..n {
            prio(i, &tasks, &dependents, &mut priority);
        }
        let waiting_on: Vec<usize> = tasks.iter().map(|t| t.deps.len()).collect();
        let ready = (0..n).filter(|&i| waiting_on[i] == 0).collect();
        Scheduler {
            tasks,
            slots,
            budget,
            priority,
            waiting_on,
            dependents,
            ready,
            ready_sorted: false,
            free_slots: slots,
            used_memory: 0,
            running: Vec::new(),
            alone_running: false,
        }
    }

    fn width(&self, i: usize) -> usize {
        self.tasks[i].threads.clamp(1, self.slots)
    }

    fn alone(&self, i: usize) -> bool {
        self.tasks[i].memory > self.budget
    }

    /// The next task to start at `now` (seconds on the caller's clock), if any may.
    pub fn next_task(&mut self, now: f64) -> Option<usize> {
        // Every task needs at least one slot: with none free, nothing can start (without
        // this, every call scanned the whole ready list: quadratic in a 20,000-step warm).
        if self.alone_running || self.free_slots == 0 {
            return None;
        }
        if !self.ready_sorted {
            // Ascending urgency: highest priority (then lowest index) last.
            let pr = &self.priority;
            self.ready
                .sort_by(|&a, &b| pr[a].total_cmp(&pr[b]).then(b.cmp(&a)));
            self.ready_sorted = true;
        }
        let head = *self.ready.last()?;
        if self.alone(head) {
            // It waits for everything else to drain and lets nothing pass it.
            if self.running.is_empty() {
                self.ready.pop();
                self.start(head, now);
                return Some(head);
            }
            return None;
        }
        if self.fits(head) {
            self.ready.pop();
            self.start(head, now);
            return Some(head);
        }
        // The head waits for slots or memory: they are reserved for it, and only a task
        // that does not delay it may pass (backfill).
        let r = self.reservation(head, now);
        let pos = self.ready.iter().rposition(|&i| {
            i != head
                && !self.alone(i)
                && self.fits(i)
                && (now + self.tasks[i].estimate <= r.at
                    || (self.width(i) <= r.spare_slots && self.tasks[i].memory <= r.spare_memory))
        })?;
        let i = self.ready.remove(pos);
        self.start(i, now);
        Some(i)
    }

    /// Whether task `i` fits the free slots and memory now.
    fn fits(&self, i: usize) -> bool {
        self.width(i) <= self.free_slots
            && self.used_memory.saturating_add(self.tasks[i].memory) <= self.budget
    }

    /// When `head` can start if the running tasks end as estimated (one past its
    /// estimate is taken to end now), and what it leaves spare then.
    fn reservation(&self, head: usize, now: f64) -> Reservation {
        let (width, memory) = (self.width(head), self.tasks[head].memory);
        let mut ends: Vec<(f64, usize)> = self
            .running
            .iter()
            .map(|&(i, at)| ((at + self.tasks[i].estimate).max(now), i))
            .collect();
        ends.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (mut slots, mut used) = (self.free_slots, self.used_memory);
        for (end, i) in ends {
            slots += self.width(i);
            used = used.saturating_sub(self.tasks[i].memory);
            if slots >= width && used.saturating_add(memory) <= self.budget {
                return Reservation {
                    at: end,
                    spare_slots: slots - width,
                    spare_memory: self.budget - used - memory,
                };
            }
        }
        // Not reached: with nothing running the head fits (`alone` covers memory).
        Reservation {
            at: f64::INFINITY,
            spare_slots: 0,
            spare_memory: 0,
        }
    }

    fn start(&mut self, i: usize, now: f64) {
        self.free_slots -= self.width(i).min(self.free_slots);
        self.used_memory += self.tasks[i].memory;
        self.running.push((i, now));
        self.alone_running = self.alone(i);
    }

    /// Tasks that finished before any was started here (hits settled in one batch by the
    /// executor): none of them is handed out; each `ok` one lets its dependents run, a
    /// failed one's dependents are returned as skipped (transitively), as in `finish`.
    pub fn settle(&mut self, done: &[(usize, bool)]) -> Vec<usize> {
        debug_assert!(self.running.is_empty(), "settle before anything starts");
        let mut gone = vec![false; self.tasks.len()];
        let mut skipped = Vec::new();
        for &(i, ok) in done {
            gone[i] = true;
            if ok {
                for &d in &self.dependents[i] {
                    self.waiting_on[d] -= 1;
                }
            } else {
                let mut stack = self.dependents[i].clone();
                while let Some(d) = stack.pop() {
                    if !skipped.contains(&d) {
                        skipped.push(d);
                        stack.extend(self.dependents[d].iter().copied());
                    }
                }
            }
        }
        for &d in &skipped {
            gone[d] = true;
        }
        self.ready = (0..self.tasks.len())
            .filter(|&i| !gone[i] && self.waiting_on[i] == 0)
            .collect();
        self.ready_sorted = false;
        skipped
    }

    /// A task finished. `ok`: its dependents may run; otherwise they are returned as
    /// skipped (transitively).
    pub fn finish(&mut self, i: usize, ok: bool) -> Vec<usize> {
        self.free_slots += self.width(i);
        self.used_memory -= self.tasks[i].memory;
        self.running.retain(|&(r, _)| r != i);
        if self.alone(i) {
            self.alone_running = false;
            self.free_slots = self.slots;
        }
        let mut skipped = Vec::new();
        if ok {
            for &d in &self.dependents[i].clone() {
                self.waiting_on[d] -= 1;
                if self.waiting_on[d] == 0 {
                    self.ready.push(d);
                    self.ready_sorted = false;
                }
            }
        } else {
            let mut stack = self.dependents[i].clone();
            while let Some(d) = stack.pop() {
                if !skipped.contains(&d) {
                    skipped.push(d);
                    stack.extend(self.dependents[d].iter().copied());
                }
            }
        }
        skipped
    }
}

/// Simulate a schedule with the estimates as true durations: returns the makespan.
/// `order_by_manifest` replaces the priority with task order (for the benchmark's baseline).
pub fn simulate(tasks: &[Task], slots: usize, budget: u64, order_by_manifest: bool) -> f64 {
    let starts = simulate_starts(tasks, slots, budget, order_by_manifest);
    (0..tasks.len())
        .map(|i| starts[i] + tasks[i].estimate)
        .fold(0.0, f64::max)
}

/// As `simulate`, each task's start time (NaN for one never started).
pub fn simulate_starts(
    tasks: &[Task],
    slots: usize,
    budget: u64,
    order_by_manifest: bool,
) -> Vec<f64> {
    let mut s = Scheduler::new(tasks.to_vec(), slots, budget);
    if order_by_manifest {
        let n = tasks.len() as f64;
        s.priority = (0..tasks.len()).map(|i| n - i as f64).collect();
    }
    let mut starts = vec![f64::NAN; tasks.len()];
    let mut now = 0.0;
    let mut running: Vec<(f64, usize)> = Vec::new();
    let mut done = 0;
    while done < tasks.len() {
        while let Some(i) = s.next_task(now) {
            starts[i] = now;
            running.push((now + tasks[i].estimate, i));
        }
        running.sort_by(|a, b| b.0.total_cmp(&a.0));
        let Some((end, i)) = running.pop() else { break };
        now = end;
        s.finish(i, true);
        done += 1;
    }
    starts
}

/// max(critical path, total work ÷ slots): no schedule can beat it.
pub fn lower_bound(tasks: &[Task], slots: usize) -> f64 {
    let s = Scheduler::new(tasks.to_vec(), slots, u64::MAX);
    let critical = s.priority.iter().copied().fold(0.0, f64::max);
    let work: f64 = tasks
        .iter()
        .map(|t| t.estimate * t.threads.clamp(1, slots) as f64)
        .sum();
    critical.max(work / slots as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(estimate: f64, threads: usize, memory: u64, deps: Vec<usize>) -> Task {
        Task {
            estimate,
            threads,
            memory,
            deps,
        }
    }

    #[test]
    fn memory_budget_serializes_big_steps() {
        let tasks = vec![t(1.0, 1, 60, vec![]), t(1.0, 1, 60, vec![])];
        let mut s = Scheduler::new(tasks, 4, 100);
        assert_eq!(s.next_task(0.0), Some(0));
        assert_eq!(s.next_task(0.0), None);
        s.finish(0, true);
        assert_eq!(s.next_task(1.0), Some(1));
    }

    #[test]
    fn oversized_step_runs_alone() {
        let tasks = vec![t(1.0, 1, 500, vec![]), t(0.5, 1, 0, vec![])];
        let mut s = Scheduler::new(tasks, 4, 100);
        assert_eq!(s.next_task(0.0), Some(0));
        assert_eq!(s.next_task(0.0), None);
        s.finish(0, true);
        assert_eq!(s.next_task(1.0), Some(1));
    }

    #[test]
    fn threads_take_slots_and_failure_skips_dependents() {
        let tasks = vec![
            t(3.0, 2, 0, vec![]),
            t(1.0, 1, 0, vec![]),
            t(1.0, 1, 0, vec![0]),
        ];
        let mut s = Scheduler::new(tasks, 2, u64::MAX);
        assert_eq!(s.next_task(0.0), Some(0));
        assert_eq!(s.next_task(0.0), None);
        assert_eq!(s.finish(0, false), vec![2]);
        assert_eq!(s.next_task(3.0), Some(1));
    }

    #[test]
    fn settled_tasks_are_never_handed_out_and_free_their_dependents() {
        // 0 and 1 settled in a batch (1 failed): 2 (needs 0) runs, 3 (needs 1) and 4
        // (needs 3) are skipped, 5 was never settled and runs.
        let tasks = vec![
            t(0.0, 1, 0, vec![]),
            t(0.0, 1, 0, vec![]),
            t(1.0, 1, 0, vec![0]),
            t(1.0, 1, 0, vec![1]),
            t(1.0, 1, 0, vec![3]),
            t(1.0, 1, 0, vec![]),
        ];
        let mut s = Scheduler::new(tasks, 1, u64::MAX);
        let mut skipped = s.settle(&[(0, true), (1, false)]);
        skipped.sort();
        assert_eq!(skipped, vec![3, 4]);
        let mut started = Vec::new();
        while let Some(i) = s.next_task(0.0) {
            started.push(i);
            s.finish(i, true);
        }
        started.sort();
        assert_eq!(started, vec![2, 5]);
    }

    #[test]
    fn longest_path_first_beats_manifest_order() {
        let mut tasks: Vec<Task> = (0..6).map(|_| t(1.0, 1, 0, vec![])).collect();
        tasks.push(t(4.0, 1, 0, vec![]));
        tasks.push(t(4.0, 1, 0, vec![6]));
        let good = simulate(&tasks, 2, u64::MAX, false);
        let naive = simulate(&tasks, 2, u64::MAX, true);
        assert!(good <= lower_bound(&tasks, 2) * 1.15, "{good}");
        assert!(naive > good, "{naive} vs {good}");
    }

    /// simpler's warm: a prepare step with `threads: 8` (129 s) beside 36 narrow steps
    /// on a 2-slot runner. Clamped to the 2 slots and on the critical path (a step
    /// waits for it), it starts as soon as the one step already running ends, not after
    /// every other step.
    #[test]
    fn a_wide_step_on_the_critical_path_starts_first() {
        let mut tasks = vec![
            t(1.0, 1, 0, vec![]),
            t(129.0, 8, 0, vec![0]),
            t(20.0, 1, 0, vec![1]),
        ];
        tasks.extend((0..36).map(|_| t(4.0, 1, 0, vec![])));
        let starts = simulate_starts(&tasks, 2, u64::MAX, false);
        // 0 and one narrow step at t = 0; the wide one when that narrow one ends.
        assert_eq!(starts[1], 4.0, "{starts:?}");
        let before = (3..39).filter(|&i| starts[i] < starts[1]).count();
        assert_eq!(before, 1, "{starts:?}");
        let makespan = simulate(&tasks, 2, u64::MAX, false);
        assert!(makespan <= lower_bound(&tasks, 2) * 1.15, "{makespan}");
        let mut s = Scheduler::new(tasks, 2, u64::MAX);
        assert_eq!(s.next_task(0.0), Some(0));
        s.finish(0, true);
        assert_eq!(s.next_task(1.0), Some(1), "both slots free: it starts");
        assert_eq!(s.next_task(1.0), None, "it holds both slots");
    }

    /// A wide step that becomes the most urgent while one slot is busy is not passed by
    /// narrow steps for ever: the slots are reserved for it, and it starts as soon as
    /// the running step ends (t = 10), not after the 6 narrow steps (t ≥ 40).
    #[test]
    fn a_wide_step_is_not_starved_by_narrow_ones() {
        let mut tasks = vec![t(10.0, 1, 0, vec![]), t(10.0, 1, 0, vec![0])];
        tasks.push(t(15.0, 2, 0, vec![]));
        tasks.extend((0..6).map(|_| t(7.0, 1, 0, vec![])));
        let starts = simulate_starts(&tasks, 2, u64::MAX, false);
        assert_eq!(starts[0], 0.0, "{starts:?}");
        assert_eq!(starts[2], 10.0, "{starts:?}");
        let narrow_before = (3..9).filter(|&i| starts[i] < starts[2]).count();
        assert_eq!(narrow_before, 1, "{starts:?}");
        // The same with a step that is wider than the runner (clamped) and memory that
        // only fits it once the others are done.
        tasks[2] = t(15.0, 8, 60, vec![]);
        for narrow in &mut tasks[3..9] {
            narrow.memory = 30;
        }
        let starts = simulate_starts(&tasks, 2, 100, false);
        assert!(starts[2] <= 14.0, "{starts:?}");
    }

    /// While the most urgent step waits for slots, a narrow step may pass it when it
    /// ends before the reserved start by the estimates, and not otherwise.
    #[test]
    fn a_short_step_backfills_before_a_reserved_one_and_a_long_one_does_not() {
        let tasks = vec![
            t(10.0, 1, 0, vec![]),
            t(20.0, 2, 0, vec![]),
            t(30.0, 1, 0, vec![]),
            t(4.0, 1, 0, vec![]),
        ];
        let mut s = Scheduler::new(tasks, 2, u64::MAX);
        s.priority = vec![40.0, 30.0, 20.0, 10.0];
        assert_eq!(s.next_task(0.0), Some(0));
        // 1 waits for 0 (until t = 10): 2 (30 s) would delay it, 3 (4 s) would not.
        assert_eq!(s.next_task(0.0), Some(3));
        assert_eq!(s.next_task(0.0), None);
        s.finish(3, true);
        // At t = 8, 4 s would end after 0 does; 2 is longer still: nothing.
        assert_eq!(s.next_task(8.0), None);
        s.finish(0, true);
        assert_eq!(s.next_task(10.0), Some(1));
    }

    /// Any suite-shaped DAG on any runner: every task is started exactly once, after
    /// its dependencies, and the makespan stays near the lower bound.
    #[test]
    fn random_dags_start_every_task_after_its_dependencies() {
        let mut seed = 7u64;
        let mut next = move |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        for _ in 0..200 {
            let n = 2 + next(40) as usize;
            let tasks: Vec<Task> = (0..n)
                .map(|i| {
                    let deps = if i > 0 && next(3) == 0 {
                        vec![next(i as u64) as usize]
                    } else {
                        vec![]
                    };
                    t(
                        1.0 + next(50) as f64,
                        1 + next(4) as usize,
                        next(3) * 40,
                        deps,
                    )
                })
                .collect();
            let slots = 1 + next(4) as usize;
            let starts = simulate_starts(&tasks, slots, 100, false);
            for (i, task) in tasks.iter().enumerate() {
                assert!(!starts[i].is_nan(), "task {i} never started: {tasks:?}");
                for &d in &task.deps {
                    assert!(starts[i] >= starts[d] + tasks[d].estimate, "{tasks:?}");
                }
            }
        }
    }
}
