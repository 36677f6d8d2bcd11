//! Memory the CPU and the GPU share: shared-virtual-memory allocations, and the activation
//! arena that lives either in host memory or in fine-grained SVM.

use super::{cl_error, GpuError};
use opencl3::context::Context;
use opencl3::memory::{CL_MEM_READ_WRITE, CL_MEM_SVM_ATOMICS, CL_MEM_SVM_FINE_GRAIN_BUFFER};
use opencl3::types::cl_context;
use std::ffi::c_void;
use std::sync::atomic::AtomicI32;

/// One SVM allocation, freed on drop (the allocation keeps its context alive).
pub struct SvmBuffer {
    context: cl_context,
    ptr: *mut c_void,
    bytes: usize,
}

// SAFETY: the allocation is plain memory; OpenCL objects are thread-safe to release.
unsafe impl Send for SvmBuffer {}
unsafe impl Sync for SvmBuffer {}

impl SvmBuffer {
    /// Allocates `bytes` (at least 64) of zeroed, 64-byte-aligned fine-grained SVM with atomics.
    pub fn fine_grained(context: &Context, bytes: usize) -> Result<SvmBuffer, GpuError> {
        let bytes = bytes.max(64);
        let flags = CL_MEM_READ_WRITE | CL_MEM_SVM_FINE_GRAIN_BUFFER | CL_MEM_SVM_ATOMICS;
        // SAFETY: a valid context; the pointer is checked and freed in Drop.
        let ptr = unsafe { opencl3::memory::svm_alloc(context.get(), flags, bytes, 64) }
            .map_err(|e| cl_error(&format!("allocating {bytes} bytes of fine-grained SVM"), e))?;
        // SAFETY: the context is valid; retained so that it outlives the allocation.
        unsafe { cl3::context::retain_context(context.get()) }
            .map_err(|e| cl_error("retaining the context", e))?;
        // SAFETY: fine-grained SVM is host-accessible without mapping; `bytes` were allocated.
        unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 0, bytes) };
        Ok(SvmBuffer {
            context: context.get(),
            ptr,
            bytes,
        })
    }

    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for SvmBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by svm_alloc in this context; no kernel uses it any more (sessions
        // drain their queue before dropping their memory).
        unsafe {
            let _ = opencl3::memory::svm_free(self.context, self.ptr);
            let _ = cl3::context::release_context(self.context);
        }
    }
}

/// The activation arena: every tensor computed at run time, at the offsets of the memory plan.
/// 64-byte aligned; its address never changes.
pub enum Arena {
    /// Host memory (CPU-only sessions, or GPUs without fine-grained SVM).
    Host { data: Vec<f32>, base: usize },
    /// Fine-grained SVM, read and written by both devices in place.
    Svm(SvmBuffer),
}

impl Arena {
    /// A zeroed host arena of `bytes`.
    pub fn host(bytes: usize) -> Arena {
        let align = crate::artifact::ARENA_ALIGN / 4;
        let data = vec![0.0f32; bytes.div_ceil(4) + align];
        let base = (align - (data.as_ptr() as usize / 4) % align) % align;
        Arena::Host { data, base }
    }

    /// A zeroed host arena of `bytes`, or `None` if the memory cannot be allocated.
    pub fn try_host(bytes: usize) -> Option<Arena> {
        let align = crate::artifact::ARENA_ALIGN / 4;
        let len = bytes.div_ceil(4).saturating_add(align);
        let mut data = Vec::new();
        data.try_reserve_exact(len).ok()?;
        data.resize(len, 0.0f32);
        let base = (align - (data.as_ptr() as usize / 4) % align) % align;
        Some(Arena::Host { data, base })
    }

    /// A zeroed fine-grained SVM arena of `bytes`.
    pub fn svm(context: &Context, bytes: usize) -> Result<Arena, GpuError> {
        Ok(Arena::Svm(SvmBuffer::fine_grained(context, bytes)?))
    }

    /// First element.
    pub fn ptr(&mut self) -> *mut f32 {
        match self {
            // SAFETY: `base` is less than the over-allocation.
            Arena::Host { data, base } => unsafe { data.as_mut_ptr().add(*base) },
            Arena::Svm(b) => b.as_ptr().cast(),
        }
    }

    /// Length in elements.
    pub fn len(&self) -> usize {
        match self {
            Arena::Host { data, base } => data.len() - base,
            Arena::Svm(b) => b.bytes() / 4,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `len` elements from element `offset`, which validation keeps in bounds.
    pub fn slice(&mut self, offset: usize, len: usize) -> &mut [f32] {
        assert!(offset + len <= self.len(), "arena range out of bounds");
        // SAFETY: in bounds (checked); the arena outlives the borrow.
        unsafe { std::slice::from_raw_parts_mut(self.ptr().add(offset), len) }
    }
}

/// The four synchronisation words in fine-grained SVM (layout in `cl/sync.cl`).
pub struct Flags {
    buffer: SvmBuffer,
}

/// Indices of the words.
pub const CPU_DONE: usize = 0;
pub const GPU_DONE: usize = 1;
pub const ABORT: usize = 2;
pub const STATUS: usize = 3;

impl Flags {
    pub fn new(context: &Context) -> Result<Flags, GpuError> {
        Ok(Flags {
            buffer: SvmBuffer::fine_grained(context, 64)?,
        })
    }

    /// Word `i` as an atomic the host reads and writes while kernels poll it.
    pub fn word(&self, i: usize) -> &AtomicI32 {
        assert!(i < 4);
        // SAFETY: 64 zeroed, aligned bytes of fine-grained SVM with atomics, alive as long as
        // `self`; AtomicI32 has the layout of i32.
        unsafe { &*self.buffer.as_ptr().cast::<AtomicI32>().add(i) }
    }

    pub fn as_ptr(&self) -> *mut c_void {
        self.buffer.as_ptr()
    }
}
