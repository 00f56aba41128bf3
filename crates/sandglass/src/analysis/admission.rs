//! SCHED_DEADLINE admission control, computed as the Linux kernel computes it.
//!
//! `sched_setattr(2)` first validates the parameters (`__checkparam_dl` in
//! kernel/sched/deadline.c) and answers `EINVAL` when
//!
//! * the deadline is zero, or the runtime is below 2^DL_SCALE = 1024 ns;
//! * the deadline or the period has bit 63 set;
//! * runtime ≤ deadline ≤ period does not hold (a zero period means "the deadline");
//! * the period is outside `[sched_deadline_period_min_us, sched_deadline_period_max_us]`
//!   (100 µs and 2^22 µs ≈ 4.19 s by default).
//!
//! It then runs the admission test (`sched_dl_overflow` and `__dl_overflow`) on the task's root
//! domain in fixed point with 20 fractional bits:
//!
//! * a task's bandwidth is `to_ratio(period, runtime) = ⌊runtime·2^20/period⌋`, from the
//!   period, not the deadline;
//! * the root domain's limit per CPU is `to_ratio(sched_rt_period_us·1000,
//!   sched_rt_runtime_us·1000)`, ⌊0.95·2^20⌋ = 996147 with the defaults 950000/1000000, and no
//!   limit at all when `sched_rt_runtime_us` is −1;
//! * with symmetric CPUs, `cap_scale(bw, dl_bw_cpus << 10)` is exactly `bw × cpus`, where cpus
//!   is the number of active CPUs in the root domain (all CPUs unless cpusets or isolcpus split
//!   it);
//! * a new task is refused with `EBUSY` when `bw × cpus < total_bw + new_bw`; otherwise its
//!   bandwidth is added to `total_bw`.
//!
//! Linux 6.12 added a deadline server for the fair class on every CPU (runtime 50 ms every
//! 1 s by default, `/sys/kernel/debug/sched/fair_server/cpuN/`), and accounted its bandwidth,
//! ⌊0.05·2^20⌋ = 52428 per CPU, in the same `total_bw`, so only about 90% of each CPU was left
//! for deadline tasks. The 2025 change "sched/deadline: Remove fair-servers from real-time
//! task's bandwidth accounting" takes it out again. [`AdmissionConfig::fair_server`] models the
//! kernels in between.
//!
//! Every figure is an integer, as in the kernel: sums of floating-point shares can admit a task
//! the kernel refuses, or refuse one it admits. `to_ratio` shifts `runtime` left by 20 bits in a
//! u64; for every parameter set `__checkparam_dl` accepts (runtime ≤ period ≤ 2^22 µs) that
//! cannot overflow, so computing it in 128 bits gives the kernel's value.
//! Asymmetric CPU capacities (big.LITTLE), where the kernel scales by the sum of the CPUs'
//! capacities instead, are not modelled.

use super::taskfile::DeadlineTask;
use crate::units::Nanos;
use serde::Serialize;
use thiserror::Error;

/// Fractional bits of a bandwidth (`BW_SHIFT`).
pub const BW_SHIFT: u32 = 20;
/// A bandwidth of one whole CPU (`BW_UNIT`).
pub const BW_UNIT: u64 = 1 << BW_SHIFT;
/// The least runtime the kernel accepts is 2^DL_SCALE ns.
pub const DL_SCALE: u32 = 10;

/// `to_ratio(period, runtime)` of kernel/sched/core.c: ⌊runtime·2^20/period⌋, 0 for a zero
/// period.
pub fn to_ratio(period_ns: u64, runtime_ns: u64) -> u64 {
    if period_ns == 0 {
        return 0;
    }
    let r = (u128::from(runtime_ns) << BW_SHIFT) / u128::from(period_ns);
    u64::try_from(r).unwrap_or(u64::MAX)
}

/// A per-CPU deadline server reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct FairServer {
    /// The server's runtime.
    pub runtime_ns: Nanos,
    /// The server's period.
    pub period_ns: Nanos,
}

impl FairServer {
    /// The kernel's default: 50 ms every second.
    pub const DEFAULT: FairServer = FairServer {
        runtime_ns: Nanos::from_millis(50),
        period_ns: Nanos::from_secs(1),
    };
}

