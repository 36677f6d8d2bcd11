//! Winograd F(4x4, 3x3) (spec §6): when the delegate takes it, and its three kernels.

use super::conv::{conv_generic_kernel, conv_generic_params, ConvProblem};
use super::desc::{slices, ConvDesc};
use super::gpu::{AdrenoGen, Gpu, Vendor};
use super::kernel::{ConvFlavour, Kernel, KernelDispatch, WorkGroupSource};
use super::target::Target;
use super::work_group::{first_fitting, Dim3};

/// Work-group candidates of Winograd4x4To36TileX6, best first.
pub const TILE_X6_WORK_GROUPS: [Dim3; 9] = [
    [8, 6, 4],
    [8, 6, 2],
    [4, 6, 2],
    [4, 6, 2],
    [2, 6, 2],
    [2, 6, 1],
    [1, 6, 1],
    [1, 3, 1],
    [1, 1, 1],
];

/// Work-group candidates of Winograd36To4x4Tile4x1, best first.
pub const TILE_4X1_WORK_GROUPS: [Dim3; 9] = [
    [32, 4, 2],
    [16, 4, 2],
    [16, 4, 1],
    [8, 4, 1],
    [4, 4, 1],
    [2, 4, 1],
    [1, 4, 1],
    [1, 2, 1],
    [1, 1, 1],
];

/// 3x3 kernel, strides 1, dilations 1, one group (padding is not tested).
pub fn suitable(desc: &ConvDesc) -> bool {
    desc.kernel == [3, 3] && desc.stride == [1, 1] && desc.dilation == [1, 1] && desc.groups <= 1
}

/// 4x4 output tiles per image: ceil(W/4) * ceil(H/4) of the destination.
pub fn tiles(dst_h: usize, dst_w: usize) -> usize {
    dst_w.div_ceil(4) * dst_h.div_ceil(4)
}

/// Thresholds of `IsRecommendedForWinograd4x4To6x6`: (min source slices, min destination
/// slices, min tiles). Adreno: 32, 32 and 128 tiles on 6xx, 64 on other models (7xx and
/// unknown); AMD: 16, 8, 32; everything else: 16, 16, 32.
pub fn thresholds(gpu: &Gpu) -> (usize, usize, usize) {
    match gpu.vendor {
        Vendor::Adreno => {
            let min_tiles = if gpu.adreno_gen() == AdrenoGen::A6xx {
                128
            } else {
                64
            };
            (32, 32, min_tiles)
        }
        Vendor::Amd => (16, 8, 32),
        _ => (16, 16, 32),
    }
}

/// Whether the delegate recommends Winograd for these slice and tile counts.
pub fn recommended(gpu: &Gpu, src_slices: usize, dst_slices: usize, tiles: usize) -> bool {
    let (min_src, min_dst, min_tiles) = thresholds(gpu);
    src_slices >= min_src && dst_slices >= min_dst && tiles >= min_tiles
}

/// The three kernels replacing the convolution: input transform (TileX6; AMD and Apple use the
/// plain Winograd4x4To36, approximated with the same grid), the pointwise ConvGeneric over the
/// (B, 36, tiles, O) tensor, whose block heuristics see the *source* shape (B, H_in, W_in), and
/// the output transform (Tile4x1; Winograd36To4x4 on AMD and Apple).
pub fn kernels(t: &Target, desc: &ConvDesc) -> Vec<KernelDispatch> {
    let b = desc.batch.max(1);
    let [h, w, o] = desc.dst;
    let i = desc.src[2];
    let tiles = tiles(h, w);
    let plain = matches!(t.vendor(), Vendor::Amd | Vendor::Apple);
    let intel = t.vendor() == Vendor::Intel;

    let grid = [tiles * b, 6, slices(i)];
    let (wg, source) = if intel {
        ([4, 6, 1], WorkGroupSource::Fixed)
    } else {
        (
            first_fitting(&TILE_X6_WORK_GROUPS, t.kernel_max_wg),
            WorkGroupSource::FirstFitting,
        )
    };
    let input = if plain {
        KernelDispatch::new(Kernel::Winograd4x4To36, grid, 3, wg, [0, 1, 2], source).approximate()
    } else {
        KernelDispatch::new(
            Kernel::Winograd4x4To36TileX6,
            grid,
            3,
            wg,
            [0, 1, 2],
            source,
        )
    };

    let problem = ConvProblem {
        src_slices: slices(i),
        dst_slices: slices(o),
        kx1: true,
        ky1: true,
        dst: Some([b, desc.src[0], desc.src[1]]),
        groups: 1,
        flavour: ConvFlavour::Winograd,
    };
    let params = conv_generic_params(t, &problem);
    let middle = conv_generic_kernel(t, params, [b, 36, tiles, o]);

    let grid = [w.div_ceil(4) * h.div_ceil(4) * b, 4, slices(o)];
    let (wg, source) = if intel {
        ([8, 4, 1], WorkGroupSource::Fixed)
    } else {
        (
            first_fitting(&TILE_4X1_WORK_GROUPS, t.kernel_max_wg),
            WorkGroupSource::FirstFitting,
        )
    };
    let output = if plain {
        KernelDispatch::new(Kernel::Winograd36To4x4, grid, 3, wg, [0, 1, 2], source).approximate()
    } else {
        KernelDispatch::new(
            Kernel::Winograd36To4x4Tile4x1,
            grid,
            3,
            wg,
            [0, 1, 2],
            source,
        )
    };
    vec![input, middle, output]
}
