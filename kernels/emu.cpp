// collbench kernels: the emulated device's runtime (src/engine/exec/cuda/dev/emu.rs).
//
// Compiled after the concatenated kernels/ sources into one shared library
// per variant. The device calls cb_emu_run once per block, each on a host
// thread of its own, which runs the block's thread 0 and starts a host
// thread for each other thread of the block. The kernel's parameters are
// laid out as cuLaunchKernel's kernelParams (params[i] points at argument
// i's bytes; pointers are 8-byte addresses); the bytes need not be aligned:
// every argument is copied out with memcpy.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <sched.h>
#include <thread>
#include <vector>

thread_local CbEmuThread cb_emu;

u64 cb_emu_now_ns() {
    return (u64)std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

void cb_emu_pause() { sched_yield(); }

// A kernel fault a GPU would report as an illegal instruction or a hang:
// said on stderr, and the process stops (only a kernel bug gets here).
[[noreturn]] static void cb_emu_fault(const char *what) {
    fprintf(stderr, "collbench emulated device: kernel fault: %s\n", what);
    fflush(stderr);
    abort();
}

// A barrier of `expected` threads that also votes. A thread that leaves
// (its kernel returned) no longer counts, as a GPU's barriers count only
// the warps still running.
struct CbEmuBarrier {
    std::mutex m;
    std::condition_variable cv;
    u32 expected = 0;
    u32 arrived = 0;
    std::atomic<u64> round{0};
    bool all = true, any = false;          // this round's votes so far
    bool all_was = true, any_was = false;  // the last round's outcome

    void finish_round() {
        all_was = all;
        any_was = any;
        all = true;
        any = false;
        arrived = 0;
        round.fetch_add(1, std::memory_order_release);
        cv.notify_all();
    }

    // Waits for the round's other threads; the round's votes (all, any).
    void arrive(bool ok, bool *all_out, bool *any_out) {
        std::unique_lock<std::mutex> l(m);
        all = all && ok;
        any = any || ok;
        u64 mine = round.load(std::memory_order_relaxed);
        if (++arrived >= expected) {
            finish_round();
        } else {
            // The others are mostly about to come: yield a while before
            // sleeping (a sleep and its wake-up cost more than a round).
            l.unlock();
            for (int i = 0; i < 256 && round.load(std::memory_order_acquire) == mine; i++) {
                sched_yield();
            }
            l.lock();
            cv.wait(l, [&] { return round.load(std::memory_order_relaxed) != mine; });
        }
        // The next round cannot end before this thread arrives at it.
        *all_out = all_was;
        *any_out = any_was;
    }

    void leave() {
        std::lock_guard<std::mutex> l(m);
        expected--;
        if (arrived > 0 && arrived >= expected) {
            finish_round();
        }
    }
};

// The threads of one LL128 line: their barrier and the line being moved.
struct CbEmuGroup {
    CbEmuBarrier bar;
    u64 parts[8][2];
    const u64 *at[8];
};

// Shared memory of a block: at least what a GPU gives a block statically.
#define CB_EMU_SHARED_BYTES (48u << 10)

struct CbEmuBlock {
    CbEmuBarrier bar;
    std::unique_ptr<CbEmuGroup[]> groups;
    alignas(64) unsigned char shared[CB_EMU_SHARED_BYTES];
    // Starting the block's threads: they wait for `go`, and run nothing
    // when `abandon` (one of them could not be started).
    std::mutex start_m;
    std::condition_variable start_cv;
    bool go = false, abandon = false;

    explicit CbEmuBlock(u32 nthreads) {
        bar.expected = nthreads;
        u32 ngroups = nthreads >= 8 ? nthreads / 8 : 0;
        groups.reset(new CbEmuGroup[ngroups ? ngroups : 1]);
        for (u32 g = 0; g < ngroups; g++) {
            groups[g].bar.expected = 8;
        }
        // Uninitialised, as a GPU's: a pattern, not zeros.
        memset(shared, 0xA5, sizeof shared);
    }
};

u64 cb_emu_shared_place(u64 bytes, u64 align) {
    // Called once per declaration (a function-local static's initialiser).
    static std::mutex m;
    static u64 used = 0;
    std::lock_guard<std::mutex> l(m);
    u64 at = (used + align - 1) / align * align;
    if (at + bytes > CB_EMU_SHARED_BYTES) {
        cb_emu_fault("shared memory beyond the block's 48 KiB");
    }
    used = at + bytes;
    return at;
}

void *cb_emu_shared_at(u64 offset) { return cb_emu.ctx->shared + offset; }

void cb_emu_sync() {
    bool all, any;
    cb_emu.ctx->bar.arrive(true, &all, &any);
}

static CbEmuGroup &cb_emu_my_group() {
    if (cb_emu.nthreads < 8 || cb_emu.nthreads % 8 != 0) {
        cb_emu_fault("a group-of-8 operation in a block that is not whole groups of 8");
    }
    return cb_emu.ctx->groups[cb_emu.tid / 8];
}

bool cb_emu_group8(bool ok, int how) {
    bool all, any;
    cb_emu_my_group().bar.arrive(ok, &all, &any);
    return how == 1 ? all : how == 2 ? any : true;
}

// The line whose parts a group's eight threads handed: one line, each part
// at its lane's place, or a fault (on a GPU, not one access).
static u64 *cb_emu_group_line(CbEmuGroup &g) {
    for (u32 k = 1; k < 8; k++) {
        if (g.at[k] != g.at[0] + 2 * k) {
            cb_emu_fault("the 8 threads of an LL128 group named parts of different lines");
        }
    }
    return (u64 *)g.at[0];
}

void cb_emu_ll128_put(u64 *part, u64 a, u64 b) {
    CbEmuGroup &g = cb_emu_my_group();
    u32 lane = cb_emu.tid & 7u;
    g.at[lane] = part;
    g.parts[lane][0] = a;
    g.parts[lane][1] = b;
    bool all, any;
    g.bar.arrive(true, &all, &any);
    if (lane == 0) {
        u64 *line = cb_emu_group_line(g);
        for (u32 k = 0; k < 8; k++) {
            __atomic_store_n(&line[2 * k], g.parts[k][0], __ATOMIC_RELAXED);
            __atomic_store_n(&line[2 * k + 1], g.parts[k][1],
                             k == 7 ? __ATOMIC_RELEASE : __ATOMIC_RELAXED);
        }
    }
    // The parts are not handed again before the line is stored.
    g.bar.arrive(true, &all, &any);
}

void cb_emu_ll128_get(const u64 *part, u64 *a, u64 *b) {
    CbEmuGroup &g = cb_emu_my_group();
    u32 lane = cb_emu.tid & 7u;
    g.at[lane] = part;
    bool all, any;
    g.bar.arrive(true, &all, &any);
    if (lane == 0) {
        const u64 *line = cb_emu_group_line(g);
        u64 seq = __atomic_load_n(&line[15], __ATOMIC_ACQUIRE);
        for (u32 k = 0; k < 8; k++) {
            g.parts[k][0] = __atomic_load_n(&line[2 * k], __ATOMIC_RELAXED);
            g.parts[k][1] = k == 7 ? seq : __atomic_load_n(&line[2 * k + 1], __ATOMIC_RELAXED);
        }
    }
    g.bar.arrive(true, &all, &any);
    // Taken before this thread's next group operation, whose first barrier
    // the leader waits at before it writes the parts again.
    *a = g.parts[lane][0];
    *b = g.parts[lane][1];
}

static_assert(sizeof(void *) == 8, "the emulated device needs 64-bit addresses");

// Every entry point with the size of each of its parameters, in order.
static const struct {
    const char *name;
    int nargs;
    u64 sizes[5];
} cb_emu_kernels[] = {
    {"cb_collective", 1, {sizeof(CbRank)}},
    {"cb_fill", 4, {sizeof(CbGen), sizeof(u32), sizeof(u8 *), sizeof(u64)}},
    {"cb_fill_at", 5, {sizeof(CbGen), sizeof(u32), sizeof(u8 *), sizeof(u64), sizeof(u64)}},
    {"cb_poison", 2, {sizeof(u8 *), sizeof(u64)}},
    {"cb_verify", 5, {sizeof(CbGen), sizeof(CbExpect), sizeof(u8 *), sizeof(u64), sizeof(CbVerdict *)}},
};
static const int cb_emu_count = (int)(sizeof cb_emu_kernels / sizeof cb_emu_kernels[0]);

// The id of entry point `name`, or -1.
extern "C" int cb_emu_entry(const char *name) {
    for (int i = 0; i < cb_emu_count; i++) {
        if (strcmp(name, cb_emu_kernels[i].name) == 0) {
            return i;
        }
    }
    return -1;
}

// How many parameters entry `id` takes (-1 for no such entry); their sizes
// go to sizes[0 .. min(count, cap)].
extern "C" int cb_emu_arg_sizes(int id, u64 *sizes, int cap) {
    if (id < 0 || id >= cb_emu_count) {
        return -1;
    }
    for (int i = 0; i < cb_emu_kernels[id].nargs && i < cap; i++) {
        sizes[i] = cb_emu_kernels[id].sizes[i];
    }
    return cb_emu_kernels[id].nargs;
}

template <class T> static T cb_emu_arg(void **params, int i) {
    T v;
    memcpy(&v, params[i], sizeof v);
    return v;
}

// Runs entry `id`'s kernel as thread `tid` of block `block`.
static void cb_emu_kernel(int id, void **p) {
    switch (id) {
    case 0:
        cb_collective(cb_emu_arg<CbRank>(p, 0));
        break;
    case 1:
        cb_fill(cb_emu_arg<CbGen>(p, 0), cb_emu_arg<u32>(p, 1), cb_emu_arg<u8 *>(p, 2),
                cb_emu_arg<u64>(p, 3));
        break;
    case 2:
        cb_fill_at(cb_emu_arg<CbGen>(p, 0), cb_emu_arg<u32>(p, 1), cb_emu_arg<u8 *>(p, 2),
                   cb_emu_arg<u64>(p, 3), cb_emu_arg<u64>(p, 4));
        break;
    case 3:
        cb_poison(cb_emu_arg<u8 *>(p, 0), cb_emu_arg<u64>(p, 1));
        break;
    case 4:
        cb_verify(cb_emu_arg<CbGen>(p, 0), cb_emu_arg<CbExpect>(p, 1),
                  cb_emu_arg<const u8 *>(p, 2), cb_emu_arg<u64>(p, 3),
                  cb_emu_arg<CbVerdict *>(p, 4));
        break;
    default:
        break;
    }
}

static void cb_emu_thread(int id, void **p, u32 block, u32 nblocks, u32 tid, u32 nthreads,
                          CbEmuBlock *ctx) {
    cb_emu.block = block;
    cb_emu.nblocks = nblocks;
    cb_emu.tid = tid;
    cb_emu.nthreads = nthreads;
    cb_emu.ctx = ctx;
    cb_emu.start_ns = cb_emu_now_ns();
    cb_emu_kernel(id, p);
    // Gone from the barriers the others may still wait at (a block of
    // several threads is whole groups of 8: cb_emu_run checked).
    if (nthreads >= 8) {
        ctx->groups[tid / 8].bar.leave();
    }
    ctx->bar.leave();
}

// Runs block `block` of `nblocks` of entry `id` with `nthreads` threads,
// thread 0 on the calling thread; false when they could not all be
// started (then it ran on none of them).
static bool cb_emu_block(int id, void **p, u32 block, u32 nblocks, u32 nthreads) {
    std::unique_ptr<CbEmuBlock> owned;
    try {
        owned.reset(new CbEmuBlock(nthreads));
    } catch (...) {
        return false;
    }
    CbEmuBlock *ctx = owned.get();
    std::vector<std::thread> others;
    bool started = true;
    try {
        others.reserve(nthreads - 1);
        for (u32 t = 1; t < nthreads; t++) {
            others.emplace_back([=] {
                {
                    std::unique_lock<std::mutex> l(ctx->start_m);
                    ctx->start_cv.wait(l, [&] { return ctx->go; });
                    if (ctx->abandon) {
                        return;
                    }
                }
                cb_emu_thread(id, p, block, nblocks, t, nthreads, ctx);
            });
        }
    } catch (...) {
        started = false;
    }
    {
        std::lock_guard<std::mutex> l(ctx->start_m);
        ctx->go = true;
        ctx->abandon = !started;
    }
    ctx->start_cv.notify_all();
    if (started) {
        cb_emu_thread(id, p, block, nblocks, 0, nthreads, ctx);
    }
    for (auto &t : others) {
        t.join();
    }
    return started;
}

// Runs block `block` of `nblocks` of entry `id` with `nthreads` threads.
// 0 when it ran so; 1 when the host would not start its other threads and
// it ran as one thread instead (the kernels take any width, and a line of
// LL128 written by one thread is read whole by a group, and the other way
// round); -1 when it could not run at all; -2 for a width the kernels
// cannot take (only 1, or whole groups of 8). No exception leaves: one
// thrown inside a running kernel ends the process, as a GPU's fault would.
extern "C" int cb_emu_run(int id, void **p, u32 block, u32 nblocks, u32 nthreads) noexcept {
    if (nthreads == 0 || (nthreads > 1 && nthreads % 8 != 0)) {
        return -2;
    }
    if (cb_emu_block(id, p, block, nblocks, nthreads)) {
        return 0;
    }
    if (nthreads > 1 && cb_emu_block(id, p, block, nblocks, 1)) {
        return 1;
    }
    return -1;
}
