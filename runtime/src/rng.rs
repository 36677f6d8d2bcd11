//! A small seeded generator (SplitMix64), so that zoo weights and default model inputs are the
//! same on every machine and with every version of every dependency.

/// SplitMix64: a 64-bit generator with a one-word state.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    pub fn symmetric(&mut self) -> f32 {
        // 24 random bits → [0, 1) exactly representable in f32.
        let unit = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        unit * 2.0 - 1.0
    }

    /// `n` values uniform in [-limit, limit).
    pub fn uniform(&mut self, n: usize, limit: f32) -> Vec<f32> {
        (0..n).map(|_| self.symmetric() * limit).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_deterministic_and_in_range() {
        let a = Rng::new(7).uniform(1000, 0.5);
        let b = Rng::new(7).uniform(1000, 0.5);
        assert_eq!(a, b);
        assert!(a.iter().all(|v| (-0.5..0.5).contains(v)));
        let mean: f32 = a.iter().sum::<f32>() / a.len() as f32;
        assert!(mean.abs() < 0.05, "mean {mean}");
        assert_ne!(Rng::new(8).uniform(10, 1.0), a[..10].to_vec());
    }
}
