//! CONVOLUTION_2D: the top-level decision (spec §5), ConvConstants (§5.2) and ConvGeneric's
//! parameters, grid and work group (§5.3).

use super::desc::{slices, ConvDesc};
use super::gpu::{AdrenoGen, Gpu, MaliGen, Vendor};
use super::kernel::{
    ConvFlavour, ConvGenericParams, GridMode, Kernel, KernelDispatch, WeightsUpload,
    WorkGroupSource,
};
use super::target::{Precision, Target};
use super::winograd;
use super::work_group::{conv_work_group, generic_work_group, Dim3};

/// What ConvGeneric's parameter heuristics look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvProblem {
    /// ceil(I/4), I = source channels.
    pub src_slices: usize,
    /// ceil(O/4).
    pub dst_slices: usize,
    /// Kernel is 1 wide along W with stride 1, dilation 1, no padding ([`ConvDesc::kx1`]).
    pub kx1: bool,
    /// The same along H.
    pub ky1: bool,
    /// Destination (B, H, W) given to the heuristics; `None` when the delegate passes none.
    pub dst: Option<[usize; 3]>,
    pub groups: usize,
    pub flavour: ConvFlavour,
}

impl ConvProblem {
    /// W*B*H*S_dst, the task size of the heuristics (when the destination is known).
    pub fn task(&self) -> Option<usize> {
        self.dst.map(|[b, h, w]| w * b * h * self.dst_slices)
    }
}

const ORDER_XYZ: Dim3 = [0, 1, 2];

/// `pickS(limit)`: 8 when S_dst%8==0 or S_dst≥32 (if `limit` allows 8), else 4 when S_dst%4==0
/// or S_dst≥8, else 2 when S_dst is even or ≥4, else S_dst.
pub fn pick_slices_block(dst_slices: usize, limit: usize) -> usize {
    let s = dst_slices.max(1);
    if limit >= 8 && (s.is_multiple_of(8) || s >= 32) {
        8
    } else if s.is_multiple_of(4) || s >= 8 {
        4
    } else if s.is_multiple_of(2) || s >= 4 {
        2
    } else {
        s
    }
}

/// Mali `RecommendedBlock` for a task of `task` outputs (W*B*H*S_dst): 1, 2, 4 or 8 by the task
/// per compute unit against the generation and precision thresholds (multiples of 256). Unknown
/// Mali models and other vendors get 1.
pub fn mali_recommended_block(
    generation: MaliGen,
    precision: Precision,
    task: usize,
    compute_units: usize,
) -> usize {
    const INF: f64 = f64::INFINITY;
    use MaliGen as G;
    use Precision as P;
    let (t1, t2, t4) = match (precision, generation) {
        (_, G::Unknown) => return 1,
        (P::F16, G::BifrostGen1) => (1.0, 4.0, 8.0),
        (P::F16, G::BifrostGen2) => (2.0, 8.0, 16.0),
        (P::F16, G::Midgard) => (4.0, 16.0, INF),
        (P::F16, _) => (1.0, 6.0, 16.0),
        (P::F32F16, G::BifrostGen1) => (1.0, 3.0, 32.0),
        (P::F32F16, G::BifrostGen2) => (2.0, 8.0, INF),
        (P::F32F16, G::Midgard) => (4.0, INF, INF),
        (P::F32F16, _) => (1.0, 8.0, INF),
        (P::F32, G::BifrostGen1) => (1.0, 4.0, INF),
        (P::F32, G::BifrostGen2) => (0.5, 4.0, INF),
        (P::F32, G::Midgard) => (16.0, INF, INF),
        (P::F32, _) => (1.0, 12.0, INF),
    };
    let per_cu = task as f64 / compute_units.max(1) as f64;
    if per_cu <= t1 * 256.0 {
        1
    } else if per_cu <= t2 * 256.0 {
        2
    } else if per_cu <= t4 * 256.0 {
        4
    } else {
        8
    }
}