/// The machine and sysctl settings the admission test depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct AdmissionConfig {
    /// Active CPUs in the root domain.
    pub cpus: u32,
    /// `kernel.sched_rt_runtime_us`; −1 disables the limit.
    pub rt_runtime_us: i64,
    /// `kernel.sched_rt_period_us`.
    pub rt_period_us: u64,
    /// A fair server on every CPU whose bandwidth counts against the limit (Linux 6.12 until
    /// the 2025 accounting change).
    pub fair_server: Option<FairServer>,
    /// `kernel.sched_deadline_period_min_us`.
    pub period_min_us: u64,
    /// `kernel.sched_deadline_period_max_us`.
    pub period_max_us: u64,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            cpus: 1,
            rt_runtime_us: 950_000,
            rt_period_us: 1_000_000,
            fair_server: None,
            period_min_us: 100,
            period_max_us: 1 << 22,
        }
    }
}

/// Settings the kernel itself would refuse.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum AdmissionError {
    /// No CPUs.
    #[error("the root domain needs at least one CPU: give --cpus 1 or more")]
    NoCpus,
    /// `sched_rt_period_us` of zero.
    #[error("sched_rt_period_us must be positive (the default is 1000000)")]
    ZeroRtPeriod,
    /// `sched_rt_runtime_us` outside −1..=period.
    #[error("sched_rt_runtime_us {runtime} is invalid: use -1 (no limit) or 0 to sched_rt_period_us ({period})")]
    BadRtRuntime {
        /// The runtime given.
        runtime: i64,
        /// The period given.
        period: u64,
    },
    /// A period range that is empty.
    #[error("sched_deadline_period_min_us ({min}) is above sched_deadline_period_max_us ({max})")]
    BadPeriodRange {
        /// The minimum.
        min: u64,
        /// The maximum.
        max: u64,
    },
}

/// What the kernel answers for one task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Already admitted before the file's requests.
    Existing,
    /// `sched_setattr` succeeds.
    Admitted,
    /// `EBUSY`: not enough bandwidth left.
    Busy,
    /// `EINVAL`: the parameters fail `__checkparam_dl`.
    Invalid,
}

/// The decision for one task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Decision {
    /// The task's name.
    pub name: String,
    /// `sched_runtime`.
    pub runtime_ns: Nanos,
    /// `sched_deadline`.
    pub deadline_ns: Nanos,
    /// `sched_period`.
    pub period_ns: Nanos,
    /// Marked as already admitted.
    pub existing: bool,
    /// `to_ratio(period, runtime)`.
    pub bw: u64,
    /// The task holds its bandwidth (admitted now or before).
    pub admitted: bool,
    /// The kernel's answer.
    pub verdict: Verdict,
    /// For `Invalid`, the check that failed.
    pub reason: Option<String>,
    /// `total_bw` once this task has been decided.
    pub total_bw_after: u64,
}

/// The admission of a whole file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct AdmissionReport {
    /// The settings used.
    pub config: AdmissionConfig,
    /// `dl_b->bw`, the limit per CPU; `None` when `sched_rt_runtime_us` is −1.
    pub bw_per_cpu: Option<u64>,
    /// `bw_per_cpu × cpus`: the most `total_bw` may reach.
    pub limit_bw: Option<u64>,
    /// Bandwidth of the fair servers of all CPUs in `total_bw`.
    pub fair_server_bw: u64,
    /// `total_bw` after every decision.
    pub total_bw: u64,
    /// `limit_bw − total_bw`.
    pub free_bw: Option<u64>,
    /// The existing tasks (and fair servers) already exceed the limit.
    pub overcommitted: bool,
    /// One decision per task, in file order.
    pub tasks: Vec<Decision>,
}

