//! `sandglass man` and `sandglass completions`: roff man pages (clap_mangen) and shell
//! completions (clap_complete), generated from the same clap definitions as `--help`, so the
//! three never disagree.

use crate::common::Failure;
use anyhow::Context;
use clap::Command;
use std::io::{self, Write};
use std::path::Path;

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
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    crate::manual::page(cmd, &path, &mut out)
        .and_then(|_| out.flush())
        .context("writing the man page")?;
    Ok(0)
}

/// Writes the page of `sandglass` and of every command into `dir` (made when missing), one file per page
/// (`sandglass-analyze-rta.1`), replacing pages written before; a link in their place is
/// refused, never followed.
pub fn man_all(mut top: Command, dir: &Path) -> Result<u8, Failure> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Failure::usage(format!("man --all {}: {e}", dir.display())))?;
    if !dir.is_dir() {
        return Err(Failure::usage(format!(
            "man --all {}: not a directory; name a directory for the pages",
            dir.display()
        )));
    }
    top.build();
    let mut pages = Vec::new();
    collect(&top, &mut Vec::new(), &mut pages);
    for (path, cmd) in &pages {
        let name = std::iter::once("sandglass")
            .chain(path.iter().copied())
            .collect::<Vec<_>>()
            .join("-");
        let file = dir.join(format!("{name}.1"));
        let mut text = Vec::new();
        crate::manual::page(cmd, path, &mut text).context("rendering a man page")?;
        write_page(&file, &text)?;
    }
    if !crate::common::quiet() {
        eprintln!("{} pages written to {}", pages.len(), dir.display());
    }
    Ok(0)
}

/// Every visible command below `cmd` with its path, `cmd` first.
fn collect<'a>(
    cmd: &'a Command,
    path: &mut Vec<&'a str>,
    out: &mut Vec<(Vec<&'a str>, &'a Command)>,
) {
    out.push((path.clone(), cmd));
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        path.push(sub.get_name());
        collect(sub, path, out);
        path.pop();
    }
}

/// Writes one page: created 0644 or truncated when it is a regular file; a link is refused.
fn write_page(file: &Path, text: &[u8]) -> Result<(), Failure> {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(file);
    let mut f = match opened {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(Failure::usage(format!(
                "{}: a symbolic link, not followed; remove it, or write the pages elsewhere",
                file.display()
            )))
        }
        Err(e) => {
            return Err(Failure::runtime(format!("{}: {e}", file.display())));
        }
    };
    let meta = f
        .metadata()
        .with_context(|| format!("reading {}", file.display()))?;
    if !meta.is_file() {
        return Err(Failure::usage(format!(
            "{}: not a regular file; remove it, or write the pages elsewhere",
            file.display()
        )));
    }
    // A hard link in a page's place would make root truncate the file it names elsewhere.
    if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
        return Err(Failure::usage(format!(
            "{}: has another name (a hard link), not overwritten; remove it, or write the pages elsewhere",
            file.display()
        )));
    }
    f.set_len(0)
        .and_then(|_| f.write_all(text))
        .with_context(|| format!("writing {}", file.display()))?;
    Ok(())
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
