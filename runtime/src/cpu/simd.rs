//! Run-time choice of the vector instruction set that CPU kernels instantiate their loops for.
//!
//! The crate is built for the target's baseline (SSE2 on x86-64, NEON on aarch64). Kernels write
//! their hot loops as `#[inline(always)]` generic Rust, instantiate them once per [`Isa`] inside
//! `#[target_feature]` wrappers, and pick the wrapper with [`Isa::detect`].

/// A vector instruction-set level a kernel can be instantiated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// x86 AVX-512F, with AVX2 and FMA.
    Avx512,
    /// x86 AVX2 with FMA.
    Avx2Fma,
    /// What the crate is compiled for: SSE2 on x86-64, NEON on aarch64, scalar code elsewhere.
    Baseline,
}

impl Isa {
    /// Every level, widest first.
    pub const ALL: [Isa; 3] = [Isa::Avx512, Isa::Avx2Fma, Isa::Baseline];

    /// The widest level this CPU supports.
    pub fn detect() -> Isa {
        Isa::ALL
            .into_iter()
            .find(|isa| isa.is_supported())
            .unwrap_or(Isa::Baseline)
    }

    /// Whether this CPU (and OS) can run code compiled for this level.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Baseline => true,
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Isa::Avx2Fma => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Isa::Avx512 => Isa::Avx2Fma.is_supported() && is_x86_feature_detected!("avx512f"),
            #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
            Isa::Avx2Fma | Isa::Avx512 => false,
        }
    }
}

/// Whether `f32::mul_add` is a single instruction in baseline code (rather than a libm call).
pub const BASELINE_HAS_FMA: bool = cfg!(any(target_arch = "aarch64", target_feature = "fma"));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detected_level_is_supported_and_baseline_always_is() {
        assert!(Isa::detect().is_supported());
        assert!(Isa::Baseline.is_supported());
        if Isa::Avx512.is_supported() {
            assert!(Isa::Avx2Fma.is_supported());
        }
    }
}
