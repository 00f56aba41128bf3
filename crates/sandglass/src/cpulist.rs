//! CPU lists in the kernel's notation (`0-3,6`, as in `/sys/devices/system/cpu/online`,
//! `taskset -c` and cyclictest's `-a`).

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;
use thiserror::Error;

/// The largest CPU number sandglass accepts (the size of the kernel's `cpu_set_t`, 1,024 CPUs,
/// minus one).
pub const MAX_CPU: usize = 1023;
#[cfg(feature = "linux")]
const _: () = assert!(MAX_CPU == sandglass_sys::sched::MAX_CPUS - 1);

/// A non-empty set of CPU numbers.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(into = "String", try_from = "String")]
pub struct CpuList(BTreeSet<usize>);

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CpuListError {
    #[error("empty CPU list: give CPUs such as 0-3,6")]
    Empty,
    #[error("'{0}' in CPU list is not a CPU number or range (examples: 1, 0-3, 0-3,6)")]
    Malformed(String),
    #[error("range '{0}' in CPU list runs backwards: write the lower CPU first")]
    Backwards(String),
    #[error("CPU {0} is beyond the largest CPU number sandglass supports ({MAX_CPU})")]
    TooLarge(usize),
    #[error("CPU {cpu} appears twice in CPU list '{list}': name each CPU once")]
    Duplicate { cpu: usize, list: String },
}

impl CpuList {
    /// A list holding exactly `cpus` (which must not be empty).
    pub fn from_cpus(cpus: impl IntoIterator<Item = usize>) -> Option<CpuList> {
        let set: BTreeSet<usize> = cpus.into_iter().collect();
        (!set.is_empty()).then_some(CpuList(set))
    }

    /// Parses `0-3,6`-style text. A CPU named twice (`0,0`, `0-3,2`) is refused: a list with
    /// a repeated CPU is a typing mistake more often than not, and would measure fewer CPUs
    /// than it seems to name.
    pub fn parse(text: &str) -> Result<CpuList, CpuListError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(CpuListError::Empty);
        }
        let mut set = BTreeSet::new();
        let insert = |set: &mut BTreeSet<usize>, cpu: usize| {
            if set.insert(cpu) {
                Ok(())
            } else {
                Err(CpuListError::Duplicate {
                    cpu,
                    list: text.to_string(),
                })
            }
        };
        for part in text.split(',') {
            let part = part.trim();
            let num = |s: &str| -> Result<usize, CpuListError> {
                let s = s.trim();
                if s.is_empty() || !s.chars().all(|c| c.is_ascii_digit()) {
                    return Err(CpuListError::Malformed(part.to_string()));
                }
                let v: usize = s.parse().map_err(|_| CpuListError::TooLarge(usize::MAX))?;
                if v > MAX_CPU {
                    return Err(CpuListError::TooLarge(v));
                }
                Ok(v)
            };
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (num(a)?, num(b)?);
                    if b < a {
                        return Err(CpuListError::Backwards(part.to_string()));
                    }
                    for cpu in a..=b {
                        insert(&mut set, cpu)?;
                    }
                }
                None => insert(&mut set, num(part)?)?,
            }
        }
        Ok(CpuList(set))
    }

    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().copied()
    }
    pub fn contains(&self, cpu: usize) -> bool {
        self.0.contains(&cpu)
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn first(&self) -> usize {
        self.0.first().copied().unwrap_or(0)
    }
    pub fn to_vec(&self) -> Vec<usize> {
        self.0.iter().copied().collect()
    }
    pub fn is_subset(&self, other: &CpuList) -> bool {
        self.0.is_subset(&other.0)
    }
    pub fn union(&self, other: &CpuList) -> CpuList {
        CpuList(self.0.union(&other.0).copied().collect())
    }
}

/// Prints the compact kernel notation, merging runs into ranges: `0-3,6`.
impl fmt::Display for CpuList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cpus: Vec<usize> = self.to_vec();
        let mut parts = Vec::new();
        let mut i = 0;
        while i < cpus.len() {
            let start = cpus[i];
            let mut end = start;
            while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
                i += 1;
                end = cpus[i];
            }
            parts.push(if start == end {
                start.to_string()
            } else {
                format!("{start}-{end}")
            });
            i += 1;
        }
        f.write_str(&parts.join(","))
    }
}

impl From<CpuList> for String {
    fn from(c: CpuList) -> String {
        c.to_string()
    }
}

impl TryFrom<String> for CpuList {
    type Error = CpuListError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        CpuList::parse(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_kernel_notation() {
        let l = CpuList::parse("0-3,6").expect("parse");
        assert_eq!(l.to_vec(), vec![0, 1, 2, 3, 6]);
        assert_eq!(l.to_string(), "0-3,6");
        assert_eq!(CpuList::parse("5").expect("parse").to_vec(), vec![5]);
        assert_eq!(CpuList::parse("1,0").expect("parse").to_string(), "0-1");
    }

    #[test]
    fn refuses_bad_lists() {
        assert_eq!(CpuList::parse(""), Err(CpuListError::Empty));
        assert!(matches!(
            CpuList::parse("a"),
            Err(CpuListError::Malformed(_))
        ));
        assert!(matches!(
            CpuList::parse("1,"),
            Err(CpuListError::Malformed(_))
        ));
        assert!(matches!(
            CpuList::parse("-1"),
            Err(CpuListError::Malformed(_))
        ));
        assert!(matches!(
            CpuList::parse("3-1"),
            Err(CpuListError::Backwards(_))
        ));
        for (list, cpu) in [("0,0", 0), ("1,1,0", 1), ("0-3,2", 2), ("4,2-5", 4)] {
            assert_eq!(
                CpuList::parse(list),
                Err(CpuListError::Duplicate {
                    cpu,
                    list: list.into()
                }),
                "{list}"
            );
        }
        assert!(matches!(
            CpuList::parse("99999"),
            Err(CpuListError::TooLarge(99999))
        ));
        assert!(matches!(
            CpuList::parse("99999999999999999999999"),
            Err(CpuListError::TooLarge(_))
        ));
    }

    proptest! {
        #[test]
        fn display_round_trips(cpus in proptest::collection::btree_set(0usize..64, 1..20)) {
            let l = CpuList::from_cpus(cpus.iter().copied()).expect("non-empty");
            prop_assert_eq!(CpuList::parse(&l.to_string()), Ok(l));
        }

        #[test]
        fn parse_never_panics(s in "[0-9,\\- a]{0,16}") {
            let _ = CpuList::parse(&s);
        }
    }
}
