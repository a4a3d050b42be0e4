//! Command-line types (clap derive). No logic lives here: `commands.rs` dispatches and
//! turns these into the plain types the phases take (clap stays in this file).

use std::path::PathBuf;

use std::time::Duration;

use clap::builder::PossibleValue;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::base::device_ids::DeviceIds;
use crate::base::sampling::{Arrival, Hold};
use crate::base::ui::{Color, Format};
use crate::base::units::{parse_age, parse_size};
use crate::select::{NoScenes, Partition, Selection};

/// Where the options every subcommand takes are listed in `--help`.
const GLOBAL: &str = "Global options";
/// Where the remote cache's options are listed in `--help`: global too, but after a
/// subcommand's own options, not among them.
const REMOTE: &str = "Remote cache options";

#[derive(Debug, Parser)]
#[command(
    name = "scenerun",
    version,
    about = "Warm scene tests outside the device lock, then take the lock once"
)]
pub struct Cli {
    /// The scene manifest [default: the nearest scenes.yaml here or in a parent directory].
    #[arg(
        long,
        global = true,
        env = "SCENERUN_MANIFEST",
        default_value = "scenes.yaml",
        hide_default_value = true,
        value_name = "FILE",
        help_heading = GLOBAL
    )]
    pub manifest: PathBuf,

    /// The cache directory (overrides $SCENERUN_CACHE_DIR and the manifest's cache.dir).
    #[arg(
        long,
        global = true,
        env = "SCENERUN_CACHE_DIR",
        value_name = "DIR",
        help_heading = GLOBAL
    )]
    pub cache_dir: Option<PathBuf>,

    /// Parallel slots for warm steps, at least 1 [default: number of cores].
    #[arg(
        short = 'j',
        long = "jobs",
        global = true,
        value_name = "N",
        value_parser = parse_jobs,
        help_heading = GLOBAL
    )]
    pub jobs: Option<usize>,

    /// Quiet: on stderr only failures, errors and the final summary line (stdout, the
    /// results, is unchanged).
    #[arg(
        short,
        long,
        global = true,
        conflicts_with = "verbose",
        help_heading = GLOBAL
    )]
    pub quiet: bool,

    /// More detail: notes on skipped include dirs in the plan, every finished step (hits
    /// too) above the progress bar, what pruning removed.
    #[arg(
        short,
        long,
        global = true,
        action = clap::ArgAction::Count,
        help_heading = GLOBAL
    )]
    pub verbose: u8,

    /// Colour on stderr: auto (a terminal, and NO_COLOR unset), always or never.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = Color::Auto,
        value_name = "WHEN",
        help_heading = GLOBAL
    )]
    pub color: Color,

    /// The manifest's profile to apply (`profiles:`, e.g. a daily mode).
    #[arg(
        long,
        global = true,
        env = "SCENERUN_PROFILE",
        value_name = "NAME",
        help_heading = GLOBAL
    )]
    pub profile: Option<String>,

    #[command(flatten)]
    pub remote: RemoteFlags,

    #[command(subcommand)]
    pub command: Command,

    /// Why the search for the manifest ended without one (for `-v`; set by the glue
    /// that parses the command line, not a flag).
    #[arg(skip)]
    pub manifest_search: Option<String>,

    /// `cache_dir` came from `$SCENERUN_CACHE_DIR`, not the flag (set by the same glue,
    /// from clap's record of where each value came from).
    #[arg(skip)]
    pub cache_dir_from_env: bool,
}

/// The shared remote cache (docs/remote-cache.md); global, like `--cache-dir`.
#[derive(Debug, Clone, Default, Args)]
pub struct RemoteFlags {
    /// Remote cache URL (overrides cache.remote.url).
    #[arg(
        long = "remote",
        value_name = "URL",
        global = true,
        env = "SCENERUN_REMOTE_URL",
        help_heading = REMOTE
    )]
    pub url: Option<String>,
    /// Upload what this run builds to the remote cache.
    #[arg(
        long = "remote-write",
        global = true,
        env = "SCENERUN_REMOTE_WRITE",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new(),
        help_heading = REMOTE
    )]
    pub write: bool,
    /// Ignore the remote cache (wins over --remote, the environment and the manifest).
    #[arg(long = "no-remote", global = true, help_heading = REMOTE)]
    pub off: bool,
    /// Exit 3 when the remote cannot be reached, times out, fails (5xx) or refuses (401/403).
    #[arg(long = "remote-required", global = true, help_heading = REMOTE)]
    pub required: bool,
}

impl RemoteFlags {
    /// The remote these flags ask for.
    pub fn flags(&self) -> crate::cache::remote::Flags {
        crate::cache::remote::Flags {
            url: self.url.clone(),
            write: self.write,
            off: self.off,
            required: self.required,
        }
    }
}

