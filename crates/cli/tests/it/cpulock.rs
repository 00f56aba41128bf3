//! One measurement per CPU: of four `noise` runs started at once on one CPU, one measures and
//! three refuse, naming the holder; `--shared-cpus` measures with a warning; a SIGKILLed run's
//! lock is free at once.

use crate::common;
use common::lock;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn sandglass(runtime: &std::path::Path, runs: &std::path::Path, args: &[&str]) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin("sandglass"));
    c.args(args)
        .env("SANDGLASS_RUNS_DIR", runs)
        .env("SANDGLASS_RUNTIME_DIR", runtime)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

#[test]
fn four_runs_on_one_cpu_one_measures_three_refuse_naming_the_holder() {
    let _machine = lock();
    let runtime = tempfile::tempdir().unwrap();
    let runs = tempfile::tempdir().unwrap();
    // The holder measures far longer than the others take to start, however busy the machine:
    // all four start while it holds the CPU, and it is stopped once the three have refused.
    let args = ["noise", "-c", "0", "-d", "600s"];
    let mut children: Vec<_> = (0..4)
        .map(|_| {
            sandglass(runtime.path(), runs.path(), &args)
                .spawn()
                .unwrap()
        })
        .collect();
    let pids: Vec<u32> = children.iter().map(|c| c.id()).collect();
    common::wait_until("three of the four runs' end", || {
        children
            .iter_mut()
            .filter_map(|c| c.try_wait().unwrap())
            .count()
            >= 3
    });
    // The holder is stopped only once it measures (its manifest says `running`): a SIGINT
    // during its start-up, before it handles signals, would end it by the signal instead.
    common::wait_until("the holder's running manifest", || {
        std::fs::read_dir(runs.path()).is_ok_and(|rd| {
            rd.flatten().any(|e| {
                std::fs::read_to_string(e.path().join("manifest.json"))
                    .is_ok_and(|m| m.contains("\"running\""))
            })
        })
    });
    for c in children.iter_mut() {
        if c.try_wait().unwrap().is_none() {
            sandglass_sys::signal::send_to_process(c.id() as i32, sandglass_sys::signal::SIGINT)
                .unwrap();
        }
    }
    let outs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    // Stopped by Ctrl-C, the holder exits with 130 as a shell would.
    let measured: Vec<usize> = (0..4)
        .filter(|&i| outs[i].status.code() == Some(130))
        .collect();
    assert_eq!(measured.len(), 1, "{outs:?}");
    let holder = pids[measured[0]];
    for (i, o) in outs.iter().enumerate() {
        if i == measured[0] {
            continue;
        }
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("CPU 0 by pid {holder} (")) && err.contains("noise -c 0 -d 600s"),
            "the refusal does not name the holder {holder}: {err}"
        );
        assert!(err.contains("--shared-cpus"), "{err}");
    }
}

#[test]
fn shared_cpus_measure_with_a_warning_and_a_killed_run_frees_its_cpu_at_once() {
    let _machine = lock();
    let runtime = tempfile::tempdir().unwrap();
    let runs = tempfile::tempdir().unwrap();
    let (mut first, _dir) = {
        let before = Instant::now();
        let mut c = sandglass(
            runtime.path(),
            runs.path(),
            &["noise", "-c", "0,1", "-d", "60s"],
        )
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        // The lock file names the holder once it holds the lock.
        let lock_file = runtime.path().join("cpu0.lock");
        while !std::fs::read_to_string(&lock_file)
            .is_ok_and(|t| t.starts_with(&format!("{}\n", c.id())))
        {
            assert!(
                before.elapsed() < common::WAIT_GUARD,
                "{}",
                common::hang_guard("the first run's lock", common::WAIT_GUARD)
            );
            assert!(c.try_wait().unwrap().is_none(), "the first run ended");
            std::thread::sleep(Duration::from_millis(20));
        }
        (c, lock_file)
    };
    let shared = sandglass(
        runtime.path(),
        runs.path(),
        &["noise", "-c", "0", "-d", "200ms", "--shared-cpus"],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&shared.stderr);
    assert_eq!(shared.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("CPU 0 by pid {}", first.id())),
        "{err}"
    );
    // Hourglass and a study take the option too; without it, they refuse or fail the cell.
    let hourglass = ["hourglass", "-n", "1", "-d", "200ms", "-x"];
    let refused = sandglass(runtime.path(), runs.path(), &hourglass)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    for args in [
        [&hourglass[..], &["--shared-cpus"]].concat(),
        vec!["quick", "--duration-scale", "0.02", "--shared-cpus"],
    ] {
        let out = sandglass(runtime.path(), runs.path(), &args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(
            err.contains(&format!("by pid {}", first.id())),
            "{args:?}: {err}"
        );
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let next = sandglass(
        runtime.path(),
        runs.path(),
        &["noise", "-c", "0", "-d", "200ms"],
    )
    .output()
    .unwrap();
    assert_eq!(
        next.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&next.stderr)
    );
}
