//! A snapshot of the machine a run was taken on: what a reader of the result needs to judge it
//! (kernel and preemption model, tick rate, CPU, counter, clocksource, SMT, frequency governor,
//! idle driver, RT throttling, virtualisation, isolated CPUs, privileges).
//!
//! Every reader is split into a pure parser of the file's text, tested on fixtures, and a thin
//! function that reads the file; a missing file is recorded as unknown, never as an error.

#[cfg(feature = "linux")]
use crate::cpulist::CpuList;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
#[cfg(feature = "linux")]
use std::io::Read;
#[cfg(feature = "linux")]
use std::path::Path;

#[cfg(feature = "linux")]
fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The kernel's preemption model and where sandglass learned it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Preemption {
    /// `none`, `voluntary`, `full`, `lazy`, `rt` or `unknown`.
    pub model: String,
    /// The kernel can switch models at boot or run time (CONFIG_PREEMPT_DYNAMIC).
    pub dynamic: bool,
    /// `debugfs`, `cmdline`, `config`, `uname` or `unknown`.
    pub source: String,
}

/// Privileges relevant to measurement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Privileges {
    pub euid: u32,
    /// CAP_SYS_NICE: real-time and deadline policies, negative nice.
    pub cap_sys_nice: bool,
    /// CAP_IPC_LOCK: mlockall without a limit.
    pub cap_ipc_lock: bool,
    /// RLIMIT_RTPRIO soft limit (`None` = unlimited).
    pub rlimit_rtprio: Option<u64>,
    /// RLIMIT_MEMLOCK soft limit in bytes (`None` = unlimited).
    pub rlimit_memlock_bytes: Option<u64>,
}

/// The machine, as far as timing is concerned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SystemSnapshot {
    pub hostname: String,
    pub kernel_release: String,
    pub kernel_version: String,
    pub machine: String,
    pub preemption: Preemption,
    /// CONFIG_HZ, when the kernel configuration is readable.
    pub hz: Option<u32>,
    pub cpu_model: String,
    pub cpus_online: String,
    /// The CPUs this process may use.
    pub cpus_allowed: String,
    pub isolated_cpus: String,
    pub nohz_full: String,
    pub smt_active: Option<bool>,
    pub clocksource: String,
    pub cpuidle_driver: Option<String>,
    /// Governor name → the CPUs using it; empty when there is no cpufreq.
    pub cpufreq_governors: BTreeMap<String, String>,
    /// `sched_rt_runtime_us` (−1 means RT throttling is disabled) and `sched_rt_period_us`.
    pub rt_runtime_us: Option<i64>,
    pub rt_period_us: Option<i64>,
    /// The hypervisor, when the kernel runs under one.
    pub virtualization: Option<String>,
    /// The counter-related CPU flags present (`constant_tsc`, `nonstop_tsc`, `rdtscp`, ...).
    pub cpu_flags: Vec<String>,
    pub cmdline: String,
    pub privileges: Privileges,
}

/// The CPU flags of the first processor in `/proc/cpuinfo` text (x86 `flags`, Arm `Features`).
pub fn parse_cpu_flags(cpuinfo: &str) -> Vec<String> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("flags") || l.starts_with("Features"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.split_whitespace().map(String::from).collect())
        .unwrap_or_default()
}

/// The CPU model name in `/proc/cpuinfo` text.
pub fn parse_cpu_model(cpuinfo: &str) -> String {
    for key in ["model name", "Model", "CPU part", "cpu model"] {
        if let Some(v) = cpuinfo
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_once(':'))
        {
            return v.1.trim().to_string();
        }
    }
    "unknown".to_string()
}

/// The current mode in `/sys/kernel/debug/sched/preempt`, which lists the modes with the
/// active one in parentheses: `none voluntary (full) lazy`.
pub fn parse_debugfs_preempt(text: &str) -> Option<String> {
    let start = text.find('(')?;
    let end = text[start..].find(')')? + start;
    Some(text[start + 1..end].to_string())
}

/// The `preempt=` boot parameter, if given.
pub fn parse_cmdline_preempt(cmdline: &str) -> Option<String> {
    cmdline
        .split_whitespace()
        .find_map(|w| w.strip_prefix("preempt="))
        .map(String::from)
}