/// Plain enums of the phases as clap values: each variant and the word that names it.
macro_rules! value_enum {
    ($ty:ident { $($variant:ident => $word:literal),+ $(,)? }) => {
        impl ValueEnum for $ty {
            fn value_variants<'a>() -> &'a [Self] {
                &[$($ty::$variant),+]
            }
            fn to_possible_value(&self) -> Option<PossibleValue> {
                Some(PossibleValue::new(match self {
                    $($ty::$variant => $word),+
                }))
            }
        }
    };
}

value_enum!(Color { Auto => "auto", Always => "always", Never => "never" });
value_enum!(Format { Text => "text", Json => "json" });
value_enum!(NoScenes { Fail => "fail", Pass => "pass" });

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compile kernels and materialize fixtures and goldens into the cache (no lock).
    Warm(WarmArgs),
    /// Verify everything is warm, take the lock once, run the device steps.
    Device(DeviceArgs),
    /// Warm, then device.
    Run(RunArgs),
    /// Preview both phases (same as `run --plan`).
    Plan(PlanArgs),
    /// Inspect and maintain the cache.
    #[command(subcommand)]
    Cache(CacheCommand),
    /// Why each step that is not a hit will run: what changed since it was last built.
    Explain(ExplainArgs),
    /// The selected scenes with their tags, platform, devices and lane.
    List(ListArgs),
    /// What-if for a fleet of runners sharing cards (docs/fleet.md).
    #[command(subcommand)]
    Fleet(FleetCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Internal: the run inside the lock, reading a frozen plan.
    #[command(hide = true)]
    Inner(InnerArgs),
    /// Internal: kills step process groups when scenerun dies.
    #[command(hide = true)]
    Watchdog,
    /// Internal: a compile a lane or device step started, through the cache
    /// (`compile_cache:`; the shims on the lanes' PATH call it).
    #[command(hide = true)]
    Cc(crate::compiled::Call),
}

#[derive(Debug, Clone, Default, Args)]
pub struct SelectArgs {
    /// Scene name substring, or glob if it has `*?[` (repeatable: any matches).
    #[arg(short = 'k', value_name = "PATTERN")]
    pub patterns: Vec<String>,
    /// Only scenes with this tag (repeatable: any).
    #[arg(long = "tag", value_name = "T")]
    pub tags: Vec<String>,
    /// Drop scenes with this tag (repeatable).
    #[arg(long = "skip-tag", value_name = "T")]
    pub skip_tags: Vec<String>,
    /// Only scenes of this platform.
    #[arg(long, value_name = "NAME")]
    pub platform: Option<String>,
    /// Only scenes of this selection of the manifest (`selections:`; repeatable: any).
    #[arg(long = "selection", value_name = "NAME")]
    pub selections: Vec<String>,
    /// K/N: the K-th (1-based) of N shards, by a hash of the scene name.
    #[arg(long, value_name = "K/N", value_parser = Partition::parse)]
    pub partition: Option<Partition>,
    /// Only scenes whose inputs include one of these paths (relative to the current dir).
    #[arg(long, value_name = "PATH", num_args = 1..)]
    pub changed: Vec<PathBuf>,
    /// Only scenes whose inputs changed since this git revision (working tree, staged,
    /// unstaged and untracked files).
    #[arg(long, value_name = "REV", value_parser = parse_revision)]
    pub changed_since: Option<String>,
    /// What an empty selection means: `fail` (exit 5) or `pass` (exit 0; device takes no lock).
    #[arg(long, value_enum, value_name = "fail|pass", default_value_t = NoScenes::Fail)]
    pub no_scenes: NoScenes,
}

impl SelectArgs {
    /// The selection these flags ask for.
    pub fn selection(&self) -> Selection {
        Selection {
            patterns: self.patterns.clone(),
            tags: self.tags.clone(),
            skip_tags: self.skip_tags.clone(),
            platform: self.platform.clone(),
            selections: self.selections.clone(),
            partition: self.partition,
            changed: self.changed.clone(),
            changed_since: self.changed_since.clone(),
            no_scenes: self.no_scenes,
            affected: None,
        }
    }
}

#[derive(Debug, Clone, Default, Args)]
pub struct WarmFlags {
    /// Exit 1 when any warm step failed.
    #[arg(long)]
    pub strict: bool,
    /// Memory budget for steps' `memory` hints, e.g. 16GiB [default: 80% of physical memory].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub memory: Option<u64>,
    /// Run every step as a process of its own, never in a `workers:` worker.
    #[arg(long)]
    pub no_workers: bool,
}

