//! The CPU's free-running cycle counter: the x86_64 time-stamp counter (TSC) or the aarch64
//! virtual counter (CNTVCT_EL0).
//!
//! Hourglass (Regehr 2002, §3.1) polls `rdtsc` in a tight loop and treats any difference between
//! successive reads above a threshold as a gap in the thread's execution. Reading the counter must
//! therefore be cheap and must not be reordered with the loop around it:
//!
//! * [`read`] is `lfence; rdtsc` on x86_64. `rdtsc` is not an ordering instruction: without the
//!   fence the CPU may execute it before earlier instructions retire, so two reads can be taken
//!   "early" and a real interruption appear shorter (Intel SDM vol. 2B, RDTSC; AMD APM vol. 3).
//!   On aarch64 it is `isb; mrs cntvct_el0`, the Arm ARM's recipe for an ordered read.
//! * [`read_bare`] is `rdtsc` alone, used only to measure what the fence costs.
//! * [`read_with_cpu`] is `rdtscp`, which returns the counter together with `IA32_TSC_AUX`; Linux
//!   stores the CPU number in its low 12 bits, so the pair says on which CPU the time was read,
//!   with no window for a migration between the two.
//!
//! Whether the counter ticks at a constant rate in every power state (`constant_tsc`,
//! `nonstop_tsc`) is decided by the caller from `/proc/cpuinfo`; when it does not, sandglass falls
//! back to `CLOCK_MONOTONIC_RAW` (see [`crate::clock`]).

/// True when this build can read a hardware cycle counter on this architecture.
pub const AVAILABLE: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// The counter read in program order: `lfence; rdtsc` (x86_64) or `isb; mrs cntvct_el0`
/// (aarch64). Returns 0 on other architectures, where [`AVAILABLE`] is false.
#[inline(always)]
pub fn read() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `lfence` and `rdtsc` exist on every x86_64 CPU (SSE2 is part of the baseline),
        // have no memory operands and cannot fault in user mode unless CR4.TSD is set, which
        // Linux does only for seccomp-restricted tasks that opted in with PR_SET_TSC.
        unsafe {
            core::arch::x86_64::_mm_lfence();
            core::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        let v: u64;
        // SAFETY: CNTVCT_EL0 is readable from EL0 on Linux (the kernel sets CNTKCTL_EL1.EL0VCTEN);
        // `isb` and `mrs` touch no memory.
        unsafe {
            core::arch::asm!("isb", "mrs {v}, cntvct_el0", v = out(reg) v, options(nomem, nostack));
        }
        v
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        0
    }
}

/// The counter without an ordering fence (`rdtsc` alone on x86_64; same as [`read`] elsewhere).
/// Used by benchmarks to show what the fence costs; measurement loops use [`read`].
#[inline(always)]
pub fn read_bare() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: as in `read`; `rdtsc` alone has no operands.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        read()
    }
}

/// True when [`read_with_cpu`] can use `rdtscp` (x86_64 with the `rdtscp` CPU flag, which the
/// caller checks in `/proc/cpuinfo`). On other architectures it is always false.
pub const HAS_RDTSCP_INSTRUCTION: bool = cfg!(target_arch = "x86_64");

/// The counter together with the number of the CPU that read it, from one `rdtscp` instruction.
/// The caller must have checked that the CPU supports `rdtscp` (the `rdtscp` flag in
/// `/proc/cpuinfo`) and that `IA32_TSC_AUX` holds the CPU number (compare with
/// [`crate::sched::current_cpu`] once). Elsewhere it returns `(read(), u32::MAX)`.
#[inline(always)]
pub fn read_with_cpu() -> (u64, u32) {
    #[cfg(target_arch = "x86_64")]
    {
        let mut aux: u32 = 0;
        // SAFETY: `rdtscp` writes only through the provided `&mut u32`; the caller established
        // that the instruction exists on this CPU (see the doc comment). It waits for earlier
        // instructions to execute, which is the ordering we want for a timestamp.
        let t = unsafe { core::arch::x86_64::__rdtscp(&mut aux) };
        (t, aux & 0xfff)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        (read(), u32::MAX)
    }
}

/// The counter frequency the hardware advertises, where it does: CNTFRQ_EL0 on aarch64. x86_64
/// has no architectural register for it, so sandglass always calibrates against
/// `CLOCK_MONOTONIC_RAW` and records the result with its uncertainty.
pub fn advertised_frequency_hz() -> Option<u64> {
    #[cfg(target_arch = "aarch64")]
    {
        let v: u64;
        // SAFETY: CNTFRQ_EL0 is readable from EL0; `mrs` touches no memory.
        unsafe {
            core::arch::asm!("mrs {v}, cntfrq_el0", v = out(reg) v, options(nomem, nostack));
        }
        Some(v)
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        None
    }
}

/// The hypervisor's vendor string from CPUID leaf 0x4000_0000 (`"KVMKVMKVM"`,
/// `"Microsoft Hv"`, `"VMwareVMware"`, ...) when CPUID leaf 1 reports a hypervisor; `None` on
/// bare metal and on architectures without CPUID.
pub fn hypervisor_vendor() -> Option<String> {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::__cpuid;
        // CPUID is a safe intrinsic: it exists on every x86_64 CPU and only returns registers.
        let leaf1 = __cpuid(1);
        if leaf1.ecx & (1 << 31) == 0 {
            return None;
        }
        // A hypervisor that sets ECX bit 31 implements leaf 0x4000_0000.
        let h = __cpuid(0x4000_0000);
        let mut bytes = Vec::with_capacity(12);
        for r in [h.ebx, h.ecx, h.edx] {
            bytes.extend_from_slice(&r.to_le_bytes());
        }
        let s: String = String::from_utf8_lossy(&bytes)
            .trim_matches(char::from(0))
            .trim()
            .to_string();
        Some(if s.is_empty() {
            "unknown".to_string()
        } else {
            s
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_advances() {
        if !AVAILABLE {
            eprintln!("skipped: no cycle counter on this architecture");
            return;
        }
        let a = read();
        let mut b = read();
        for _ in 0..1000 {
            b = read();
        }
        assert!(b > a, "counter did not advance: {a} then {b}");
        assert!(read_bare() >= a);
    }

    #[test]
    fn rdtscp_reports_the_current_cpu() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        if !cpuinfo.split_whitespace().any(|w| w == "rdtscp") {
            eprintln!("skipped: this CPU has no rdtscp");
            return;
        }
        // A migration between the two reads is possible but rare; retry a few times.
        let mut agreed = false;
        for _ in 0..100 {
            let (_, cpu) = read_with_cpu();
            if crate::sched::current_cpu() == Some(cpu) {
                agreed = true;
                break;
            }
        }
        assert!(agreed, "TSC_AUX never matched sched_getcpu()");
    }
}
