//! DEPTHWISE_CONV_2D (spec §7): DepthwiseConv3x3 or the general DepthwiseConv, with grid and
//! work group.

use super::desc::{slices, DepthwiseDesc, Padding2d};
use super::gpu::{MaliGen, Vendor};
use super::kernel::{Kernel, KernelDispatch, WorkGroupSource};
use super::target::{Precision, StorageType, Target};
use super::work_group::generic_work_group;

/// `Dw3x3OK`: multiplier 1, 3x3 kernel, strides 1, dilations 1 and padding exactly 1 on all
/// four sides (as SAME at stride 1 gives; a merged PAD may not). The excluded 2016 Adreno driver
/// cannot be recognised offline.
pub fn dw3x3_ok(desc: &DepthwiseDesc) -> bool {
    desc.multiplier == 1
        && desc.kernel == [3, 3]
        && desc.stride == [1, 1]
        && desc.dilation == [1, 1]
        && desc.padding
            == Padding2d {
                prepended: [1, 1],
                appended: [1, 1],
            }
}

/// Whether the delegate picks DepthwiseConv3x3: on Mali only for Bifrost and Valhall gen 1
/// (G57, G77) with a non-buffer source and precision other than F32; elsewhere whenever
/// [`dw3x3_ok`] holds. Runtime weights always take the general kernel.
pub fn uses_3x3(t: &Target, desc: &DepthwiseDesc, src_storage: StorageType) -> bool {
    if desc.runtime_weights || !dw3x3_ok(desc) {
        return false;
    }
    match t.vendor() {
        Vendor::Mali => {
            let generation = t.gpu.mali_gen();
            (generation.is_bifrost() || generation == MaliGen::ValhallGen1)
                && !src_storage.is_buffer_like()
                && t.precision != Precision::F32
        }
        _ => true,
    }
}

/// The kernel for a depthwise node whose source tensor has storage `src_storage`.
///
/// DepthwiseConv3x3: grid (ceil(W/2)*B, ceil(H/2), S); work group fixed at (8,4,1) on PowerVR
/// with dedicated local memory (its weights are always in a buffer there), else the generic
/// picker. DepthwiseConv: grid (W*B, H, ceil(C*mult/4)); (16,16,1) fixed on AMD with strides 1,
/// dilations 1 and KH*KW ≥ 10, else the generic picker.
pub fn select_depthwise(
    t: &Target,
    desc: &DepthwiseDesc,
    src_storage: StorageType,
) -> KernelDispatch {
    let b = desc.batch.max(1);
    let [h, w, c] = desc.dst.map(|d| d.max(1));
    if uses_3x3(t, desc, src_storage) {
        let grid = [w.div_ceil(2) * b, h.div_ceil(2), slices(c)];
        let (wg, source) = if t.vendor() == Vendor::PowerVr && t.gpu.spec.local_memory_dedicated {
            ([8, 4, 1], WorkGroupSource::Fixed)
        } else {
            (
                generic_work_group(grid, t.kernel_max_wg),
                WorkGroupSource::FastGeneric,
            )
        };
        return KernelDispatch::new(Kernel::DepthwiseConv3x3, grid, 3, wg, [0, 1, 2], source)
            .with_block([2, 2, 1, 1]);
    }
    let grid = [w * b, h, slices(c)];
    let amd_cached = t.vendor() == Vendor::Amd
        && desc.stride == [1, 1]
        && desc.dilation == [1, 1]
        && desc.kernel[0] * desc.kernel[1] >= 10;
    let (wg, source) = if amd_cached {
        ([16, 16, 1], WorkGroupSource::Fixed)
    } else {
        (
            generic_work_group(grid, t.kernel_max_wg),
            WorkGroupSource::FastGeneric,
        )
    };
    KernelDispatch::new(Kernel::DepthwiseConv, grid, 3, wg, [0, 1, 2], source)
}
