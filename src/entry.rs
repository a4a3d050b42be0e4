//! The entry point: read the command line, run one command, say how the process exits.
//! Nothing below it knows it exists.

use crate::base::exit::Exit;
use crate::base::{error, ui};
use crate::cli::Cli;
use crate::{commands, manifest};

/// Parse the command line. Without `--manifest` (or `$SCENERUN_MANIFEST`), the manifest
/// is the nearest `scenes.yaml` in the current directory or one of its parents, as `just`
/// finds its justfile (docs/cli.md).
pub fn parse_args() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().try_get_matches()?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    cli.cache_dir_from_env =
        matches.value_source("cache_dir") == Some(clap::parser::ValueSource::EnvVariable);
    if matches.value_source("manifest") == Some(clap::parser::ValueSource::DefaultValue) {
        if let Ok(d) = std::env::current_dir() {
            let found = manifest::discover(&d, &cli.manifest);
            if let Some(p) = found.path {
                cli.manifest = p;
            }
            cli.manifest_search = found.stopped;
        }
    } else if cli.manifest.is_dir() && cli.manifest.join("scenes.yaml").is_file() {
        // `--manifest DIR` means the manifest in it (docs/cli.md).
        cli.manifest = cli.manifest.join("scenes.yaml");
    }
    Ok(cli)
}

/// What to do about a command-line error where clap's own tip says nothing: a
/// subcommand's option (`-k`, `--tag`, `--format`, ...) given before the subcommand,
/// where only the global options go (docs/cli.md).
pub fn usage_hint(e: &clap::Error, args: &[String]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    use clap::CommandFactory;
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(flag)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let flag = flag.split('=').next().unwrap_or(flag);
    let cmd = Cli::command();
    let at = args
        .iter()
        .position(|a| a == flag || a.starts_with(&format!("{flag}=")))?;
    let sub = args[at..]
        .iter()
        .find_map(|a| cmd.get_subcommands().find(|s| s.get_name() == a))?;
    let takes = sub.get_arguments().any(|a| {
        a.get_short().is_some_and(|c| flag == format!("-{c}"))
            || a.get_long().is_some_and(|l| flag == format!("--{l}"))
    });
    takes.then(|| {
        format!(
            "hint: `{flag}` is an option of `{0}`: put it after the subcommand, e.g. `scenerun {0} {flag} ...`",
            sub.get_name()
        )
    })
}

/// Run one command line to completion and say how the process should exit.
pub fn run(cli: Cli) -> Exit {
    let ui = ui::Ui::new(
        cli.quiet,
        cli.verbose,
        cli.color,
        crate::report::notice::words,
    );
    if ui.verbose > 0 {
        if let Some(why) = &cli.manifest_search {
            let name = cli.manifest.display();
            ui.info(&format!(
                "no {name} found here or above; the search stopped: {why}"
            ));
        }
        let shown = std::path::absolute(&cli.manifest).unwrap_or(cli.manifest.clone());
        ui.info(&format!("manifest: {}", shown.display()));
    }
    let exit = match commands::dispatch(cli, &ui) {
        Ok(exit) => exit,
        Err(err) => {
            ui.error(&error::render(&err));
            error::exit_of(&err)
        }
    };
    ui.say_posted();
    exit
}
