//! A small deterministic pseudo-random generator for resampling.
//!
//! Bootstrap intervals must be reproducible: the same data and seed give the same interval on
//! every machine. SplitMix64 (Steele, Lea & Flood, *Fast splittable pseudorandom number
//! generators*, OOPSLA 2014) is enough for resampling indices: it passes BigCrush, needs one
//! word of state and no dependency. Bounded draws use Lemire's multiply-and-reject method
//! (*Fast random integer generation in an interval*, ACM TOMACS 2019), so they carry no
//! modulo bias.

/// The SplitMix64 generator.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator started from `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform number in the open interval (0, 1): the top 53 bits, centred in their step.
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// A uniform integer in `0..n`; `n` must be positive (0 gives 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = u128::from(self.next_u64()) * u128::from(n);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_values() {
        // The first outputs for seed 1234567 of the reference C implementation
        // (Vigna, prng.di.unimi.it/splitmix64.c).
        let mut r = SplitMix64::new(1_234_567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
        assert_eq!(r.next_u64(), 9_817_491_932_198_370_423);
    }

    #[test]
    fn bounded_draws_cover_the_range() {
        let mut r = SplitMix64::new(7);
        let mut seen = [0u32; 6];
        for _ in 0..6000 {
            seen[r.below(6) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c > 800 && c < 1200), "{seen:?}");
        assert_eq!(r.below(0), 0);
        assert_eq!(r.below(1), 0);
    }
}
