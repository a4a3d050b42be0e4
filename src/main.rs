use clap::Parser;

fn main() {
    let cli = scenerun::cli::Cli::parse();
    let exit = scenerun::run(cli);
    std::process::exit(exit.code());
}