#[derive(Debug, Clone, Default, Args)]
pub struct DeviceFlags {
    /// Run the device steps directly, without the lock command.
    #[arg(long)]
    pub no_lock: bool,
    /// Device ids for --no-lock: a comma list with ranges, e.g. 0-3,8 [default: 0].
    #[arg(long, value_name = "LIST", requires = "no_lock", value_parser = DeviceIds::parse)]
    pub devices: Option<DeviceIds>,
    /// Where report.json, junit.xml and logs go (default: build/scenerun beside the manifest).
    #[arg(long, value_name = "DIR")]
    pub report_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Args)]
pub struct PreviewFlags {
    /// Show both phases and run nothing.
    #[arg(long, conflicts_with = "dry_run")]
    pub plan: bool,
    /// Print every command as it would run; run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Output format of --plan.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct WarmArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    #[command(flatten)]
    pub preview: PreviewFlags,
    #[command(flatten)]
    pub warm: WarmFlags,
}

#[derive(Debug, Args)]
pub struct DeviceArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    #[command(flatten)]
    pub preview: PreviewFlags,
    #[command(flatten)]
    pub device: DeviceFlags,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    #[command(flatten)]
    pub preview: PreviewFlags,
    #[command(flatten)]
    pub warm: WarmFlags,
    #[command(flatten)]
    pub device: DeviceFlags,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    #[command(flatten)]
    pub device: DeviceFlags,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Debug, Subcommand)]
pub enum CacheCommand {
    /// Entries and bytes per kind, hits and misses of the last warm.
    Stats {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Re-hash every entry; exit 1 if any is corrupt.
    Verify {
        /// Remove corrupt entries so the next warm rebuilds them.
        #[arg(long)]
        fix: bool,
    },
    /// Evict entries by age and size (never one used in the last 24 h).
    Prune {
        /// Remove entries not used for this long, e.g. 14d; 0: any age [default: the manifest's cache.max_age].
        #[arg(long, value_name = "DURATION", value_parser = parse_age)]
        max_age: Option<Duration>,
        /// Then remove least recently used entries until the cache fits, e.g. 20GiB
        /// [default: the manifest's cache.max_size].
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        max_size: Option<u64>,
    },
    /// Remove every entry.
    Clean,
}

#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Simulate jobs through one FIFO lock queue onto a pool of cards (seeded, deterministic).
    Simulate(SimulateArgs),
}

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Cards in the pool.
    #[arg(long, value_name = "C", value_parser = parse_cards)]
    pub cards: u32,
    /// Jobs to simulate.
    // The id `jobs` is the global `-j/--jobs`'s: this subcommand's own takes its place
    // here (an id of its own would put two `--jobs` on the command).
    #[arg(long = "jobs", id = "jobs", value_name = "N", default_value_t = 10_000, value_parser = parse_sim_jobs)]
    pub jobs: usize,
    /// How jobs arrive: poisson:RATE_PER_S (exponential gaps) or fixed:SECS (one every SECS).
    #[arg(long, value_name = "poisson:RATE|fixed:SECS", value_parser = Arrival::parse)]
    pub arrival: Arrival,
    /// How long a job holds its cards: exp:MEAN_S or fixed:SECS.
    #[arg(
        long,
        value_name = "exp:MEAN|fixed:SECS",
        value_parser = Hold::parse,
        required_unless_present = "from_reports",
        conflicts_with = "from_reports"
    )]
    pub hold: Option<Hold>,
    /// Cards each job takes, all at once.
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = parse_cards, conflicts_with = "from_reports")]
    pub cards_per_job: u32,
    /// Seed of the arrivals and holds: the same seed gives the same output.
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,
    /// Job shapes from these report dirs (report.json, warm record, trace) and the
    /// cache's history, instead of --hold.
    #[arg(long, value_name = "DIR", num_args = 1..)]
    pub from_reports: Vec<PathBuf>,
    /// Lock acquisitions per job of the old flow (warm work inside the lock).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = parse_acquisitions, requires = "from_reports", conflicts_with = "hold")]
    pub old_acquisitions: u32,
    /// Simulate the old flow and `warm && device` on the same arrivals.
    // Conflicting with --hold as well: clap waives `requires` for an argument that
    // conflicts with one given (--hold conflicts with --from-reports).
    #[arg(long, requires = "from_reports", conflicts_with = "hold")]
    pub compare: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Also draw queue length and cards busy over time into this SVG file.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct InnerArgs {
    /// The frozen plan written by `scenerun device`.
    pub frozen: PathBuf,
}

/// Why a value is refused (clap prints it after the option's name).
#[derive(Debug)]
enum BadArg {
    /// A count or a number of slots below 1.
    Zero,
    /// Not a number; `what` it should have been.
    NotANumber {
        text: String,
        what: &'static str,
    },
    EmptyRevision,
    /// A revision that would read as an option of git's.
    OptionLike(String),
    /// Above the documented maximum.
    TooMany {
        max: u64,
    },
}

