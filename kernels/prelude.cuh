// collbench kernels: portability layer.
//
// Every file in kernels/ is compiled by NVRTC (no toolkit headers: this file
// defines what the others need) and, for the emulated device, by a host C++
// compiler, where each thread of a block is a host thread (blockDim.x is
// COLLBENCH_EMU_THREADS, 1 by default: one host thread a block). Only this
// file knows which of the two it is.

typedef signed char i8;
typedef unsigned char u8;
typedef unsigned short u16;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

#if defined(__CUDACC__)

#define CB_DEVICE __device__ __forceinline__
#define CB_KERNEL extern "C" __global__
// A variable every thread of the block shares: CB_SHARED_VAR(u32, ok);
#define CB_SHARED_VAR(type, name) __shared__ type name
// The collective kernel's register cap: at most 64 a thread keeps two blocks
// of 512 threads (the default) resident per SM, so auto channels cover
// every SM, and 1024-thread blocks (COLLBENCH_CUDA_THREADS) still launch.
#if __CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 4)
#define CB_MAX_REGISTERS __maxnreg__(64)
#else
#define CB_MAX_REGISTERS __launch_bounds__(1024, 1)
#endif

// A kernel parameter read in place (its address taken) rather than copied
// to local memory first: CUDA 11.7 and newer, sm_70 and newer.
#if __CUDACC_VER_MAJOR__ > 11 || (__CUDACC_VER_MAJOR__ == 11 && __CUDACC_VER_MINOR__ >= 7)
#define CB_GRID_CONSTANT __grid_constant__
#else
#define CB_GRID_CONSTANT
#endif

CB_DEVICE u32 cb_tid() { return threadIdx.x; }
CB_DEVICE u32 cb_nthreads() { return blockDim.x; }
CB_DEVICE u32 cb_block() { return blockIdx.x; }
CB_DEVICE u32 cb_nblocks() { return gridDim.x; }
CB_DEVICE u64 cb_global_tid() { return (u64)blockIdx.x * blockDim.x + threadIdx.x; }
CB_DEVICE u64 cb_global_threads() { return (u64)gridDim.x * blockDim.x; }
CB_DEVICE void cb_sync() { __syncthreads(); }
// Whether the block's threads form LL128's groups of 8 (a warp's lanes in
// fours of 8): always on a GPU, whose blocks are whole warps.
CB_DEVICE bool cb_lanes8() { return true; }

