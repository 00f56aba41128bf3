//! `sandglass top` (`monitor --top`): a per-CPU table of the live figures, redrawn every
//! second in the terminal's alternate screen, as `rtla timerlat top` does: the latest
//! release's lateness, the minimum, mean and maximum since the start, the p99 of the last
//! 10 s (from the live buckets, within 9.05 %), releases and missed releases. `q`, Esc or
//! Ctrl-C end the monitor as SIGINT would, SIGTERM and SIGHUP as they end any monitor, and a
//! terminal that goes away (its window closed) as SIGHUP: the segment under way is kept and the
//! terminal restored (raw mode and the alternate screen left) on every path.

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::terminal::{self, EnterAlternateScreen, LeaveAlternateScreen};
use ratatui::crossterm::{cursor, execute};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};
use ratatui::Terminal;
use sandglass::live::{CpuSnapshot, Live};
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How far back the p99 column looks.
const WINDOW: Duration = Duration::from_secs(10);

/// A duration in at most 8 characters: `850 ns`, `54.4 µs`, `1.25 ms`, `1.20 s`.
pub fn short(ns: f64) -> String {
    if !ns.is_finite() {
        return "-".into();
    }
    let (v, unit) = if ns.abs() < 1e3 {
        return format!("{ns:.0} ns");
    } else if ns.abs() < 1e6 {
        (ns / 1e3, "µs")
    } else if ns.abs() < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    if v.abs() < 10.0 {
        format!("{v:.2} {unit}")
    } else if v.abs() < 100.0 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.0} {unit}")
    }
}

/// The table's rows: one per measured CPU.
pub fn rows(now: &[CpuSnapshot], before: Option<&[CpuSnapshot]>) -> Vec<[String; 8]> {
    now.iter()
        .map(|c| {
            let earlier = before.and_then(|b| b.iter().find(|e| e.cpu == c.cpu));
            let seen = c.releases > 0;
            let ns = |v: i64| if seen { short(v as f64) } else { "-".into() };
            [
                c.cpu.to_string(),
                ns(c.current_ns),
                ns(c.min_ns),
                c.mean_ns().map_or("-".into(), short),
                ns(c.max_ns),
                c.quantile_since(earlier, 0.99).map_or("-".into(), short),
                c.releases.to_string(),
                c.missed.to_string(),
            ]
        })
        .collect()
}

/// The terminal in raw mode and on its alternate screen, restored when dropped (whatever ends
/// the display: a quit, a signal, a terminal that went away, a panic), with every error of
/// the restoration ignored: a terminal that hung up cannot be restored, and must not make the
/// restoration fail.
struct Screen {
    terminal: Terminal<CrosstermBackend<io::Stdout>>,
}

