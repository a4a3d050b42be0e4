//! What scenerun tells the user besides results and errors, as one typed value from
//! every layer: the base layer's warnings (posted on the `warning` board), the cache's
//! and the remote cache's, the warm's and the device phase's. Nothing here words or
//! prints a notice: report/ (`report::notice::line`) is the one function that does.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One thing to tell the user. Payloads are data (paths, counts, names, durations);
/// where the payload is an error, its text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Notice {
    // The base layer (said through the `warning` board).
    /// A file scenerun keeps for itself (a memo, the history, a record) is there but
    /// over its cap, a link or a special file: treated as absent (`fsutil::read_kept`).
    Damaged { error: String },
    /// This user's seal key cannot be read or made (`seal`): a key of this process only
    /// is used instead.
    SealKey { path: PathBuf, error: String },
    /// The manifest writes a key that a newer one replaces; it still works, for now.
    Deprecated {
        key: &'static str,
        instead: &'static str,
    },

    // The cache and the remote cache.
    /// The cache (or the job's store) is writable by other users.
    CacheExposed(Exposed),
    /// A remote operation failed (the failure's text); `off`: which direction is
    /// switched off for the rest of the run because of it.
    RemoteFailed {
        failure: String,
        off: Option<Direction>,
    },
    /// Remote writes are on, readers require signed records, and the signing key's
    /// variable (`sign_env`, when the manifest names one) holds none: nothing is uploaded.
    RemoteUnsigned { sign_env: Option<String> },
    /// An entry of the local cache does not match its integrity record: not uploaded.
    RemoteMismatch { path: PathBuf },
    /// An entry (built by `built_by`) of `bytes` is over `cache.remote.max_upload`.
    RemoteTooBig {
        built_by: String,
        bytes: u64,
        cap: u64,
    },

    // The warm.
    /// The prune after the warm was not due: nothing was added since a recent one.
    NotPruned,
    /// A prune (after the warm, or `cache prune`) removed `removed` entries of `freed`
    /// bytes; `now`: the cache's size after it, when a size cap is set.
    Pruned {
        removed: usize,
        freed: u64,
        now: Option<u64>,
    },
    /// The prune kept an entry another scenerun is using (`kind` `key`).
    PruneKeptInUse { kind: &'static str, key: String },
    /// The prune kept `count` entries in use by another scenerun.
    PruneKeptBusy { count: usize },
    /// The cache is still over its cap after the prune (`total` > `cap` bytes).
    PruneOverCap { total: u64, cap: u64 },
    /// The trace could not be written (the warm itself stands).
    TraceNotWritten { error: String },

    // The device phase: the outer, before, around and after the lock command.
    /// A lane process could not be started before the lock (`error`: why): its batch
    /// starts inside the lock.
    LaneNotPrestarted { lane: String, error: String },
    /// The fork server could not start (`why`: its error): each lane process starts its
    /// own interpreter.
    NoForkServer { why: String },
    /// Lane processes started before the lock: how many of each lane.
    Prestarted(Vec<(String, usize)>),
    /// The lock command is called, once.
    TakingLock { command: String },
    /// The lock command started the inner run more than once.
    LockRanInnerTwice,
    /// The lock command had not returned this long after the steps ended, and was killed.
    LockKilledAfterRelease { release_timeout: Duration },
    /// No scene could run on the device: every one failed in warm.
    AllFailedInWarm,
    /// No scene needs the device: each failed in warm or its test ran there.
    AllDecidedInWarm,
    /// Every granted id was quarantined before the scenes all ran.
    NoHealthyDevice { quarantined: Vec<String> },
    /// Lines of the run's compile log no compiler shim writes (forged or damaged by a
    /// step): ignored.
    CompileLogIgnored { lines: usize },
    /// The run cannot hear its compiler shims (`cache::witness`): nothing they keep is
    /// signed, so under `cache.verify_key` each compiles again next time.
    CompilesNotSigned { why: String },
    /// A process of this user that told the run of a compile it kept (pid `pid`) runs
    /// `runs`, not this scenerun (`me`): nothing it kept is signed. Under qemu-user the
    /// kernel names the emulator as every emulated process's executable.
    ShimRefused {
        pid: i32,
        runs: PathBuf,
        me: PathBuf,
    },
    /// A compiler of `compile_cache:` got no shim, so none of its compiles goes through
    /// the cache.
    ShimLeftOut { compiler: String, why: ShimMissing },

    // The inner run, about the lock (on its own stderr, which the lock tool keeps).
    /// The lock command handed over no usable ids (the grant's error).
    GrantRefused { why: String },
    /// The lock command started the inner run of this invocation again; this one does
    /// nothing.
    InnerAgain,
    /// The lock may be gone, and every device step was killed.
    LockLost(LockLoss),
    /// A lane process did something that was ignored or worked around.
    Lane(LaneNotice),
}

