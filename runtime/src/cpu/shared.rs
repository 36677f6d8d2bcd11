//! Writing disjoint parts of one output slice from several threads.

use std::marker::PhantomData;

/// A mutable slice that pool tasks write in disjoint pieces.
pub struct SharedOut<'a> {
    ptr: *mut f32,
    len: usize,
    _slice: PhantomData<&'a mut [f32]>,
}

// SAFETY: tasks only obtain disjoint ranges (the contract of `range`).
unsafe impl Send for SharedOut<'_> {}
unsafe impl Sync for SharedOut<'_> {}

impl<'a> SharedOut<'a> {
    pub fn new(out: &'a mut [f32]) -> Self {
        SharedOut {
            ptr: out.as_mut_ptr(),
            len: out.len(),
            _slice: PhantomData,
        }
    }

    /// The elements `start..start + len`.
    ///
    /// # Safety
    /// No two live references returned by this function may overlap.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn range(&self, start: usize, len: usize) -> &mut [f32] {
        assert!(
            start.checked_add(len).is_some_and(|end| end <= self.len),
            "output range out of bounds"
        );
        std::slice::from_raw_parts_mut(self.ptr.add(start), len)
    }

    /// A raw pointer to the elements `start..start + len`, for tasks that share rows but write
    /// disjoint columns of them (see [`super::packed_gemm::gemm_packed_raw`]).
    pub fn ptr_range(&self, start: usize, len: usize) -> *mut f32 {
        assert!(
            start.checked_add(len).is_some_and(|end| end <= self.len),
            "output range out of bounds"
        );
        self.ptr.wrapping_add(start)
    }
}
