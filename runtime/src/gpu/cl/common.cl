// Shared definitions, prepended to every program.
//
// Tensors are passed as a base pointer and an element offset (activations live in one arena).
// BC is the number of output channels a work item computes (a vector of BC lanes); weights of
// convolutions and fully-connected layers are stored in blocks of 8 output channels, so a vector
// that starts at a multiple of BC never crosses a block.

#ifndef BC
#define BC 8
#endif

#if BC == 8
#define VEC float8
#define VLOAD(p) vload8(0, (p))
#define VSTORE(v, p) vstore8((v), 0, (p))
#elif BC == 4
#define VEC float4
#define VLOAD(p) vload4(0, (p))
#define VSTORE(v, p) vstore4((v), 0, (p))
#elif BC == 2
#define VEC float2
#define VLOAD(p) vload2(0, (p))
#define VSTORE(v, p) vstore2((v), 0, (p))
#else
#define VEC float
#define VLOAD(p) (*(p))
#define VSTORE(v, p) (*(p) = (v))
#endif

// Fused activations, numbered as in the runtime's `Activation`.
#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_RELU_N1_TO_1 2
#define ACT_RELU6 3
#define ACT_TANH 4

inline float activate(float x, int act) {
    switch (act) {
    case ACT_RELU: return fmax(x, 0.0f);
    case ACT_RELU_N1_TO_1: return clamp(x, -1.0f, 1.0f);
    case ACT_RELU6: return clamp(x, 0.0f, 6.0f);
    case ACT_TANH: return tanh(x);
    default: return x;
    }
}

inline VEC activate_vec(VEC x, int act) {
    switch (act) {
    case ACT_RELU: return fmax(x, (VEC)(0.0f));
    case ACT_RELU_N1_TO_1: return clamp(x, (VEC)(-1.0f), (VEC)(1.0f));
    case ACT_RELU6: return clamp(x, (VEC)(0.0f), (VEC)(6.0f));
    case ACT_TANH: return tanh(x);
    default: return x;
    }
}

// Address of output-channel vector `co` (a multiple of BC) in weights blocked by 8 channels,
// `depth` rows per block: element (o, r) sits at ((o / 8) * depth + r) * 8 + o % 8.
inline size_t blocked(int co, int depth, int r) {
    return ((size_t)(co >> 3) * depth + r) * 8 + (co & 7);
}

// Stores the lanes of `v` whose channel co + l lies in [c0, c1); `p` points at channel co.
inline void store_lanes(VEC v, __global float* p, int co, int c0, int c1) {
    if (co >= c0 && co + BC <= c1) {
        VSTORE(v, p);
        return;
    }
    float lanes[BC];
    VSTORE(v, lanes);
    #pragma unroll
    for (int l = 0; l < BC; l++) {
        if (co + l >= c0 && co + l < c1) p[l] = lanes[l];
    }
}