/// Adreno block from the waves figure W*B*H*S_dst / compute_units / wave_size.
fn adreno_params(gpu: &Gpu, precision: Precision, p: &ConvProblem) -> ConvGenericParams {
    let mut block = [2, 2, 1, 2];
    if let (Some(task), Some(model)) = (p.task(), gpu.adreno) {
        let wave = model.wave_size(precision == Precision::F16);
        let waves = task as f64 / gpu.compute_units().max(1) as f64 / wave as f64;
        block = if waves <= 6.0 {
            [1, 1, 1, 1]
        } else if waves <= 12.0 {
            [2, 1, 1, 1]
        } else if waves <= 24.0 {
            [2, 1, 1, 2]
        } else {
            [2, 2, 1, 2]
        };
    }
    if gpu.adreno_gen() == AdrenoGen::A3xx {
        block = match precision {
            Precision::F16 => [2, 2, 1, 2],
            Precision::F32F16 => [2, 1, 1, 2],
            Precision::F32 => [2, 2, 1, 1],
        };
    }
    ConvGenericParams {
        block,
        src_loop: 1,
        weights_upload: WeightsUpload::TexturesMemX4,
        work_group: [8, 2, 1],
        launch_order: ORDER_XYZ,
        fixed_work_group: false,
        grid_mode: GridMode::ThreeD,
        flavour: p.flavour,
    }
}

fn mali_params(gpu: &Gpu, precision: Precision, p: &ConvProblem) -> ConvGenericParams {
    let generation = gpu.mali_gen();
    let mut r = match p.task() {
        Some(task) => mali_recommended_block(generation, precision, task, gpu.compute_units()),
        None => 2,
    };
    if !(p.kx1 && p.ky1) && (generation.is_midgard() || generation.is_bifrost()) {
        r = r.min(4);
    }
    let odd_small = matches!(p.dst_slices, 1 | 3);
    let mut block = match r {
        8 if odd_small => [2, 2, 1, 1],
        8 => [2, 2, 1, 2],
        4 if odd_small => [2, 2, 1, 1],
        4 if precision == Precision::F32 && generation.is_valhall() => [2, 2, 1, 1],
        4 => [2, 1, 1, 2],
        2 => [2, 1, 1, 1],
        _ => [1, 1, 1, 1],
    };
    if let Some([_, h, w]) = p.dst {
        if w == 1 {
            block[1] *= block[0];
            block[0] = 1;
        }
        if h == 1 {
            block[0] *= block[1];
            block[1] = 1;
        }
    }
    let mut src_loop = 1;
    if p.src_slices.is_multiple_of(2) && r <= 2 && !generation.is_midgard() {
        src_loop = 2;
    }
    if p.src_slices.is_multiple_of(4)
        && r == 1
        && !generation.is_midgard()
        && precision == Precision::F16
    {
        src_loop = 4;
    }
    ConvGenericParams {
        block,
        src_loop,
        weights_upload: WeightsUpload::GlobalMem,
        work_group: [4, 4, 1],
        launch_order: ORDER_XYZ,
        fixed_work_group: false,
        grid_mode: GridMode::ThreeD,
        flavour: p.flavour,
    }
}

/// Pointwise (`dwh`) problems launch in 3D with order (2,0,1); the others use a linear spatial
/// grid with order (1,0,2). PowerVR and NVIDIA.
fn order_and_mode(p: &ConvProblem) -> (Dim3, GridMode) {
    if p.flavour == ConvFlavour::Winograd {
        ([2, 0, 1], GridMode::ThreeD)
    } else {
        ([1, 0, 2], GridMode::LinearSpatial)
    }
}

