//! The warm scheduler's decisions, kept pure so they can be tested and benchmarked:
//! longest remaining path first (from history; unknown steps count as the mean), `threads`
//! slots per step out of `-j`, `memory` against a budget, and a step bigger than the
//! budget runs alone rather than never.

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
    running: usize,
    alone_running: bool,
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
            running: 0,
            alone_running: false,
        }
    }

    fn width(&self, i: usize) -> usize {
        self.tasks[i].threads.clamp(1, self.slots)
    }

    fn alone(&self, i: usize) -> bool {
        self.tasks[i].memory > self.budget
    }

    /// The next task to start now, if any fits.
    pub fn next_task(&mut self) -> Option<usize> {
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
            if self.running == 0 {
                self.ready.pop();
                self.start(head);
                return Some(head);
            }
            return None;
        }
        let pos = self.ready.iter().rposition(|&i| {
            !self.alone(i)
                && self.width(i) <= self.free_slots
                && self.used_memory + self.tasks[i].memory <= self.budget
        })?;
        let i = self.ready.remove(pos);
        self.start(i);
        Some(i)
    }

    fn start(&mut self, i: usize) {
        self.free_slots -= self.width(i).min(self.free_slots);
        self.used_memory += self.tasks[i].memory;
        self.running += 1;
        self.alone_running = self.alone(i);
    }

    /// Tasks that finished before any was started here (hits settled in one batch by the
    /// executor): none of them is handed out; each `ok` one lets its dependents run, a
    /// failed one's dependents are returned as skipped (transitively), as in `finish`.
    pub fn settle(&mut self, done: &[(usize, bool)]) -> Vec<usize> {
        debug_assert_eq!(self.running, 0, "settle before anything starts");
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
        self.running -= 1;
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
    let mut s = Scheduler::new(tasks.to_vec(), slots, budget);
    if order_by_manifest {
        let n = tasks.len() as f64;
        s.priority = (0..tasks.len()).map(|i| n - i as f64).collect();
    }
    let mut now = 0.0;
    let mut running: Vec<(f64, usize)> = Vec::new();
    let mut done = 0;
    while done < tasks.len() {
        while let Some(i) = s.next_task() {
            running.push((now + tasks[i].estimate, i));
        }
        running.sort_by(|a, b| b.0.total_cmp(&a.0));
        let Some((end, i)) = running.pop() else { break };
        now = end;
        s.finish(i, true);
        done += 1;
    }
    now
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
        assert_eq!(s.next_task(), Some(0));
        assert_eq!(s.next_task(), None);
        s.finish(0, true);
        assert_eq!(s.next_task(), Some(1));
    }

    #[test]
    fn oversized_step_runs_alone() {
        let tasks = vec![t(1.0, 1, 500, vec![]), t(0.5, 1, 0, vec![])];
        let mut s = Scheduler::new(tasks, 4, 100);
        assert_eq!(s.next_task(), Some(0));
        assert_eq!(s.next_task(), None);
        s.finish(0, true);
        assert_eq!(s.next_task(), Some(1));
    }

    #[test]
    fn threads_take_slots_and_failure_skips_dependents() {
        let tasks = vec![
            t(3.0, 2, 0, vec![]),
            t(1.0, 1, 0, vec![]),
            t(1.0, 1, 0, vec![0]),
        ];
        let mut s = Scheduler::new(tasks, 2, u64::MAX);
        assert_eq!(s.next_task(), Some(0));
        assert_eq!(s.next_task(), None);
        assert_eq!(s.finish(0, false), vec![2]);
        assert_eq!(s.next_task(), Some(1));
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
        while let Some(i) = s.next_task() {
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
}
