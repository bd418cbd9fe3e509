// Host-emulation driver for kernels/data.cu (tests/kernels_emu_data.rs).
// Compiled after the kernels' sources and the emulated device's runtime
// (kernels/emu.cpp) for one CB_DT; runs the kernels through the runtime's
// cb_emu_run, as the emulated device does.
//
// Usage: driver REQUEST RESPONSE. REQUEST is a sequence of records of
// little-endian u64 words; RESPONSE gets, per command, its length in bytes
// (u64) and then its bytes.
//   1 GEN:    CbGen (80 bytes, `words` ignored), nwords, words[nwords]
//   2 FILL:   rank, first, count, nblocks, nthreads -> count elements (cb_fill
//                                              if first == 0, else cb_fill_at)
//   3 POISON: count, nblocks, nthreads          -> count elements
//   4 VERIFY: CbExpect (32 bytes), count, nblocks, nthreads, then count
//             elements padded to 8 bytes        -> CbVerdict (32 bytes)
// A kernel runs as `nblocks` emulated blocks of `nthreads` threads (1 or a
// multiple of 8), each block started on its own thread.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

static FILE *req;
static FILE *resp;

static void fail(const char *what) {
    std::fprintf(stderr, "data_driver: %s\n", what);
    std::exit(2);
}

static bool word(u64 *w) { return std::fread(w, 8, 1, req) == 1; }

static u64 need() {
    u64 w;
    if (!word(&w)) fail("request ends inside a record");
    return w;
}

static void bytes(void *dst, u64 n) {
    if (n > 0 && std::fread(dst, 1, n, req) != n) fail("request ends inside a record");
}

// Runs kernel `name` with the parameters at `params` (cuLaunchKernel's
// layout) as `nblocks` blocks of `nthreads` threads.
static void run_blocks(const char *name, void **params, u64 nblocks, u64 nthreads) {
    int id = cb_emu_entry(name);
    if (id < 0) fail("no such kernel");
    if (nblocks == 0) nblocks = 1;
    std::vector<std::thread> threads;
    std::vector<int> rc(nblocks, 0);
    for (u64 b = 0; b < nblocks; b++) {
        threads.emplace_back([=, &rc] { rc[b] = cb_emu_run(id, params, (u32)b, (u32)nblocks, (u32)nthreads); });
    }
    for (auto &t : threads) t.join();
    for (int r : rc) {
        if (r != 0) fail("cb_emu_run refused the launch");
    }
}

static void reply(const void *data, u64 n) {
    if (std::fwrite(&n, 8, 1, resp) != 1 || (n > 0 && std::fwrite(data, 1, n, resp) != n)) {
        fail("cannot write the response");
    }
}

// Buffers of u64 words, so that every element is aligned.
static std::vector<u64> elems(u64 count) { return std::vector<u64>((count * CB_SIZE + 7) / 8); }

int main(int argc, char **argv) {
    if (argc != 3) fail("usage: data_driver REQUEST RESPONSE");
    req = std::fopen(argv[1], "rb");
    resp = std::fopen(argv[2], "wb");
    if (!req || !resp) fail("cannot open the request or the response");
    CbGen gen;
    std::memset(&gen, 0, sizeof gen);
    std::vector<u64> words;
    u64 tag;
    while (word(&tag)) {
        if (tag == 1) {
            bytes(&gen, sizeof gen);
            words.assign(need(), 0);
            bytes(words.data(), words.size() * 8);
            gen.words = words.data();
        } else if (tag == 2) {
            u64 rank = need(), first = need(), count = need(), nblocks = need(), nthreads = need();
            std::vector<u64> out = elems(count);
            u8 *dst = (u8 *)out.data();
            u32 r = (u32)rank;
            if (first == 0) {
                void *p[] = {&gen, &r, &dst, &count};
                run_blocks("cb_fill", p, nblocks, nthreads);
            } else {
                void *p[] = {&gen, &r, &dst, &first, &count};
                run_blocks("cb_fill_at", p, nblocks, nthreads);
            }
            reply(dst, count * CB_SIZE);
        } else if (tag == 3) {
            u64 count = need(), nblocks = need(), nthreads = need();
            std::vector<u64> out = elems(count);
            u8 *dst = (u8 *)out.data();
            void *p[] = {&dst, &count};
            run_blocks("cb_poison", p, nblocks, nthreads);
            reply(dst, count * CB_SIZE);
        } else if (tag == 4) {
            CbExpect e;
            bytes(&e, sizeof e);
            u64 count = need(), nblocks = need(), nthreads = need();
            std::vector<u64> in = elems(count);
            bytes(in.data(), in.size() * 8);
            CbVerdict v = {0, 0, ~(u64)0, 0};
            const u8 *recv = (const u8 *)in.data();
            CbVerdict *out = &v;
            void *p[] = {&gen, &e, &recv, &count, &out};
            run_blocks("cb_verify", p, nblocks, nthreads);
            reply(&v, sizeof v);
        } else {
            fail("unknown record");
        }
    }
    if (std::fclose(resp) != 0) fail("cannot write the response");
    return 0;
}
