fn main() {
    tune_malloc();
    // A panic anywhere is exit 3 with every step group killed, never a hang.
    scenerun::base::proc::install_panic_hook();
    // A bad command line is a usage error (exit 4, docs/cli.md), not clap's default 2,
    // which means "interrupted" here; --help and --version still exit 0.
    let cli = scenerun::entry::parse_args().unwrap_or_else(|e| {
        let _ = e.print();
        let args: Vec<String> = std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        if let Some(hint) = scenerun::entry::usage_hint(&e, &args) {
            eprintln!("{hint}");
        }
        let code = if e.use_stderr() {
            scenerun::base::exit::Exit::Usage.code()
        } else {
            0
        };
        std::process::exit(code)
    });
    let exit = scenerun::entry::run(cli);
    std::process::exit(exit.code());
}

/// Eight malloc arenas and a fixed mmap threshold. glibc's default gives every thread
/// an arena of its own up to 8 per core and raises the mmap threshold after the first
/// large free, so freed blocks stay resident in many heaps (72 MiB RSS on the 500x40
/// plan bench when that was measured). Two arenas had kept that down, but a plan runs up
/// to ~8 threads at once (the rayon pool, the memo, load, identity, trace and prune
/// threads): on two arenas they queued on the arena locks (a no-op 200x40 warm made
/// 900-1,900 context switches in most runs, 110-190 with eight, and spent ~10 % more
/// CPU), while eight cost the 500x40 plan ~2 MiB of peak RSS (51 MiB cold).
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; it is called first thing in
    // main, before any other thread exists. A refused value leaves glibc's default.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 8);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}
