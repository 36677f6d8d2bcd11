//! Kernel launches: [`GpuBackend`] holds a device's programs, the GPU copies of an artifact's
//! constants and the Winograd scratch buffers, and enqueues the kernels of one step (or of one
//! output-channel range of it) through [`dispatch`].

use super::device::GpuDevice;
use super::dispatch::{dispatch, dispatch_with, pad8, DepthwiseGrid, Dispatch, GpuOp, Variant};
use super::memory::Flags;
use super::program::ProgramCache;
use super::{cl_error, GpuError};
use crate::artifact::{Artifact, BinaryKind, Kernel, Step, Storage, TensorDesc, UnaryKind};
use crate::cpu::Activation;
use opencl3::event::Event;
use opencl3::memory::{Buffer, ClMem, CL_MEM_COPY_HOST_PTR, CL_MEM_READ_ONLY, CL_MEM_READ_WRITE};
use opencl3::types::cl_mem;
use std::collections::HashMap;
use std::ffi::c_void;
use std::ops::Range;

/// Where the activation arena is, as the kernels see it.
#[derive(Clone, Copy)]
pub enum ArenaMem {
    /// Fine-grained SVM shared with the host.
    Svm(*mut c_void),
    /// A device buffer (copies to and from the host are explicit).
    Buffer(cl_mem),
}

/// One kernel argument.
enum Arg {
    Svm(*mut c_void),
    Mem(cl_mem),
    Bytes(Vec<u8>),
}

fn val<T: Copy>(v: T) -> Arg {
    // SAFETY: T is a plain `#[repr(C)]` struct or scalar; its bytes are what OpenCL copies.
    let bytes =
        unsafe { std::slice::from_raw_parts((&v as *const T).cast::<u8>(), size_of::<T>()) };
    Arg::Bytes(bytes.to_vec())
}

fn int(v: usize) -> Arg {
    val(v as i32)
}

