//! `sandglass monitor`: segments in the catalog, the duty cycle, retention, a restart after a
//! kill, the HTTP endpoint (exposition checked by promtool, hostile clients), and a real
//! Prometheus server scraping it. Loopback only; every process is stopped by the test.

use crate::common;
use common::{lock, run_in, runtime_for, share, skip, Guarded};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A monitor started with `args` (plus `--listen 127.0.0.1:0`), and the address it serves.
struct Monitor {
    child: Child,
    addr: SocketAddr,
    stderr: std::sync::mpsc::Receiver<String>,
}

impl Monitor {
    fn start(runs: &std::path::Path, args: &[&str]) -> Monitor {
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("sandglass"))
            .arg("monitor")
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .env("SANDGLASS_RUNS_DIR", runs)
            .env("SANDGLASS_RUNTIME_DIR", runtime_for(runs))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let end = Instant::now() + common::WAIT_GUARD;
        let addr = loop {
            let line = rx
                .recv_timeout(end.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| {
                    let _ = child.kill();
                    panic!(
                        "{}",
                        common::hang_guard(
                            "the monitor's line saying where it serves",
                            common::WAIT_GUARD
                        )
                    )
                });
            if let Some(rest) = line.strip_prefix("sandglass: serving http://") {
                break rest.split('/').next().unwrap().parse().unwrap();
            }
        };
        Monitor {
            child,
            addr,
            stderr: rx,
        }
    }

    /// Sends SIGTERM; returns how long the monitor took to exit, its exit code and what it
    /// printed since it started serving.
    fn terminate(mut self) -> (Duration, Option<i32>, String) {
        let t0 = Instant::now();
        sandglass_sys::signal::send_to_process(
            self.child.id() as i32,
            sandglass_sys::signal::SIGTERM,
        )
        .unwrap();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if t0.elapsed() > common::WAIT_GUARD {
                let _ = self.child.kill();
                panic!(
                    "{}",
                    common::hang_guard("the monitor's end after SIGTERM", common::WAIT_GUARD)
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let took = t0.elapsed();
        // Everything it printed: the reader ends at the end of its stderr.
        let end = Instant::now() + common::WAIT_GUARD;
        let mut text = Vec::new();
        while let Ok(line) = self
            .stderr
            .recv_timeout(end.saturating_duration_since(Instant::now()))
        {
            text.push(line);
        }
        (took, status.code(), text.join("\n"))
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `request` and returns the whole answer (the server closes or 5 s pass).
fn http(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(request);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn get(addr: SocketAddr, path: &str) -> String {
    http(
        addr,
        format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes(),
    )
}

fn status(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The value of the sample `name{labels}` in an exposition.
fn sample(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
}

fn runs_json(runs: &std::path::Path) -> serde_json::Value {
    let out = run_in(runs, &["runs", "--json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

fn find(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    })
}

#[test]
fn monitor_serves_growing_histograms_and_ends_on_sigterm_with_its_segment_catalogued() {
    let _machine = lock();
    let runs = tempfile::tempdir().unwrap();
    let m = Monitor::start(runs.path(), &["-c", "1", "--segment", "1h"]);
    let count = |t: &str| sample(t, "sandglass_timer_latency_seconds_count{cpu=\"1\"}").unwrap();
    // Scraped until the histogram has counts, then until they have grown: however slowly a
    // busy machine serves, what matters is that they grow.
    let mut first = String::new();
    common::wait_until("a scrape with counts", || {
        first = get(m.addr, "/metrics");
        status(&first) == 200 && count(&first) > 0.0
    });
    assert!(
        first.contains("content-type: text/plain; version=0.0.4"),
        "{first}"
    );
    let n1 = count(&first);
    let mut second = String::new();
    common::wait_until("a scrape with more counts", || {
        second = get(m.addr, "/metrics");
        status(&second) == 200 && count(&second) > n1
    });
    let buckets = second
        .lines()
        .filter(|l| l.starts_with("sandglass_timer_latency_seconds_bucket{"))
        .count();
    assert_eq!(buckets, 162, "161 bounds and +Inf");
    // OpenMetrics for a client that asks for it.
    let om = http(
        m.addr,
        b"GET /metrics HTTP/1.1\r\nhost: x\r\naccept: application/openmetrics-text; version=1.0.0\r\nconnection: close\r\n\r\n",
    );
    assert!(om.contains("application/openmetrics-text"), "{om}");
    assert!(om.trim_end().ends_with("# EOF"));
    match find("promtool") {
        Some(promtool) => {
            let body = second.split_once("\r\n\r\n").unwrap().1;
            let mut p = Command::new(promtool)
                .args(["check", "metrics"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            p.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
            let out = p.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "promtool check metrics: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        None => skip("promtool is not installed (Debian: apt-get install prometheus)"),
    }
    let (took, code, said) = m.terminate();
    assert_eq!(code, Some(0), "{said}");
    // It ends at SIGTERM, not at the end of its hour-long segment (the bound is a margin far
    // above the moment it takes, for a busy machine).
    assert!(
        took < Duration::from_secs(120),
        "SIGTERM took {took:?}: it did not end at the signal (or the machine is extremely overloaded)"
    );
    assert!(
        said.contains("segment ") && said.contains(" interrupted: "),
        "{said}"
    );
    let listed = runs_json(runs.path());
    let rows = listed["runs"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{listed}");
    assert_eq!(rows[0]["state"], "interrupted");
    assert_eq!(rows[0]["kind"], "timer");
    // Its files are whole: `runs show` verifies every checksum.
    let id = rows[0]["id"].as_str().unwrap();
    let shown = run_in(runs.path(), &["runs", "show", id]);
    assert_eq!(shown.code, Some(0), "{}", shown.stderr);
}

/// 50 % of every second for 3 s at 1 ms: exactly 1,500 releases, in three windows of 500.
#[test]
fn a_duty_cycle_measures_only_its_windows() {
    let _machine = lock();
    let runs = tempfile::tempdir().unwrap();
    let out = run_in(
        runs.path(),
        &[
            "monitor",
            "-c",
            "1",
            "--duty",
            "50%",
            "--duty-period",
            "1s",
            "--segment",
            "3s",
            "--segments",
            "1",
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let listed = runs_json(runs.path());
    let run = &listed["runs"][0];
    assert_eq!(run["state"], "completed", "{listed}");
    let dir = std::path::PathBuf::from(run["path"].as_str().unwrap());
    let at = common::column(
        &dir,
        &sandglass::store::table::tables::TIMER_SAMPLES,
        "release_ns",
    );
    assert_eq!(at.len(), 1_500);
    for (w, window) in at.chunks(500).enumerate() {
        let start = w as i64 * 1_000_000_000;
        // Windows are laid out in counter ticks and the releases stored in nanoseconds through
        // the calibration the run ends with, which may differ from the one it started with by
        // some parts per million on a busy virtual machine: 100 ppm of slack (a release 80 ns
        // before the second window's start was seen).
        let slack = start / 10_000;
        assert!(
            window
                .iter()
                .all(|&t| t >= start - slack && t < start + 500_000_000 + slack),
            "window {w}: {:?}..{:?}",
            window.first(),
            window.last()
        );
    }
}

/// Three segments under a 1-byte disk limit: the two older ones are removed as each newer
/// one completes, the newest is kept.
#[test]
fn retention_keeps_the_newest_segment_under_a_disk_limit() {
    let _machine = lock();
    let runs = tempfile::tempdir().unwrap();
    let out = run_in(
        runs.path(),
        &[
            "monitor",
            "-c",
            "1",
            "--segment",
            "500ms",
            "--segments",
            "3",
            "--max-disk",
            "1",
            "--json",
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        out.stderr.matches("removed segment ").count(),
        2,
        "{}",
        out.stderr
    );
    // --json: each segment's result, one line of `timer --json` each, as it ended.
    let segments: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(segments.len(), 3, "{}", out.stdout);
    for s in &segments {
        assert_eq!(s["kind"], "timer", "{s}");
        assert_eq!(s["state"], "completed", "{s}");
        assert!(s["cpus"][0]["count"].as_u64().unwrap() > 0, "{s}");
    }
    assert!(out.stderr.contains("beyond --max-disk 1"), "{}", out.stderr);
    let listed = runs_json(runs.path());
    let rows = listed["runs"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{listed}");
    let dirs = std::fs::read_dir(runs.path())
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("manifest.json").exists())
        .count();
    assert_eq!(dirs, 1);
}

/// A monitor killed mid-segment leaves it running; the next start marks it incomplete and
/// measures on.
#[test]
fn a_restart_after_a_kill_marks_the_segment_incomplete_and_carries_on() {
    let _machine = lock();
    let runs = tempfile::tempdir().unwrap();
    let (mut child, dir) = common::start_run(runs.path(), &["monitor", "-c", "1"]);
    std::thread::sleep(Duration::from_millis(500));
    child.kill().unwrap();
    child.wait().unwrap();
    let out = run_in(
        runs.path(),
        &[
            "monitor",
            "-c",
            "1",
            "--segment",
            "500ms",
            "--segments",
            "1",
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let listed = runs_json(runs.path());
    let rows = listed["runs"].as_array().unwrap();
    let state = |p: &std::path::Path| {
        rows.iter()
            .find(|r| r["path"].as_str() == Some(p.to_str().unwrap()))
            .map(|r| r["state"].clone())
    };
    assert_eq!(state(&dir), Some("incomplete".into()), "{listed}");
    assert_eq!(rows.len(), 2, "{listed}");
}

/// `--json` into an output that fails (a full disk: /dev/full) ends the monitor after that
/// segment with exit code 1 and one error line; the segment itself is kept.
#[test]
fn a_json_output_that_fails_ends_the_monitor_with_an_error() {
    let _machine = lock();
    let runs = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("sandglass"))
        .args([
            "monitor",
            "-c",
            "1",
            "--segment",
            "500ms",
            "--segments",
            "3",
            "--json",
            "-q",
        ])
        .env("SANDGLASS_RUNS_DIR", runs.path())
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("writing the output"), "{stderr}");
    let listed = runs_json(runs.path());
    assert_eq!(listed["runs"].as_array().unwrap().len(), 1, "{listed}");
}

#[test]
fn bad_monitor_flags_are_usage_errors() {
    let runs = tempfile::tempdir().unwrap();
    for (args, what) in [
        (vec!["--duty", "0%"], "--duty 0%"),
        (vec!["--duty", "150%"], "--duty 150%"),
        (
            vec!["--duty", "1%", "--duty-period", "10ms"],
            "less than one interval",
        ),
        (
            // Two releases of 7 ms do not fit in a cycle of 10 ms.
            vec!["-i", "7ms", "--duty", "90%", "--duty-period", "10ms"],
            "does not fit in --duty-period 10ms",
        ),
        (vec!["--keep", "soon"], "--keep"),
        (vec!["--max-disk", "lots"], "--max-disk lots"),
        (vec!["--listen", "localhost"], "--listen localhost"),
        (vec!["--segment", "0s"], "--segment"),
        (vec!["--json", "--top"], "--json"),
    ] {
        let mut a = vec!["monitor", "-c", "1"];
        a.extend(&args);
        let out = run_in(runs.path(), &a);
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr);
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {}", out.stderr);
        assert!(lines[0].contains(what), "{args:?}: {}", out.stderr);
    }
}

/// Malformed, oversized, slow, body-carrying, wrong-method and too many concurrent requests:
/// each gets an error answer or is closed, the server stays up, and it never ran on the
/// measured CPU.
#[test]
fn hostile_http_clients_get_errors_and_the_server_stays_up() {
    let _machine = share();
    let runs = tempfile::tempdir().unwrap();
    let m = Monitor::start(runs.path(), &["-c", "1", "--segment", "1h"]);
    assert_eq!(status(&http(m.addr, b"GARBAGE\r\n\r\n")), 400);
    let version = status(&http(m.addr, b"GET /metrics HTTP/9.9\r\n\r\n"));
    assert!(version == 400 || version == 505, "{version}");
    let huge = format!(
        "GET /metrics HTTP/1.1\r\nhost: x\r\nx-pad: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    assert_eq!(status(&http(m.addr, huge.as_bytes())), 431);
    assert_eq!(
        status(&http(
            m.addr,
            b"POST /metrics HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\nconnection: close\r\n\r\nabc"
        )),
        405
    );
    assert_eq!(
        status(&http(
            m.addr,
            b"GET /metrics HTTP/1.1\r\nhost: x\r\ncontent-length: 100000000\r\nconnection: close\r\n\r\n"
        )),
        413
    );
    assert_eq!(status(&get(m.addr, "/../etc/passwd")), 404);
    assert_eq!(status(&get(m.addr, "/healthz")), 200);
    // A slow client: half a request head, then nothing. The server closes it after its head
    // deadline (5 s), without an answer (hyper sends none for a timed-out head). The read's
    // own timeout is a hang guard far beyond that deadline.
    let mut slow = TcpStream::connect(m.addr).unwrap();
    let t0 = Instant::now();
    slow.write_all(b"GET /metr").unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut answer = Vec::new();
    let closed = slow.read_to_end(&mut answer);
    let took = t0.elapsed();
    assert!(
        closed.is_ok(),
        "not closed after {took:?}: {closed:?}: the 5 s head deadline did not cut it (hang guard: 120 s; the machine may be overloaded, or it hung)"
    );
    assert!(answer.is_empty(), "{answer:?}");
    assert!(took >= Duration::from_secs(4), "closed after {took:?}");
    // 300 idle connections, more than the 256 held: none is refused; the oldest are closed
    // to make room for the newest, and a scrape made then is answered.
    let mut idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(m.addr).unwrap())
        .collect();
    let scraped = get(m.addr, "/healthz");
    assert_eq!(status(&scraped), 200, "{scraped}");
    // Every eviction happened at an accept, before the scrape was answered: a read that
    // does not wait tells which connections the server closed.
    let mut closed = Vec::new();
    let mut refused = 0;
    for (i, s) in idle.iter_mut().enumerate() {
        s.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 64];
        match s.read(&mut buf) {
            Ok(0) => closed.push(i),
            Ok(n) if status(&String::from_utf8_lossy(&buf[..n])) == 503 => refused += 1,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            _ => closed.push(i),
        }
    }
    assert_eq!(refused, 0);
    assert!(closed.len() >= 300 + 1 - 256, "{closed:?}");
    assert!(closed.iter().all(|&i| i < 100), "newest closed: {closed:?}");
    drop(idle);
    std::thread::sleep(Duration::from_millis(200));
    // Still up, and measuring.
    let after = get(m.addr, "/metrics");
    assert_eq!(status(&after), 200, "{after}");
    // The server thread was never allowed on the measured CPU.
    let pid = m.child.id();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    let mut seen = false;
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() == "sg-http" {
            seen = true;
            let status = std::fs::read_to_string(t.path().join("status")).unwrap();
            let allowed = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .unwrap()
                .trim()
                .to_string();
            let cpus = sandglass::cpulist::CpuList::parse(&allowed).unwrap();
            assert!(!cpus.iter().any(|c| c == 1), "sg-http allowed on {allowed}");
        }
    }
    assert!(seen, "no sg-http thread");
    let (_, code, said) = m.terminate();
    assert_eq!(code, Some(0), "{said}");
}

/// Holds `n` connections against `addr` from a thread of its own: the even ones idle after
/// connecting, the odd ones a slowloris sending a request head one byte every second. Each
/// one the server closes is opened again at once, as an attacker would. Stops and closes
/// them all when the returned flag is set. The counter (and the thread's result) is how many
/// it opened again.
fn hold(
    addr: SocketAddr,
    n: usize,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    std::thread::JoinHandle<usize>,
) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let done = stop.clone();
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    let head =
        b"GET /metrics HTTP/1.1\r\nhost: x\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let open = move || {
        let s = TcpStream::connect(addr).unwrap();
        s.set_nonblocking(true).unwrap();
        s
    };
    let thread = std::thread::spawn(move || {
        let mut held: Vec<(TcpStream, usize)> = (0..n).map(|_| (open(), 0)).collect();
        let mut reopened = 0;
        while !done.load(Ordering::Relaxed) {
            for (i, (s, sent)) in held.iter_mut().enumerate() {
                let mut buf = [0u8; 256];
                let gone = match s.read(&mut buf) {
                    Ok(_) => true,
                    Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                } || (i % 2 == 1 && s.write(&head[*sent % head.len()..][..1]).is_err());
                if gone {
                    *s = open();
                    *sent = 0;
                    reopened += 1;
                    counted.store(reopened, Ordering::Relaxed);
                } else if i % 2 == 1 {
                    *sent += 1;
                }
            }
            for _ in 0..10 {
                if done.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        reopened
    });
    (stop, count, thread)
}

/// Issue 31's denial of service: 200 connections held open (half idle, half a slowloris)
/// made every `/healthz` probe fail when the server refused connections beyond 16. Now every
/// scrape of `/metrics` and `/healthz`, each on a fresh connection, is answered 200 while they
/// are held, and on across the moment the server cuts the slowloris connections. (How fast
/// is printed, not asserted: a busy machine serves slowly.)
#[test]
fn scrapes_are_answered_while_200_idle_and_slowloris_connections_are_held() {
    let _machine = share();
    let runs = tempfile::tempdir().unwrap();
    let m = Monitor::start(runs.path(), &["-c", "1", "--segment", "1h"]);
    let (stop, reopened, holder) = hold(m.addr, 200);
    // Let the held connections settle in before the first scrape.
    std::thread::sleep(Duration::from_secs(1));
    let mut slowest = Duration::ZERO;
    let guard = Instant::now() + common::WAIT_GUARD;
    let mut i = 0;
    // At least 20 scrapes, and on until the server has cut (and the holder reopened) 100 of
    // the held connections.
    while i < 20 || reopened.load(std::sync::atomic::Ordering::Relaxed) < 100 {
        assert!(
            Instant::now() < guard,
            "{}",
            common::hang_guard("100 held connections cut", common::WAIT_GUARD)
        );
        let path = if i % 2 == 0 { "/metrics" } else { "/healthz" };
        let t0 = Instant::now();
        let mut s = TcpStream::connect(m.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let mut out = Vec::new();
        let read = s.read_to_end(&mut out);
        let took = t0.elapsed();
        let answer = String::from_utf8_lossy(&out);
        assert!(
            read.is_ok(),
            "scrape {i} of {path}: {read:?} after {took:?} (a read timeout is the hang guard: 120 s): {answer}"
        );
        assert_eq!(status(&answer), 200, "scrape {i} of {path}: {answer}");
        slowest = slowest.max(took);
        i += 1;
        // Spread over 7 s at least, across the moment the server cuts the slowloris
        // connections.
        std::thread::sleep(Duration::from_millis(300));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reopened = holder.join().unwrap();
    // The slowloris connections were cut at their head deadline and opened again.
    assert!(reopened >= 100, "{reopened} connections reopened");
    println!("{i} scrapes answered while 200 connections were held, the slowest in {slowest:?}; {reopened} held connections cut and reopened");
    let (_, code, said) = m.terminate();
    assert_eq!(code, Some(0), "{said}");
}

/// A real Prometheus scrapes the monitor every second; `histogram_quantile(0.99, …)` and the
/// missed-release counter it stores agree with the exact figures of the same releases, read
/// back from the segment's samples.
#[test]
fn a_real_prometheus_scrapes_the_monitor_and_agrees_with_its_samples() {
    let (Some(prometheus), Some(_)) = (find("prometheus"), find("promtool")) else {
        skip("prometheus and promtool are not installed (Debian: apt-get install prometheus)");
        return;
    };
    let _machine = share();
    let runs = tempfile::tempdir().unwrap();
    let prom_dir = tempfile::tempdir().unwrap();
    let m = Monitor::start(runs.path(), &["-c", "1", "--segment", "1h"]);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = prom_dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  - job_name: sandglass\n    static_configs:\n      - targets: ['{}']\n",
            m.addr
        ),
    )
    .unwrap();
    struct Killed(Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let server = Killed(
        Command::new(prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                prom_dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let api: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let end = Instant::now() + common::WAIT_GUARD;
    while TcpStream::connect(api).is_err() {
        assert!(
            Instant::now() < end,
            "{}",
            common::hang_guard("Prometheus listening", common::WAIT_GUARD)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let query = |q: &str, at: Option<f64>| -> serde_json::Value {
        let mut path = format!("/api/v1/query?query={}", urlencode(q));
        if let Some(t) = at {
            path.push_str(&format!("&time={t:.3}"));
        }
        let answer = get(api, &path);
        let body = answer.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
        // Chunked answers: the JSON object is between the first '{' and the last '}'.
        let json = match (body.find('{'), body.rfind('}')) {
            (Some(a), Some(b)) => &body[a..=b],
            _ => "null",
        };
        serde_json::from_str(json).unwrap_or(serde_json::Value::Null)
    };
    // Wait for 15 scrapes that saw releases.
    let end = Instant::now() + common::WAIT_GUARD;
    let scrapes = loop {
        let r = query(
            "count_over_time(sandglass_timer_releases_total{cpu=\"1\"}[1m])",
            None,
        );
        let n = r["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        if n >= 15.0 {
            break n;
        }
        assert!(
            Instant::now() < end,
            "{}: Prometheus scraped {n} times: {r}",
            common::hang_guard("15 scrapes", common::WAIT_GUARD)
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    // One scrape's figures: the latest sample's time, then every query at that time.
    let latest = query(
        "timestamp(sandglass_timer_latency_seconds_count{cpu=\"1\"})",
        None,
    );
    let at: f64 = latest["data"]["result"][0]["value"][1]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let value = |q: &str| -> f64 {
        let r = query(q, Some(at));
        r["data"]["result"][0]["value"][1]
            .as_str()
            .unwrap_or_else(|| panic!("{q}: {r}"))
            .parse()
            .unwrap()
    };
    let n = value("sandglass_timer_latency_seconds_count{cpu=\"1\"}") as usize;
    let missed = value("sandglass_timer_missed_releases_total{cpu=\"1\"}") as i64;
    let p99 = value("histogram_quantile(0.99, sandglass_timer_latency_seconds_bucket{cpu=\"1\"})");
    drop(server);
    let (_, code, said) = m.terminate();
    assert_eq!(code, Some(0), "{said}");
    // The same releases, exactly: the first n of the segment's samples.
    let listed = runs_json(runs.path());
    let dir = std::path::PathBuf::from(listed["runs"][0]["path"].as_str().unwrap());
    let table = &sandglass::store::table::tables::TIMER_SAMPLES;
    let late = common::column(&dir, table, "lateness_ns");
    let flags = common::column(&dir, table, "missed");
    assert!(
        late.len() >= n && n > 1_000,
        "{} samples, {n} scraped",
        late.len()
    );
    let mut first: Vec<i64> = late[..n].iter().map(|&x| x.max(0)).collect();
    first.sort_unstable();
    let exact = sandglass::stats::quantile_sorted(&first, 0.99).unwrap() as f64 / 1e9;
    let err = (p99 - exact).abs() / exact;
    assert!(
        err <= sandglass::live::RELATIVE_ERROR + 1e-9,
        "Prometheus p99 {p99} s against exact {exact} s ({scrapes} scrapes, {n} releases): error {err}"
    );
    assert_eq!(flags[..n].iter().sum::<i64>(), missed);
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The example alert rules in contrib/ load, and fire as their unit tests say (p99 above the
/// threshold for 5 minutes, any missed release, a monitor that stopped answering).
#[test]
fn the_example_alert_rules_pass_promtool() {
    let Some(promtool) = find("promtool") else {
        skip("promtool is not installed (Debian: apt-get install prometheus)");
        return;
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/prometheus");
    for args in [
        ["check", "rules", "sandglass-alerts.yml"],
        ["test", "rules", "sandglass-alerts.test.yml"],
    ] {
        let out = Command::new(&promtool)
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `sandglass top` in a pseudo-terminal of 80 columns: a table with one row per measured CPU,
/// redrawn, that `q` ends with exit 0, the terminal restored and the segment catalogued.
#[test]
fn top_shows_one_row_per_cpu_in_a_terminal_and_quits_on_q() {
    let _machine = lock();
    let runs = tempfile::tempdir().unwrap();
    let (mut master, mut child) = in_a_terminal(runs.path(), &["top", "-c", "1"]);
    let screen = read_until(&mut master, |s| {
        s.contains("RELEASES") && s.contains("MISSED")
    });
    // A second redraw counts on: the terminal only gets what changed, here cells of the CPU's
    // row (the table's first row is the screen's fourth).
    std::thread::sleep(Duration::from_millis(1_500));
    let more = read_until(&mut master, |s| s.contains("\x1b[4;"));
    master.write_all(b"q").unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < common::WAIT_GUARD,
            "{}",
            common::hang_guard("top's end on q", common::WAIT_GUARD)
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let tail = read_until(&mut master, |s| s.contains("\x1b[?1049l"));
    assert_eq!(status.code(), Some(0), "{screen}{more}{tail}");
    // The table's row for CPU 1: a line that starts, after the border, with the cell "1" (the
    // redraw may move the cursor before the next cell, ending the line there).
    let plain = strip_ansi(&(screen + &more));
    assert!(
        plain.lines().any(|l| l
            .strip_prefix('│')
            .and_then(|r| r.split_whitespace().next())
            == Some("1")),
        "{plain}"
    );
    // The alternate screen was left.
    assert!(tail.contains("\x1b[?1049l"), "{tail:?}");
    let listed = runs_json(runs.path());
    assert_eq!(listed["runs"].as_array().unwrap().len(), 1, "{listed}");
}

#[test]
fn top_without_a_terminal_is_a_usage_error() {
    let runs = tempfile::tempdir().unwrap();
    let out = run_in(runs.path(), &["top", "-c", "1"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("needs a terminal"), "{}", out.stderr);
    // The live table and --json's lines for other tools are one or the other.
    let out = run_in(runs.path(), &["top", "-c", "1", "--json"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--json"), "{}", out.stderr);
}

/// Waits up to `ms` for `master` to have something and reads it into `text`: `Some(true)` when
/// something was read, `Some(false)` when nothing came, `None` when the terminal is closed.
fn read_once(master: &mut std::fs::File, text: &mut String, ms: i32) -> Option<bool> {
    use std::os::fd::AsRawFd;
    let mut buf = [0u8; 65536];
    let mut p = libc::pollfd {
        fd: master.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    if unsafe { libc::poll(&mut p, 1, ms) } <= 0 {
        return Some(false);
    }
    match master.read(&mut buf) {
        Ok(n) if n > 0 => {
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
            Some(true)
        }
        _ => None,
    }
}

/// Waits up to `bound` for `child` to end, reading (and returning) what it writes to the
/// terminal meanwhile, so that its output never blocks; kills it and fails past the bound.
fn wait_reading(
    master: Option<&mut std::fs::File>,
    child: &mut Child,
    bound: Duration,
    what: &str,
) -> (std::process::ExitStatus, String) {
    let mut text = String::new();
    let end = Instant::now() + bound;
    let mut master = master;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            // What it wrote just before it ended may still wait in the terminal: read it all.
            if let Some(m) = master {
                while read_once(m, &mut text, 200) == Some(true) {}
            }
            return (status, text);
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} {what}: {text}", common::hang_guard("top's end", bound));
        }
        match master.as_deref_mut() {
            Some(m) => {
                if read_once(m, &mut text, 20).is_none() {
                    master = None;
                }
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Regression: `top` started without a usable terminal kept measuring, deaf to SIGTERM. With
/// its input not a terminal (its output one) it refuses at once, measuring nothing.
#[test]
fn top_with_its_input_not_a_terminal_refuses_at_once() {
    let runs = tempfile::tempdir().unwrap();
    // A terminal for the output only.
    let (mut master, mut child) =
        in_a_terminal_with_stdin(runs.path(), &["top", "-c", "1"], Stdio::null());
    let (status, text) = wait_reading(
        Some(&mut master),
        &mut child,
        common::WAIT_GUARD,
        "with its input /dev/null",
    );
    assert_eq!(status.code(), Some(2), "{text}");
    assert!(text.contains("needs a terminal"), "{text}");
    let listed = runs_json(runs.path());
    assert!(listed["runs"].as_array().unwrap().is_empty(), "{listed}");
}

/// `top` in a pseudo-terminal ends, with exit 0 and its segment kept and catalogued, on
/// SIGTERM, on SIGHUP, and when its terminal goes away (the master side closed: a terminal
/// window closed); each within a few seconds, the test failing rather than hanging if not.
#[test]
fn top_ends_on_sigterm_on_sighup_and_when_its_terminal_goes_away() {
    let _machine = lock();
    for end in ["SIGTERM", "SIGHUP", "closed"] {
        let runs = tempfile::tempdir().unwrap();
        let (mut master, mut child) = in_a_terminal(runs.path(), &["top", "-c", "1"]);
        let screen = read_until(&mut master, |s| s.contains("RELEASES"));
        assert!(screen.contains("RELEASES"), "{end}: no table: {screen}");
        let (status, tail) = match end {
            "closed" => {
                drop(master);
                wait_reading(None, &mut child, common::WAIT_GUARD, end)
            }
            _ => {
                let sig = if end == "SIGTERM" {
                    sandglass_sys::signal::SIGTERM
                } else {
                    sandglass_sys::signal::SIGHUP
                };
                sandglass_sys::signal::send_to_process(child.id() as i32, sig).unwrap();
                let got = wait_reading(Some(&mut master), &mut child, common::WAIT_GUARD, end);
                // The alternate screen was left.
                assert!(got.1.contains("\x1b[?1049l"), "{end}: {:?}", got.1);
                got
            }
        };
        assert_eq!(status.code(), Some(0), "{end}: {tail}");
        let listed = runs_json(runs.path());
        let rows = listed["runs"].as_array().unwrap();
        assert_eq!(rows.len(), 1, "{end}: {listed}");
        assert_eq!(rows[0]["state"], "interrupted", "{end}: {listed}");
        let dir = std::path::PathBuf::from(rows[0]["path"].as_str().unwrap());
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
        let signal = if end == "SIGTERM" {
            "SIGTERM"
        } else {
            "SIGHUP"
        };
        let detail = m["end_detail"].as_str().unwrap_or_default();
        assert!(detail.contains(signal), "{end}: {detail}");
        let report = run_in(runs.path(), &["report", dir.to_str().unwrap()]);
        assert_eq!(report.code, Some(0), "{end}: {}", report.stderr);
    }
}

/// Starts `sandglass ARGS` on a new pseudo-terminal of 80×24 (its stdin, stdout and stderr);
/// returns the master side and the process.
fn in_a_terminal(runs: &std::path::Path, args: &[&str]) -> (std::fs::File, Child) {
    in_a_terminal_with_stdin(runs, args, None)
}

/// [`in_a_terminal`], with `stdin` instead of the terminal when given.
fn in_a_terminal_with_stdin(
    runs: &std::path::Path,
    args: &[&str],
    stdin: impl Into<Option<Stdio>>,
) -> (std::fs::File, Child) {
    use std::os::fd::FromRawFd;
    let (mut m, mut s) = (0, 0);
    let size = libc::winsize {
        ws_row: 24,
        ws_col: 80,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: both pointers are valid for the call; the name and termios may be null.
    let r = unsafe {
        libc::openpty(
            &mut m,
            &mut s,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    assert_eq!(r, 0, "openpty failed");
    // Close-on-exec, so that no process started meanwhile (this one's siblings in other tests)
    // holds the master side: closing it must hang the terminal up.
    for fd in [m, s] {
        // SAFETY: fcntl on a descriptor openpty just returned.
        assert_eq!(
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) },
            0
        );
    }
    // SAFETY: openpty returned two open descriptors that nothing else owns.
    let (master, slave) = unsafe { (std::fs::File::from_raw_fd(m), std::fs::File::from_raw_fd(s)) };
    let child = Command::new(assert_cmd::cargo::cargo_bin("sandglass"))
        .args(args)
        .env("SANDGLASS_RUNS_DIR", runs)
        .env("SANDGLASS_RUNTIME_DIR", runtime_for(runs))
        .env("TERM", "xterm-256color")
        .stdin(
            stdin
                .into()
                .unwrap_or_else(|| slave.try_clone().unwrap().into()),
        )
        .stdout(slave.try_clone().unwrap())
        .stderr(slave)
        .spawn()
        .unwrap();
    (master, child)
}

/// Reads the terminal until `done` holds for what was read, the terminal is closed, or the hang
/// guard expires (the caller's checks of what was read then fail). `top` redraws several times a
/// second, so `done` is asked after every read, not only when the terminal falls quiet.
fn read_until(master: &mut std::fs::File, done: impl Fn(&str) -> bool) -> String {
    let mut text = String::new();
    let end = Instant::now() + common::WAIT_GUARD;
    loop {
        if read_once(master, &mut text, 200).is_none() {
            break;
        }
        if done(&text) || Instant::now() > end {
            break;
        }
    }
    text
}

/// `text` without its ANSI escape sequences (cursor moves become nothing, so words that a
/// redraw placed apart may touch; the tests look for cells, not layout).
fn strip_ansi(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            if chars.peek() == Some(&'[') {
                chars.next();
                // Parameters, then one final byte in @..~.
                for d in chars.by_ref() {
                    if ('@'..='~').contains(&d) {
                        break;
                    }
                }
            }
            // A cursor position often starts a new row.
            out.push('\n');
            continue;
        }
        out.push(c);
    }
    out
}

/// A segment that fails (here a thread that never stops, so the watchdog ends it) ends the
/// monitor with exit code 1, for a service manager to restart it; the segment is kept.
#[test]
fn a_failed_segment_ends_the_monitor_with_exit_code_1() {
    let _machine = share();
    let runs = tempfile::tempdir().unwrap();
    let out = assert_cmd::Command::cargo_bin("sandglass")
        .unwrap()
        .args(["monitor", "-c", "1", "--segment", "1s", "--segments", "3"])
        .env("SANDGLASS_RUNS_DIR", runs.path())
        .env("SANDGLASS_RUNTIME_DIR", runtime_for(runs.path()))
        .env("SANDGLASS_FAULT", "stuck-thread=0")
        .guarded_output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(" watchdog: "), "{stderr}");
    let listed = runs_json(runs.path());
    let rows = listed["runs"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{listed}");
    assert_eq!(rows[0]["state"], "watchdog");
}
