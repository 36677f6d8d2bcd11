// Cross-device synchronisation through flags in fine-grained SVM (see runtime/src/sync.rs):
// flags[0] = last step the CPU finished, flags[1] = last step the GPU finished,
// flags[2] = abort (set by the host to release every spinning kernel), flags[3] = status
// (1 when a wait gave up after `max_spins`).

// C11 atomics with the all-SVM-devices scope where the device has them (OpenCL C 2.0, or 3.0
// with the optional feature); OpenCL 1.x atomics otherwise (PoCL on a CPU: one coherent memory).
#if (__OPENCL_C_VERSION__ == 200) || defined(__opencl_c_atomic_scope_all_devices)
#define LOAD_FLAG(p) atomic_load_explicit((volatile __global atomic_int*)(p), memory_order_acquire, memory_scope_all_svm_devices)
#define STORE_FLAG(p, v) atomic_store_explicit((volatile __global atomic_int*)(p), (v), memory_order_release, memory_scope_all_svm_devices)
#else
#define LOAD_FLAG(p) atomic_or((volatile __global int*)(p), 0)
#define STORE_FLAG(p, v) (mem_fence(CLK_GLOBAL_MEM_FENCE), atomic_xchg((volatile __global int*)(p), (v)))
#endif

// Publishes flags[index] = value. Grid: (1).
__kernel void signal_flag(__global int* flags, int index, int value) {
    STORE_FLAG(flags + index, value);
}

// Spins until flags[index] >= target or abort; gives up after max_spins polls, setting status
// and abort. Grid: (1).
__kernel void wait_flag(__global int* flags, int index, int target, int max_spins) {
    for (int spins = 0; LOAD_FLAG(flags + index) < target; spins++) {
        if (LOAD_FLAG(flags + 2) != 0) return;
        if (spins >= max_spins) {
            STORE_FLAG(flags + 3, 1);
            STORE_FLAG(flags + 2, 1);
            return;
        }
    }
}

// Spins until abort is set (fault injection: a kernel that never finishes on its own).
__kernel void hang(__global int* flags) {
    while (LOAD_FLAG(flags + 2) == 0) {
    }
}