/// The most warm slots (`-j`).
pub const MAX_SLOTS: usize = 1024;
/// `fleet simulate`: the most jobs, cards and acquisitions per job it takes (the
/// simulation keeps a few numbers per job: 10 million jobs are ~0.5 GB at most).
pub const MAX_SIM_JOBS: usize = 10_000_000;
pub const MAX_SIM_CARDS: u32 = 1_000_000;
pub const MAX_SIM_ACQUISITIONS: u32 = 1000;

impl std::fmt::Display for BadArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadArg::Zero => f.write_str("must be at least 1"),
            BadArg::NotANumber { text, what } => write!(f, "`{text}` is not {what}"),
            BadArg::EmptyRevision => f.write_str("an empty revision"),
            BadArg::OptionLike(text) => write!(
                f,
                "`{text}` is not a revision: a revision never starts with `-`"
            ),
            BadArg::TooMany { max } => write!(f, "must be at most {max}"),
        }
    }
}

impl std::error::Error for BadArg {}

fn parse_jobs(text: &str) -> Result<usize, BadArg> {
    match text.trim().parse::<usize>() {
        Ok(0) => Err(BadArg::Zero),
        Ok(n) if n > MAX_SLOTS => Err(BadArg::TooMany {
            max: MAX_SLOTS as u64,
        }),
        Ok(n) => Ok(n),
        Err(_) => Err(BadArg::NotANumber {
            text: text.to_string(),
            what: "a number of slots",
        }),
    }
}

/// A git revision for `--changed-since`: handed to `git diff`, so it must never read as
/// one of git's options (`--output=FILE` would truncate FILE).
fn parse_revision(text: &str) -> Result<String, BadArg> {
    if text.is_empty() {
        return Err(BadArg::EmptyRevision);
    }
    if text.starts_with('-') {
        return Err(BadArg::OptionLike(text.to_string()));
    }
    Ok(text.to_string())
}

/// `fleet simulate --jobs`: 1 to `MAX_SIM_JOBS`.
fn parse_sim_jobs(text: &str) -> Result<usize, BadArg> {
    let n = parse_count_upto(text, MAX_SIM_JOBS as u64, "a number of jobs")?;
    Ok(n as usize)
}

/// `fleet simulate --cards` and `--cards-per-job`: 1 to `MAX_SIM_CARDS`.
fn parse_cards(text: &str) -> Result<u32, BadArg> {
    Ok(parse_count_upto(text, MAX_SIM_CARDS.into(), "a number of cards")? as u32)
}

/// `fleet simulate --old-acquisitions`: 1 to `MAX_SIM_ACQUISITIONS`.
fn parse_acquisitions(text: &str) -> Result<u32, BadArg> {
    Ok(parse_count_upto(text, MAX_SIM_ACQUISITIONS.into(), "a count")? as u32)
}

fn parse_count_upto(text: &str, max: u64, what: &'static str) -> Result<u64, BadArg> {
    match text.trim().parse::<u64>() {
        Ok(0) => Err(BadArg::Zero),
        Ok(n) if n > max => Err(BadArg::TooMany { max }),
        Ok(n) => Ok(n),
        Err(_) => Err(BadArg::NotANumber {
            text: text.to_string(),
            what,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_option_has_help() {
        fn walk(c: &clap::Command, path: &str) {
            for a in c.get_arguments() {
                let builtin = matches!(a.get_id().as_str(), "help" | "version");
                assert!(
                    builtin || a.get_help().is_some() || a.is_hide_set(),
                    "{path} --{} has no help text",
                    a.get_id()
                );
            }
            for sub in c.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()));
            }
        }
        walk(&Cli::command(), "scenerun");
    }

    #[test]
    fn values_are_typed_at_parse_time() {
        let p = |args: &[&str]| Cli::try_parse_from(args);
        assert!(p(&["scenerun", "-j", "0", "plan"]).is_err());
        assert!(p(&["scenerun", "warm", "--memory", "lots"]).is_err());
        assert!(p(&["scenerun", "plan", "--partition", "3/2"]).is_err());
        assert!(p(&["scenerun", "device", "--no-lock", "--devices", "0-x"]).is_err());
        // The one strict id parser: a name or a repeated id is no device id.
        assert!(p(&["scenerun", "device", "--no-lock", "--devices", "gpu0"]).is_err());
        assert!(p(&["scenerun", "device", "--no-lock", "--devices", "0,00"]).is_err());
        assert!(p(&["scenerun", "cache", "prune", "--max-age", "forever"]).is_err());
        let Command::Warm(w) = p(&["scenerun", "warm", "--memory", "1GiB"])
            .unwrap()
            .command
        else {
            panic!("warm");
        };
        assert_eq!(w.warm.memory, Some(1 << 30));
    }
}
