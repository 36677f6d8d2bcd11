//! FULLY_CONNECTED (spec §8): the FullyConnected kernel, or ConvGeneric when the op is batched.

use super::conv::{conv_generic_kernel, conv_generic_params, ConvProblem};
use super::desc::{slices, FcDesc};
use super::gpu::{AdrenoGen, Vendor};
use super::kernel::{ConvFlavour, Kernel, KernelDispatch, WorkGroupSource};
use super::target::Target;
use super::work_group::Dim3;

/// FullyConnected's fixed work group: (16,4,1) on Adreno 3xx, (32,4,1) on every other Adreno,
/// (8,4,1) on Intel, NVIDIA, PowerVR and Apple, (16,4,1) on Mali, AMD and others.
pub fn work_group(t: &Target) -> Dim3 {
    match t.vendor() {
        Vendor::Adreno if t.gpu.adreno_gen() == AdrenoGen::A3xx => [16, 4, 1],
        Vendor::Adreno => [32, 4, 1],
        Vendor::Intel | Vendor::Nvidia | Vendor::PowerVr | Vendor::Apple => [8, 4, 1],
        Vendor::Mali | Vendor::Amd | Vendor::Other => [16, 4, 1],
    }
}

/// The kernel for a fully-connected node: ConvGeneric (fully-connected flavour, destination
/// (B,1,1,O)) when the op is batch-supported, else FullyConnected with grid (ceil(O/4),1,1).
pub fn select_fully_connected(t: &Target, desc: &FcDesc) -> KernelDispatch {
    let b = desc.batch.max(1);
    if desc.batch_supported {
        let problem = ConvProblem {
            src_slices: slices(desc.src_channels),
            dst_slices: slices(desc.dst_channels),
            kx1: true,
            ky1: true,
            dst: Some([b, 1, 1]),
            groups: 1,
            flavour: ConvFlavour::FullyConnected,
        };
        let params = conv_generic_params(t, &problem);
        return conv_generic_kernel(t, params, [b, 1, 1, desc.dst_channels]);
    }
    let grid = [slices(desc.dst_channels).max(1), 1, 1];
    KernelDispatch::new(
        Kernel::FullyConnected,
        grid,
        3,
        work_group(t),
        [0, 1, 2],
        WorkGroupSource::Fixed,
    )
}
