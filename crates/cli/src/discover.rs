//! `sandglass man` and `sandglass completions`: roff man pages (clap_mangen) and shell
//! completions (clap_complete), generated from the same clap definitions as `--help`, so the
//! three never disagree.

use crate::common::Failure;
use anyhow::Context;
use clap::Command;
use std::io::{self, Write};

/// Prints the man page of `path` (empty: the top page; `["analyze", "rta"]`: a nested
/// command's page) in roff, for `man -l -` or a `man1` directory.
pub fn man(mut top: Command, path: &[String]) -> Result<u8, Failure> {
    // Building gives every subcommand its page name (`sandglass-timer`) and the command line
    // that runs it (`sandglass timer`).
    top.build();
    let mut cmd = &top;
    for (depth, name) in path.iter().enumerate() {
        cmd = cmd.find_subcommand(name).ok_or_else(|| {
            let parent = std::iter::once("sandglass")
                .chain(path[..depth].iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" ");
            let names: Vec<&str> = cmd
                .get_subcommands()
                .filter(|c| !c.is_hide_set() && c.get_name() != "help")
                .map(Command::get_name)
                .collect();
            if names.is_empty() {
                Failure::usage(format!(
                    "man {}: '{parent}' has no subcommands; use 'sandglass man {}'",
                    path.join(" "),
                    path[..depth].join(" ")
                ))
            } else {
                Failure::usage(format!(
                    "man {}: '{parent}' has no command '{name}'; use one of {}",
                    path.join(" "),
                    names.join(", ")
                ))
            }
        })?;
    }
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    clap_mangen::Man::new(cmd.clone())
        .render(&mut out)
        .and_then(|_| out.flush())
        .context("writing the man page")?;
    Ok(0)
}

/// Prints the completion script for `shell`.
pub fn completions(mut top: Command, shell: clap_complete::Shell) -> Result<u8, Failure> {
    // clap_complete panics when its output cannot be written (a closed pipe): the script is
    // generated in memory and written here, where a closed pipe is a quiet end.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut top, "sandglass", &mut script);
    let stdout = io::stdout();
    let mut out = stdout.lock();
    out.write_all(&script)
        .and_then(|_| out.flush())
        .context("writing the completions")?;
    Ok(0)
}
