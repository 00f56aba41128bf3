//! `sandglass runs`: the catalog of the runs and studies in the runs directory (list, show, rm,
//! import, rebuild). The catalog only indexes the run directories, which stay the source of
//! truth; see docs/catalog.md.

use crate::common::{print_json, Failure};
use anyhow::Context;
use clap::{Args, Subcommand};
use sandglass::catalog::{self, Catalog, CatalogError, Entry, Filter};
use sandglass::kind::Unit;
use sandglass::store::{self, RunReader};
use sandglass::RunKind;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// `sandglass runs`: without a subcommand, the list.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct RunsArgs {
    #[command(subcommand)]
    pub command: Option<RunsCommand>,
    #[command(flatten)]
    pub list: ListArgs,
}

/// Filters of the list.
#[derive(Args, Clone, Debug, Default)]
pub struct ListArgs {
    /// Only this kind: timer, noise, hourglass, load, study, or bench (every bench-*) or one
    /// bench kind such as bench-ipc
    #[arg(long, value_name = "KIND")]
    pub kind: Option<String>,
    /// Only runs made on this host (the hostname in the run's system snapshot)
    #[arg(long, value_name = "HOST")]
    pub host: Option<String>,
    /// Only runs started at or after DATE: YYYY-MM-DD, an RFC 3339 time, or an age such as 7d
    #[arg(long, value_name = "DATE")]
    pub since: Option<String>,
    /// Only runs started before DATE (a bare date includes that whole day)
    #[arg(long, value_name = "DATE")]
    pub until: Option<String>,
    /// Only the cells of this study (an id or a unique prefix)
    #[arg(long, value_name = "ID")]
    pub study: Option<String>,
    /// Include the cells of studies
    #[arg(long)]
    pub all: bool,
    /// Print JSON instead of the table
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand)]
pub enum RunsCommand {
    /// List runs and studies, newest first (the default)
    List(ListArgs),
    /// One run or study: what it was, its files checked against their checksums, its figures
    Show {
        /// Run or study id, or a unique prefix of one
        id: String,
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
    },
    /// Delete a run or study directory and its catalog entries; a directory outside the runs
    /// directory (imported in place) only leaves the catalog, and only directories this user
    /// owns are deleted
    Rm {
        /// Run or study id, or a unique prefix of one (an empty id is refused)
        id: String,
        /// Also remove a run still in progress (its manifest says running and its process is alive)
        #[arg(long)]
        force: bool,
    },
    /// Verify a run or study directory and add it to the catalog in place (a directory outside
    /// the runs directory is never deleted by rm or retention), or unpack an archive of
    /// `runs pack` into the runs directory and add its runs (nothing is added when any file is
    /// damaged)
    Import {
        /// The run or study directory, or an archive written by `runs pack`
        dir: PathBuf,
    },
    /// Write runs and studies, each verified against its checksums, into one archive to move
    /// to another host (`runs import ARCHIVE` there); gzip-compressed tar
    Pack {
        /// Run or study ids (or unique prefixes), or directories
        #[arg(required = true, num_args = 1..)]
        ids: Vec<String>,
        /// The archive to write, such as runs.tar.gz; an existing file is never overwritten
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
    },
    /// Write the catalog as Parquet for DuckDB, Spark or Trino: DIR/runs.parquet (one row per
    /// run: host, kernel, times, key figures) and DIR/histograms.parquet (each timer and noise
    /// run's histogram buckets per CPU); the list's filters choose the runs
    Export {
        /// The directory to write into (created when missing; the two files are replaced)
        #[arg(long, value_name = "DIR")]
        parquet: PathBuf,
        #[command(flatten)]
        filter: ListArgs,
    },
    /// Recreate the catalog from the run and study directories
    Rebuild {
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
    },
}

fn fail(e: CatalogError) -> Failure {
    if e.is_usage() {
        Failure::usage(e.to_string())
    } else {
        Failure::runtime(e.to_string())
    }
}