fn powervr_params(gpu: &Gpu, precision: Precision, p: &ConvProblem) -> ConvGenericParams {
    let wg_x = if gpu.opencl >= (3, 0) {
        gpu.spec.preferred_work_group_size_multiple.unwrap_or(32)
    } else {
        32
    };
    let (launch_order, grid_mode) = order_and_mode(p);
    let mut block = [1, 1, 1, pick_slices_block(p.dst_slices, 8)];
    let mut src_loop = 1;
    let weights_upload = if gpu.spec.local_memory_dedicated {
        if precision == Precision::F32F16 {
            WeightsUpload::LocalMemByThreads
        } else {
            WeightsUpload::LocalMemAsyncSubgroup
        }
    } else {
        WeightsUpload::GlobalMem
    };
    if precision == Precision::F16 {
        block[3] = block[3].min(4);
        let s = p.src_slices;
        if s.is_multiple_of(2) {
            src_loop = 2;
        }
        if s.is_multiple_of(4) && block[3] <= 2 {
            src_loop = 4;
        }
        if block[3] == 1 {
            if s.is_multiple_of(2) {
                src_loop = 2;
            }
            if s.is_multiple_of(4) {
                src_loop = 4;
            }
            if s <= 8 {
                src_loop = s;
            }
        }
        block[0] = 2;
    }
    ConvGenericParams {
        block,
        src_loop,
        weights_upload,
        work_group: [wg_x, 1, 1],
        launch_order,
        fixed_work_group: true,
        grid_mode,
        flavour: p.flavour,
    }
}

/// src_loop of NVIDIA, Intel and other vendors: 2 when S_src is even, 4 when S_src%4==0 and
/// bs ≤ 2.
fn src_loop_even(src_slices: usize, bs: usize) -> usize {
    if src_slices.is_multiple_of(4) && bs <= 2 {
        4
    } else if src_slices.is_multiple_of(2) {
        2
    } else {
        1
    }
}

fn nvidia_params(gpu: &Gpu, p: &ConvProblem) -> ConvGenericParams {
    let (launch_order, grid_mode) = order_and_mode(p);
    let mut block = [2, 1, 1, pick_slices_block(p.dst_slices, 4)];
    if let Some(task) = p.task() {
        let per_cu = task as f64 / gpu.compute_units().max(1) as f64;
        let warps = per_cu / (block[0] * block[1] * block[3]) as f64 / 32.0;
        if warps < 8.0 {
            block[0] = 1;
        }
        if warps < 4.0 && block[3] >= 4 {
            block[3] /= 2;
        }
        if warps < 2.0 && block[3] >= 2 {
            block[3] /= 2;
        }
    }
    ConvGenericParams {
        src_loop: src_loop_even(p.src_slices, block[3]),
        block,
        weights_upload: WeightsUpload::LocalMemByThreads,
        work_group: [32, 1, 1],
        launch_order,
        fixed_work_group: true,
        grid_mode,
        flavour: p.flavour,
    }
}

/// AMD's "halve one dimension" step: bs, else bz, else by, else bx, the first that is even.
fn halve_one(block: &mut [usize; 4]) {
    for i in [3, 2, 1, 0] {
        if block[i].is_multiple_of(2) {
            block[i] /= 2;
            return;
        }
    }
}

fn amd_params(gpu: &Gpu, precision: Precision, p: &ConvProblem) -> ConvGenericParams {
    let s = p.dst_slices;
    let mut block = if s.is_multiple_of(4) || s >= 8 {
        [2, 2, 1, 4]
    } else if s.is_multiple_of(2) || s >= 4 {
        [4, 2, 1, 2]
    } else {
        [4, 4, 1, 1]
    };
    if precision != Precision::F16 {
        halve_one(&mut block);
    }
    if let Some(task) = p.task() {
        let per_cu = task as f64 / gpu.compute_units().max(1) as f64;
        let waves64 = per_cu / (block[0] * block[1] * block[3]) as f64 / 64.0;
        for limit in [4.0, 2.0, 1.0, 0.5] {
            if waves64 < limit {
                halve_one(&mut block);
            }
        }
    }
    let per_thread = block[0] * block[1] * block[3];
    let src_loop = if per_thread <= 1 && p.src_slices.is_multiple_of(8) {
        8
    } else if per_thread <= 2 && p.src_slices.is_multiple_of(4) {
        4
    } else if per_thread <= 4 && p.src_slices.is_multiple_of(2) {
        2
    } else {
        1
    };
    ConvGenericParams {
        block,
        src_loop,
        weights_upload: WeightsUpload::ConstantMem,
        work_group: [8, 4, 1],
        launch_order: ORDER_XYZ,
        fixed_work_group: false,
        grid_mode: GridMode::ThreeD,
        flavour: p.flavour,
    }
}

