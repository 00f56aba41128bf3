//! `sandglass sysinfo`: the system snapshot.

use crate::common::Failure;
use anyhow::Context;
use std::io::{self, Write};

pub fn sysinfo(json: bool) -> Result<u8, Failure> {
    let s = sandglass::system::snapshot();
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    if json {
        serde_json::to_writer_pretty(&mut out, &s).map_err(|e| Failure::runtime(e.to_string()))?;
        writeln!(out).context("writing the output")?;
    } else {
        let v = serde_json::to_value(&s).map_err(|e| Failure::runtime(e.to_string()))?;
        if let serde_json::Value::Object(m) = v {
            for (k, v) in m {
                let text = match v {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                };
                writeln!(out, "{k:<20} {text}").context("writing the output")?;
            }
        }
    }
    out.flush().context("writing the output")?;
    Ok(0)
}
