//! Scheduler benchmark: simulated makespans of the warm scheduler's policy (longest
//! remaining path first, `threads` slots, `memory` budget) and of plain manifest order,
//! against the lower bound max(critical path, total work ÷ slots).
//!
//!   cargo run --release --example sched_bench -- DAG.json [--slots N] [--budget BYTES]
//!   cargo run --release --example sched_bench -- --random N [--slots N] [--seed S]
//!
//! DAG.json (written by bench/gen_sched.py), tasks in manifest order (scene by scene:
//! kernels, fixture, golden — the order in which `scenerun warm` numbers its units):
//!   {"slots": 2, "budget": 10737418240,
//!    "tasks": [{"name": "s00/fixture", "secs": 1.2, "threads": 1, "memory": 0, "deps": []}, ...]}
//!
//! Prints one JSON object per DAG (and, for --random, a summary line).

use scenerun::warm::sched::{lower_bound, simulate, Task};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut file = None;
    let mut random = None;
    let mut slots_flag = None;
    let mut budget_flag = None;
    let mut seed = 1u64;
    let mut i = 0;
    while i < args.len() {
        let val = || args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--random" => {
                random = Some(val().parse::<usize>().expect("--random N"));
                i += 1;
            }
            "--slots" => {
                slots_flag = Some(val().parse::<usize>().expect("--slots N"));
                i += 1;
            }
            "--budget" => {
                budget_flag = Some(val().parse::<u64>().expect("--budget BYTES"));
                i += 1;
            }
            "--seed" => {
                seed = val().parse().expect("--seed S");
                i += 1;
            }
            f => file = Some(f.to_string()),
        }
        i += 1;
    }

    if let Some(path) = file {
        let text = std::fs::read_to_string(&path).expect("read DAG file");
        let v: serde_json::Value = serde_json::from_str(&text).expect("DAG JSON");
        let slots = slots_flag.unwrap_or(v["slots"].as_u64().unwrap_or(2) as usize);
        let budget = budget_flag.unwrap_or(v["budget"].as_u64().unwrap_or(u64::MAX));
        let tasks: Vec<Task> = v["tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .map(|t| Task {
                estimate: t["secs"].as_f64().expect("secs"),
                threads: t["threads"].as_u64().unwrap_or(1) as usize,
                memory: t["memory"].as_u64().unwrap_or(0),
                deps: t["deps"]
                    .as_array()
                    .map(|d| d.iter().map(|x| x.as_u64().unwrap() as usize).collect())
                    .unwrap_or_default(),
            })
            .collect();
        report(&path, &tasks, slots, budget);
    }

    if let Some(n) = random {
        let slots = slots_flag.unwrap_or(2);
        let mut rng = Lcg(seed);
        let (mut sum_p, mut sum_m, mut max_p, mut max_m, mut worse) = (0.0, 0.0, 0.0f64, 0.0f64, 0);
        for _ in 0..n {
            let (tasks, budget) = random_dag(&mut rng);
            let lb = lower_bound(&tasks, slots);
            let p = simulate(&tasks, slots, budget, false) / lb;
            let m = simulate(&tasks, slots, budget, true) / lb;
            sum_p += p;
            sum_m += m;
            max_p = max_p.max(p);
            max_m = max_m.max(m);
            if p > m + 1e-9 {
                worse += 1;
            }
        }
        println!(
            "{{\"random_dags\": {n}, \"slots\": {slots}, \"policy_mean_ratio\": {:.4}, \"policy_max_ratio\": {:.4}, \"manifest_order_mean_ratio\": {:.4}, \"manifest_order_max_ratio\": {:.4}, \"policy_worse_than_manifest_order\": {worse}}}",
            sum_p / n as f64,
            max_p,
            sum_m / n as f64,
            max_m
        );
    }
}

fn report(name: &str, tasks: &[Task], slots: usize, budget: u64) {
    let lb = lower_bound(tasks, slots);
    let work: f64 = tasks
        .iter()
        .map(|t| t.estimate * t.threads.clamp(1, slots) as f64)
        .sum();
    let policy = simulate(tasks, slots, budget, false);
    let manifest = simulate(tasks, slots, budget, true);
    println!(
        "{{\"dag\": \"{name}\", \"tasks\": {}, \"slots\": {slots}, \"work_secs\": {work:.3}, \"work_per_slot\": {:.3}, \"lower_bound\": {lb:.3}, \"policy_makespan\": {policy:.3}, \"policy_ratio\": {:.4}, \"manifest_order_makespan\": {manifest:.3}, \"manifest_order_ratio\": {:.4}}}",
        tasks.len(),
        work / slots as f64,
        policy / lb,
        manifest / lb
    );
}

/// Small deterministic PRNG (no extra dependency).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next()
    }
}

/// A suite-shaped DAG: scenes with 0–4 kernels, a fixture and a golden that waits for it;
/// durations 0.2–3 s, some `threads: 2`, some memory-heavy steps.
fn random_dag(rng: &mut Lcg) -> (Vec<Task>, u64) {
    const GIB: u64 = 1 << 30;
    let budget = 10 * GIB;
    let scenes = 6 + (rng.next() * 20.0) as usize;
    let mut tasks = Vec::new();
    for _ in 0..scenes {
        for _ in 0..(rng.next() * 5.0) as usize {
            tasks.push(Task {
                estimate: rng.range(0.2, 0.8),
                threads: 1,
                memory: 0,
                deps: vec![],
            });
        }
        let gen = |rng: &mut Lcg, deps: Vec<usize>| Task {
            estimate: rng.range(0.2, 3.0),
            threads: if rng.next() < 0.2 { 2 } else { 1 },
            memory: if rng.next() < 0.25 { 6 * GIB } else { 0 },
            deps,
        };
        let f = tasks.len();
        let fixture = gen(rng, vec![]);
        tasks.push(fixture);
        let golden = gen(rng, vec![f]);
        tasks.push(golden);
    }
    (tasks, budget)
}