/// The configured preemption model and `CONFIG_HZ` from kernel configuration text.
pub fn parse_config(config: &str) -> (Option<String>, bool, Option<u32>) {
    let set = |k: &str| config.lines().any(|l| l.trim() == format!("{k}=y"));
    let model = if set("CONFIG_PREEMPT_RT") {
        Some("rt")
    } else if set("CONFIG_PREEMPT_NONE") {
        Some("none")
    } else if set("CONFIG_PREEMPT_VOLUNTARY") {
        Some("voluntary")
    } else if set("CONFIG_PREEMPT_LAZY") {
        Some("lazy")
    } else if set("CONFIG_PREEMPT") {
        Some("full")
    } else {
        None
    };
    let hz = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("CONFIG_HZ="))
        .and_then(|v| v.parse().ok());
    (model.map(String::from), set("CONFIG_PREEMPT_DYNAMIC"), hz)
}

/// The preemption model from what is readable, most authoritative first.
pub fn preemption_from(
    debugfs: Option<&str>,
    cmdline: &str,
    config: Option<&str>,
    uname_version: &str,
) -> Preemption {
    let (cfg_model, dynamic, _) = config.map(parse_config).unwrap_or((None, false, None));
    let dynamic = dynamic || uname_version.contains("PREEMPT_DYNAMIC");
    if uname_version.contains("PREEMPT_RT") {
        return Preemption {
            model: "rt".into(),
            dynamic,
            source: "uname".into(),
        };
    }
    if let Some(m) = debugfs.and_then(parse_debugfs_preempt) {
        return Preemption {
            model: m,
            dynamic,
            source: "debugfs".into(),
        };
    }
    if dynamic {
        if let Some(m) = parse_cmdline_preempt(cmdline) {
            return Preemption {
                model: m,
                dynamic,
                source: "cmdline".into(),
            };
        }
    }
    if let Some(m) = cfg_model {
        return Preemption {
            model: m,
            dynamic,
            source: "config".into(),
        };
    }
    let model = if uname_version.contains("PREEMPT ") || uname_version.ends_with("PREEMPT") {
        "full"
    } else {
        "unknown"
    };
    Preemption {
        model: model.into(),
        dynamic,
        source: if model == "unknown" {
            "unknown"
        } else {
            "uname"
        }
        .into(),
    }
}

/// Whether capability `bit` is in the effective set of `/proc/self/status` text.
pub fn parse_cap_eff(status: &str, bit: u32) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1u64 << bit) != 0)
}

/// CAP_IPC_LOCK.
pub const CAP_IPC_LOCK: u32 = 14;
/// CAP_SYS_NICE.
pub const CAP_SYS_NICE: u32 = 23;

/// The privileges of this process.
#[cfg(feature = "linux")]
pub fn privileges() -> Privileges {
    use sandglass_sys::process::{rlimit, Resource};
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    Privileges {
        euid: sandglass_sys::process::euid(),
        cap_sys_nice: parse_cap_eff(&status, CAP_SYS_NICE),
        cap_ipc_lock: parse_cap_eff(&status, CAP_IPC_LOCK),
        rlimit_rtprio: rlimit(Resource::RtPrio).ok().and_then(|l| l.soft),
        rlimit_memlock_bytes: rlimit(Resource::MemLock).ok().and_then(|l| l.soft),
    }
}

