// collbench kernels: the emulated device's runtime (src/engine/exec/cuda/dev/emu.rs).
//
// Compiled after the concatenated kernels/ sources into one shared library
// per variant. A block is one host thread: the device calls cb_emu_run once
// per block, each on its own thread, with the kernel's parameters laid out
// as cuLaunchKernel's kernelParams (params[i] points at argument i's bytes;
// pointers are 8-byte addresses). The bytes need not be aligned: every
// argument is copied out with memcpy.
#include <chrono>
#include <cstring>
#include <sched.h>

thread_local CbEmuThread cb_emu;

u64 cb_emu_now_ns() {
    return (u64)std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

void cb_emu_pause() { sched_yield(); }

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

// Runs block `block` of `nblocks` of entry `id` on the calling thread.
extern "C" void cb_emu_run(int id, void **p, u32 block, u32 nblocks) {
    cb_emu.block = block;
    cb_emu.nblocks = nblocks;
    cb_emu.start_ns = cb_emu_now_ns();
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