impl Screen {
    fn enter() -> io::Result<Screen> {
        terminal::enable_raw_mode()?;
        let mut out = io::stdout();
        let entered = execute!(out, EnterAlternateScreen)
            .and_then(|_| Terminal::new(CrosstermBackend::new(io::stdout())));
        match entered {
            Ok(terminal) => Ok(Screen { terminal }),
            Err(e) => {
                let _ = execute!(out, LeaveAlternateScreen, cursor::Show);
                let _ = terminal::disable_raw_mode();
                Err(e)
            }
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = execute!(
            self.terminal.backend_mut(),
            LeaveAlternateScreen,
            cursor::Show
        );
        let _ = terminal::disable_raw_mode();
    }
}

/// What the keys read from the terminal ask for: `q`, `Q`, Esc alone, or Ctrl-C (a byte 3 in
/// raw mode) quit.
fn quits(keys: &[u8]) -> bool {
    keys == [0x1b] || keys.iter().any(|&b| matches!(b, b'q' | b'Q' | 0x03))
}

/// Ends the monitor as a hang-up: the terminal went away (or never was usable), so nothing can
/// be shown; the main thread ends the segment under way as SIGHUP does.
fn hang_up() {
    use sandglass_sys::signal;
    let _ = signal::send_to_process(std::process::id() as i32, signal::SIGHUP);
}

/// Runs the display until `stop` is set; a key that quits sends SIGINT to the process, a
/// terminal that went away SIGHUP. The caller blocks the signals that end a run before it
/// creates this thread, so that they reach only the main thread, which ends the measurement.
/// Input is read from standard input after `poll(2)` says it is there, so that a terminal
/// that hung up is seen at once (`POLLHUP`, `EIO`, end of file) and never read in a loop.
pub fn run(live: Arc<Live>, stop: Arc<AtomicBool>, title: String) {
    use sandglass_sys::{signal, tty};
    const STDIN: i32 = 0;
    let Ok(mut screen) = Screen::enter() else {
        hang_up();
        return;
    };
    let started = Instant::now();
    let mut history: VecDeque<(Instant, Vec<CpuSnapshot>)> = VecDeque::new();
    let mut next_draw = Instant::now();
    let mut keys = [0u8; 64];
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= next_draw {
            let snap = live.snapshot();
            while history
                .front()
                .is_some_and(|(t, _)| now.duration_since(*t) > WINDOW)
            {
                history.pop_front();
            }
            let before = history.front().map(|(_, s)| s.as_slice());
            let table = rows(&snap, before);
            let seg = live.segment();
            let elapsed = now.duration_since(started).as_secs();
            let drawn = screen.terminal.draw(|f| {
                draw(f, &title, elapsed, table, seg.duty, seg.completed);
            });
            if drawn.is_err() {
                hang_up();
                break;
            }
            history.push_back((now, snap));
            next_draw = now + Duration::from_secs(1);
        }
        let wait = next_draw
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(100));
        match tty::wait_input(STDIN, wait.as_millis() as i32) {
            tty::Input::Nothing => {}
            tty::Input::HungUp => {
                hang_up();
                break;
            }
            tty::Input::Ready => match tty::read(STDIN, &mut keys) {
                Ok(0) => {
                    hang_up();
                    break;
                }
                Ok(n) => {
                    if quits(&keys[..n]) {
                        let _ = signal::send_to_process(std::process::id() as i32, signal::SIGINT);
                    }
                }
                Err(e) if e == sandglass_sys::Errno::EINTR || e == sandglass_sys::Errno::EAGAIN => {
                }
                Err(_) => {
                    hang_up();
                    break;
                }
            },
        }
    }
    drop(screen);
}

/// One frame: the title with the time since the start, the table, the footer.
fn draw(
    f: &mut ratatui::Frame<'_>,
    title: &str,
    elapsed: u64,
    table: Vec<[String; 8]>,
    duty: f64,
    completed: u64,
) {
    let [head, body, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(f.area());
    f.render_widget(
        Paragraph::new(Line::from(format!(
            "{title}  {:02}:{:02}:{:02}",
            elapsed / 3600,
            elapsed / 60 % 60,
            elapsed % 60
        ))),
        head,
    );
    let header = Row::new([
        "CPU", "CUR", "MIN", "AVG", "MAX", "P99 10s", "RELEASES", "MISSED",
    ])
    .style(Style::default().add_modifier(Modifier::BOLD));
    let widths = [
        Constraint::Length(4),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(10),
        Constraint::Length(8),
    ];
    f.render_widget(
        Table::new(table.into_iter().map(Row::new), widths)
            .header(header)
            .block(Block::bordered()),
        body,
    );
    f.render_widget(
        Paragraph::new(Line::from(format!(
            "duty {:.0}%  segments {completed}  q: quit (the segment is kept)",
            duty * 100.0,
        ))),
        foot,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_durations_fit_eight_columns() {
        assert_eq!(short(850.0), "850 ns");
        assert_eq!(short(54_398.0), "54.4 µs");
        assert_eq!(short(1_245_000.0), "1.25 ms");
        assert_eq!(short(123_400_000.0), "123 ms");
        assert_eq!(short(1_200_000_000.0), "1.20 s");
        for v in [1.0, 999.0, 9_999.0, 99_999.0, 999_999.0, 9e8, 5e10] {
            assert!(short(v).chars().count() <= 8, "{}", short(v));
        }
    }

    #[test]
    fn one_row_per_cpu_with_the_last_window_p99() {
        let live = Live::new(&[1, 3]);
        let c = live.cpu(1).expect("cpu 1");
        for _ in 0..100 {
            c.release(5_000, false);
        }
        let before = live.snapshot();
        for _ in 0..100 {
            c.release(500_000, true);
        }
        let r = rows(&live.snapshot(), Some(&before));
        assert_eq!(r.len(), 2);
        assert_eq!(r[0][0], "1");
        assert_eq!(r[0][2], "5.00 µs");
        assert_eq!(r[0][4], "500 µs");
        assert_eq!((r[0][6].as_str(), r[0][7].as_str()), ("200", "100"));
        assert!(r[0][5].ends_with("µs"), "{}", r[0][5]);
        assert_eq!(r[1][1], "-");
    }
}