#[cfg(feature = "linux")]
fn kernel_config() -> Option<String> {
    let gz = std::fs::File::open("/proc/config.gz").ok()?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

#[cfg(feature = "linux")]
fn kernel_config_any(release: &str) -> Option<String> {
    kernel_config().or_else(|| std::fs::read_to_string(format!("/boot/config-{release}")).ok())
}

/// CPUs this process may run on.
#[cfg(feature = "linux")]
pub fn allowed_cpus() -> Vec<usize> {
    sandglass_sys::sched::get_affinity(sandglass_sys::Tid::SELF).unwrap_or_else(|_| vec![0])
}

/// CPUs online, from `/sys/devices/system/cpu/online`.
#[cfg(feature = "linux")]
pub fn online_cpus() -> Option<CpuList> {
    read("/sys/devices/system/cpu/online").and_then(|s| CpuList::parse(&s).ok())
}

/// The SMT siblings of `cpu` (itself included).
#[cfg(feature = "linux")]
pub fn smt_siblings(cpu: usize) -> Option<CpuList> {
    read(&format!(
        "/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
    ))
    .and_then(|s| CpuList::parse(&s).ok())
}

/// `sched_rt_runtime_us`, or `None` when unreadable.
#[cfg(feature = "linux")]
pub fn rt_runtime_us() -> Option<i64> {
    read("/proc/sys/kernel/sched_rt_runtime_us").and_then(|s| s.parse().ok())
}

/// `sched_rt_period_us`, or `None` when unreadable.
#[cfg(feature = "linux")]
pub fn rt_period_us() -> Option<i64> {
    read("/proc/sys/kernel/sched_rt_period_us").and_then(|s| s.parse().ok())
}

#[cfg(feature = "linux")]
fn governors(online: &[usize]) -> BTreeMap<String, String> {
    let mut by: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for &c in online {
        if let Some(g) = read(&format!(
            "/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor"
        )) {
            by.entry(g).or_default().push(c);
        }
    }
    by.into_iter()
        .filter_map(|(g, cpus)| CpuList::from_cpus(cpus).map(|l| (g, l.to_string())))
        .collect()
}

#[cfg(feature = "linux")]
fn virtualization(flags: &[String]) -> Option<String> {
    if let Some(v) = sandglass_sys::counter::hypervisor_vendor() {
        let name = match v.as_str() {
            "KVMKVMKVM" => "KVM",
            "Microsoft Hv" => "Hyper-V",
            "VMwareVMware" => "VMware",
            "XenVMMXenVMM" => "Xen",
            "TCGTCGTCGTCG" => "QEMU (TCG)",
            " lrpepyh  vr" | "prl hyperv" => "Parallels",
            "ACRNACRNACRN" => "ACRN",
            other => other,
        };
        return Some(name.to_string());
    }
    if let Some(t) = read("/sys/hypervisor/type") {
        return Some(t);
    }
    flags
        .iter()
        .any(|f| f == "hypervisor")
        .then(|| "unknown hypervisor".to_string())
}

/// Takes the snapshot.
#[cfg(feature = "linux")]
pub fn snapshot() -> SystemSnapshot {
    let u = sandglass_sys::process::uname().ok();
    let release = u.as_ref().map(|u| u.release.clone()).unwrap_or_default();
    let version = u.as_ref().map(|u| u.version.clone()).unwrap_or_default();
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = parse_cpu_flags(&cpuinfo);
    let cmdline = read("/proc/cmdline").unwrap_or_default();
    let config = kernel_config_any(&release);
    let debugfs = read("/sys/kernel/debug/sched/preempt");
    let preemption = preemption_from(debugfs.as_deref(), &cmdline, config.as_deref(), &version);
    let hz = config.as_deref().and_then(|c| parse_config(c).2);
    let online = online_cpus();
    let online_vec = online.as_ref().map(|l| l.to_vec()).unwrap_or_default();
    let interesting = [
        "tsc",
        "constant_tsc",
        "nonstop_tsc",
        "rdtscp",
        "tsc_known_freq",
        "tsc_reliable",
        "hypervisor",
        "ht",
    ];
    SystemSnapshot {
        hostname: u.as_ref().map(|u| u.nodename.clone()).unwrap_or_default(),
        kernel_release: release,
        kernel_version: version,
        machine: u.map(|u| u.machine).unwrap_or_default(),
        preemption,
        hz,
        cpu_model: parse_cpu_model(&cpuinfo),
        cpus_online: online.map(|l| l.to_string()).unwrap_or_default(),
        cpus_allowed: CpuList::from_cpus(allowed_cpus())
            .map(|l| l.to_string())
            .unwrap_or_default(),
        isolated_cpus: read("/sys/devices/system/cpu/isolated").unwrap_or_default(),
        nohz_full: read("/sys/devices/system/cpu/nohz_full").unwrap_or_default(),
        smt_active: read("/sys/devices/system/cpu/smt/active").map(|s| s == "1"),
        clocksource: read("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_else(|| "unknown".into()),
        cpuidle_driver: read("/sys/devices/system/cpu/cpuidle/current_driver"),
        cpufreq_governors: governors(&online_vec),
        rt_runtime_us: rt_runtime_us(),
        rt_period_us: read("/proc/sys/kernel/sched_rt_period_us").and_then(|s| s.parse().ok()),
        virtualization: virtualization(&flags),
        cpu_flags: flags
            .iter()
            .filter(|f| interesting.contains(&f.as_str()))
            .cloned()
            .collect(),
        cmdline,
        privileges: privileges(),
    }
}

/// Per-CPU time counters of `/proc/stat`, in clock ticks (USER_HZ).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// All time: user, nice, system, idle, iowait, irq, softirq, steal.
    pub total: u64,
    /// Idle and iowait.
    pub idle: u64,
}

impl CpuTimes {
    /// The share of `later - self` that the CPU was busy.
    pub fn busy_share(&self, later: &CpuTimes) -> Option<f64> {
        let total = later.total.checked_sub(self.total)?;
        let idle = later.idle.checked_sub(self.idle)?;
        (total > 0).then(|| (total.saturating_sub(idle)) as f64 / total as f64)
    }
}

/// The counters of CPU `cpu` in `/proc/stat` text.
pub fn parse_cpu_times(stat: &str, cpu: usize) -> Option<CpuTimes> {
    let prefix = format!("cpu{cpu} ");
    let line = stat.lines().find(|l| l.starts_with(&prefix))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 5 {
        return None;
    }
    Some(CpuTimes {
        total: v.iter().sum(),
        idle: v[3] + v[4],
    })
}

/// The current counters of CPU `cpu`.
#[cfg(feature = "linux")]
pub fn cpu_times(cpu: usize) -> Option<CpuTimes> {
    parse_cpu_times(&std::fs::read_to_string("/proc/stat").ok()?, cpu)
}

/// True when `path` exists (used for device checks such as `/dev/rtc`).
#[cfg(feature = "linux")]
pub fn exists(path: &str) -> bool {
    Path::new(path).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUINFO: &str = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\nflags\t\t: fpu tsc constant_tsc nonstop_tsc rdtscp hypervisor\n\nprocessor\t: 1\n";

    #[test]
    fn cpuinfo_fixtures() {
        let f = parse_cpu_flags(CPUINFO);
        assert!(f.contains(&"nonstop_tsc".to_string()));
        assert_eq!(parse_cpu_model(CPUINFO), "AMD EPYC");
        let arm = "processor\t: 0\nFeatures\t: fp asimd evtstrm\nCPU part\t: 0xd0c\n";
        assert_eq!(parse_cpu_flags(arm), vec!["fp", "asimd", "evtstrm"]);
        assert_eq!(parse_cpu_model(arm), "0xd0c");
        assert_eq!(parse_cpu_model(""), "unknown");
    }

    #[test]
    fn preemption_sources_in_order() {
        let cfg = "CONFIG_PREEMPT_NONE=y\n# CONFIG_PREEMPT is not set\nCONFIG_PREEMPT_DYNAMIC=y\nCONFIG_HZ=250\n";
        assert_eq!(parse_config(cfg), (Some("none".into()), true, Some(250)));
        let v = "#1 SMP PREEMPT_DYNAMIC @0";
        let p = preemption_from(None, "quiet", Some(cfg), v);
        assert_eq!(
            (p.model.as_str(), p.dynamic, p.source.as_str()),
            ("none", true, "config")
        );
        let p = preemption_from(None, "quiet preempt=full", Some(cfg), v);
        assert_eq!((p.model.as_str(), p.source.as_str()), ("full", "cmdline"));
        let p = preemption_from(Some("none voluntary (full) lazy"), "", Some(cfg), v);
        assert_eq!((p.model.as_str(), p.source.as_str()), ("full", "debugfs"));
        let p = preemption_from(None, "", None, "#1 SMP PREEMPT_RT Tue");
        assert_eq!(p.model, "rt");
        let p = preemption_from(None, "", None, "#1 SMP");
        assert_eq!(p.model, "unknown");
        assert_eq!(
            parse_debugfs_preempt("none (voluntary) full"),
            Some("voluntary".into())
        );
    }

    #[test]
    fn cpu_times_from_proc_stat() {
        let a = "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 5 0 5 40 0 0 0 0 0 0\ncpu1 100 0 50 1000 10 0 0 0 0 0\n";
        let b = "cpu1 160 0 90 1090 20 0 0 0 0 0\n";
        let t0 = parse_cpu_times(a, 1).expect("cpu1");
        assert_eq!(
            t0,
            CpuTimes {
                total: 1160,
                idle: 1010
            }
        );
        let t1 = parse_cpu_times(b, 1).expect("cpu1");
        // 200 ticks passed, 100 of them busy.
        assert_eq!(t0.busy_share(&t1), Some(0.5));
        assert_eq!(parse_cpu_times(a, 7), None);
        assert_eq!(t1.busy_share(&t0), None);
    }

    #[test]
    fn capability_bits() {
        let status = "Name:\tx\nCapEff:\t000001fffeffffff\n";
        assert!(parse_cap_eff(status, CAP_SYS_NICE));
        assert!(parse_cap_eff(status, CAP_IPC_LOCK));
        assert!(!parse_cap_eff(status, 24));
        assert!(!parse_cap_eff("CapEff:\t0000000000000000\n", CAP_SYS_NICE));
        assert!(!parse_cap_eff("", CAP_SYS_NICE));
    }

    #[test]
    fn snapshot_of_this_machine_is_plausible() {
        let s = snapshot();
        assert!(!s.kernel_release.is_empty());
        assert!(!s.cpus_online.is_empty());
        assert!(!s.cpus_allowed.is_empty());
        let json = serde_json::to_string(&s).expect("serialises");
        let back: SystemSnapshot = serde_json::from_str(&json).expect("deserialises");
        assert_eq!(back, s);
    }
}
