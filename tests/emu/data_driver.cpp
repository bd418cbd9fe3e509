// Host-emulation driver for kernels/data.cu (tests/kernels_emu_data.rs).
// Compiled after prelude.cuh, abi.cuh, elem.cuh and data.cu for one CB_DT.
//
// Usage: driver REQUEST RESPONSE. REQUEST is a sequence of records of
// little-endian u64 words; RESPONSE gets, per command, its length in bytes
// (u64) and then its bytes.
//   1 GEN:    CbGen (80 bytes, `words` ignored), nwords, words[nwords]
//   2 FILL:   rank, first, count, nblocks       -> count elements (cb_fill if
//                                                  first == 0, else cb_fill_at)
//   3 POISON: count, nblocks                    -> count elements
//   4 VERIFY: CbExpect (32 bytes), count, nblocks, then count elements
//             padded to 8 bytes                 -> CbVerdict (32 bytes)
// A kernel runs as `nblocks` emulated blocks, each on its own thread.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

thread_local CbEmuThread cb_emu;
u64 cb_emu_now_ns() { return 0; }
void cb_emu_pause() { std::this_thread::yield(); }

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

static void run_blocks(u64 nblocks, const std::function<void()> &kernel) {
    if (nblocks == 0) nblocks = 1;
    std::vector<std::thread> threads;
    for (u64 b = 0; b < nblocks; b++) {
        threads.emplace_back([b, nblocks, &kernel] {
            cb_emu.block = (u32)b;
            cb_emu.nblocks = (u32)nblocks;
            cb_emu.start_ns = 0;
            kernel();
        });
    }
    for (auto &t : threads) t.join();
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
            u64 rank = need(), first = need(), count = need(), nblocks = need();
            std::vector<u64> out = elems(count);
            u8 *dst = (u8 *)out.data();
            run_blocks(nblocks, [&] {
                if (first == 0) {
                    cb_fill(gen, (u32)rank, dst, count);
                } else {
                    cb_fill_at(gen, (u32)rank, dst, first, count);
                }
            });
            reply(dst, count * CB_SIZE);
        } else if (tag == 3) {
            u64 count = need(), nblocks = need();
            std::vector<u64> out = elems(count);
            u8 *dst = (u8 *)out.data();
            run_blocks(nblocks, [&] { cb_poison(dst, count); });
            reply(dst, count * CB_SIZE);
        } else if (tag == 4) {
            CbExpect e;
            bytes(&e, sizeof e);
            u64 count = need(), nblocks = need();
            std::vector<u64> in = elems(count);
            bytes(in.data(), in.size() * 8);
            CbVerdict v = {0, 0, ~(u64)0, 0};
            run_blocks(nblocks, [&] { cb_verify(gen, e, (const u8 *)in.data(), count, &v); });
            reply(&v, sizeof v);
        } else {
            fail("unknown record");
        }
    }
    if (std::fclose(resp) != 0) fail("cannot write the response");
    return 0;
}