fn intel_params(gpu: &Gpu, precision: Precision, p: &ConvProblem) -> ConvGenericParams {
    let block = [1, 1, 1, pick_slices_block(p.dst_slices, 4)];
    let mut work_group = [16, 1, 1];
    let mut weights_upload = WeightsUpload::LocalMemByThreads;
    let sizes = &gpu.spec.sub_group_sizes;
    if !sizes.is_empty() && precision != Precision::F32F16 {
        weights_upload = WeightsUpload::PrivateMemSimdBroadcast;
        work_group[0] = if sizes.contains(&16) {
            16
        } else {
            sizes.iter().copied().min().unwrap_or(16)
        };
    }
    ConvGenericParams {
        block,
        src_loop: src_loop_even(p.src_slices, block[3]),
        weights_upload,
        work_group,
        launch_order: ORDER_XYZ,
        fixed_work_group: true,
        grid_mode: if p.flavour == ConvFlavour::Winograd {
            GridMode::ThreeD
        } else {
            GridMode::LinearSpatial
        },
        flavour: p.flavour,
    }
}

fn other_params(p: &ConvProblem) -> ConvGenericParams {
    let block = [1, 1, 1, pick_slices_block(p.dst_slices, 4)];
    ConvGenericParams {
        block,
        src_loop: src_loop_even(p.src_slices, block[3]),
        weights_upload: WeightsUpload::GlobalMem,
        work_group: [8, 2, 1],
        launch_order: ORDER_XYZ,
        fixed_work_group: false,
        grid_mode: GridMode::ThreeD,
        flavour: p.flavour,
    }
}

/// ConvGeneric's `GuessBestParams` for `p` on `t`, with the common post-processing: grouped
/// convolutions shrink bs to a divisor of the per-group slices; the fully-connected and
/// Winograd (pointwise) flavours fold `by` into `bx` and the work group's y into x.
pub fn conv_generic_params(t: &Target, p: &ConvProblem) -> ConvGenericParams {
    let gpu = &t.gpu;
    let mut params = match gpu.vendor {
        Vendor::Adreno => adreno_params(gpu, t.precision, p),
        Vendor::Mali => mali_params(gpu, t.precision, p),
        Vendor::PowerVr => powervr_params(gpu, t.precision, p),
        Vendor::Nvidia => nvidia_params(gpu, p),
        Vendor::Amd => amd_params(gpu, t.precision, p),
        Vendor::Intel => intel_params(gpu, t.precision, p),
        Vendor::Apple | Vendor::Other => other_params(p),
    };
    if p.groups > 1 {
        let per_group = p.dst_slices / p.groups;
        let bs = params.block[3];
        if !per_group.is_multiple_of(bs) {
            params.block[3] = if bs == 4 && per_group.is_multiple_of(2) {
                2
            } else {
                1
            };
        }
    }
    if matches!(
        p.flavour,
        ConvFlavour::FullyConnected | ConvFlavour::Winograd
    ) {
        params.block[0] *= params.block[1];
        params.block[1] = 1;
        params.work_group[0] *= params.work_group[1];
        params.work_group[1] = 1;
    }
    params
}

