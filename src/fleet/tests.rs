//! The simulator against closed forms (docs/fleet.md, "How it is checked").

use super::*;
use crate::base::sampling::{Arrival, Hold};

fn given(cards: u32, jobs: usize, arrival: Arrival, hold: Hold, k: u32, seed: u64) -> FlowStats {
    let setup = Setup {
        cards,
        jobs,
        arrival,
        seed,
        source: Source::Given {
            hold,
            cards_per_job: k,
        },
        timeline: false,
    };
    run(&setup).unwrap().remove(0).stats
}

/// Mean wait in the queue of an M/M/c queue (Erlang C): `c` servers, `rate` arrivals
/// per second, exponential holds with mean `hold`.
fn erlang_c_wait(c: u32, rate: f64, hold: f64) -> f64 {
    let a = rate * hold;
    let c_f = c as f64;
    assert!(a < c_f, "unstable");
    // sum_{k<c} a^k / k!, and a^c / c! left in `term`.
    let (mut sum, mut term) = (0.0, 1.0);
    for k in 0..c {
        sum += term;
        term *= a / (k + 1) as f64;
    }
    let top = term * c_f / (c_f - a);
    let p_wait = top / (sum + top);
    p_wait * hold / (c_f - a)
}

#[test]
fn erlang_c_of_known_cases() {
    // M/M/1: Wq = rho / (mu - lambda).
    assert!((erlang_c_wait(1, 0.5, 1.0) - 1.0).abs() < 1e-12);
    // M/M/2 at a = 1: P(wait) = 1/3, Wq = 1/3 / (2 - 1).
    assert!((erlang_c_wait(2, 1.0, 1.0) - 1.0 / 3.0).abs() < 1e-12);
}

#[test]
fn deterministic_arrivals_with_hold_below_the_interval_never_wait() {
    for hold in [1.0, 9.0, 9.999, 10.0] {
        let s = given(
            1,
            1000,
            Arrival::Fixed { secs: 10.0 },
            Hold::Fixed { secs: hold },
            1,
            1,
        );
        assert_eq!(s.mean_wait_secs, 0.0, "hold {hold}");
        assert_eq!(s.p95_wait_secs, 0.0);
        assert!((s.utilization - 1000.0 * hold / (999.0 * 10.0 + hold)).abs() < 1e-9);
        assert_eq!(s.device_share, 1.0);
    }
    // Past the interval, waits grow job after job: the model is not waving them away.
    let s = given(
        1,
        1000,
        Arrival::Fixed { secs: 10.0 },
        Hold::Fixed { secs: 11.0 },
        1,
        1,
    );
    assert!((s.p50_wait_secs - 499.0).abs() < 1e-6, "{s:?}");
}

/// M/M/c over 1,000,000 jobs: the mean wait within 5 % of Erlang C at loads up to 0.75
/// (with fewer jobs the sample mean itself strays 10-20 %).
#[test]
fn poisson_arrivals_and_exponential_holds_wait_as_erlang_c() {
    let jobs = 1_000_000;
    for (cards, load) in [(1, 0.5), (1, 0.75), (4, 0.75), (8, 0.6)] {
        let hold = 2.0;
        let rate = load * cards as f64 / hold;
        let s = given(
            cards,
            jobs,
            Arrival::Poisson { rate },
            Hold::Exp { mean: hold },
            1,
            42,
        );
        let want = erlang_c_wait(cards, rate, hold);
        let err = (s.mean_wait_secs - want).abs() / want;
        assert!(
            err < 0.05,
            "{cards} cards at load {load}: mean wait {} against Erlang C {want} ({:.1} %)",
            s.mean_wait_secs,
            err * 100.0
        );
        // The pool is as full as the load says.
        assert!((s.utilization - load).abs() < 0.02, "{s:?}");
    }
}

#[test]
fn jobs_taking_several_cards_at_once_share_the_pool() {
    // Two cards per job on four cards is two servers: M/M/2.
    let (rate, hold) = (0.6, 2.0);
    let s = given(
        4,
        400_000,
        Arrival::Poisson { rate },
        Hold::Exp { mean: hold },
        2,
        3,
    );
    let want = erlang_c_wait(2, rate, hold);
    assert!(
        (s.mean_wait_secs - want).abs() / want < 0.05,
        "{} vs {want}",
        s.mean_wait_secs
    );
}

#[test]
fn a_seed_gives_the_same_figures_and_another_seed_others() {
    let f = |seed| {
        given(
            3,
            5000,
            Arrival::Poisson { rate: 1.0 },
            Hold::Exp { mean: 2.5 },
            1,
            seed,
        )
    };
    assert_eq!(f(5), f(5));
    assert_ne!(f(5), f(6));
}

/// The seed's job: 8 acquisitions, each holding a card ~115 s (compile, fixture and
/// golden inside the lock) for 36 ms of device work. `warm && device` warms the same
/// 8 x 115 s outside the lock (no cache hits, one step after another: the most it
/// could take) and holds one card for the device work plus one 4.1 s runtime start-up.
fn seed_job() -> shapes::RunShape {
    let device = 0.036;
    shapes::RunShape {
        name: "seed".into(),
        cards: 1,
        old: vec![
            Segment {
                secs: 115.0,
                device_secs: device,
            };
            8
        ],
        warm_secs: 8.0 * (115.0 - device),
        new: Segment {
            secs: 4.1 + 8.0 * device,
            device_secs: 8.0 * device,
        },
    }
}

/// docs/fleet.md, "The seed's figures": on 8 cards, 0.008 jobs/s (28.8 an hour) is an
/// offered load of 0.92 for the old flow (0.008 x 8 x 115 / 8); there a job queues
/// ~52 % of its wall time, as the seed measured (1187 s of 2297 s). The same arrivals
/// under `warm && device` wait for nothing.
#[test]
fn the_seeds_figures_queue_about_half_the_wall_time_and_warm_device_does_not() {
    let setup = Setup {
        cards: 8,
        jobs: 50_000,
        arrival: Arrival::Poisson { rate: 0.008 },
        seed: 1,
        source: Source::Runs {
            runs: vec![seed_job()],
            compare: true,
        },
        timeline: false,
    };
    let r = run(&setup).unwrap();
    // The table docs/fleet.md quotes (`-- --nocapture` shows it).
    println!("{}", render::text(&setup, &r));
    let (old, new) = (&r[0].stats, &r[1].stats);
    assert_eq!((r[0].flow, r[1].flow), (Flow::Old, Flow::New));
    assert_eq!(old.acquisitions, 8 * 50_000);
    assert!(
        (0.47..0.57).contains(&old.queued_share),
        "old flow queued {:.1} % of its wall time",
        old.queued_share * 100.0
    );
    assert!((old.utilization - 0.92).abs() < 0.02, "{old:?}");
    assert!(old.device_share < 0.001, "{old:?}");
    // warm && device: one 4.4 s hold per job; the pool is almost idle, nobody waits long.
    assert_eq!(new.acquisitions, 50_000);
    assert!(new.mean_wait_secs < 0.1, "{new:?}");
    assert!(new.queued_share < 0.001, "{new:?}");
    assert!(new.utilization < 0.01, "{new:?}");
    assert!(
        new.mean_wall_secs < old.mean_wall_secs / 1.5,
        "{new:?} {old:?}"
    );
}
