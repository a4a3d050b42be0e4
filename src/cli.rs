//! Command-line types (clap derive). No logic lives here: `lib.rs` dispatches.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "scenerun",
    version,
    about = "Warm scene tests outside the device lock, then take the lock once"
)]
pub struct Cli {
    /// The scene manifest.
    #[arg(
        long,
        global = true,
        env = "SCENERUN_MANIFEST",
        default_value = "scenes.yaml"
    )]
    pub manifest: PathBuf,

    /// The cache directory (overrides $SCENERUN_CACHE_DIR and the manifest's cache.dir).
    #[arg(long, global = true, env = "SCENERUN_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,

    /// Parallel slots for warm steps (default: number of cores).
    #[arg(short = 'j', long = "jobs", global = true)]
    pub jobs: Option<usize>,

    /// Print only failures and the final line.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// More detail (skipped include dirs, every hit).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    #[arg(long, global = true, value_enum, default_value_t = Color::Auto)]
    pub color: Color,

    #[command(flatten)]
    pub remote: RemoteFlags,

    #[command(subcommand)]
    pub command: Command,
}

/// The shared remote cache (docs/remote-cache.md); global, like `--cache-dir`.
#[derive(Debug, Clone, Default, Args)]
pub struct RemoteFlags {
    /// Remote cache URL (overrides cache.remote.url).
    #[arg(
        long = "remote",
        value_name = "URL",
        global = true,
        env = "SCENERUN_REMOTE_URL"
    )]
    pub url: Option<String>,
    /// Upload what this run builds to the remote cache.
    #[arg(
        long = "remote-write",
        global = true,
        env = "SCENERUN_REMOTE_WRITE",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub write: bool,
    /// Ignore the remote cache (wins over --remote, the environment and the manifest).
    #[arg(long = "no-remote", global = true)]
    pub off: bool,
    /// Exit 3 when the remote cannot be reached, times out, fails (5xx) or refuses (401/403).
    #[arg(long = "remote-required", global = true)]
    pub required: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Color {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    #[default]
    Text,
    Json,
}

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
    /// Internal: the run inside the lock, reading a frozen plan.
    #[command(hide = true)]
    Inner(InnerArgs),
    /// Internal: kills step process groups when scenerun dies.
    #[command(hide = true)]
    Watchdog,
}

#[derive(Debug, Clone, Default, Args)]
pub struct Selection {
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
    #[arg(long)]
    pub platform: Option<String>,
    /// K/N: the K-th (1-based) of N shards, by a hash of the scene name.
    #[arg(long, value_name = "K/N")]
    pub partition: Option<String>,
}

#[derive(Debug, Clone, Default, Args)]
pub struct WarmFlags {
    /// Exit 1 when any warm step failed.
    #[arg(long)]
    pub strict: bool,
    /// Memory budget for steps' `memory` hints (default: 80% of physical memory).
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
}

#[derive(Debug, Clone, Default, Args)]
pub struct DeviceFlags {
    /// Run the device steps directly, without the lock command.
    #[arg(long)]
    pub no_lock: bool,
    /// Device ids for --no-lock (comma list or ranges, default 0).
    #[arg(long, value_name = "LIST", requires = "no_lock")]
    pub devices: Option<String>,
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
    pub select: Selection,
    #[command(flatten)]
    pub preview: PreviewFlags,
    #[command(flatten)]
    pub warm: WarmFlags,
}

#[derive(Debug, Args)]
pub struct DeviceArgs {
    #[command(flatten)]
    pub select: Selection,
    #[command(flatten)]
    pub preview: PreviewFlags,
    #[command(flatten)]
    pub device: DeviceFlags,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub select: Selection,
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
    pub select: Selection,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    #[command(flatten)]
    pub device: DeviceFlags,
}

#[derive(Debug, Subcommand)]
pub enum CacheCommand {
    /// Entries and bytes per kind, hits and misses of the last warm.
    Stats,
    /// Re-hash every entry; exit 1 if any is corrupt.
    Verify {
        /// Remove corrupt entries so the next warm rebuilds them.
        #[arg(long)]
        fix: bool,
    },
    /// Evict entries by age and size (never one used in the last 24 h).
    Prune {
        #[arg(long, value_name = "D")]
        max_age: Option<String>,
        #[arg(long, value_name = "S")]
        max_size: Option<String>,
    },
    /// Remove every entry.
    Clean,
}

#[derive(Debug, Args)]
pub struct InnerArgs {
    /// The frozen plan written by `scenerun device`.
    pub frozen: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }
}
