//! `sandglass hourglass`.

use crate::common::{context, Console, Failure};
use anyhow::Context;
use sandglass::hourglass::cmdline::{self, Command as HgCommand};
use sandglass::hourglass::run;
use sandglass_report::hourglass as hg_report;
use std::io::{self, Write};

/// True when the Hourglass command line holds `-q` or `--quiet`, which are sandglass's own
/// (the paper's options have no such letter).
pub fn quiet(args: &[String]) -> bool {
    args.iter().any(|a| is_quiet(a))
}

fn is_quiet(arg: &str) -> bool {
    arg == "-q" || arg == "--quiet"
}

/// sandglass's own option beside the paper's: measure CPUs another sandglass is measuring.
const SHARED_CPUS: &str = "--shared-cpus";

/// sandglass's own option beside the paper's: print the result as JSON (the run's
/// `summary.json`) instead of the paper's formats.
const JSON: &str = "--json";

pub fn hourglass(args: &[String]) -> Result<u8, Failure> {
    let shared = args.iter().any(|a| a == SHARED_CPUS);
    let json = args.iter().any(|a| a == JSON);
    let args: Vec<String> = args
        .iter()
        .filter(|a| !is_quiet(a) && *a != SHARED_CPUS && *a != JSON)
        .cloned()
        .collect();
    let spec = match cmdline::parse(&args) {
        Ok(HgCommand::Help) => {
            print!("{}", cmdline::HELP);
            return Ok(0);
        }
        Ok(HgCommand::Run(spec)) => spec,
        Err(e) => return Err(Failure::usage(e.to_string())),
    };
    let mut console = Console::new();
    let mut ctx = context();
    ctx.shared_cpus = Some(shared);
    let result = run::run(&spec, &ctx, &mut console);
    console.clear();
    let result = result?;
    crate::common::register(std::path::Path::new(&result.run.run_dir));
    let opts = hg_report::Options {
        trace: !spec.suppress_trace,
        raw_cycles: spec.raw_cycles,
        gap_histogram: spec.gap_histogram,
        latlate: true,
    };
    if json {
        crate::common::print_json(&result)?;
        return crate::common::run_outcome(&result.run);
    }
    if crate::common::quiet() {
        return crate::common::run_outcome(&result.run);
    }
    let mut out = crate::common::text_stdout();
    let written =
        sandglass::store::RunReader::open_any_state(std::path::Path::new(&result.run.run_dir))
            .map_err(|e| io::Error::other(e.to_string()))
            .and_then(|r| hg_report::write(&mut out, &result, &r, &opts));
    written
        .and_then(|_| out.flush())
        .context("writing the output")?;
    crate::common::run_outcome(&result.run)
}