#[repr(C)]
#[derive(Clone, Copy)]
struct ConvGeom {
    n: i32,
    h: i32,
    w: i32,
    c: i32,
    oh: i32,
    ow: i32,
    oc: i32,
    kh: i32,
    kw: i32,
    sh: i32,
    sw: i32,
    dh: i32,
    dw: i32,
    pt: i32,
    pl: i32,
    cg: i32,
    ocg: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DwGeom {
    n: i32,
    h: i32,
    w: i32,
    c: i32,
    oh: i32,
    ow: i32,
    oc: i32,
    oc_pad: i32,
    kh: i32,
    kw: i32,
    sh: i32,
    sw: i32,
    dh: i32,
    dw: i32,
    pt: i32,
    pl: i32,
    m: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct WinoGeom {
    n: i32,
    h: i32,
    w: i32,
    c: i32,
    oh: i32,
    ow: i32,
    oc: i32,
    oc_pad: i32,
    pt: i32,
    pl: i32,
    th: i32,
    tw: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Bcast {
    dims: [i32; 6],
    sa: [i32; 6],
    sb: [i32; 6],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct View {
    dims: [i32; 6],
    ds: [i32; 6],
    ss: [i32; 6],
    lo: [i32; 6],
    hi: [i32; 6],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct PoolGeom {
    n: i32,
    h: i32,
    w: i32,
    c: i32,
    oh: i32,
    ow: i32,
    fh: i32,
    fw: i32,
    sh: i32,
    sw: i32,
    pt: i32,
    pl: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Reduce {
    dims: [i32; 6],
    so: [i32; 6],
    rdims: [i32; 6],
    sr: [i32; 6],
    count: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct ResizeGeom {
    n: i32,
    h: i32,
    w: i32,
    c: i32,
    oh: i32,
    ow: i32,
    scale_y: f32,
    scale_x: f32,
    align_corners: i32,
    half_pixel: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct TConvGeom {
    n: i32,
    h: i32,
    w: i32,
    c: i32,
    oh: i32,
    ow: i32,
    oc: i32,
    kh: i32,
    kw: i32,
    sh: i32,
    sw: i32,
    pt: i32,
    pl: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct MatMul {
    batch: [i32; 4],
    sl: [i32; 4],
    sr: [i32; 4],
    m: i32,
    k: i32,
    n: i32,
    lhs_row: i32,
    lhs_col: i32,
    rhs_row: i32,
    rhs_col: i32,
}

fn act(a: Activation) -> Arg {
    val(match a {
        Activation::None => 0i32,
        Activation::Relu => 1,
        Activation::ReluN1To1 => 2,
        Activation::Relu6 => 3,
        Activation::Tanh => 4,
    })
}

/// Row-major element strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Right-aligns `v` into `N` slots, filling the front with `fill`.
fn pad_front<const N: usize>(v: &[i64], fill: i32) -> Result<[i32; N], GpuError> {
    if v.len() > N {
        return Err(GpuError::Mismatch(format!(
            "rank {} exceeds the GPU kernels' limit of {N}",
            v.len()
        )));
    }
    let mut out = [fill; N];
    for (o, x) in out[N - v.len()..].iter_mut().zip(v) {
        *o = i32::try_from(*x)
            .map_err(|_| GpuError::Mismatch(format!("{x} exceeds the GPU kernels' index range")))?;
    }
    Ok(out)
}

fn ints(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

/// A device's programs and an artifact's GPU-side constants.
pub struct GpuBackend {
    pub dev: GpuDevice,
    pub programs: ProgramCache,
    /// GPU copies of the constants GPU operands read, by artifact tensor.
    weights: HashMap<usize, Buffer<f32>>,
    /// Winograd's transformed input and products.
    scratch_u: Option<Buffer<f32>>,
    scratch_m: Option<Buffer<f32>>,
    /// Bound where a kernel has an optional operand that is absent.
    dummy: Buffer<f32>,
    /// How depthwise parts order their grid (by size unless a benchmark says otherwise).
    pub depthwise_grid: DepthwiseGrid,
}

fn device_buffer(dev: &GpuDevice, values: &[f32], what: &str) -> Result<Buffer<f32>, GpuError> {
    let n = values.len().max(1);
    let mut copy;
    let data: &[f32] = if values.is_empty() {
        copy = vec![0.0f32; 1];
        &mut copy
    } else {
        values
    };
    // SAFETY: the host pointer is valid for `n` floats and copied at creation.
    unsafe {
        Buffer::<f32>::create(
            &dev.context,
            CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
            n,
            data.as_ptr() as *mut c_void,
        )
    }
    .map_err(|e| cl_error(&format!("uploading {what} ({} floats)", values.len()), e))
}

fn scratch(dev: &GpuDevice, floats: usize, what: &str) -> Result<Option<Buffer<f32>>, GpuError> {
    if floats == 0 {
        return Ok(None);
    }
    // SAFETY: no host pointer.
    unsafe {
        Buffer::<f32>::create(
            &dev.context,
            CL_MEM_READ_WRITE,
            floats,
            std::ptr::null_mut(),
        )
    }
    .map(Some)
    .map_err(|e| cl_error(&format!("allocating {what} ({floats} floats)"), e))
}

/// The dispatch decision for the channel range `range` of `kernel` (element-wise for ops that
/// are not split by channel).
pub fn decide(kernel: &Kernel, range: Range<usize>, dev: &super::device::DeviceInfo) -> Dispatch {
    decide_with(kernel, range, dev, DepthwiseGrid::BySize)
}

/// [`decide`], with depthwise parts ordering their grid as `grid` says.
pub fn decide_with(
    kernel: &Kernel,
    range: Range<usize>,
    dev: &super::device::DeviceInfo,
    grid: DepthwiseGrid,
) -> Dispatch {
    let with = |op| dispatch_with(op, range, dev, grid);
    match kernel {
        Kernel::Conv2d(p) => with(GpuOp::Conv(p)),
        Kernel::DepthwiseConv2d(p) => with(GpuOp::Depthwise(p)),
        Kernel::FullyConnected(p) => with(GpuOp::FullyConnected(p)),
        _ => dispatch(GpuOp::Other { items: 1 }, 0..0, dev),
    }
}

/// Output channels of a splittable kernel (`None` for the others).
pub fn split_channels(kernel: &Kernel) -> Option<usize> {
    match kernel {
        Kernel::Conv2d(p) => Some(p.output[3]),
        Kernel::DepthwiseConv2d(p) => Some(p.output[3]),
        Kernel::FullyConnected(p) => Some(p.units),
        _ => None,
    }
}

impl GpuBackend {
    /// Uploads the constants that the GPU parts of `artifact` read and allocates scratch.
    pub fn new(dev: GpuDevice, artifact: &Artifact) -> Result<GpuBackend, GpuError> {
        let mut weights = HashMap::new();
        let (mut u, mut m) = (0usize, 0usize);
        for step in artifact.steps.iter().filter(|s| s.placement.uses_gpu()) {
            for &t in step.gpu_operands.iter().flatten() {
                let desc = &artifact.tensors[t];
                if let Storage::Constant { offset } = desc.storage {
                    if let std::collections::hash_map::Entry::Vacant(e) = weights.entry(t) {
                        let values = &artifact.weights[offset..offset + desc.elements()];
                        e.insert(device_buffer(&dev, values, &desc.name)?);
                    }
                }
            }
            if let Kernel::Conv2d(p) = &step.kernel {
                let range = step.placement.gpu_range(p.output[3]);
                if decide(&step.kernel, range, &dev.info).variant == Variant::ConvWinograd {
                    let tiles = p.output[0] * p.output[1].div_ceil(4) * p.output[2].div_ceil(4);
                    u = u.max(36 * tiles * p.input[3]);
                    m = m.max(36 * tiles * pad8(p.output[3]));
                }
            }
        }
        let scratch_u = scratch(&dev, u, "Winograd input tiles")?;
        let scratch_m = scratch(&dev, m, "Winograd products")?;
        let dummy = device_buffer(&dev, &[0.0], "a placeholder")?;
        Ok(GpuBackend {
            dev,
            programs: ProgramCache::default(),
            weights,
            scratch_u,
            scratch_m,
            dummy,
            depthwise_grid: DepthwiseGrid::BySize,
        })
    }

    /// Enqueues one kernel; returns its event.
    fn enqueue(
        &mut self,
        source: &'static str,
        options: &str,
        name: &'static str,
        args: &[Arg],
        global: [usize; 3],
        local: Option<[usize; 3]>,
    ) -> Result<Event, GpuError> {
        let kernel = self
            .programs
            .kernel(&self.dev, source, options, name)?
            .get();
        for (i, a) in args.iter().enumerate() {
            let i = i as u32;
            // SAFETY: argument types match the kernel's signature in `cl/*.cl`; pointers are
            // live SVM allocations or buffers owned by the session and this backend.
            let r = unsafe {
                match a {
                    Arg::Svm(p) => opencl3::kernel::set_kernel_arg_svm_pointer(kernel, i, *p),
                    Arg::Mem(m) => opencl3::kernel::set_kernel_arg(
                        kernel,
                        i,
                        size_of::<cl_mem>(),
                        (m as *const cl_mem).cast(),
                    ),
                    Arg::Bytes(b) => {
                        opencl3::kernel::set_kernel_arg(kernel, i, b.len(), b.as_ptr().cast())
                    }
                }
            };
            r.map_err(|e| cl_error(&format!("setting argument {i} of kernel {name}"), e))?;
        }
        // SAFETY: sizes point at 3-element arrays that outlive the call.
        unsafe {
            self.dev.queue.enqueue_nd_range_kernel(
                kernel,
                3,
                std::ptr::null(),
                global.as_ptr(),
                local.as_ref().map_or(std::ptr::null(), |l| l.as_ptr()),
                &[],
            )
        }
        .map_err(|e| cl_error(&format!("launching kernel {name} on grid {global:?}"), e))
    }

    /// Publishes `flags[index] = value` from the queue.
    pub fn signal(&mut self, flags: &Flags, index: usize, value: i32) -> Result<Event, GpuError> {
        self.enqueue(
            "sync",
            "",
            "signal_flag",
            &[Arg::Svm(flags.as_ptr()), int(index), val(value)],
            [1, 1, 1],
            None,
        )
    }

    /// Makes the queue spin until `flags[index] >= target` (or abort, or `max_spins` polls).
    pub fn wait(
        &mut self,
        flags: &Flags,
        index: usize,
        target: i32,
        max_spins: i32,
    ) -> Result<Event, GpuError> {
        self.enqueue(
            "sync",
            "",
            "wait_flag",
            &[
                Arg::Svm(flags.as_ptr()),
                int(index),
                val(target),
                val(max_spins),
            ],
            [1, 1, 1],
            None,
        )
    }

    /// Fault injection: a kernel that spins until the abort flag is set.
    pub fn hang(&mut self, flags: &Flags) -> Result<Event, GpuError> {
        self.enqueue(
            "sync",
            "",
            "hang",
            &[Arg::Svm(flags.as_ptr())],
            [1, 1, 1],
            None,
        )
    }

    /// Fault injection: a launch the device rejects (an empty grid).
    pub fn invalid_launch(&mut self) -> Result<Event, GpuError> {
        self.enqueue("layout", "", "strided_copy", &[], [0, 0, 0], None)
    }

    /// The memory argument and element offset of tensor `t`.
    fn tensor(&self, a: &Artifact, t: usize, arena: ArenaMem) -> Result<(Arg, Arg), GpuError> {
        let desc = &a.tensors[t];
        match desc.storage {
            Storage::Arena { offset } => {
                let mem = match arena {
                    ArenaMem::Svm(p) => Arg::Svm(p),
                    ArenaMem::Buffer(m) => Arg::Mem(m),
                };
                Ok((mem, int(offset / 4)))
            }
            Storage::Constant { .. } => {
                let b = self.weights.get(&t).ok_or_else(|| {
                    GpuError::Mismatch(format!("constant '{}' was not uploaded", desc.name))
                })?;
                Ok((Arg::Mem(b.get()), int(0)))
            }
        }
    }

    fn constant(&self, a: &Artifact, t: Option<usize>) -> Result<Arg, GpuError> {
        match t {
            Some(t) => Ok(self.tensor(a, t, ArenaMem::Svm(std::ptr::null_mut()))?.0),
            None => Ok(Arg::Mem(self.dummy.get())),
        }
    }

    /// Enqueues step `step` computing output channels `range` (the whole output for kernels that
    /// are not split by channel). Returns the last kernel's event.
    pub fn enqueue_step(
        &mut self,
        a: &Artifact,
        step: &Step,
        range: Range<usize>,
        arena: ArenaMem,
    ) -> Result<Event, GpuError> {
        let ops = &step.gpu_operands;
        let operand = |i: usize| ops.get(i).copied().flatten();
        let shape = |i: usize| -> &[usize] {
            operand(i).map_or(&[][..], |t| a.tensors[t].shape.as_slice())
        };
        let x = |s: &Self, i: usize| -> Result<(Arg, Arg), GpuError> {
            let t = operand(i).ok_or_else(|| {
                GpuError::Mismatch(format!("{}: GPU operand {i} is missing", step.name))
            })?;
            s.tensor(a, t, arena)
        };
        let out_desc: &TensorDesc = &a.tensors[step.outputs[0]];
        let out_shape = out_desc.shape.as_slice();
        let total = out_desc.elements();
        let d = decide_with(
            &step.kernel,
            range.clone(),
            &self.dev.info,
            self.depthwise_grid,
        );
        let (c0, c1) = (range.start, range.end);
        let one = |d: Dispatch| (d.grid, Some(d.work_group));
        match &step.kernel {
            Kernel::Conv2d(p) => {
                let (src, src_off) = x(self, 0)?;
                let w = self.constant(a, operand(1))?;
                let b = self.constant(a, operand(2))?;
                let (dst, dst_off) = self.tensor(a, step.outputs[0], arena)?;
                if d.variant == Variant::ConvWinograd {
                    return self.winograd(p, d, c0, c1, [src, src_off, w, b, dst, dst_off]);
                }
                let g = ConvGeom {
                    n: p.input[0] as i32,
                    h: p.input[1] as i32,
                    w: p.input[2] as i32,
                    c: p.input[3] as i32,
                    oh: p.output[1] as i32,
                    ow: p.output[2] as i32,
                    oc: p.output[3] as i32,
                    kh: p.kernel[0] as i32,
                    kw: p.kernel[1] as i32,
                    sh: p.stride[0] as i32,
                    sw: p.stride[1] as i32,
                    dh: p.dilation[0] as i32,
                    dw: p.dilation[1] as i32,
                    pt: p.pad[0] as i32,
                    pl: p.pad[1] as i32,
                    cg: p.group_in() as i32,
                    ocg: p.group_out() as i32,
                };
                let name = if d.variant == Variant::ConvConstants {
                    "conv_constants"
                } else {
                    "conv_generic"
                };
                let opts = format!(
                    "-DBX={} -DBY={} -DBC={}",
                    d.block[0], d.block[1], d.block[2]
                );
                let args = [
                    src,
                    src_off,
                    w,
                    b,
                    dst,
                    dst_off,
                    val(g),
                    int(d.c_start),
                    int(c0),
                    int(c1),
                    act(p.activation),
                ];
                let (global, local) = one(d);
                self.enqueue("conv", &opts, name, &args, global, local)
            }
            Kernel::DepthwiseConv2d(p) => {
                let (src, src_off) = x(self, 0)?;
                let w = self.constant(a, operand(1))?;
                let b = self.constant(a, operand(2))?;
                let (dst, dst_off) = self.tensor(a, step.outputs[0], arena)?;
                let g = DwGeom {
                    n: p.input[0] as i32,
                    h: p.input[1] as i32,
                    w: p.input[2] as i32,
                    c: p.input[3] as i32,
                    oh: p.output[1] as i32,
                    ow: p.output[2] as i32,
                    oc: p.output[3] as i32,
                    oc_pad: pad8(p.output[3]) as i32,
                    kh: p.kernel[0] as i32,
                    kw: p.kernel[1] as i32,
                    sh: p.stride[0] as i32,
                    sw: p.stride[1] as i32,
                    dh: p.dilation[0] as i32,
                    dw: p.dilation[1] as i32,
                    pt: p.pad[0] as i32,
                    pl: p.pad[1] as i32,
                    m: p.multiplier as i32,
                };
                let name = if d.variant == Variant::Depthwise3x3 {
                    "depthwise_3x3"
                } else {
                    "depthwise_generic"
                };
                let opts = format!(
                    "-DBX={} -DBC={} -DCHANNELS_INNER={}",
                    d.block[0],
                    d.block[2],
                    i32::from(d.channels_inner)
                );
                let args = [
                    src,
                    src_off,
                    w,
                    b,
                    dst,
                    dst_off,
                    val(g),
                    int(d.c_start),
                    int(c0),
                    int(c1),
                    act(p.activation),
                ];
                let (global, local) = one(d);
                self.enqueue("depthwise", &opts, name, &args, global, local)
            }
            Kernel::FullyConnected(p) => {
                let (src, src_off) = x(self, 0)?;
                let w = self.constant(a, operand(1))?;
                let b = self.constant(a, operand(2))?;
                let (dst, dst_off) = self.tensor(a, step.outputs[0], arena)?;
                let opts = format!("-DBR={} -DBC={}", d.block[0], d.block[2]);
                let args = [
                    src,
                    src_off,
                    w,
                    b,
                    dst,
                    dst_off,
                    int(p.rows),
                    int(p.depth),
                    int(p.units),
                    int(d.c_start),
                    int(c0),
                    int(c1),
                    act(p.activation),
                ];
                let (global, local) = one(d);
                self.enqueue(
                    "fully_connected",
                    &opts,
                    "fully_connected",
                    &args,
                    global,
                    local,
                )
            }
            Kernel::TransposeConv(p) => {
                let (src, src_off) = x(self, 0)?;
                let w = self.constant(a, operand(1))?;
                let has_bias = operand(2).is_some();
                let b = self.constant(a, operand(2))?;
                let (dst, dst_off) = self.tensor(a, step.outputs[0], arena)?;
                let g = TConvGeom {
                    n: p.input[0] as i32,
                    h: p.input[1] as i32,
                    w: p.input[2] as i32,
                    c: p.input[3] as i32,
                    oh: p.output[1] as i32,
                    ow: p.output[2] as i32,
                    oc: p.output[3] as i32,
                    kh: p.kernel[0] as i32,
                    kw: p.kernel[1] as i32,
                    sh: p.stride[0] as i32,
                    sw: p.stride[1] as i32,
                    pt: p.pad[0] as i32,
                    pl: p.pad[1] as i32,
                };
                let args = [
                    src,
                    src_off,
                    w,
                    b,
                    val(has_bias as i32),
                    dst,
                    dst_off,
                    val(g),
                    act(p.activation),
                ];
                self.elementwise("matmul", "transpose_conv", &args, total)
            }
            Kernel::BatchMatMul(p) => {
                let (l, l_off) = x(self, 0)?;
                let (r, r_off) = x(self, 1)?;
                let (dst, dst_off) = self.tensor(a, step.outputs[0], arena)?;
                let mm = matmul_geometry(p)?;
                let args = [l, l_off, r, r_off, dst, dst_off, val(mm), int(total)];
                self.elementwise("matmul", "batch_matmul", &args, total)
            }
            Kernel::Binary { kind, activation } => {
                let op = match kind {
                    BinaryKind::Add => 0,
                    BinaryKind::Sub => 1,
                    BinaryKind::Mul => 2,
                    BinaryKind::Div => 3,
                };
                self.binary(
                    a,
                    step,
                    arena,
                    op,
                    *activation,
                    out_shape,
                    shape(0),
                    shape(1),
                )
            }
            Kernel::Prelu => self.binary(
                a,
                step,
                arena,
                4,
                Activation::None,
                out_shape,
                shape(0),
                shape(1),
            ),
            Kernel::Unary(kind) => {
                let (src, src_off) = x(self, 0)?;
                let (dst, dst_off) = self.tensor(a, step.outputs[0], arena)?;
                let (op, alpha) = match *kind {
                    UnaryKind::Logistic => (0, 0.0),
                    UnaryKind::Tanh => (1, 0.0),
                    UnaryKind::Relu => (2, 0.0),
                    UnaryKind::Relu6 => (3, 0.0),
                    UnaryKind::ReluN1To1 => (4, 0.0),
                    UnaryKind::HardSwish => (5, 0.0),
                    UnaryKind::LeakyRelu { alpha } => (6, alpha),
                };
                let args = [src, src_off, dst, dst_off, int(total), val(op), val(alpha)];
                self.elementwise("elementwise", "unary", &args, total)
            }
            Kernel::Softmax { beta } => {
                let (src, src_off) = x(self, 0)?;
                let (dst, dst_off) = self.tensor(a, step.outputs[0], arena)?;
                let depth = out_shape.last().copied().unwrap_or(1).max(1);
                let rows = total / depth;
                let args = [
                    src,
                    src_off,
                    dst,
                    dst_off,
                    int(rows),
                    int(depth),
                    val(*beta),
                ];
                self.elementwise("elementwise", "softmax", &args, rows)
            }
            Kernel::MaxPool2d(p) | Kernel::AvgPool2d(p) => {
                let (src, src_off) = x(self, 0)?;
                let (dst, dst_off) = self.tensor(a, step.outputs[0], arena)?;
                let i = shape(0);
                let g = PoolGeom {
                    n: i[0] as i32,
                    h: i[1] as i32,
                    w: i[2] as i32,
                    c: i[3] as i32,
                    oh: out_shape[1] as i32,
                    ow: out_shape[2] as i32,
                    fh: p.filter[0] as i32,
                    fw: p.filter[1] as i32,
                    sh: p.stride[0] as i32,
                    sw: p.stride[1] as i32,
                    pt: p.pad[0] as i32,
                    pl: p.pad[1] as i32,
                };
                let is_max = matches!(step.kernel, Kernel::MaxPool2d(_)) as i32;
                let args = [
                    src,
                    src_off,
                    dst,
                    dst_off,
                    val(g),
                    val(is_max),
                    act(p.activation),
                ];
                self.elementwise("pool", "pool2d", &args, total)
            }
            Kernel::Mean { axes } => {
                let (src, src_off) = x(self, 0)?;
                let (dst, dst_off) = self.tensor(a, step.outputs[0], arena)?;
                let r = reduce_geometry(shape(0), axes)?;
                let args = [src, src_off, dst, dst_off, val(r), int(total)];
                self.elementwise("pool", "mean", &args, total)
            }
            Kernel::ResizeBilinear {
                align_corners,
                half_pixel_centers,
            }
            | Kernel::ResizeNearest {
                align_corners,
                half_pixel_centers,
            } => {
                let (src, src_off) = x(self, 0)?;
                let (dst, dst_off) = self.tensor(a, step.outputs[0], arena)?;
                let i = shape(0);
                let scale = |i: usize, o: usize| {
                    if *align_corners && o > 1 {
                        (i - 1) as f32 / (o - 1) as f32
                    } else {
                        i as f32 / o as f32
                    }
                };
                let g = ResizeGeom {
                    n: i[0] as i32,
                    h: i[1] as i32,
                    w: i[2] as i32,
                    c: i[3] as i32,
                    oh: out_shape[1] as i32,
                    ow: out_shape[2] as i32,
                    scale_y: scale(i[1], out_shape[1]),
                    scale_x: scale(i[2], out_shape[2]),
                    align_corners: *align_corners as i32,
                    half_pixel: *half_pixel_centers as i32,
                };
                let name = if matches!(step.kernel, Kernel::ResizeBilinear { .. }) {
                    "resize_bilinear"
                } else {
                    "resize_nearest"
                };
                let args = [src, src_off, dst, dst_off, val(g)];
                self.elementwise("pool", name, &args, total)
            }
            Kernel::Concat { axis } => {
                let out_strides = strides(out_shape);
                let mut last = None;
                let mut at = 0;
                for i in 0..ops.len() {
                    let s = shape(i).to_vec();
                    let view = copy_view(&s, &strides(&s), &out_strides, None)?;
                    let (src, src_off) = x(self, i)?;
                    let (dst, dst_off) = self.tensor(a, step.outputs[0], arena)?;
                    let dst_off = shift(dst_off, at * out_strides[*axis]);
                    at += s[*axis];
                    let n = s.iter().product();
                    let args = [src, src_off, dst, dst_off, val(view), int(n), val(0.0f32)];
                    last = Some(self.elementwise("layout", "strided_copy", &args, n)?);
                }
                last.ok_or_else(|| GpuError::Mismatch(format!("{}: no inputs", step.name)))
            }
            Kernel::Copy
            | Kernel::Transpose { .. }
            | Kernel::StridedSlice { .. }
            | Kernel::Pad { .. }
            | Kernel::DepthToSpace { .. }
            | Kernel::SpaceToDepth { .. } => {
                let (view, src_shift, value) = layout_view(&step.kernel, shape(0), out_shape)?;
                let (src, src_off) = x(self, 0)?;
                let src_off = shift(src_off, src_shift);
                let (dst, dst_off) = self.tensor(a, step.outputs[0], arena)?;
                let args = [
                    src,
                    src_off,
                    dst,
                    dst_off,
                    val(view),
                    int(total),
                    val(value),
                ];
                self.elementwise("layout", "strided_copy", &args, total)
            }
        }
    }

    /// A one-item-per-element launch.
    fn elementwise(
        &mut self,
        source: &'static str,
        name: &'static str,
        args: &[Arg],
        items: usize,
    ) -> Result<Event, GpuError> {
        let d = dispatch(GpuOp::Other { items }, 0..0, &self.dev.info);
        self.enqueue(source, "", name, args, d.grid, Some(d.work_group))
    }

    #[allow(clippy::too_many_arguments)]
    fn binary(
        &mut self,
        a: &Artifact,
        step: &Step,
        arena: ArenaMem,
        op: i32,
        activation: Activation,
        out: &[usize],
        sa: &[usize],
        sb: &[usize],
    ) -> Result<Event, GpuError> {
        let operand = |i: usize| {
            step.gpu_operands.get(i).copied().flatten().ok_or_else(|| {
                GpuError::Mismatch(format!("{}: GPU operand {i} is missing", step.name))
            })
        };
        let (x, x_off) = self.tensor(a, operand(0)?, arena)?;
        let (y, y_off) = self.tensor(a, operand(1)?, arena)?;
        let (dst, dst_off) = self.tensor(a, step.outputs[0], arena)?;
        let total: usize = out.iter().product();
        let same = sa == out && sb == out;
        let bcast = |s: &[usize]| -> Vec<i64> {
            // Right-align s to out; broadcast dimensions get stride 0.
            let st = strides(s);
            let lead = out.len() - s.len().min(out.len());
            (0..out.len())
                .map(|d| {
                    if d < lead || s[d - lead] == 1 {
                        0
                    } else {
                        st[d - lead] as i64
                    }
                })
                .collect()
        };
        let b = Bcast {
            dims: pad_front(&ints(out), 1)?,
            sa: pad_front(&bcast(sa), 0)?,
            sb: pad_front(&bcast(sb), 0)?,
        };
        let args = [
            x,
            x_off,
            y,
            y_off,
            dst,
            dst_off,
            val(b),
            int(total),
            val(same as i32),
            val(op),
            act(activation),
        ];
        self.elementwise("elementwise", "binary", &args, total)
    }

    /// The three Winograd kernels. `args`: src, src_off, weights, bias, dst, dst_off.
    fn winograd(
        &mut self,
        p: &crate::cpu::conv::ConvParams,
        d: Dispatch,
        c0: usize,
        c1: usize,
        args: [Arg; 6],
    ) -> Result<Event, GpuError> {
        let [src, src_off, w, b, dst, dst_off] = args;
        let (u, m) = match (&self.scratch_u, &self.scratch_m) {
            (Some(u), Some(m)) => (u.get(), m.get()),
            _ => {
                return Err(GpuError::Mismatch(
                    "Winograd scratch was not allocated for this step".into(),
                ))
            }
        };
        let [n, oh, ow, oc] = p.output;
        let (th, tw) = (oh.div_ceil(4), ow.div_ceil(4));
        let g = WinoGeom {
            n: n as i32,
            h: p.input[1] as i32,
            w: p.input[2] as i32,
            c: p.input[3] as i32,
            oh: oh as i32,
            ow: ow as i32,
            oc: oc as i32,
            oc_pad: pad8(oc) as i32,
            pt: p.pad[0] as i32,
            pl: p.pad[1] as i32,
            th: th as i32,
            tw: tw as i32,
        };
        let opts = format!("-DBT={} -DBC={}", d.block[0], d.block[2]);
        let shape = |items: [usize; 3], info: &super::device::DeviceInfo| {
            let x = super::dispatch::launch_shape(items, 16, info);
            (x.0, Some(x.1))
        };
        let (gi, li) = shape([p.input[3], tw, n * th], &self.dev.info);
        self.enqueue(
            "winograd",
            &opts,
            "winograd_input",
            &[src, src_off, Arg::Mem(u), val(g)],
            gi,
            li,
        )?;
        let tiles = n * th * tw;
        self.enqueue(
            "winograd",
            &opts,
            "winograd_gemm",
            &[
                Arg::Mem(u),
                w,
                Arg::Mem(m),
                int(tiles),
                int(p.input[3]),
                int(pad8(oc)),
                int(d.c_start),
                int(c1),
            ],
            d.grid,
            Some(d.work_group),
        )?;
        let blocks = c1.saturating_sub(d.c_start).div_ceil(d.block[2]);
        let (go, lo) = shape([blocks, tw, n * th], &self.dev.info);
        self.enqueue(
            "winograd",
            &opts,
            "winograd_output",
            &[
                Arg::Mem(m),
                b,
                dst,
                dst_off,
                val(g),
                int(d.c_start),
                int(c0),
                int(c1),
                act(p.activation),
            ],
            go,
            lo,
        )
    }
}

/// Adds `by` elements to an offset argument.
fn shift(off: Arg, by: usize) -> Arg {
    match off {
        Arg::Bytes(b) if b.len() == 4 => {
            let v = i32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
            val(v + by as i32)
        }
        other => other,
    }
}

/// A view copying a whole tensor of shape `s` (source strides `ss`) into a destination with
/// strides `ds` (rank-aligned with `s`).
fn copy_view(
    s: &[usize],
    ss: &[usize],
    ds: &[usize],
    lo: Option<&[usize]>,
) -> Result<View, GpuError> {
    let lo: Vec<i64> = lo.map_or(vec![0; s.len()], ints);
    let hi: Vec<i64> = s.iter().zip(&lo).map(|(&d, &l)| d as i64 + l).collect();
    Ok(View {
        dims: pad_front(&ints(s), 1)?,
        ds: pad_front(&ints(ds), 0)?,
        ss: pad_front(&ints(ss), 0)?,
        lo: pad_front(&lo, 0)?,
        hi: pad_front(&hi, 1)?,
    })
}

/// The strided view of a data-movement kernel, the source offset shift, and the pad value.
fn layout_view(
    kernel: &Kernel,
    input: &[usize],
    out: &[usize],
) -> Result<(View, usize, f32), GpuError> {
    let in_strides = strides(input);
    let full = |dims: &[i64], ds: &[i64], ss: &[i64]| -> Result<View, GpuError> {
        Ok(View {
            dims: pad_front(dims, 1)?,
            ds: pad_front(ds, 0)?,
            ss: pad_front(ss, 0)?,
            lo: [0; 6],
            hi: pad_front(dims, 1)?,
        })
    };
    match kernel {
        Kernel::Copy => {
            let n = out.iter().product::<usize>() as i64;
            Ok((full(&[n], &[1], &[1])?, 0, 0.0))
        }
        Kernel::Transpose { perm } => {
            let ss: Vec<i64> = perm.iter().map(|&p| in_strides[p] as i64).collect();
            Ok((full(&ints(out), &ints(&strides(out)), &ss)?, 0, 0.0))
        }
        Kernel::StridedSlice {
            begin,
            stride,
            count,
        } => {
            let ss: Vec<i64> = stride
                .iter()
                .zip(&in_strides)
                .map(|(&s, &st)| s as i64 * st as i64)
                .collect();
            let shift: usize = begin.iter().zip(&in_strides).map(|(b, s)| b * s).sum();
            Ok((full(&ints(count), &ints(&strides(count)), &ss)?, shift, 0.0))
        }
        Kernel::Pad {
            before,
            after: _,
            value,
        } => {
            let view = copy_view(out, &in_strides, &strides(out), Some(before))?;
            // hi = before + input dim, not + output dim.
            let hi: Vec<i64> = before
                .iter()
                .zip(input)
                .map(|(&b, &d)| (b + d) as i64)
                .collect();
            Ok((
                View {
                    hi: pad_front(&hi, 1)?,
                    ..view
                },
                0,
                *value,
            ))
        }
        Kernel::DepthToSpace { block } => {
            let b = *block;
            let [n, h, w, c] = [input[0], input[1], input[2], input[3]];
            let co = c / (b * b);
            // Output viewed as [n, h, b, w, b, co].
            let dims = [n, h, b, w, b, co];
            let ss = [h * w * c, w * c, b * co, c, co, 1];
            Ok((
                full(&ints(&dims), &ints(&strides(&dims)), &ints(&ss))?,
                0,
                0.0,
            ))
        }
        Kernel::SpaceToDepth { block } => {
            let b = *block;
            let [n, h, w, c] = [input[0], input[1], input[2], input[3]];
            // Output viewed as [n, h / b, w / b, b, b, c].
            let dims = [n, h / b, w / b, b, b, c];
            let ss = [h * w * c, b * w * c, b * c, w * c, c, 1];
            Ok((
                full(&ints(&dims), &ints(&strides(&dims)), &ints(&ss))?,
                0,
                0.0,
            ))
        }
        other => Err(GpuError::Mismatch(format!(
            "{other:?} is not a data-movement kernel"
        ))),
    }
}

fn reduce_geometry(input: &[usize], axes: &[usize]) -> Result<Reduce, GpuError> {
    let st = strides(input);
    let (mut dims, mut so, mut rdims, mut sr) = (vec![], vec![], vec![], vec![]);
    for (d, (&n, &s)) in input.iter().zip(&st).enumerate() {
        if axes.contains(&d) {
            rdims.push(n as i64);
            sr.push(s as i64);
        } else {
            dims.push(n as i64);
            so.push(s as i64);
        }
    }
    Ok(Reduce {
        dims: pad_front(&dims, 1)?,
        so: pad_front(&so, 0)?,
        rdims: pad_front(&rdims, 1)?,
        sr: pad_front(&sr, 0)?,
        count: rdims.iter().product::<i64>() as i32,
    })
}

fn matmul_geometry(p: &crate::cpu::batch_matmul::BatchMatMulParams) -> Result<MatMul, GpuError> {
    let (l, r, o) = (&p.lhs, &p.rhs, &p.out);
    let rank = o.len();
    if rank < 2 || l.len() < 2 || r.len() < 2 {
        return Err(GpuError::Mismatch("batch matmul needs rank >= 2".into()));
    }
    let (m, n) = (o[rank - 2], o[rank - 1]);
    let k = if p.adj_lhs {
        l[l.len() - 2]
    } else {
        l[l.len() - 1]
    };
    let (lr, lc) = if p.adj_lhs { (1, m) } else { (k, 1) };
    let (rr, rc) = if p.adj_rhs { (1, k) } else { (n, 1) };
    let batch = &o[..rank - 2];
    let bstrides = |s: &[usize]| -> Vec<i64> {
        let sb = &s[..s.len() - 2];
        let mat = s[s.len() - 2] * s[s.len() - 1];
        let st = strides(sb);
        let lead = batch.len() - sb.len().min(batch.len());
        (0..batch.len())
            .map(|d| {
                if d < lead || sb[d - lead] == 1 {
                    0
                } else {
                    (st[d - lead] * mat) as i64
                }
            })
            .collect()
    };
    Ok(MatMul {
        batch: pad_front(&ints(batch), 1)?,
        sl: pad_front(&bstrides(l), 0)?,
        sr: pad_front(&bstrides(r), 0)?,
        m: m as i32,
        k: k as i32,
        n: n as i32,
        lhs_row: lr as i32,
        lhs_col: lc as i32,
        rhs_row: rr as i32,
        rhs_col: rc as i32,
    })
}
