//! One renderer per result type: [`Render`] is what a result prints as, in text and, where it
//! has one, in Markdown; [`stored`] renders a probe's stored result by its run's kind (the one
//! place that maps a kind to its result type and so to its renderer).

use sandglass::check::CheckReport;
use sandglass::hourglass::result::HourglassResult;
use sandglass::microbench::budget::BudgetResult;
use sandglass::microbench::copy::CopyResult;
use sandglass::microbench::ctxsw::CtxswResult;
use sandglass::microbench::file::FileResult;
use sandglass::microbench::ipc::IpcResult;
use sandglass::microbench::timer_overhead::TimerOverheadResult;
use sandglass::noise::NoiseResult;
use sandglass::study::run::StudyOutcome;
use sandglass::timer::TimerResult;
use sandglass::RunKind;
use std::io::{self, Write};

/// How a result is written for people.
pub trait Render {
    /// The text report, as the command that measured it prints it.
    fn text(&self, w: &mut dyn Write) -> io::Result<()>;

    /// The Markdown report (`report --markdown`), for pasting into an issue or a pull request;
    /// `None` for a result that has none.
    fn markdown(&self, _w: &mut dyn Write) -> Option<io::Result<()>> {
        None
    }
}

impl Render for TimerResult {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        crate::timer::write(w, self)
    }
    fn markdown(&self, w: &mut dyn Write) -> Option<io::Result<()>> {
        Some(crate::markdown::timer(w, self))
    }
}

impl Render for NoiseResult {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        crate::noise::write(w, self)
    }
    fn markdown(&self, w: &mut dyn Write) -> Option<io::Result<()>> {
        Some(crate::markdown::noise(w, self))
    }
}

/// The summary; the trace and the LAT wakeups stream from the run's tables
/// ([`crate::hourglass::write`]).
impl Render for HourglassResult {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        crate::hourglass::write_summary(w, self)
    }
    fn markdown(&self, w: &mut dyn Write) -> Option<io::Result<()>> {
        Some(crate::markdown::hourglass(w, self))
    }
}

impl Render for StudyOutcome {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        crate::study::write(w, self)
    }
    fn markdown(&self, w: &mut dyn Write) -> Option<io::Result<()>> {
        Some(crate::markdown::study(w, self))
    }
}

impl Render for CheckReport {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        crate::check::write(w, self)
    }
}

/// The bench kinds' tables, each from its own writer in [`crate::microbench`].
macro_rules! bench_text {
    ($($result:ty => $write:ident),* $(,)?) => {
        $(impl Render for $result {
            fn text(&self, w: &mut dyn Write) -> io::Result<()> {
                crate::microbench::$write(w, self)
            }
        })*
    };
}

bench_text! {
    CopyResult => write_copy,
    IpcResult => write_ipc,
    CtxswResult => write_ctxsw,
    FileResult => write_file,
    TimerOverheadResult => write_timer_overhead,
    BudgetResult => write_budget,
}

/// Renders the result a run of `kind` stored (`summary.json` of a timer, noise or Hourglass
/// run, `result.json` of a bench run) from its text: in Markdown when `markdown` and the
/// result has it, else in text. `None` when no probe writes `kind`; an error of kind
/// `InvalidData` when `stored` is not such a result.
pub fn stored(
    w: &mut dyn Write,
    kind: &RunKind,
    stored: &[u8],
    markdown: bool,
) -> Option<io::Result<()>> {
    fn with<R: Render + serde::de::DeserializeOwned>(
        w: &mut dyn Write,
        stored: &[u8],
        markdown: bool,
    ) -> io::Result<()> {
        let r: R = serde_json::from_slice(stored)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        match markdown.then(|| r.markdown(w)).flatten() {
            Some(written) => written,
            None => r.text(w),
        }
    }
    Some(match kind {
        RunKind::Timer => with::<TimerResult>(w, stored, markdown),
        RunKind::Noise => with::<NoiseResult>(w, stored, markdown),
        RunKind::Hourglass => with::<HourglassResult>(w, stored, markdown),
        RunKind::BenchCopy => with::<CopyResult>(w, stored, markdown),
        RunKind::BenchIpc => with::<IpcResult>(w, stored, markdown),
        RunKind::BenchCtxsw => with::<CtxswResult>(w, stored, markdown),
        RunKind::BenchFile => with::<FileResult>(w, stored, markdown),
        RunKind::BenchTimerOverhead => with::<TimerOverheadResult>(w, stored, markdown),
        RunKind::BenchBudget => with::<BudgetResult>(w, stored, markdown),
        RunKind::Load | RunKind::Study | RunKind::Unknown(_) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_probes_kind_has_a_renderer_and_refuses_what_is_not_its_result() {
        for kind in RunKind::KNOWN {
            let mut out = Vec::new();
            let r = stored(&mut out, &kind, b"{\"not\": \"a result\"}", false);
            match kind {
                RunKind::Load | RunKind::Study => assert!(r.is_none(), "{kind}"),
                _ => {
                    let e = r.expect("a renderer").expect_err("not a result");
                    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{kind}: {e}");
                }
            }
        }
        assert!(stored(&mut Vec::new(), &RunKind::named("bench-tlb"), b"{}", false).is_none());
    }
}
