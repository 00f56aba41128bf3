//! `sandglass sysinfo`: the system snapshot.

use crate::common::{print_json, Failure};
use anyhow::Context;
use sandglass::result::Versioned;
use std::io::Write;

/// The version of `sandglass sysinfo --json`.
pub const JSON_SCHEMA: &str = "sandglass-sysinfo/1";

pub fn sysinfo(json: bool) -> Result<u8, Failure> {
    let s = sandglass::system::snapshot();
    if json {
        print_json(&Versioned {
            schema: JSON_SCHEMA,
            body: s,
        })?;
        return Ok(0);
    }
    let mut out = crate::common::text_stdout();
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
    out.flush().context("writing the output")?;
    Ok(0)
}