// Loads and stores other agents (peer blocks, other GPUs, the host) see:
// system scope, so they also order against host-mapped and peer memory.
CB_DEVICE u64 cb_ld_acquire(const u64 *p) {
    u64 v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
CB_DEVICE void cb_st_release(u64 *p, u64 v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
// The same at GPU scope: for peers whose kernels run on this GPU.
CB_DEVICE u64 cb_ld_acquire_gpu(const u64 *p) {
    u64 v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
CB_DEVICE void cb_st_release_gpu(u64 *p, u64 v) {
    asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
CB_DEVICE u64 cb_ld_volatile(const u64 *p) {
    u64 v;
    asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
CB_DEVICE void cb_st_volatile(u64 *p, u64 v) {
    asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
CB_DEVICE void cb_st_volatile_u32(u32 *p, u32 v) {
    asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// The low-latency protocol's 16-byte line {data0, flag0, data1, flag1}:
// one vector access, so a line is seen whole or not at all.
CB_DEVICE void cb_ll_store(u32 *line, u32 d0, u32 f0, u32 d1, u32 f1) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(line), "r"(d0), "r"(f0),
                 "r"(d1), "r"(f1)
                 : "memory");
}
CB_DEVICE void cb_ll_load(const u32 *line, u32 *d0, u32 *f0, u32 *d1, u32 *f1) {
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(*d0), "=r"(*f0), "=r"(*d1), "=r"(*f1)
                 : "l"(line)
                 : "memory");
}
// LL128: one thread's 16-byte part of a 128-byte line (two u64s), one
// vector access; `flag` says the part holds the line's sequence number
// (its second word), which the GPU needs no more than the others: a warp's
// eight parts of a line go out in one instruction (NCCL's LL128).
CB_DEVICE void cb_ll128_put(u64 *part, u64 a, u64 b, bool flag) {
    (void)flag;
    asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(part), "l"(a), "l"(b) : "memory");
}
CB_DEVICE void cb_ll128_get(const u64 *part, u64 *a, u64 *b) {
    asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(*a), "=l"(*b) : "l"(part) : "memory");
}
// The sequence number of the LL128 line at `line` (its last word).
CB_DEVICE u64 cb_ll128_flag(const u64 *line) { return cb_ld_volatile(line + 15); }
// Whether `ok` holds on every thread of this thread's group of 8 (the
// threads of one LL128 line: consecutive lanes of a warp).
CB_DEVICE bool cb_group8_all(bool ok) {
    u32 lane = threadIdx.x & 31u;
    return __all_sync(0xFFu << (lane & 24u), ok);
}
CB_DEVICE bool cb_group8_any(bool ok) {
    u32 lane = threadIdx.x & 31u;
    return __any_sync(0xFFu << (lane & 24u), ok);
}
// Brings the 8 threads of this thread's LL128 line together, so that their
// 16-byte accesses to the line issue as one instruction: lanes that took
// loops of different lengths (the last part is 8 bytes shorter) are not
// otherwise promised to reconverge before it.
CB_DEVICE void cb_group8_sync() {
    u32 lane = threadIdx.x & 31u;
    __syncwarp(0xFFu << (lane & 24u));
}
CB_DEVICE void cb_fence_system() { __threadfence_system(); }
CB_DEVICE void cb_fence_gpu() { __threadfence(); }
CB_DEVICE u64 cb_now_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
CB_DEVICE u64 cb_atomic_add(u64 *p, u64 v) { return atomicAdd(p, v); }
// Sets a block-shared flag that several threads may set at once.
CB_DEVICE void cb_mark(u32 *p) { atomicExch(p, 1u); }
CB_DEVICE void cb_pause() { __nanosleep(64); }

#else // host emulation: each thread of a block a host thread (kernels/emu.cpp)

#define CB_DEVICE static inline
#define CB_KERNEL extern "C"
#define CB_MAX_REGISTERS
#define CB_GRID_CONSTANT

struct CbEmuBlock;
struct CbEmuThread {
    u32 block;
    u32 nblocks;
    u32 tid;
    u32 nthreads;
    u64 start_ns;
    CbEmuBlock *ctx;  // the block's barriers and shared memory
};
extern thread_local CbEmuThread cb_emu;

// Shared memory: each declaration gets its place in every block's shared
// memory once, for the process (as a GPU's static __shared__ variables
// have theirs in the kernel's image), wherever and however often it runs.
// Never zeroed, as on a GPU: it starts as a pattern no kernel may rely on.
u64 cb_emu_shared_place(u64 bytes, u64 align);
void *cb_emu_shared_at(u64 offset);
#define CB_SHARED_VAR(type, name) \
    static const u64 name##_cb_place = cb_emu_shared_place(sizeof(type), alignof(type)); \
    type &name = *(type *)cb_emu_shared_at(name##_cb_place)

static inline u32 cb_tid() { return cb_emu.tid; }
static inline u32 cb_nthreads() { return cb_emu.nthreads; }
static inline u32 cb_block() { return cb_emu.block; }
static inline u32 cb_nblocks() { return cb_emu.nblocks; }
static inline u64 cb_global_tid() { return (u64)cb_emu.block * cb_emu.nthreads + cb_emu.tid; }
static inline u64 cb_global_threads() { return (u64)cb_emu.nblocks * cb_emu.nthreads; }
void cb_emu_sync();
static inline void cb_sync() {
    if (cb_emu.nthreads > 1) {
        cb_emu_sync();
    }
}
// Groups of 8 only in blocks of whole groups; a block of one thread runs
// LL128's lines alone, in order.
static inline bool cb_lanes8() { return cb_emu.nthreads >= 8; }
// A barrier of this thread's group of 8 that also votes: how 0 syncs,
// 1 answers whether `ok` holds on all 8, 2 whether on any.
bool cb_emu_group8(bool ok, int how);
static inline bool cb_group8_all(bool ok) { return cb_emu_group8(ok, 1); }
static inline bool cb_group8_any(bool ok) { return cb_emu_group8(ok, 2); }
static inline void cb_group8_sync() { (void)cb_emu_group8(true, 0); }
// LL128's line as one access of its group of 8, as a warp's one instruction
// on a GPU: every thread hands its part, then one thread stores the line
// (its sequence number last, with release), or loads it (that first, with
// acquire) and hands each thread its part.
void cb_emu_ll128_put(u64 *part, u64 a, u64 b);
void cb_emu_ll128_get(const u64 *part, u64 *a, u64 *b);
static inline u64 cb_ld_acquire(const u64 *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void cb_st_release(u64 *p, u64 v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline u64 cb_ld_acquire_gpu(const u64 *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void cb_st_release_gpu(u64 *p, u64 v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline u64 cb_ld_volatile(const u64 *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
static inline void cb_st_volatile(u64 *p, u64 v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
static inline void cb_st_volatile_u32(u32 *p, u32 v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
// A host has no 16-byte single-copy atomicity guarantee in C++: the emulation
// stores the data before the flags and loads the flags before the data, with
// release/acquire, which gives the same all-or-nothing view to the reader.
static inline void cb_ll_store(u32 *line, u32 d0, u32 f0, u32 d1, u32 f1) {
    __atomic_store_n(&line[0], d0, __ATOMIC_RELAXED);
    __atomic_store_n(&line[2], d1, __ATOMIC_RELAXED);
    __atomic_store_n(&line[1], f0, __ATOMIC_RELEASE);
    __atomic_store_n(&line[3], f1, __ATOMIC_RELEASE);
}
static inline void cb_ll_load(const u32 *line, u32 *d0, u32 *f0, u32 *d1, u32 *f1) {
    *f0 = __atomic_load_n(&line[1], __ATOMIC_ACQUIRE);
    *f1 = __atomic_load_n(&line[3], __ATOMIC_ACQUIRE);
    *d0 = __atomic_load_n(&line[0], __ATOMIC_RELAXED);
    *d1 = __atomic_load_n(&line[2], __ATOMIC_RELAXED);
}
// LL128 emulated: in blocks of groups, a group's access of a line is one
// (above); a thread alone writes a line's eight parts in order, the
// sequence number last with release, and a reader acquires it before the rest.
static inline void cb_ll128_put(u64 *part, u64 a, u64 b, bool flag) {
    if (cb_lanes8()) {
        cb_emu_ll128_put(part, a, b);
        return;
    }
    __atomic_store_n(&part[0], a, __ATOMIC_RELAXED);
    __atomic_store_n(&part[1], b, flag ? __ATOMIC_RELEASE : __ATOMIC_RELAXED);
}
static inline void cb_ll128_get(const u64 *part, u64 *a, u64 *b) {
    if (cb_lanes8()) {
        cb_emu_ll128_get(part, a, b);
        return;
    }
    *a = __atomic_load_n(&part[0], __ATOMIC_RELAXED);
    *b = __atomic_load_n(&part[1], __ATOMIC_RELAXED);
}
static inline u64 cb_ll128_flag(const u64 *line) { return __atomic_load_n(&line[15], __ATOMIC_ACQUIRE); }
static inline void cb_fence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void cb_fence_gpu() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
u64 cb_emu_now_ns();
static inline u64 cb_now_ns() { return cb_emu_now_ns(); }
static inline u64 cb_atomic_add(u64 *p, u64 v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline void cb_mark(u32 *p) { __atomic_store_n(p, 1u, __ATOMIC_RELAXED); }
void cb_emu_pause();
static inline void cb_pause() { cb_emu_pause(); }

#endif

// Unaligned-safe element access through bytes is not needed: every buffer
// the executor hands a kernel is aligned to the element size.

// Bit casts.
#if defined(__CUDACC__)
CB_DEVICE float cb_f32(u32 b) { return __uint_as_float(b); }
CB_DEVICE u32 cb_f32_bits(float x) { return __float_as_uint(x); }
CB_DEVICE double cb_f64(u64 b) { return __longlong_as_double((long long)b); }
CB_DEVICE u64 cb_f64_bits(double x) { return (u64)__double_as_longlong(x); }
#else
static inline float cb_f32(u32 b) { float x; __builtin_memcpy(&x, &b, 4); return x; }
static inline u32 cb_f32_bits(float x) { u32 b; __builtin_memcpy(&b, &x, 4); return b; }
static inline double cb_f64(u64 b) { double x; __builtin_memcpy(&x, &b, 8); return x; }
static inline u64 cb_f64_bits(double x) { u64 b; __builtin_memcpy(&b, &x, 8); return b; }
#endif

// 64x64 -> high 64 bits of the product (Lemire's range reduction), and the
// atomic minimum data.cu's verification keeps its first bad index with.
#if defined(__CUDACC__)
CB_DEVICE u64 cb_mulhi(u64 a, u64 b) { return __umul64hi(a, b); }
CB_DEVICE u64 cb_atomic_min(u64 *p, u64 v) { return atomicMin(p, v); }
#else
static inline u64 cb_mulhi(u64 a, u64 b) {
    return (u64)(((unsigned __int128)a * b) >> 64);
}
static inline u64 cb_atomic_min(u64 *p, u64 v) {
    u64 old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v < old &&
           !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}
#endif
