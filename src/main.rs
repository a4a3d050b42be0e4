fn main() {
    // A bad command line is a usage error (exit 4, docs/cli.md), not clap's default 2,
    // which means "interrupted" here; --help and --version still exit 0.
    let cli = scenerun::parse_args().unwrap_or_else(|e| {
        let _ = e.print();
        let code = if e.use_stderr() {
            scenerun::exit::Exit::Usage.code()
        } else {
            0
        };
        std::process::exit(code)
    });
    let exit = scenerun::run(cli);
    std::process::exit(exit.code());
}