/// What a lane process did that was ignored or worked around (docs/lanes.md). The
/// inner run notes these in the live file, so the type crosses that file as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LaneNotice {
    /// A results line of no kind the protocol knows (`why`), clipped.
    Garbage { why: String, line: String },
    /// More ignored results lines of lane `lane` (its process `process`) than were shown.
    MoreIgnored {
        more: usize,
        lane: String,
        process: usize,
    },
    /// A start line for a scene that had started.
    SecondStart { scene: String },
    /// An end line for a scene that had ended.
    SecondEnd { scene: String },
    /// A start or end line for a scene that is not in the process's batch.
    NotInBatch { scene: String },
    /// A reportlog report for `nodeid`, whose scene `scene` had ended.
    ReportAfterEnd { nodeid: String, scene: String },
    /// A reportlog report for `nodeid`, which no scene of the batch owns.
    ReportNoOwner { nodeid: String },
    /// `who` (a scene or node) claims a duration past the process's whole life
    /// (`ran`); it counts as `seen`, the time scenerun saw it run.
    ClaimClamped {
        who: String,
        claimed: Secs,
        ran: Secs,
        seen: Secs,
    },
    /// A device fault named only ids the process does not hold.
    ForeignFault { ids: Vec<String> },
    /// The process started before the lock for a batch of `lane` cannot be used; the
    /// batch runs in a process started now.
    NotAdopted { lane: String, why: Unadoptable },
    /// The ids could not be handed to process `process` started before the lock
    /// (`error`); it is stopped and its batch runs in a process started now.
    CannotHandIds {
        lane: String,
        process: usize,
        error: String,
    },
    /// The process started before the lock for `scenes` ended before it was ready
    /// (`how`); its batch runs in a process started now.
    EndedBeforeReady {
        lane: String,
        scenes: Vec<String>,
        how: String,
        log: PathBuf,
    },
    /// The process started before the lock for a batch of `scenes` scenes (group `pid`)
    /// was not used, as the packing inside the lock differed; it was stopped.
    PrestartUnused {
        lane: String,
        scenes: usize,
        pid: i32,
    },
}

/// Why a process started before the lock cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Unadoptable {
    /// `scenerun device` was stopping it.
    BeingStopped { pid: i32 },
    /// It reported results before it had its ids (its command does not wait for them).
    ReportedEarly { pid: i32 },
    /// It ended before its ids came (`how`; its output in `log`).
    EndedEarly { pid: i32, how: String, log: PathBuf },
    /// It was not there when the inner run started.
    Gone { pid: i32 },
}

/// Seconds a lane claimed or ran: finite by construction (the protocol reads no other),
/// so equal when their bits are.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secs(pub f64);

impl Eq for Secs {}

impl std::hash::Hash for Secs {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}

/// A cache directory other users can write to: anyone who can may plant entries
/// (scenerun checks what it serves, but a cache should be private to its runner user).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Exposed {
    pub dir: PathBuf,
    /// Its permission bits.
    pub mode: u32,
}

impl Exposed {
    /// Writable by every user, not only by its group.
    pub fn by_all(&self) -> bool {
        self.mode & 0o002 != 0
    }
}

/// Why a compiler of `compile_cache:` got no shim.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ShimMissing {
    /// On none of the run's `PATH`s (a test that runs it fails as it would without
    /// scenerun).
    NotOnPath,
    /// Its identity command failed (the error's text): its compiles run without the
    /// cache.
    NoIdentity { error: String },
}

/// A direction of the remote cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Uploads,
    Downloads,
}

/// Why the inner run takes the lock to be gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockLoss {
    /// `scenerun device` (this pid) died.
    Outer { pid: i32 },
    /// The lock command (this pid) died.
    LockTool { pid: i32 },
    /// No lock tool was recorded, and the process that started the inner run died.
    Parent,
}

/// Where notices go: the terminal in a run (report/ implements it for `ui::Ui`). A
/// layer that tells the user something takes one of these and knows nothing of how it
/// is shown.
pub trait Tell: Send + Sync {
    fn tell(&self, n: Notice);
}
