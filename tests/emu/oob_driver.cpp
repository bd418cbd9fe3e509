// The sanitizer test's positive control (tests/cuda_emu_sanitize.rs):
// cb_poison told to write one element past the end of its buffer, run
// through the runtime's cb_emu_run as the emulated device runs it. Built
// with -fsanitize=address it must stop with AddressSanitizer's report
// naming cb_poison; "no fault" on stdout means the sanitizer saw nothing.

#include <cstdio>
#include <cstdlib>

int main() {
    const u64 count = 64;
    u8 *buf = (u8 *)std::malloc(count * CB_SIZE);
    u64 past = count + 1;
    void *params[] = {&buf, &past};
    int id = cb_emu_entry("cb_poison");
    if (id < 0) {
        std::fprintf(stderr, "oob_driver: no kernel cb_poison\n");
        return 2;
    }
    int rc = cb_emu_run(id, params, 0, 1, 1);
    std::printf("no fault (cb_emu_run: %d)\n", rc);
    std::free(buf);
    return 0;
}