/// Why `__checkparam_dl` refuses `task`, if it does.
pub fn check_params(task: &DeadlineTask, config: &AdmissionConfig) -> Option<String> {
    let (runtime, deadline, period_attr) =
        (task.runtime_ns.0, task.deadline_ns.0, task.period_ns.0);
    if deadline == 0 {
        return Some("the deadline is zero".into());
    }
    if runtime < 1 << DL_SCALE {
        return Some(format!(
            "the runtime ({runtime} ns) is below the kernel's minimum of 1024 ns"
        ));
    }
    if deadline & (1 << 63) != 0 || period_attr & (1 << 63) != 0 {
        return Some("the deadline or the period does not fit in 63 bits".into());
    }
    let period = if period_attr == 0 {
        deadline
    } else {
        period_attr
    };
    if period < deadline {
        return Some(format!(
            "the deadline ({}) is above the period ({})",
            Nanos(deadline),
            Nanos(period)
        ));
    }
    if deadline < runtime {
        return Some(format!(
            "the runtime ({}) is above the deadline ({})",
            Nanos(runtime),
            Nanos(deadline)
        ));
    }
    let min = config.period_min_us.saturating_mul(1000);
    let max = config.period_max_us.saturating_mul(1000);
    if period < min || period > max {
        return Some(format!(
            "the period ({}) is outside sched_deadline_period_min_us..max_us ({} to {})",
            Nanos(period),
            Nanos(min),
            Nanos(max)
        ));
    }
    None
}