/// Opens the catalog; a catalog that did not exist yet is filled from the directories first.
fn open(base: &Path) -> Result<Catalog, Failure> {
    let mut c = Catalog::open(base).map_err(fail)?;
    crate::common::note_moved_aside(&c);
    if c.created() {
        let report = c.rebuild(base).map_err(fail)?;
        if !report.skipped.is_empty() {
            eprintln!(
                "sandglass: warning: the catalog was created from {}; {} damaged directories were left out ('sandglass runs rebuild' names them)",
                base.display(),
                report.skipped.len()
            );
        }
    } else {
        let marked = c.settle(base).map_err(fail)?;
        for d in marked {
            eprintln!(
                "sandglass: note: {} was left unfinished by a process that ended (killed, crashed or the machine stopped); marked incomplete",
                d.display()
            );
        }
    }
    Ok(c)
}

/// Opens the catalog for a command that reads it, or `None` when there is no runs directory
/// (nothing to read, and nothing is created). A store this process cannot or must not write
/// (a read-only file system, another user's) is read without writing anything, with one note.
fn open_existing() -> Result<Option<Catalog>, Failure> {
    let base = store::default_base();
    if !base.is_dir() {
        return Ok(None);
    }
    if store::access::write_access(&base).is_ok() {
        return open(&base).map(Some);
    }
    let c = Catalog::open_read(&base).map_err(fail)?;
    let Some(cause) = c.read_only() else {
        return Ok(Some(c));
    };
    if !crate::common::quiet() {
        eprintln!(
            "sandglass: note: {}: {cause}, so it is read as it is and nothing is written there",
            base.display()
        );
        if let Some(n) = c.read_note() {
            eprintln!("sandglass: note: {n}");
        }
    }
    Ok(Some(c))
}

/// Opens the catalog for a command that writes it (rm, import), refusing a store this
/// process cannot or must not write with one line.
fn open_to_write(id: &str) -> Result<Catalog, Failure> {
    let base = store::default_base();
    if !base.is_dir() {
        return Err(no_base_error(id));
    }
    open(&base)
}

fn no_base_error(id: &str) -> Failure {
    Failure::usage(format!(
        "no run or study {id}: {} does not exist (set SANDGLASS_RUNS_DIR to the runs directory)",
        store::default_base().display()
    ))
}

fn write_out(text: &str) -> Result<(), Failure> {
    let mut out = crate::common::text_stdout();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .context("writing the output")?;
    Ok(())
}

/// `2026-11-22T10:15:00Z` as `2026-11-22 10:15:00`.
fn when(t: &str) -> String {
    t.replacen('T', " ", 1).trim_end_matches('Z').to_string()
}

