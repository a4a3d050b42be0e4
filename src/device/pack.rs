//! Packing scenes onto granted device ids: each scene holds `devices` ids while it runs,
//! `exclusive` scenes run alone, longest first by history. The same policy drives the
//! `--plan` preview (simulated with estimates) and the real inner run, so the preview
//! shows what will happen.

/// What the packer needs to know of a scene.
#[derive(Debug, Clone)]
pub struct Job {
    pub devices: usize,
    pub exclusive: bool,
    /// Seconds (already defaulted for unknown scenes).
    pub estimate: f64,
}

impl Job {
    /// Jobs from (devices, exclusive, history estimate); a scene without history counts
    /// as the mean of those with one (1 s when none has).
    pub fn with_estimates(scenes: impl Iterator<Item = (usize, bool, Option<f64>)>) -> Vec<Job> {
        let scenes: Vec<_> = scenes.collect();
        let known: Vec<f64> = scenes.iter().filter_map(|s| s.2).collect();
        let mean = if known.is_empty() {
            1.0
        } else {
            known.iter().sum::<f64>() / known.len() as f64
        };
        scenes
            .into_iter()
            .map(|(devices, exclusive, estimate)| Job {
                devices,
                exclusive,
                estimate: estimate.unwrap_or(mean),
            })
            .collect()
    }
}

/// Decides which scene starts next.
pub struct Packer {
    pending: Vec<usize>,
}

impl Packer {
    /// Exclusive scenes first (they need the whole pool idle; doing them up front never
    /// leaves ids stranded behind them), then longest first; ties in manifest order.
    pub fn new(jobs: &[Job]) -> Packer {
        let mut pending: Vec<usize> = (0..jobs.len()).collect();
        pending.sort_by(|&a, &b| {
            jobs[b]
                .exclusive
                .cmp(&jobs[a].exclusive)
                .then(jobs[b].estimate.total_cmp(&jobs[a].estimate))
                .then(a.cmp(&b))
        });
        Packer { pending }
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The next scene to start with `free` ids free and `running` scenes running (one of
    /// them exclusive when `exclusive_running`). An exclusive scene at the head of the
    /// queue waits for the pool to drain and lets nothing pass it.
    pub fn next(
        &mut self,
        jobs: &[Job],
        free: usize,
        running: usize,
        exclusive_running: bool,
    ) -> Option<usize> {
        if exclusive_running {
            return None;
        }
        let head = *self.pending.first()?;
        if jobs[head].exclusive {
            if running == 0 && jobs[head].devices <= free {
                return Some(self.pending.remove(0));
            }
            return None;
        }
        let pos = self
            .pending
            .iter()
            .position(|&j| !jobs[j].exclusive && jobs[j].devices <= free)?;
        Some(self.pending.remove(pos))
    }
}

/// One scene's place in a simulated packing.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub job: usize,
    pub start: f64,
    pub end: f64,
    /// Indices into the granted id list.
    pub ids: Vec<usize>,
}

/// Take the `n` lowest free ids.
pub fn take_ids(free: &mut Vec<usize>, n: usize) -> Vec<usize> {
    free.sort_unstable();
    free.drain(..n).collect()
}

/// Simulate the packing of `jobs` (all of which fit in `ids`) with their estimates.
pub fn simulate(jobs: &[Job], ids: usize) -> Vec<Placement> {
    let mut packer = Packer::new(jobs);
    let mut free: Vec<usize> = (0..ids).collect();
    let mut running: Vec<Placement> = Vec::new();
    let mut done = Vec::new();
    let mut now = 0.0;
    loop {
        let excl = running.iter().any(|p| jobs[p.job].exclusive);
        if let Some(j) = packer.next(jobs, free.len(), running.len(), excl) {
            let got = take_ids(&mut free, jobs[j].devices);
            running.push(Placement {
                job: j,
                start: now,
                end: now + jobs[j].estimate,
                ids: got,
            });
            continue;
        }
        if running.is_empty() {
            break;
        }
        // Advance to the earliest end.
        let (idx, _) = running
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.end.total_cmp(&b.1.end))
            .expect("running is not empty");
        let p = running.remove(idx);
        now = p.end;
        free.extend(p.ids.iter().copied());
        done.push(p);
    }
    done.sort_by(|a, b| a.start.total_cmp(&b.start).then(a.job.cmp(&b.job)));
    done
}

/// Device ids given on the command line (`--devices 0-3,8`), parsed by clap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceIds(pub Vec<String>);

impl DeviceIds {
    pub fn parse(text: &str) -> Result<DeviceIds, String> {
        match parse_ids(text)? {
            ids if ids.is_empty() => Err("no device id given".into()),
            ids => Ok(DeviceIds(ids)),
        }
    }
}

/// Parse granted ids: a comma list, with ranges (`0-3,8`). Order is kept, duplicates dropped.
pub fn parse_ids(text: &str) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let ids: Vec<String> = match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u64, u64) = match (a.trim().parse(), b.trim().parse()) {
                    (Ok(a), Ok(b)) if a <= b && b - a < 4096 => (a, b),
                    _ => return Err(format!("bad device range `{part}`")),
                };
                (a..=b).map(|i| i.to_string()).collect()
            }
            None => {
                if part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '.')
                {
                    vec![part.to_string()]
                } else {
                    return Err(format!("bad device id `{part}`"));
                }
            }
        };
        for id in ids {
            if !out.contains(&id) {
                out.push(id);
            }
        }
    }
    if out.is_empty() {
        return Err(format!("no device ids in `{text}`"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(devices: usize, exclusive: bool, estimate: f64) -> Job {
        Job {
            devices,
            exclusive,
            estimate,
        }
    }

    #[test]
    fn ids() {
        assert_eq!(parse_ids("0-3,8").unwrap(), ["0", "1", "2", "3", "8"]);
        assert_eq!(parse_ids("4,5,4").unwrap(), ["4", "5"]);
        assert!(parse_ids("").is_err());
        assert!(parse_ids("3-1").is_err());
        assert!(parse_ids("1;rm").is_err());
    }

    #[test]
    fn exclusive_runs_alone_and_others_share() {
        let jobs = [
            job(1, false, 1.0),
            job(2, true, 1.0),
            job(1, false, 2.0),
            job(1, false, 1.0),
        ];
        let p = simulate(&jobs, 2);
        let excl = p.iter().find(|p| p.job == 1).unwrap();
        for other in p.iter().filter(|p| p.job != 1) {
            assert!(other.end <= excl.start || other.start >= excl.end, "{p:?}");
        }
        // The two ids are used side by side after the exclusive scene.
        assert_eq!(p.len(), 4);
        let makespan = p.iter().map(|p| p.end).fold(0.0, f64::max);
        assert!((makespan - 3.0).abs() < 1e-9, "{p:?}");
    }
}