/// ConvGeneric's dispatch for `params` writing a destination tensor of BHWC shape `dst`:
/// tx = ceil(W/bx), ty = ceil(H/by), ts = ceil(S/bs); the grid by mode; the work group fixed or
/// from the conv picker.
pub fn conv_generic_kernel(
    t: &Target,
    params: ConvGenericParams,
    dst: [usize; 4],
) -> KernelDispatch {
    let [b, h, w, c] = dst.map(|d| d.max(1));
    let [bx, by, _, bs] = params.block.map(|d| d.max(1));
    let (tx, ty, ts) = (w.div_ceil(bx), h.div_ceil(by), slices(c).div_ceil(bs));
    let (grid, grid_dimension) = match params.grid_mode {
        GridMode::ThreeD => ([tx * b, ty, ts], 3),
        GridMode::LinearSpatial => ([tx * b * ty, ts, 1], 2),
        GridMode::LinearAll => ([tx * b * ty * ts, 1, 1], 1),
    };
    let (work_group, source) =
        if params.fixed_work_group || params.weights_upload.uses_local_memory() {
            (params.work_group, WorkGroupSource::Fixed)
        } else {
            (
                conv_work_group(grid, &t.gpu, t.kernel_max_wg),
                WorkGroupSource::FastConv,
            )
        };
    let mut k = KernelDispatch::new(
        Kernel::ConvGeneric,
        grid,
        grid_dimension,
        work_group,
        params.launch_order,
        source,
    )
    .with_block(params.block);
    k.conv = Some(params);
    k
}

/// Constant-memory bytes ConvConstants needs for I→O channels and a KH×KW kernel: channels are
/// aligned to 4 on the input side ("dot" mode, when O%4≠0 and I%4==0 or that is smaller) or
/// else on the output side.
pub fn conv_constants_bytes(
    src_channels: usize,
    dst_channels: usize,
    kernel: [usize; 2],
    precision: Precision,
) -> usize {
    let (i, o) = (src_channels, dst_channels);
    let dot = !o.is_multiple_of(4) && (i.is_multiple_of(4) || o * slices(i) < i * slices(o));
    let aligned = if dot {
        o * 4 * slices(i)
    } else {
        i * 4 * slices(o)
    };
    aligned * kernel[0] * kernel[1] * precision.weight_bytes()
}

/// ConvConstants' constant-memory limit: 2560 on Adreno 3xx–5xx, 3584 on other Adreno models
/// (unknown ones included), 4096 on AMD, 1024 elsewhere.
pub fn conv_constants_max_bytes(gpu: &Gpu) -> usize {
    match gpu.vendor {
        Vendor::Adreno => match gpu.adreno_gen() {
            AdrenoGen::A3xx | AdrenoGen::A4xx | AdrenoGen::A5xx => 2560,
            _ => 3584,
        },
        Vendor::Amd => 4096,
        _ => 1024,
    }
}

/// `IsConvConstantsSupported`: one group, the weights fit the constant-memory limit, O ≤ 32.
/// (The one 2018 Adreno driver the delegate excludes cannot be recognised offline.)
pub fn conv_constants_ok(t: &Target, desc: &ConvDesc) -> bool {
    desc.groups == 1
        && conv_constants_bytes(desc.src[2], desc.dst[2], desc.kernel, t.precision)
            <= conv_constants_max_bytes(&t.gpu)
        && slices(desc.dst[2]) <= 8
}

/// Whether `SelectConvolution` tries ConvConstants on this vendor (Adreno, NVIDIA and unknown
/// vendors).
fn tries_conv_constants(vendor: Vendor) -> bool {
    matches!(vendor, Vendor::Adreno | Vendor::Nvidia | Vendor::Other)
}

fn conv_constants_kernel(t: &Target, desc: &ConvDesc) -> KernelDispatch {
    let [h, w, c] = desc.dst.map(|d| d.max(1));
    let grid = [w * desc.batch.max(1), h, 1];
    KernelDispatch::new(
        Kernel::ConvConstants,
        grid,
        3,
        generic_work_group(grid, t.kernel_max_wg),
        ORDER_XYZ,
        WorkGroupSource::FastGeneric,
    )
    .with_block([1, 1, 1, slices(c)])
}