/// Decides `tasks` in order as `sched_setattr(2)` would: the `existing` ones first (they hold
/// their bandwidth whatever the limit), then every other task in file order.
pub fn admit(
    tasks: &[DeadlineTask],
    config: &AdmissionConfig,
) -> Result<AdmissionReport, AdmissionError> {
    if config.cpus == 0 {
        return Err(AdmissionError::NoCpus);
    }
    if config.rt_period_us == 0 {
        return Err(AdmissionError::ZeroRtPeriod);
    }
    if config.rt_runtime_us < -1 || config.rt_runtime_us > config.rt_period_us as i64 {
        return Err(AdmissionError::BadRtRuntime {
            runtime: config.rt_runtime_us,
            period: config.rt_period_us,
        });
    }
    if config.period_min_us > config.period_max_us {
        return Err(AdmissionError::BadPeriodRange {
            min: config.period_min_us,
            max: config.period_max_us,
        });
    }
    let cpus = u64::from(config.cpus);
    let bw_per_cpu = u64::try_from(config.rt_runtime_us).ok().map(|rt| {
        to_ratio(
            config.rt_period_us.saturating_mul(1000),
            rt.saturating_mul(1000),
        )
    });
    let limit_bw = bw_per_cpu.map(|bw| bw.saturating_mul(cpus));
    let fair_server_bw = config
        .fair_server
        .map(|f| to_ratio(f.period_ns.0, f.runtime_ns.0).saturating_mul(cpus))
        .unwrap_or(0);
    let mut total = fair_server_bw;
    let mut decisions: Vec<Option<Decision>> = vec![None; tasks.len()];
    let decide = |t: &DeadlineTask, total: &mut u64, pass_existing: bool| -> Decision {
        let bw = to_ratio(
            if t.period_ns.0 == 0 {
                t.deadline_ns.0
            } else {
                t.period_ns.0
            },
            t.runtime_ns.0,
        );
        let reason = check_params(t, config);
        let verdict = if reason.is_some() {
            Verdict::Invalid
        } else if pass_existing {
            Verdict::Existing
        } else {
            match limit_bw {
                Some(limit) if limit < total.saturating_add(bw) => Verdict::Busy,
                _ => Verdict::Admitted,
            }
        };
        let admitted = matches!(verdict, Verdict::Existing | Verdict::Admitted);
        if admitted {
            *total = total.saturating_add(bw);
        }
        Decision {
            name: t.name.clone(),
            runtime_ns: t.runtime_ns,
            deadline_ns: t.deadline_ns,
            period_ns: t.period_ns,
            existing: t.existing,
            bw,
            admitted,
            verdict,
            reason,
            total_bw_after: *total,
        }
    };
    for (i, t) in tasks.iter().enumerate().filter(|(_, t)| t.existing) {
        decisions[i] = Some(decide(t, &mut total, true));
    }
    let overcommitted = limit_bw.is_some_and(|l| total > l);
    for (i, t) in tasks.iter().enumerate().filter(|(_, t)| !t.existing) {
        decisions[i] = Some(decide(t, &mut total, false));
    }
    Ok(AdmissionReport {
        config: *config,
        bw_per_cpu,
        limit_bw,
        fair_server_bw,
        total_bw: total,
        free_bw: limit_bw.map(|l| l.saturating_sub(total)),
        overcommitted,
        tasks: decisions.into_iter().flatten().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dl(name: &str, runtime: Nanos, period: Nanos) -> DeadlineTask {
        DeadlineTask {
            name: name.into(),
            runtime_ns: runtime,
            deadline_ns: period,
            period_ns: period,
            existing: false,
        }
    }

    fn ms(v: u64) -> Nanos {
        Nanos::from_millis(v)
    }

    fn verdicts(r: &AdmissionReport) -> Vec<Verdict> {
        r.tasks.iter().map(|d| d.verdict).collect()
    }

    #[test]
    fn kernel_fixed_point_values_by_hand() {
        // ⌊950000000·1048576/1000000000⌋ = ⌊996147.2⌋.
        assert_eq!(to_ratio(1_000_000_000, 950_000_000), 996_147);
        // ⌊0.3·2^20⌋ = ⌊314572.8⌋, ⌊0.05·2^20⌋ = ⌊52428.8⌋, ⌊1024·2^20/10^8⌋ = ⌊10.7⌋.
        assert_eq!(to_ratio(ms(100).0, ms(30).0), 314_572);
        assert_eq!(to_ratio(ms(100).0, ms(5).0), 52_428);
        assert_eq!(to_ratio(ms(100).0, 1024), 10);
        assert_eq!(to_ratio(0, 5), 0);
        assert_eq!(to_ratio(1, 1), BW_UNIT);
    }

    /// One CPU, default sysctls: limit 996147. Three 30%-tasks take 943716; a fourth would need
    /// 1258288 (EBUSY); a 5% task fits exactly because of the floors (996144 ≤ 996147, whereas
    /// 0.3·3 + 0.05 = 0.95 is right at the limit in real numbers); the next 1024 ns task (bw
    /// 10) does not (996154).
    #[test]
    fn one_cpu_in_order() {
        let tasks = [
            dl("a", ms(30), ms(100)),
            dl("b", ms(30), ms(100)),
            dl("c", ms(30), ms(100)),
            dl("d", ms(30), ms(100)),
            dl("e", ms(5), ms(100)),
            dl("f", Nanos(1024), ms(100)),
        ];
        let r = admit(&tasks, &AdmissionConfig::default()).expect("valid config");
        assert_eq!(r.bw_per_cpu, Some(996_147));
        assert_eq!(r.limit_bw, Some(996_147));
        use Verdict::*;
        assert_eq!(
            verdicts(&r),
            vec![Admitted, Admitted, Admitted, Busy, Admitted, Busy]
        );
        assert_eq!(r.tasks[3].total_bw_after, 943_716);
        assert_eq!(r.total_bw, 996_144);
        assert_eq!(r.free_bw, Some(3));
        assert!(!r.overcommitted);
    }

    /// Four CPUs: the limit is 4 × 996147 = 3984588, so twelve 30%-tasks (3774864) fit and the
    /// thirteenth (4089436) does not. With the 6.12 fair servers, 4 × 52428 = 209712 is taken
    /// first; twelve tasks still fit, with 12 to spare (209712 + 3774864 = 3984576).
    #[test]
    fn cpus_and_fair_server() {
        let tasks: Vec<DeadlineTask> = (0..13)
            .map(|i| dl(&format!("t{i}"), ms(30), ms(100)))
            .collect();
        let config = AdmissionConfig {
            cpus: 4,
            ..AdmissionConfig::default()
        };
        let r = admit(&tasks, &config).expect("valid");
        assert_eq!(r.limit_bw, Some(3_984_588));
        assert_eq!(r.tasks.iter().filter(|d| d.admitted).count(), 12);
        assert_eq!(r.tasks[12].verdict, Verdict::Busy);
        assert_eq!(r.total_bw, 3_774_864);
        let with_server = AdmissionConfig {
            fair_server: Some(FairServer::DEFAULT),
            ..config
        };
        let r = admit(&tasks, &with_server).expect("valid");
        assert_eq!(r.fair_server_bw, 209_712);
        assert_eq!(r.tasks.iter().filter(|d| d.admitted).count(), 12);
        assert_eq!(r.total_bw, 3_984_576);
        // One CPU with the fair server: 52428 + 3 × 314572 = 996144 fits, a 5% task does not.
        let one = [
            dl("a", ms(30), ms(100)),
            dl("b", ms(30), ms(100)),
            dl("c", ms(30), ms(100)),
            dl("e", ms(5), ms(100)),
        ];
        let r = admit(
            &one,
            &AdmissionConfig {
                fair_server: Some(FairServer::DEFAULT),
                ..AdmissionConfig::default()
            },
        )
        .expect("valid");
        use Verdict::*;
        assert_eq!(verdicts(&r), vec![Admitted, Admitted, Admitted, Busy]);
    }

    #[test]
    fn existing_tasks_are_counted_first() {
        let mut tasks = vec![dl("new", ms(50), ms(100)), dl("old", ms(50), ms(100))];
        tasks[1].existing = true;
        let r = admit(&tasks, &AdmissionConfig::default()).expect("valid");
        // old (524288) is in place before new is decided: 1048576 > 996147.
        assert_eq!(r.tasks[1].verdict, Verdict::Existing);
        assert_eq!(r.tasks[0].verdict, Verdict::Busy);
        assert_eq!(r.tasks[1].total_bw_after, 524_288);
        // Existing tasks beyond the limit are reported, not refused.
        let over = vec![
            DeadlineTask {
                existing: true,
                ..dl("x", ms(60), ms(100))
            },
            DeadlineTask {
                existing: true,
                ..dl("y", ms(60), ms(100))
            },
        ];
        let r = admit(&over, &AdmissionConfig::default()).expect("valid");
        assert!(r.overcommitted);
        assert_eq!(r.free_bw, Some(0));
    }

    #[test]
    fn unlimited_when_rt_runtime_is_minus_one() {
        let tasks = [dl("a", ms(90), ms(100)), dl("b", ms(90), ms(100))];
        let r = admit(
            &tasks,
            &AdmissionConfig {
                rt_runtime_us: -1,
                ..AdmissionConfig::default()
            },
        )
        .expect("valid");
        assert_eq!((r.bw_per_cpu, r.limit_bw, r.free_bw), (None, None, None));
        assert!(r.tasks.iter().all(|d| d.admitted));
    }

    #[test]
    fn invalid_parameters_are_einval() {
        let cfg = AdmissionConfig::default();
        let mut t = dl("x", Nanos(1000), ms(1));
        assert!(check_params(&t, &cfg).is_some_and(|m| m.contains("1024")));
        t.runtime_ns = ms(2);
        assert!(check_params(&t, &cfg).is_some_and(|m| m.contains("above the deadline")));
        let t = DeadlineTask {
            deadline_ns: ms(20),
            ..dl("y", ms(1), ms(10))
        };
        assert!(check_params(&t, &cfg).is_some_and(|m| m.contains("above the period")));
        let t = dl("z", Nanos(2000), Nanos(50_000));
        assert!(check_params(&t, &cfg).is_some_and(|m| m.contains("outside")));
        let t = dl("w", ms(1), Nanos::from_secs(5));
        assert!(check_params(&t, &cfg).is_some());
        // Exactly at the limits is accepted: 100 µs and 4194304 µs.
        assert_eq!(
            check_params(&dl("lo", Nanos(1024), Nanos(100_000)), &cfg),
            None
        );
        assert_eq!(
            check_params(&dl("hi", ms(1), Nanos(4_194_304_000)), &cfg),
            None
        );
        let r = admit(&[dl("x", Nanos(1000), ms(1))], &cfg).expect("valid");
        assert_eq!(r.tasks[0].verdict, Verdict::Invalid);
        assert!(!r.tasks[0].admitted);
        assert_eq!(r.total_bw, 0);
    }

    #[test]
    fn bad_settings() {
        let d = AdmissionConfig::default();
        assert_eq!(
            admit(&[], &AdmissionConfig { cpus: 0, ..d }),
            Err(AdmissionError::NoCpus)
        );
        assert!(matches!(
            admit(
                &[],
                &AdmissionConfig {
                    rt_runtime_us: 2_000_000,
                    ..d
                }
            ),
            Err(AdmissionError::BadRtRuntime { .. })
        ));
        assert_eq!(
            admit(
                &[],
                &AdmissionConfig {
                    rt_period_us: 0,
                    ..d
                }
            ),
            Err(AdmissionError::ZeroRtPeriod)
        );
    }
}