/// A figure as people read it, written by its unit (a figure its kind does not declare, from
/// a catalog row of another version, as a plain number).
fn figure_text(unit: Option<Unit>, v: &Value) -> String {
    match v {
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            match unit {
                Some(Unit::Nanos) => sandglass::Nanos(x.max(0.0) as u64).to_string(),
                Some(Unit::Share) => format!("{:.2}%", x * 100.0),
                Some(Unit::BytesPerSecond) => format!("{:.0} MB/s", x / 1e6),
                _ if x.fract() == 0.0 => format!("{x:.0}"),
                _ => format!("{x:.1}"),
            }
        }
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The key figures as `name value` pairs separated by commas, in the order the kind declares
/// them (any it does not declare after).
fn figures_text(e: &Entry) -> String {
    if e.kind == RunKind::Study {
        let n = |k: &str| e.figures.get(k).and_then(Value::as_u64).unwrap_or(0);
        let name = e.figures.get("name").and_then(Value::as_str).unwrap_or("");
        return format!(
            "{name}: {} of {} cells done",
            n("cells_done"),
            n("cells_total")
        );
    }
    let declared = e.kind.key_figures();
    let rank = |k: &str| {
        declared
            .iter()
            .position(|f| f.key == k)
            .unwrap_or(declared.len())
    };
    let mut figures: Vec<(&String, &Value)> = e.figures.iter().collect();
    figures.sort_by_key(|(k, _)| rank(k));
    figures
        .into_iter()
        .map(|(k, v)| match e.kind.key_figure(k) {
            Some(f) => format!("{} {}", f.label, figure_text(Some(f.unit), v)),
            None => format!("{} {}", k.replace('_', " "), figure_text(None, v)),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Lines of `rows` with every column but the last padded to its widest cell.
fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..cols)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == cols {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

fn filter(c: &Catalog, a: &ListArgs) -> Result<Filter, Failure> {
    let now = SystemTime::now();
    let date = |flag: &str, v: &Option<String>, upper: bool| {
        v.as_deref()
            .map(|d| {
                catalog::parse_when(d, upper, now)
                    .map_err(|e| Failure::usage(format!("{flag} {e}")))
            })
            .transpose()
    };
    let since = date("--since", &a.since, false)?;
    let until = date("--until", &a.until, true)?;
    if let (Some(s), Some(u)) = (&since, &until) {
        if s >= u {
            return Err(Failure::usage(format!(
                "--since {} is not before --until {}: give an earlier --since or a later --until",
                a.since.as_deref().unwrap_or(""),
                a.until.as_deref().unwrap_or("")
            )));
        }
    }
    if let Some(k) = &a.kind {
        if k.trim().is_empty() {
            return Err(Failure::usage(
                "--kind: give a kind, such as timer, noise, hourglass, load, study or bench",
            ));
        }
    }
    let study = match &a.study {
        Some(s) => {
            let e = c.resolve(s).map_err(fail)?;
            if e.kind != RunKind::Study {
                return Err(Failure::usage(format!(
                    "--study {s}: {} is a {} run, not a study",
                    e.id, e.kind
                )));
            }
            Some(e.id)
        }
        None => None,
    };
    Ok(Filter {
        kind: a.kind.clone(),
        host: a.host.clone(),
        since,
        until,
        study,
        cells: a.all,
    })
}

/// The version of `sandglass runs list --json`.
pub const JSON_SCHEMA: &str = "sandglass-runs/1";

/// `sandglass runs list --json`: the matching rows of the catalog, newest first.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct RunList {
    /// [`JSON_SCHEMA`].
    pub schema: &'static str,
    pub runs: Vec<Entry>,
}

/// The `schema` of `runs show --json`.
pub const SHOW_SCHEMA: &str = "sandglass-runs-show/1";
/// The `schema` of `runs rebuild --json`.
pub const REBUILD_SCHEMA: &str = "sandglass-runs-rebuild/1";

/// `sandglass runs show ID --json`: the catalog's row, the manifest's essentials, each listed
/// file checked against its checksum, and a study's cells.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct RunShow {
    /// [`SHOW_SCHEMA`].
    pub schema: &'static str,
    pub run: Entry,
    /// Null for a study, and for a run whose manifest cannot be read.
    pub manifest: Option<ManifestBrief>,
    /// Every file the manifest lists, checked (empty for a study).
    pub files: Vec<catalog::FileStatus>,
    /// A study's cells, as catalogued (empty for a run).
    pub cells: Vec<Entry>,
    /// Every listed file is present and matches its checksum.
    pub intact: bool,
    /// What is wrong, and what to do, when the run is not intact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// What `runs show` gives of a run's manifest.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct ManifestBrief {
    /// The run format's version.
    pub schema_version: u32,
    pub tool: store::Tool,
    pub end_detail: Option<String>,
    /// The warnings' messages.
    pub warnings: Vec<String>,
}

impl Default for RunList {
    fn default() -> RunList {
        RunList {
            schema: JSON_SCHEMA,
            runs: Vec::new(),
        }
    }
}

fn list(a: &ListArgs) -> Result<u8, Failure> {
    let Some(c) = open_existing()? else {
        if a.study.is_some() {
            return Err(no_base_error(a.study.as_deref().unwrap_or("")));
        }
        // Check the flags even when there is nothing to list.
        let now = SystemTime::now();
        for (flag, v, upper) in [("--since", &a.since, false), ("--until", &a.until, true)] {
            if let Some(d) = v {
                catalog::parse_when(d, upper, now)
                    .map_err(|e| Failure::usage(format!("{flag} {e}")))?;
            }
        }
        if a.json {
            print_json(&RunList::default())?;
        } else {
            eprintln!(
                "sandglass: no runs: {} does not exist (set SANDGLASS_RUNS_DIR to the runs directory)",
                store::default_base().display()
            );
        }
        return Ok(0);
    };
    let f = filter(&c, a)?;
    let entries = c.list(&f).map_err(fail)?;
    if a.json {
        print_json(&RunList {
            schema: JSON_SCHEMA,
            runs: entries,
        })?;
        return Ok(0);
    }
    if entries.is_empty() {
        eprintln!(
            "sandglass: no runs match in {} (runs written elsewhere are added with 'sandglass runs import DIR')",
            c.path().display()
        );
        return Ok(0);
    }
    let mut rows = vec![["ID", "STARTED", "KIND", "STATE", "HOST", "FIGURES"]
        .map(String::from)
        .to_vec()];
    for e in &entries {
        rows.push(vec![
            e.id.clone(),
            when(&e.started_at),
            e.kind.to_string(),
            e.state.clone(),
            e.host.clone(),
            figures_text(e),
        ]);
    }
    write_out(&table(&rows))?;
    Ok(0)
}

fn show(id: &str, as_json: bool) -> Result<u8, Failure> {
    let c = open_existing()?.ok_or_else(|| no_base_error(id))?;
    let e = c.resolve(id).map_err(fail)?;
    if !e.path.is_dir() {
        return Err(Failure::usage(format!(
            "{}: its directory {} no longer exists; 'sandglass runs rebuild' drops it from the catalog",
            e.id,
            e.path.display()
        )));
    }
    let cells = if e.kind == RunKind::Study {
        c.list(&Filter {
            study: Some(e.id.clone()),
            ..Filter::default()
        })
        .map_err(fail)?
    } else {
        Vec::new()
    };
    let (files, manifest, problem) = if e.kind == RunKind::Study {
        (Vec::new(), None, None)
    } else {
        match catalog::check_files(&e.path) {
            Ok(files) => {
                let m = RunReader::open_any_state(&e.path)
                    .map(|r| ManifestBrief {
                        schema_version: r.manifest.schema_version,
                        tool: r.manifest.tool.clone(),
                        end_detail: r.manifest.end_detail.clone(),
                        warnings: r
                            .manifest
                            .warnings
                            .iter()
                            .map(|w| w.message.clone())
                            .collect(),
                    })
                    .ok();
                let problem = files.iter().find(|f| !f.ok).map(|f| {
                    format!(
                        "{}: {}; the run directory is damaged (restore the file from a copy, or remove the run with 'sandglass runs rm {}')",
                        e.path.join(&f.name).display(),
                        f.status,
                        e.id
                    )
                });
                (files, m, problem)
            }
            Err(err) => (Vec::new(), None, Some(err.to_string())),
        }
    };
    if as_json {
        print_json(&RunShow {
            schema: SHOW_SCHEMA,
            run: e.clone(),
            manifest,
            files: files.clone(),
            cells: cells.clone(),
            intact: problem.is_none(),
            problem: problem.clone(),
        })?;
    } else {
        let mut t = String::new();
        let what = if e.kind == RunKind::Study {
            "study"
        } else {
            "run"
        };
        t += &format!("{what} {}\n", e.id);
        let mut rows: Vec<Vec<String>> = vec![
            vec!["  kind".into(), e.kind.to_string()],
            vec!["  state".into(), e.state.clone()],
            vec!["  path".into(), e.path.display().to_string()],
        ];
        if c.place(&e) == catalog::Place::External {
            rows.push(vec![
                "  stored".into(),
                "outside the runs directory (imported in place): `sandglass runs rm` forgets it and never deletes it".into(),
            ]);
        }
        rows.extend([
            vec!["  started".into(), when(&e.started_at)],
            vec![
                "  ended".into(),
                e.ended_at
                    .as_deref()
                    .map(when)
                    .unwrap_or_else(|| "-".into()),
            ],
            vec!["  host".into(), e.host.clone()],
            vec!["  kernel".into(), e.kernel.clone()],
            vec!["  command".into(), e.command_line.join(" ")],
            vec!["  sandglass".into(), e.tool_version.clone()],
        ]);
        if let Some(s) = &e.study {
            rows.push(vec!["  study".into(), s.clone()]);
        }
        if let Some(d) = manifest.as_ref().and_then(|m| m.end_detail.as_deref()) {
            rows.push(vec!["  ended by".into(), d.to_string()]);
        }
        if !e.figures.is_empty() {
            rows.push(vec!["  figures".into(), figures_text(&e)]);
        }
        for w in manifest.iter().flat_map(|m| &m.warnings) {
            rows.push(vec!["  warning".into(), w.clone()]);
        }
        t += &table(&rows);
        if !files.is_empty() {
            t += "files (checked now against manifest.json)\n";
            let mut rows = vec![["  NAME", "BYTES", "SHA-256", "STATUS"]
                .map(String::from)
                .to_vec()];
            for f in &files {
                rows.push(vec![
                    format!("  {}", f.name),
                    f.bytes.to_string(),
                    f.sha256.chars().take(16).collect(),
                    f.status.clone(),
                ]);
            }
            t += &table(&rows);
        }
        if !cells.is_empty() {
            t += "cells\n";
            let mut rows = vec![["  ID", "KIND", "STATE", "FIGURES"]
                .map(String::from)
                .to_vec()];
            for c in &cells {
                rows.push(vec![
                    format!("  {}", c.id),
                    c.kind.to_string(),
                    c.state.clone(),
                    figures_text(c),
                ]);
            }
            t += &table(&rows);
        }
        write_out(&t)?;
    }
    match problem {
        Some(p) => Err(Failure::usage(p)),
        None => Ok(0),
    }
}

fn rm(id: &str, force: bool) -> Result<u8, Failure> {
    if id.trim().is_empty() {
        return Err(fail(CatalogError::EmptyId));
    }
    let mut c = open_to_write(id)?;
    let e = c.resolve(id).map_err(fail)?;
    let cells = if e.kind == RunKind::Study {
        c.list(&Filter {
            study: Some(e.id.clone()),
            ..Filter::default()
        })
        .map_err(fail)?
        .len()
    } else {
        0
    };
    let (removed, how) = c.remove(&e.id, force).map_err(fail)?;
    let with = if cells > 0 {
        format!(" with its {cells} cells")
    } else {
        String::new()
    };
    let (verb, after) = match how {
        catalog::Removal::Deleted => ("removed", String::new()),
        catalog::Removal::Forgotten => (
            "forgot",
            " (outside the runs directory, imported in place: removed from the catalog only, the directory is left as it is)".to_string(),
        ),
        catalog::Removal::Gone => ("forgot", " (the directory was already gone)".to_string()),
    };
    write_out(&format!(
        "{verb} {} {}{with} ({}, started {}): {}{after}\n",
        removed.kind,
        removed.id,
        removed.state,
        when(&removed.started_at),
        removed.path.display()
    ))?;
    Ok(0)
}

/// `runs pack`.
fn pack(ids: &[String], output: &Path) -> Result<u8, Failure> {
    if output.exists() {
        return Err(Failure::usage(format!(
            "-o {}: the file exists; give a new name",
            output.display()
        )));
    }
    let dirs = ids
        .iter()
        .map(|i| crate::common::resolve_run(i).map_err(Failure::usage))
        .collect::<Result<Vec<_>, _>>()?;
    let bytes = store::pack::pack(&dirs, output).map_err(|e| Failure::runtime(e.to_string()))?;
    write_out(&format!(
        "packed {} run(s) into {} ({bytes} bytes); on the other host: sandglass runs import {}\n",
        dirs.len(),
        output.display(),
        output.display()
    ))?;
    Ok(0)
}

/// `runs import ARCHIVE`.
fn import_archive(archive: &Path) -> Result<u8, Failure> {
    let base = store::default_base();
    if let Err(cause) = store::access::write_access(&base) {
        return Err(fail(CatalogError::ReadOnly { base, cause }));
    }
    let added = store::pack::unpack(archive, &base).map_err(|e| match e {
        store::pack::PackError::Io { .. } => Failure::runtime(e.to_string()),
        _ => Failure::usage(e.to_string()),
    })?;
    let mut c = open(&base)?;
    let mut text = String::new();
    for d in &added {
        let ids = c.index(d).map_err(fail)?;
        if let Some(e) = ids.first().and_then(|i| c.get(i).ok().flatten()) {
            text += &format!(
                "imported {} {} ({}): {}\n",
                e.kind,
                e.id,
                e.state,
                e.path.display()
            );
        }
    }
    write_out(&text)?;
    Ok(0)
}

fn import(dir: &Path) -> Result<u8, Failure> {
    if dir.is_file() {
        return import_archive(dir);
    }
    if !dir.is_dir() {
        return Err(Failure::usage(format!(
            "{}: no such directory; give a run or study directory",
            dir.display()
        )));
    }
    let base = store::default_base();
    let mut c = open(&base)?;
    let ids = c.index(dir).map_err(fail)?;
    let mut text = String::new();
    if let Some(first) = ids.first() {
        if let Some(e) = c.get(first).map_err(fail)? {
            let cells = ids.len() - 1;
            let with = if cells > 0 {
                format!(" with {cells} cells")
            } else {
                String::new()
            };
            let place = if c.place(&e) == catalog::Place::External {
                " (indexed in place, outside the runs directory: `sandglass runs rm` forgets it and never deletes it)"
            } else {
                ""
            };
            text += &format!(
                "imported {} {}{with} ({}): {}{place}\n",
                e.kind,
                e.id,
                e.state,
                e.path.display()
            );
        }
    }
    write_out(&text)?;
    Ok(0)
}

fn rebuild(as_json: bool) -> Result<u8, Failure> {
    let base = store::default_base();
    let mut c = Catalog::open(&base).map_err(fail)?;
    crate::common::note_moved_aside(&c);
    let report = c.rebuild(&base).map_err(fail)?;
    if as_json {
        print_json(&sandglass::result::Versioned {
            schema: REBUILD_SCHEMA,
            body: report,
        })?;
        return Ok(0);
    }
    for s in &report.skipped {
        eprintln!(
            "sandglass: warning: left out {}: {}",
            s.path.display(),
            s.reason
        );
    }
    let dropped = if report.dropped.is_empty() {
        String::new()
    } else {
        format!(
            ", {} whose directories are gone dropped",
            report.dropped.len()
        )
    };
    let skipped = if report.skipped.is_empty() {
        String::new()
    } else {
        format!(", {} damaged directories left out", report.skipped.len())
    };
    write_out(&format!(
        "rebuilt {}: {} runs and studies indexed{dropped}{skipped}\n",
        c.path().display(),
        report.indexed
    ))?;
    Ok(0)
}

/// `runs export --parquet DIR`.
fn export_parquet(dir: &Path, a: &ListArgs) -> Result<u8, Failure> {
    if a.json {
        return Err(Failure::usage(
            "--json: runs export writes Parquet files and prints one line; leave --json out",
        ));
    }
    let Some(c) = open_existing()? else {
        return Err(Failure::usage(format!(
            "nothing to export: {} does not exist (set SANDGLASS_RUNS_DIR to the runs directory)",
            store::default_base().display()
        )));
    };
    let f = filter(&c, a)?;
    let entries = c.list(&f).map_err(fail)?;
    let out = sandglass::fleet::export(&entries, dir)
        .map_err(|e| Failure::runtime(format!("--parquet {}: {e}", dir.display())))?;
    for (id, why) in &out.skipped {
        eprintln!("sandglass: warning: {id}: its histograms were left out: {why}");
    }
    write_out(&format!(
        "wrote {} ({} runs) and {} ({} histogram rows)\n",
        dir.join("runs.parquet").display(),
        out.runs,
        dir.join("histograms.parquet").display(),
        out.histogram_rows
    ))?;
    Ok(0)
}

pub fn runs(a: &RunsArgs) -> Result<u8, Failure> {
    match &a.command {
        None => list(&a.list),
        Some(RunsCommand::List(l)) => list(l),
        Some(RunsCommand::Show { id, json }) => show(id, *json),
        Some(RunsCommand::Rm { id, force }) => rm(id, *force),
        Some(RunsCommand::Import { dir }) => import(dir),
        Some(RunsCommand::Pack { ids, output }) => pack(ids, output),
        Some(RunsCommand::Rebuild { json }) => rebuild(*json),
        Some(RunsCommand::Export { parquet, filter }) => export_parquet(parquet, filter),
    }
}