/// The problem ConvGeneric sees for an ordinary (or grouped, or dynamic-weights) convolution.
pub fn conv_problem(desc: &ConvDesc, flavour: ConvFlavour) -> ConvProblem {
    ConvProblem {
        src_slices: slices(desc.src[2]),
        dst_slices: slices(desc.dst[2]),
        kx1: desc.kx1(),
        ky1: desc.ky1(),
        dst: Some([desc.batch, desc.dst[0], desc.dst[1]]),
        groups: desc.groups.max(1),
        flavour,
    }
}

/// An approximate kernel over a BHWC tensor: grid (W*B, H, ceil(C/4)), generic picker.
pub fn approximate_kernel(t: &Target, kernel: Kernel, shape: [usize; 4]) -> KernelDispatch {
    let [b, h, w, c] = shape.map(|d| d.max(1));
    let grid = [w * b, h, slices(c)];
    KernelDispatch::new(
        kernel,
        grid,
        3,
        generic_work_group(grid, t.kernel_max_wg),
        ORDER_XYZ,
        WorkGroupSource::FastGeneric,
    )
    .approximate()
}

/// The kernels the delegate runs for a CONVOLUTION_2D node (§5): runtime weights give
/// ConverterToConvWeights + ConvGeneric; a grouped conv whose per-group channels are not both
/// multiples of 4 is split (Split, one conv per group, ConcatZ); otherwise Winograd when suitable
/// and recommended, then ConvConstants where the vendor tries it and it fits, else ConvGeneric.
pub fn select_conv(t: &Target, desc: &ConvDesc) -> Vec<KernelDispatch> {
    let dst = [desc.batch, desc.dst[0], desc.dst[1], desc.dst[2]];
    if desc.runtime_weights {
        let weights = [desc.dst[2], desc.kernel[0], desc.kernel[1], desc.src[2]];
        let converter = approximate_kernel(
            t,
            Kernel::ConverterToConvWeights,
            [1, weights[1] * weights[2], weights[0], weights[3]],
        );
        let params = conv_generic_params(t, &conv_problem(desc, ConvFlavour::DynamicWeights));
        return vec![converter, conv_generic_kernel(t, params, dst)];
    }
    let groups = desc.groups.max(1);
    if groups > 1 {
        let per_in = desc.src[2] / groups;
        let per_out = desc.dst[2] / groups;
        if !per_in.is_multiple_of(4) || !per_out.is_multiple_of(4) {
            let src = [desc.batch, desc.src[0], desc.src[1], desc.src[2]];
            let mut kernels = vec![approximate_kernel(t, Kernel::Split, src)];
            let part = ConvDesc {
                src: [desc.src[0], desc.src[1], per_in],
                dst: [desc.dst[0], desc.dst[1], per_out],
                groups: 1,
                ..*desc
            };
            for _ in 0..groups {
                kernels.extend(select_conv(t, &part));
            }
            kernels.push(approximate_kernel(t, Kernel::ConcatZ, dst));
            return kernels;
        }
        let params = conv_generic_params(t, &conv_problem(desc, ConvFlavour::Conv));
        return vec![conv_generic_kernel(t, params, dst)];
    }
    if winograd::suitable(desc)
        && winograd::recommended(
            &t.gpu,
            slices(desc.src[2]),
            slices(desc.dst[2]),
            winograd::tiles(desc.dst[0], desc.dst[1]),
        )
    {
        return winograd::kernels(t, desc);
    }
    if tries_conv_constants(t.vendor()) && conv_constants_ok(t, desc) {
        return vec![conv_constants_kernel(t, desc)];
    }
    let params = conv_generic_params(t, &conv_problem(desc, ConvFlavour::Conv));
    vec![conv_generic_kernel(t, params, dst)]
}
