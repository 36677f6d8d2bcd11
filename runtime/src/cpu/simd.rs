//! Run-time choice of the vector instruction set that CPU kernels instantiate their loops for.
//!
//! The crate is built for the target's baseline (SSE2 on x86-64, NEON on aarch64). Kernels write
//! their hot loops as `#[inline(always)]` generic Rust, instantiate them once per [`Isa`] inside
//! `#[target_feature]` wrappers, and pick the wrapper with [`Isa::detect`].
//!
//! Every x86 path is behind `#[cfg(target_arch = ...)]`; other targets (aarch64 Android/iOS) get
//! the baseline instantiation. The environment variable `TANDEM_ISA` caps the level on x86 so that
//! the portable baseline kernels can be tested there: `baseline` (alias `portable`), `avx2` or
//! `avx512`; it is read once per process, and other values are ignored.

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

    /// The widest level this CPU supports, capped by `TANDEM_ISA` if set (detected once).
    pub fn detect() -> Isa {
        static DETECTED: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        *DETECTED.get_or_init(|| {
            Isa::widest_supported(
                std::env::var("TANDEM_ISA")
                    .ok()
                    .and_then(|v| Isa::parse_cap(&v)),
            )
        })
    }

    /// The widest supported level no wider than `cap` (no cap: the widest supported).
    fn widest_supported(cap: Option<Isa>) -> Isa {
        let skip = cap.map_or(0, |c| Isa::ALL.iter().position(|&i| i == c).unwrap_or(0));
        Isa::ALL
            .into_iter()
            .skip(skip)
            .find(|isa| isa.is_supported())
            .unwrap_or(Isa::Baseline)
    }

    /// A `TANDEM_ISA` value as a cap, or `None` for an unrecognised one.
    fn parse_cap(value: &str) -> Option<Isa> {
        match value.trim().to_ascii_lowercase().as_str() {
            "baseline" | "portable" => Some(Isa::Baseline),
            "avx2" => Some(Isa::Avx2Fma),
            "avx512" => Some(Isa::Avx512),
            _ => None,
        }
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

    #[test]
    fn the_override_caps_the_level() {
        assert_eq!(Isa::parse_cap("portable"), Some(Isa::Baseline));
        assert_eq!(Isa::parse_cap(" Baseline "), Some(Isa::Baseline));
        assert_eq!(Isa::parse_cap("AVX2"), Some(Isa::Avx2Fma));
        assert_eq!(Isa::parse_cap("avx512"), Some(Isa::Avx512));
        assert_eq!(Isa::parse_cap("sse9"), None);
        assert_eq!(Isa::widest_supported(Some(Isa::Baseline)), Isa::Baseline);
        let widest = Isa::widest_supported(None);
        assert!(widest.is_supported());
        assert_eq!(Isa::widest_supported(Some(Isa::Avx512)), widest);
        let capped = Isa::widest_supported(Some(Isa::Avx2Fma));
        assert_ne!(capped, Isa::Avx512);
        assert!(capped.is_supported());
        // The process-wide choice honours the variable the tests were started with.
        if std::env::var("TANDEM_ISA").is_ok_and(|v| v == "portable" || v == "baseline") {
            assert_eq!(Isa::detect(), Isa::Baseline);
        }
    }
}
