// Host emulation of the collective kernel (tests/kernels_emu_coll.rs).
// Compiled after the concatenated kernels/ sources. Every block of every
// rank is a host thread; device memory is host memory. Reads a request
// (see the test for the format), runs the operation once per listed
// protocol (restoring the inputs before each run, keeping the connections'
// counters, as a real world does), and writes every rank's buffers.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

static FILE *in;

static void get(void *p, size_t n) {
    if (n && fread(p, 1, n, in) != n) {
        fprintf(stderr, "short request\n");
        exit(2);
    }
}

template <class T> static T get1() {
    T v;
    get(&v, sizeof v);
    return v;
}

static u8 *alloc(size_t n) {
    void *p = nullptr;
    if (posix_memalign(&p, 128, n ? n : 128) != 0) {
        exit(2);
    }
    memset(p, 0, n ? n : 128);
    return (u8 *)p;
}

struct Rank {
    u32 nch;
    std::vector<CbStep> steps;
    std::vector<u32> chan_start;
    std::vector<CbConn> ins, outs;
    u64 bytes[3];
    u8 *bufs[3];
    std::vector<u8> init[2];
    std::vector<CbProgress> progress;
};

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: driver REQUEST OUTPUT\n");
        return 2;
    }
    in = fopen(argv[1], "rb");
    if (!in) {
        return 2;
    }
    u32 magic = get1<u32>();
    if (magic != 0x4D454243u) {
        fprintf(stderr, "bad magic\n");
        return 2;
    }
    u32 nranks = get1<u32>();
    u32 nprotos = get1<u32>();
    std::vector<u32> protos(nprotos);
    get(protos.data(), 4 * nprotos);
    u64 arena_bytes = get1<u64>();
    u64 timeout_ns = get1<u64>();
    u8 *arena = alloc(arena_bytes);
    std::vector<Rank> ranks(nranks);
    for (auto &r : ranks) {
        r.nch = get1<u32>();
        u32 nsteps = get1<u32>(), nins = get1<u32>(), nouts = get1<u32>();
        get(r.bytes, sizeof r.bytes);
        r.steps.resize(nsteps);
        get(r.steps.data(), sizeof(CbStep) * nsteps);
        r.chan_start.resize(r.nch + 1);
        get(r.chan_start.data(), 4 * (r.nch + 1));
        r.ins.resize(nins);
        get(r.ins.data(), sizeof(CbConn) * nins);
        r.outs.resize(nouts);
        get(r.outs.data(), sizeof(CbConn) * nouts);
        for (auto *list : {&r.ins, &r.outs}) {
            for (auto &c : *list) {
                c.tail = (u64 *)(arena + (u64)c.tail);
                c.head = (u64 *)(arena + (u64)c.head);
                c.buf = arena + (u64)c.buf;
                c.ll = arena + (u64)c.ll;
            }
        }
        for (int b = 0; b < 3; b++) {
            r.bufs[b] = alloc(r.bytes[b]);
        }
        for (int b = 0; b < 2; b++) {
            r.init[b].resize(r.bytes[b]);
            get(r.init[b].data(), r.bytes[b]);
        }
        r.progress.assign(r.nch, CbProgress{});
    }
    CbStatus status{};
    for (u32 proto : protos) {
        std::vector<std::thread> threads;
        for (u32 q = 0; q < nranks; q++) {
            Rank &r = ranks[q];
            for (int b = 0; b < 2; b++) {
                if (r.bytes[b]) {
                    memcpy(r.bufs[b], r.init[b].data(), r.bytes[b]);
                }
            }
            CbRank k{};
            k.steps = r.steps.data();
            k.chan_start = r.chan_start.data();
            k.ins = r.ins.data();
            k.outs = r.outs.data();
            for (int b = 0; b < 3; b++) {
                k.bufs[b] = r.bufs[b];
            }
            k.progress = r.progress.data();
            k.status = &status;
            k.timeout_ns = timeout_ns;
            k.rank = q;
            k.nranks = nranks;
            k.proto = proto;
            k.nchannels = r.nch;
            for (u32 c = 0; c < r.nch; c++) {
                threads.emplace_back([k, c, &r]() {
                    cb_emu.block = c;
                    cb_emu.nblocks = r.nch;
                    cb_collective(k);
                });
            }
        }
        for (auto &t : threads) {
            t.join();
        }
        if (status.abort) {
            break;
        }
    }
    FILE *out = fopen(argv[2], "wb");
    if (!out) {
        return 2;
    }
    fwrite(&status, sizeof status, 1, out);
    for (auto &r : ranks) {
        for (u32 c = 0; c < r.nch; c++) {
            fwrite(&r.progress[c].step, 8, 1, out);
        }
        for (int b = 0; b < 2; b++) {
            fwrite(r.bufs[b], 1, r.bytes[b], out);
        }
    }
    fclose(out);
    return status.abort ? 3 : 0;
}
