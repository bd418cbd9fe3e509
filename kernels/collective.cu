// collbench kernels: the persistent collective kernel. One launch per rank
// per operation; block c walks channel c's steps (see abi.cuh). Thread 0 of
// a block does the waiting on flags; every thread of the block moves data.
//
// Simple protocol, per step:
//   thread 0: wait until every input message has arrived (tail) and every
//             output slot is free (head); publish the slot addresses;
//   barrier;  all threads: value = src op dst op received..., finish,
//             write dst and every output slot;
//   barrier;  thread 0: system fence, then post outputs (tail, release) and
//             release inputs (head, release).
// Low-latency protocol: thread 0 waits only for free output slots; every
// thread polls its own 16-byte lines of the input slots (data and sequence
// number in one store) and writes its lines of the output slots the same
// way, so a message is one store per line and no separate flag.
//
// Every wait gives up after `timeout_ns` or when another rank gave up
// (status->abort, or status->stop from the host): the first to give up
// records where, and the kernel returns early. The host turns that record into the timeout error and the
// flight recorder's last word.

#define CB_WAIT_RECV 1u
#define CB_WAIT_SEND 2u
#define CB_POLL_CHECK 1024u
// A GPU's status record is host-mapped memory: every thread of a low-latency
// wait polls, so it is read only every this many polls (a read crosses
// PCIe); the clock, a register, is read every CB_POLL_CHECK.
#define CB_ABORT_CHECK (16u * CB_POLL_CHECK)

struct CbBlock {
    const CbStep *step;
    const CbRank *r;
    u32 channel;
    u32 index;       // the step's index in its channel
    u64 wait_start;  // when the current wait began (0: not yet timed)
    u64 waiting;     // on whom, as the progress record has it (0: no one)
    u32 polls;
};

// Whether the kernels must stop: a rank of this GPU gave up (`abort`), or
// the host stopped them (`stop`: another GPU's or process's rank gave up,
// or the run ends). The two words have one writer side each: atomics on
// host-mapped memory are atomic among one GPU's threads, not between the
// host and a GPU or between GPUs.
CB_DEVICE bool cb_stopping(const CbStatus *s) {
    return (cb_ld_volatile(&s->abort) | cb_ld_volatile(&s->stop)) != 0;
}

// Records that this rank gave up waiting and tells every rank to stop.
CB_DEVICE void cb_give_up(CbBlock *b, u32 peer, u32 kind, u64 waited) {
    CbStatus *s = b->r->status;
#if defined(__CUDACC__)
    // System scope: the record is host-mapped (this GPU's own; the host
    // carries a stop to the other GPUs' records).
    unsigned long long prev = atomicCAS_system((unsigned long long *)&s->abort, 0ull, 1ull);
#else
    u64 prev = 0;
    __atomic_compare_exchange_n(&s->abort, &prev, 1ull, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
#endif
    if (prev == 0) {
        s->rank = b->r->rank;
        s->channel = b->channel;
        s->step = b->index;
        s->peer = peer;
        s->kind = kind;
        s->waited_ns = waited;
        cb_fence_system();
        // Readers poll `abort` first, then read the record: store it again
        // after the record so a reader that sees 2 sees the record whole.
        cb_st_release(&s->abort, 2ull);
    }
}

// One more poll of a wait; false when the wait must end (timeout or abort).
CB_DEVICE bool cb_keep_waiting(CbBlock *b, u32 peer, u32 kind) {
    if (++b->polls % CB_POLL_CHECK != 0) {
        return true;
    }
    cb_pause();
    if (b->polls % CB_ABORT_CHECK == 0 && cb_stopping(b->r->status)) {
        return false;
    }
    u64 now = cb_now_ns();
    u64 on = 1ull + peer + (kind == CB_WAIT_SEND ? (1ull << 32) : 0ull);
    if (b->waiting != on) {
        // Blocked longer than a few polls, or now on another peer of the
        // step (the one before delivered): tell the recorder where and on
        // whom (progress is host-mapped: written only here, never per
        // step). The step's timeout counts from its first wait.
        b->waiting = on;
        if (cb_tid() == 0) {
            cb_st_volatile(&b->r->progress[b->channel].step, b->index);
            cb_st_volatile(&b->r->progress[b->channel].wait_on, on);
        }
    }
    if (b->wait_start == 0) {
        b->wait_start = now;
        return true;
    }
    if (now - b->wait_start > b->r->timeout_ns) {
        cb_give_up(b, peer, kind, now - b->wait_start);
        return false;
    }
    return true;
}

// Flag accesses at the scope the connections need (see CB_PROTO_SYS).
CB_DEVICE bool cb_sys(const CbRank *r) { return (r->proto & CB_PROTO_SYS) != 0; }
CB_DEVICE u64 cb_flag_acquire(const CbRank *r, const u64 *p) {
    return cb_sys(r) ? cb_ld_acquire(p) : cb_ld_acquire_gpu(p);
}
CB_DEVICE void cb_flag_release(const CbRank *r, u64 *p, u64 v) {
    if (cb_sys(r)) {
        cb_st_release(p, v);
    } else {
        cb_st_release_gpu(p, v);
    }
}

// memcpy for small, mostly constant sizes (NVRTC has no <cstring>).
CB_DEVICE void cb_bytes(void *dst, const void *src, u32 n) {
    u8 *d = (u8 *)dst;
    const u8 *s = (const u8 *)src;
    for (u32 i = 0; i < n; i++) {
        d[i] = s[i];
    }
}

// 16 bytes, the unit of vector loads and stores.
struct CbVec {
    u32 w[4];
};

#define CB_VEC_ELEMS (16u / CB_SIZE)

CB_DEVICE CbVec cb_load_vec(const u8 *p) {
#if defined(__CUDACC__)
    uint4 v = *(const uint4 *)p;
    CbVec r;
    r.w[0] = v.x;
    r.w[1] = v.y;
    r.w[2] = v.z;
    r.w[3] = v.w;
    return r;
#else
    CbVec r;
    __builtin_memcpy(&r, p, 16);
    return r;
#endif
}

CB_DEVICE void cb_store_vec(u8 *p, CbVec v) {
#if defined(__CUDACC__)
    *(uint4 *)p = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
#else
    __builtin_memcpy(p, &v, 16);
#endif
}

CB_DEVICE cb_bits cb_lane(const CbVec &v, u32 k) {
    cb_bits e;
    const u8 *bytes = (const u8 *)v.w;
    cb_bytes(&e, bytes + k * CB_SIZE, CB_SIZE);
    return e;
}

CB_DEVICE void cb_set_lane(CbVec &v, u32 k, cb_bits e) {
    u8 *bytes = (u8 *)v.w;
    cb_bytes(bytes + k * CB_SIZE, &e, CB_SIZE);
}

CB_DEVICE CbVec cb_combine(CbVec a, CbVec b) {
    CbVec r;
#pragma unroll
    for (u32 k = 0; k < CB_VEC_ELEMS; k++) {
        cb_set_lane(r, k, cb_apply(cb_lane(a, k), cb_lane(b, k)));
    }
    return r;
}

CB_DEVICE CbVec cb_finish_vec(CbVec a, u32 nranks) {
#if CB_OP == CB_AVG
    CbVec r;
#pragma unroll
    for (u32 k = 0; k < CB_VEC_ELEMS; k++) {
        cb_set_lane(r, k, cb_finish(cb_lane(a, k), nranks));
    }
    return r;
#else
    (void)nranks;
    return a;
#endif
}

// What a step does to values besides combining them: avg divides the
// result by the rank count (finish); premulsum multiplies the step's source,
// this rank's input, by the scalar before combining (pre).
struct CbFx {
    bool finish;
    bool pre;
    u32 nranks;
    cb_bits scalar;
};

CB_DEVICE cb_bits cb_pre(const CbFx &fx, cb_bits x) {
#if CB_OP == CB_PREMULSUM
    return fx.pre ? cb_prod(x, fx.scalar) : x;
#else
    (void)fx;
    return x;
#endif
}

CB_DEVICE CbVec cb_pre_vec(const CbFx &fx, CbVec a) {
#if CB_OP == CB_PREMULSUM
    if (!fx.pre) {
        return a;
    }
    CbVec r;
#pragma unroll
    for (u32 k = 0; k < CB_VEC_ELEMS; k++) {
        cb_set_lane(r, k, cb_prod(cb_lane(a, k), fx.scalar));
    }
    return r;
#else
    (void)fx;
    return a;
#endif
}

// Where one step reads and writes.
struct CbIo {
    const u8 *in[CB_MAX_PEERS + 2];  // src, dst-as-input, then received slots
    u32 nin;
    u8 *dst;                         // may be null
    u8 *out[CB_MAX_PEERS];           // output slots (simple protocol)
    u32 nout;
};

CB_DEVICE bool cb_aligned16(const void *p) { return ((u64)p & 15ull) == 0; }

// The common shapes of a step (a copy; one input and a received message;
// at most one output slot) with every pointer in a register: the general
// loop below indexes io.in[k] at run time, which keeps them in local memory
// and costs a load before every vector. U vectors in flight per thread.
template <u32 NIN, u32 U>
CB_DEVICE void cb_move_fixed(const u8 *in0, const u8 *in1, u8 *dst, u8 *out0, u64 nv,
                             const CbFx &fx) {
    u32 t = cb_tid(), nt = cb_nthreads();
    u64 i = t;
    for (; i + (U - 1ull) * nt < nv; i += (u64)U * nt) {
        CbVec v[U];
#pragma unroll
        for (u32 u = 0; u < U; u++) {
            v[u] = cb_pre_vec(fx, cb_load_vec(in0 + (i + (u64)u * nt) * 16));
        }
        if (NIN == 2) {
            CbVec w[U];
#pragma unroll
            for (u32 u = 0; u < U; u++) {
                w[u] = cb_load_vec(in1 + (i + (u64)u * nt) * 16);
            }
#pragma unroll
            for (u32 u = 0; u < U; u++) {
                v[u] = cb_combine(v[u], w[u]);
            }
        }
#pragma unroll
        for (u32 u = 0; u < U; u++) {
            u64 off = (i + (u64)u * nt) * 16;
            CbVec x = fx.finish ? cb_finish_vec(v[u], fx.nranks) : v[u];
            if (dst) {
                cb_store_vec(dst + off, x);
            }
            if (out0) {
                cb_store_vec(out0 + off, x);
            }
        }
    }
    for (; i < nv; i += nt) {
        u64 off = i * 16;
        CbVec v = cb_pre_vec(fx, cb_load_vec(in0 + off));
        if (NIN == 2) {
            v = cb_combine(v, cb_load_vec(in1 + off));
        }
        if (fx.finish) {
            v = cb_finish_vec(v, fx.nranks);
        }
        if (dst) {
            cb_store_vec(dst + off, v);
        }
        if (out0) {
            cb_store_vec(out0 + off, v);
        }
    }
}

// Elements [lo, hi) moved one at a time, U in flight per thread: the path
// of addresses that are not 16-byte aligned alike (a block of an all-to-all
// at an odd offset, read from or written to an aligned slot).
CB_DEVICE void cb_move_elems(const CbIo &io, u64 lo, u64 hi, const CbFx &fx) {
    const u32 U = 8;
    u32 nt = cb_nthreads();
    u64 i = lo + cb_tid();
    for (; i + (U - 1ull) * nt < hi; i += (u64)U * nt) {
        cb_bits v[U];
#pragma unroll
        for (u32 u = 0; u < U; u++) {
            v[u] = cb_pre(fx, ((const cb_bits *)io.in[0])[i + (u64)u * nt]);
        }
        for (u32 k = 1; k < io.nin; k++) {
            cb_bits w[U];
#pragma unroll
            for (u32 u = 0; u < U; u++) {
                w[u] = ((const cb_bits *)io.in[k])[i + (u64)u * nt];
            }
#pragma unroll
            for (u32 u = 0; u < U; u++) {
                v[u] = cb_apply(v[u], w[u]);
            }
        }
#pragma unroll
        for (u32 u = 0; u < U; u++) {
            u64 e = i + (u64)u * nt;
            cb_bits x = fx.finish ? cb_finish(v[u], fx.nranks) : v[u];
            if (io.dst) {
                ((cb_bits *)io.dst)[e] = x;
            }
            for (u32 k = 0; k < io.nout; k++) {
                ((cb_bits *)io.out[k])[e] = x;
            }
        }
    }
#ifdef CB_TEST_OVERREAD
    // A planted fault for tests/cuda_emu_sanitize.rs only (never defined
    // for NVRTC): one element read past the range, a read that changes no
    // value, which only the emulated device's memory check can see.
    if (i < hi) {
        volatile cb_bits over = ((const cb_bits *)io.in[0])[hi];
        (void)over;
    }
#endif
    for (; i < hi; i += nt) {
        cb_bits v = cb_pre(fx, ((const cb_bits *)io.in[0])[i]);
        for (u32 k = 1; k < io.nin; k++) {
            v = cb_apply(v, ((const cb_bits *)io.in[k])[i]);
        }
        if (fx.finish) {
            v = cb_finish(v, fx.nranks);
        }
        if (io.dst) {
            ((cb_bits *)io.dst)[i] = v;
        }
        for (u32 k = 0; k < io.nout; k++) {
            ((cb_bits *)io.out[k])[i] = v;
        }
    }
}

// Elements before the first 16-byte boundary when every address of `io` is
// the same distance from one (0 when aligned), or `len` when they differ
// (then no element lines up for vectors).
CB_DEVICE u64 cb_head_elems(const CbIo &io, u64 len) {
    u64 m = (u64)io.in[0] & 15ull;
    bool alike = io.dst == 0 || ((u64)io.dst & 15ull) == m;
    for (u32 k = 1; k < io.nin; k++) {
        alike = alike && ((u64)io.in[k] & 15ull) == m;
    }
    for (u32 k = 0; k < io.nout; k++) {
        alike = alike && ((u64)io.out[k] & 15ull) == m;
    }
    if (!alike || m % CB_SIZE != 0) {
        return len;
    }
    u64 head = ((16ull - m) & 15ull) / CB_SIZE;
    return head < len ? head : len;
}

// A copy between addresses equally far from an 8-byte boundary (but not
// from a 16-byte one: an aligned slot and a block at an odd offset):
// elements up to the boundary, then 8-byte words, U in flight per thread.
// Returns the elements it did not move (the tail), or `len` when the
// addresses do not line up even at 8 bytes.
CB_DEVICE u64 cb_copy_words(const CbIo &io, u64 len, const CbFx &fx) {
    const u32 U = 8;
    u64 m = (u64)io.in[0] & 7ull;
    bool alike = io.nin == 1 && m % CB_SIZE == 0 && (io.dst == 0 || ((u64)io.dst & 7ull) == m);
    for (u32 k = 0; k < io.nout; k++) {
        alike = alike && ((u64)io.out[k] & 7ull) == m;
    }
#if CB_OP == CB_AVG
    // A finishing copy divides: not a copy of bytes.
    alike = alike && !fx.finish;
#elif CB_OP == CB_PREMULSUM
    // A premultiplied copy scales: not a copy of bytes either.
    alike = alike && !fx.pre;
#endif
    if (!alike) {
        return 0;
    }
    u64 head = ((8ull - m) & 7ull) / CB_SIZE;
    head = head < len ? head : len;
    cb_move_elems(io, 0, head, fx);
    u64 sk = head * CB_SIZE;
    u64 nw = (len - head) * CB_SIZE / 8;
    const u64 *src = (const u64 *)(io.in[0] + sk);
    u64 *dst = io.dst ? (u64 *)(io.dst + sk) : 0;
    u32 nt = cb_nthreads();
    u64 i = cb_tid();
    for (; i + (U - 1ull) * nt < nw; i += (u64)U * nt) {
        u64 v[U];
#pragma unroll
        for (u32 u = 0; u < U; u++) {
            v[u] = src[i + (u64)u * nt];
        }
#pragma unroll
        for (u32 u = 0; u < U; u++) {
            u64 w = i + (u64)u * nt;
            if (dst) {
                dst[w] = v[u];
            }
            for (u32 k = 0; k < io.nout; k++) {
                ((u64 *)(io.out[k] + sk))[w] = v[u];
            }
        }
    }
    for (; i < nw; i += nt) {
        u64 v = src[i];
        if (dst) {
            dst[i] = v;
        }
        for (u32 k = 0; k < io.nout; k++) {
            ((u64 *)(io.out[k] + sk))[i] = v;
        }
    }
    return head + nw * 8 / CB_SIZE;
}

// The simple protocol's data movement: value of every element, written to
// dst and every output slot. Vectors of 16 bytes over the aligned middle
// when every address is equally far from alignment; elements before and
// after it (and everywhere when the addresses differ) one at a time.
CB_DEVICE void cb_move(const CbIo &io, u64 len, const CbFx &fx) {
    u64 head = cb_head_elems(io, len);
    if (head == len && len * CB_SIZE >= 64) {
        // Not aligned alike at 16 bytes: 8-byte words for a copy that is at 8.
        u64 done = cb_copy_words(io, len, fx);
        if (done != 0) {
            cb_move_elems(io, done, len, fx);
            return;
        }
    }
    if (head != 0) {
        cb_move_elems(io, 0, head, fx);
        if (head == len) {
            return;
        }
    }
    // The aligned middle: `sk` bytes in, `bytes` long.
    u64 sk = head * CB_SIZE;
    u64 bytes = ((len - head) * CB_SIZE) & ~15ull;
    u64 body = head + bytes / CB_SIZE;
    u32 t = cb_tid(), nt = cb_nthreads();
    if (bytes != 0 && io.nout <= 1 && (io.nin == 1 || io.nin == 2)) {
        u8 *out0 = io.nout == 1 ? io.out[0] + sk : 0;
        u8 *dst = io.dst ? io.dst + sk : 0;
        if (io.nin == 1) {
            cb_move_fixed<1, 8>(io.in[0] + sk, 0, dst, out0, bytes / 16, fx);
        } else {
            cb_move_fixed<2, 4>(io.in[0] + sk, io.in[1] + sk, dst, out0, bytes / 16, fx);
        }
    } else if (bytes != 0) {
        u64 nv = bytes / 16;
        u64 i = t;
        // Four vectors in flight per thread: more bytes per memory round trip.
        for (; i + 3ull * nt < nv; i += 4ull * nt) {
            CbVec v[4];
#pragma unroll
            for (u32 u = 0; u < 4; u++) {
                v[u] = cb_pre_vec(fx, cb_load_vec(io.in[0] + sk + (i + (u64)u * nt) * 16));
            }
            for (u32 k = 1; k < io.nin; k++) {
                CbVec w[4];
#pragma unroll
                for (u32 u = 0; u < 4; u++) {
                    w[u] = cb_load_vec(io.in[k] + sk + (i + (u64)u * nt) * 16);
                }
#pragma unroll
                for (u32 u = 0; u < 4; u++) {
                    v[u] = cb_combine(v[u], w[u]);
                }
            }
#pragma unroll
            for (u32 u = 0; u < 4; u++) {
                u64 off = sk + (i + (u64)u * nt) * 16;
                CbVec x = fx.finish ? cb_finish_vec(v[u], fx.nranks) : v[u];
                if (io.dst) {
                    cb_store_vec(io.dst + off, x);
                }
                for (u32 k = 0; k < io.nout; k++) {
                    cb_store_vec(io.out[k] + off, x);
                }
            }
        }
        for (; i < nv; i += nt) {
            u64 off = sk + i * 16;
            CbVec v = cb_pre_vec(fx, cb_load_vec(io.in[0] + off));
            for (u32 k = 1; k < io.nin; k++) {
                v = cb_combine(v, cb_load_vec(io.in[k] + off));
            }
            if (fx.finish) {
                v = cb_finish_vec(v, fx.nranks);
            }
            if (io.dst) {
                cb_store_vec(io.dst + off, v);
            }
            for (u32 k = 0; k < io.nout; k++) {
                cb_store_vec(io.out[k] + off, v);
            }
        }
    }
    if (body < len) {
        cb_move_elems(io, body, len, fx);
    }
}

// Element address of a resolved slice.
CB_DEVICE u8 *cb_at(const CbRank *r, u8 buf, u64 off) { return r->bufs[buf] + off * CB_SIZE; }

// Waits (thread 0) until the output slots of `s` are free. False: give up.
CB_DEVICE bool cb_wait_send_room(CbBlock *b, const CbStep *s) {
    const CbRank *r = b->r;
    for (u32 k = 0; k < s->nsend; k++) {
        const CbConn *c = &r->outs[s->send[k]];
        u64 posted = *c->tail;  // this block is the only writer
        while (posted - cb_flag_acquire(r, c->head) >= c->slots) {
            if (!cb_keep_waiting(b, c->peer, CB_WAIT_SEND)) {
                return false;
            }
        }
    }
    return true;
}

// Waits (thread 0) until every input message of `s` has arrived (simple protocol).
CB_DEVICE bool cb_wait_recv(CbBlock *b, const CbStep *s) {
    const CbRank *r = b->r;
    for (u32 k = 0; k < s->nrecv; k++) {
        const CbConn *c = &r->ins[s->recv[k]];
        u64 want = *c->head + 1;  // this block is the only writer of head
        while (cb_flag_acquire(r, c->tail) < want) {
            if (!cb_keep_waiting(b, c->peer, CB_WAIT_RECV)) {
                return false;
            }
        }
    }
    return true;
}

CB_DEVICE u8 *cb_slot(const CbConn *c, u64 seq_index) {
    return c->buf + (seq_index % c->slots) * c->slot_bytes;
}

CB_DEVICE u32 *cb_ll_slot(const CbConn *c, u64 seq_index) {
    return (u32 *)(c->ll + (seq_index % c->slots) * c->ll_slot_bytes);
}

// The 32-bit flag of low-latency message `seq_index`: 1 to 2^32 - 1, never
// 0, so lines never written (zero) never pass for a message, whatever the
// count (a connection's count runs on across a sweep's cases).
CB_DEVICE u32 cb_ll_flag(u64 seq_index) {
    return (u32)(seq_index % 0xffffffffull) + 1u;
}

// Flags repeat every 2^32 - 1 messages: a line last written that long ago
// (past the ends of every message of its slot since) would pass for new.
// So once every 2^24 uses of a slot (the last of each 2^24: lines never
// written are zero, which no flag is), its sender writes the current flag
// into the slot's lines past its message: then every line of a slot was
// written within fewer than 2^32 - 1 messages (a slot takes at least 1 in
// 15 of them), and holds no flag a message would wait for before the
// slot's next such pass.
#define CB_LL_CLEAN_USES (1ull << 24)

// The line protocols' shared work on `ne` elements at byte `off`: the local
// inputs (src, scaled by premulsum, then dst-as-input) combined into `acc`
// (returns whether there were any) ...
CB_DEVICE bool cb_lines_local(const CbIo &io, const CbFx &fx, u64 off, u32 ne, cb_bits *acc) {
    for (u32 k = 0; k < io.nin; k++) {
        for (u32 e = 0; e < ne; e++) {
            cb_bits x = ((const cb_bits *)(io.in[k] + off))[e];
            x = k == 0 ? cb_pre(fx, x) : x;
            acc[e] = k > 0 ? cb_apply(acc[e], x) : x;
        }
    }
    return io.nin > 0;
}

// ... a received payload's elements folded in ...
CB_DEVICE void cb_lines_fold(cb_bits *acc, bool have, const u8 *payload, u32 ne) {
    for (u32 e = 0; e < ne; e++) {
        cb_bits x;
        cb_bytes(&x, payload + e * CB_SIZE, CB_SIZE);
        acc[e] = have ? cb_apply(acc[e], x) : x;
    }
}

// ... and the value finished and written to dst.
CB_DEVICE void cb_lines_out(const CbIo &io, const CbFx &fx, u64 off, u32 ne, cb_bits *acc) {
    if (fx.finish) {
        for (u32 e = 0; e < ne; e++) {
            acc[e] = cb_finish(acc[e], fx.nranks);
        }
    }
    if (io.dst) {
        for (u32 e = 0; e < ne; e++) {
            ((cb_bits *)(io.dst + off))[e] = acc[e];
        }
    }
}

// The low-latency protocol's data movement: 8 payload bytes per line; each
// thread owns lines t, t + nt, ... of every input and output slot.
CB_DEVICE void cb_move_ll(CbBlock *b, const CbStep *s, const CbIo &io, const CbFx &fx, u32 *lost) {
    const CbRank *r = b->r;
    u64 bytes = s->len * CB_SIZE;
    u64 lines = (bytes + 7) / 8;
    u32 t = cb_tid(), nt = cb_nthreads();
    const u32 *in_ll[CB_MAX_PEERS];
    u32 in_seq[CB_MAX_PEERS];
    u32 *out_ll[CB_MAX_PEERS];
    u32 out_seq[CB_MAX_PEERS];
    for (u32 k = 0; k < s->nrecv; k++) {
        const CbConn *c = &r->ins[s->recv[k]];
        u64 idx = *c->head;
        in_ll[k] = cb_ll_slot(c, idx);
        in_seq[k] = cb_ll_flag(idx);
    }
    for (u32 k = 0; k < s->nsend; k++) {
        const CbConn *c = &r->outs[s->send[k]];
        u64 idx = *c->tail;
        out_ll[k] = cb_ll_slot(c, idx);
        out_seq[k] = cb_ll_flag(idx);
        if ((idx / c->slots) % CB_LL_CLEAN_USES == CB_LL_CLEAN_USES - 1) {
            for (u64 j = lines + t; j < c->ll_slot_bytes / 16; j += nt) {
                cb_ll_store(out_ll[k] + 4 * j, 0, out_seq[k], 0, out_seq[k]);
            }
        }
    }
    for (u64 j = t; j < lines; j += nt) {
        u64 off = j * 8;
        u32 n = bytes - off < 8 ? (u32)(bytes - off) : 8u;
        u32 ne = n / CB_SIZE;
        // Gather the 8-byte group of every input: local ones, then lines.
        cb_bits acc[8 / CB_SIZE > 0 ? 8 / CB_SIZE : 1];
        bool have = cb_lines_local(io, fx, off, ne, acc);
        for (u32 k = 0; k < s->nrecv; k++) {
            u32 d0, f0, d1, f1;
            const u32 *line = in_ll[k] + 4 * j;
            for (;;) {
                cb_ll_load(line, &d0, &f0, &d1, &f1);
                if (f0 == in_seq[k] && f1 == in_seq[k]) {
                    break;
                }
                if (!cb_keep_waiting(b, r->ins[s->recv[k]].peer, CB_WAIT_RECV)) {
                    cb_mark(lost);
                    return;
                }
            }
            u32 words[2] = {d0, d1};
            cb_lines_fold(acc, have, (const u8 *)words, ne);
            have = true;
        }
        cb_lines_out(io, fx, off, ne, acc);
        if (s->nsend) {
            u32 words[2] = {0, 0};
            cb_bytes(words, acc, ne * CB_SIZE);
            for (u32 k = 0; k < s->nsend; k++) {
                cb_ll_store(out_ll[k] + 4 * j, words[0], out_seq[k], words[1], out_seq[k]);
            }
        }
    }
}

// Waits (thread 0) until the first line of every LL message of `s` has
// come (`--links`: the wait for a sender, apart from the move). False: the
// wait gave up.
CB_DEVICE bool cb_wait_ll_first(CbBlock *b, const CbStep *s) {
    const CbRank *r = b->r;
    for (u32 k = 0; k < s->nrecv; k++) {
        const CbConn *c = &r->ins[s->recv[k]];
        u64 idx = *c->head;
        const u32 *line = cb_ll_slot(c, idx);
        u32 seq = cb_ll_flag(idx);
        u32 d0, f0, d1, f1;
        for (;;) {
            cb_ll_load(line, &d0, &f0, &d1, &f1);
            if (f0 == seq && f1 == seq) {
                break;
            }
            if (!cb_keep_waiting(b, c->peer, CB_WAIT_RECV)) {
                return false;
            }
        }
    }
    return true;
}

CB_DEVICE u64 *cb_ll128_slot(const CbConn *c, u64 seq_index) {
    return (u64 *)(c->ll128 + (seq_index % c->slots) * c->ll128_slot_bytes);
}

// Waits (thread 0) until the first line of every LL128 message of `s` has
// arrived. False: give up.
CB_DEVICE bool cb_wait_ll128_first(CbBlock *b, const CbStep *s) {
    const CbRank *r = b->r;
    for (u32 k = 0; k < s->nrecv; k++) {
        const CbConn *c = &r->ins[s->recv[k]];
        u64 idx = *c->head;
        const u64 *line = cb_ll128_slot(c, idx);
        while (cb_ll128_flag(line) != idx + 1) {
            if (!cb_keep_waiting(b, c->peer, CB_WAIT_RECV)) {
                return false;
            }
        }
    }
    return true;
}

// Waits until part `lane` of the LL128 line at `line` holds message `seq`,
// and reads it. False: give up (every thread of the line's group agrees).
CB_DEVICE bool cb_ll128_wait(CbBlock *b, const u64 *line, u32 lane, u64 seq, u32 peer, u64 *w0,
                             u64 *w1) {
    if (cb_lanes8()) {
        // The line's eight threads read their parts at once and look at the
        // sequence number in the last one; all of them read again until it
        // is this message's.
        for (;;) {
            cb_group8_sync();
            cb_ll128_get(line + 2 * lane, w0, w1);
            if (cb_group8_all(lane != 7 || *w1 == seq)) {
                return true;
            }
            bool give_up = !cb_keep_waiting(b, peer, CB_WAIT_RECV);
            if (cb_group8_any(give_up)) {
                return false;
            }
        }
    }
    // A block of one thread reads the line's parts in order: the sequence
    // number first.
    if (lane == 0) {
        while (cb_ll128_flag(line) != seq) {
            if (!cb_keep_waiting(b, peer, CB_WAIT_RECV)) {
                return false;
            }
        }
    }
    cb_ll128_get(line + 2 * lane, w0, w1);
    return true;
}

// LL128's data movement: 120 payload bytes a line; thread t owns part
// t % 8 of lines t / 8, t / 8 + nt / 8, ... (16 bytes each; the last part
// 8 bytes and the sequence number), of every input and output slot and of
// the local buffers at the same payload offsets.
CB_DEVICE void cb_move_ll128(CbBlock *b, const CbStep *s, const CbIo &io, const CbFx &fx,
                             u32 *lost) {
    const CbRank *r = b->r;
    u64 bytes = s->len * CB_SIZE;
    u64 parts = (bytes + 119) / 120 * 8;
    u32 t = cb_tid(), nt = cb_nthreads();
    const u64 *in_l[CB_MAX_PEERS];
    u64 in_seq[CB_MAX_PEERS];
    u64 *out_l[CB_MAX_PEERS];
    u64 out_seq[CB_MAX_PEERS];
    for (u32 k = 0; k < s->nrecv; k++) {
        const CbConn *c = &r->ins[s->recv[k]];
        u64 idx = *c->head;
        in_l[k] = cb_ll128_slot(c, idx);
        in_seq[k] = idx + 1;
    }
    for (u32 k = 0; k < s->nsend; k++) {
        const CbConn *c = &r->outs[s->send[k]];
        u64 idx = *c->tail;
        out_l[k] = cb_ll128_slot(c, idx);
        out_seq[k] = idx + 1;
    }
    for (u64 p = t; p < parts; p += nt) {
        u64 line = p >> 3;
        u32 lane = (u32)(p & 7);
        u64 off = line * 120 + lane * 16;
        u32 cap = lane == 7 ? 8u : 16u;
        u32 n = off >= bytes ? 0u : (bytes - off < cap ? (u32)(bytes - off) : cap);
        u32 ne = n / CB_SIZE;
        cb_bits acc[16 / CB_SIZE];
        bool have = cb_lines_local(io, fx, off, ne, acc);
        for (u32 k = 0; k < s->nrecv; k++) {
            u64 w[2];
            if (!cb_ll128_wait(b, in_l[k] + line * 16, lane, in_seq[k], r->ins[s->recv[k]].peer,
                               &w[0], &w[1])) {
                cb_mark(lost);
                return;
            }
            cb_lines_fold(acc, have, (const u8 *)w, ne);
            have = true;
        }
        cb_lines_out(io, fx, off, ne, acc);
        if (s->nsend) {
            u64 w[2] = {0, 0};
            cb_bytes(w, acc, ne * CB_SIZE);
            if (cb_lanes8()) {
                cb_group8_sync();
            }
            for (u32 k = 0; k < s->nsend; k++) {
                cb_ll128_put(out_l[k] + line * 16 + 2 * lane, w[0], lane == 7 ? out_seq[k] : w[1],
                             lane == 7);
            }
        }
    }
}

// A step that received over the connections of `s` waited from `room` to
// `data` for their messages and has moved them by now: stretch it as the
// slowest slowed one asks (fault injection; the messages are not yet
// released, so the sender waits too), then count it against each.
CB_DEVICE void cb_time_links(const CbRank *r, const CbStep *s, u64 room, u64 data) {
    u64 pace = 1000;
    for (u32 k = 0; k < s->nrecv; k++) {
        u64 p = r->links[s->recv[k]].pace;
        pace = p > pace ? p : pace;
    }
    u64 done = cb_now_ns();
    if (pace > 1000) {
        // A bare clock loop: a pause (a sleep on the emulated device) would
        // overshoot short steps many times over. Left when the kernels stop.
        u64 until = data + (done - data) * pace / 1000;
        while (cb_now_ns() < until && !cb_stopping(r->status)) {
        }
        done = cb_now_ns();
    }
    u64 bytes = s->len * CB_SIZE;
    for (u32 k = 0; k < s->nrecv; k++) {
        CbLink *l = &r->links[s->recv[k]];
        l->bytes += bytes;
        l->wait_ns += data - room;
        l->transfer_ns += done - data;
    }
}

// Runs step `s`; false when the block must stop (a wait gave up).
CB_DEVICE bool cb_run_step(CbBlock *b, const CbStep *s, CbIo *shared_io, u32 *shared_ok,
                            u32 *lost) {
    const CbRank *r = b->r;
    // A step with no peer has no slot: it moves data as the simple protocol
    // does, whatever the protocol of the operation.
    bool peers = s->nrecv != 0 || s->nsend != 0;
    bool ll = (r->proto & CB_PROTO_MASK) == CB_PROTO_LL && peers;
    bool ll128 = (r->proto & CB_PROTO_MASK) == CB_PROTO_LL128 && peers;
    // Payload and flags in the same lines: no wait for a tail, no slot pointers.
    bool lines = ll || ll128;
    // `--links`: thread 0 times the wait for the senders' data and the move.
    bool timed = r->links != 0 && s->nrecv != 0;
    u64 t_room = 0, t_data = 0;  // thread 0's
    if (cb_tid() == 0) {
        bool ok = cb_wait_send_room(b, s);
        if (timed) {
            t_room = cb_now_ns();
        }
        // A low-latency message of no elements has no line to poll: wait
        // for its tail like the simple protocol, or this block would count
        // it consumed before it was sent (and its sender would then wait
        // for room forever).
        if (ok && (!lines || s->len == 0)) {
            ok = cb_wait_recv(b, s);
        } else if (ok && timed) {
            // `--links`: the data's wait is until each message's first line
            // is there, so a slow sender is not counted as a slow transfer.
            ok = ll128 ? cb_wait_ll128_first(b, s) : cb_wait_ll_first(b, s);
        }
        if (timed) {
            t_data = cb_now_ns();
        }
        *shared_ok = ok ? 1u : 0u;
        *lost = 0;
        CbIo io;
        io.nin = 0;
        if (s->flags & CB_HAS_SRC) {
            io.in[io.nin++] = cb_at(r, s->src_buf, s->src);
        }
        io.dst = (s->flags & CB_HAS_DST) ? cb_at(r, s->dst_buf, s->dst) : 0;
        if (s->flags & CB_DST_IN) {
            io.in[io.nin++] = io.dst;
        }
        io.nout = 0;
        if (!lines) {
            for (u32 k = 0; k < s->nrecv; k++) {
                const CbConn *c = &r->ins[s->recv[k]];
                io.in[io.nin++] = cb_slot(c, *c->head);
            }
            for (u32 k = 0; k < s->nsend; k++) {
                const CbConn *c = &r->outs[s->send[k]];
                io.out[io.nout++] = cb_slot(c, *c->tail);
            }
        }
        *shared_io = io;
        if (b->wait_start != 0) {
            cb_st_volatile(&r->progress[b->channel].wait_on, 0);
            // A wait on the same peer later in the step is told again.
            b->waiting = 0;
        }
    }
    cb_sync();
    if (*shared_ok == 0) {
        return false;
    }
    CbIo io = *shared_io;
    CbFx fx;
    fx.finish = (s->flags & CB_FINISH) != 0;
    fx.pre = (s->flags & CB_PRE) != 0;
    fx.nranks = r->nranks;
    fx.scalar = (cb_bits)r->scalar;
    if (ll) {
        cb_move_ll(b, s, io, fx, lost);
    } else if (ll128) {
        cb_move_ll128(b, s, io, fx, lost);
    } else if (io.nin > 0) {
        cb_move(io, s->len, fx);
    }
    cb_sync();
    if (cb_tid() == 0 && timed && *lost == 0) {
        cb_time_links(r, s, t_room, t_data);
    }
    if (cb_tid() == 0) {
        if (lines && *lost != 0) {
            // A line never came: some thread gave up (no read of the
            // host-mapped status here: it would cross PCIe every step).
            *shared_ok = 0;
        } else {
            if (s->nsend + s->nrecv == 0) {
            } else if (cb_sys(r)) {
                cb_fence_system();
            } else {
                cb_fence_gpu();
            }
            for (u32 k = 0; k < s->nsend; k++) {
                const CbConn *c = &r->outs[s->send[k]];
                u64 t = *c->tail;
                // The message's length beside the tail (the rest of the
                // tail's line), for a host proxy that forwards the slot.
                c->tail[1 + t % c->slots] = s->len * CB_SIZE;
                cb_flag_release(r, c->tail, t + 1);
            }
            for (u32 k = 0; k < s->nrecv; k++) {
                const CbConn *c = &r->ins[s->recv[k]];
                cb_flag_release(r, c->head, *c->head + 1);
            }
            if (b->wait_start != 0) {
                // A long wait (of the low-latency lines, too) is over.
                cb_st_volatile(&r->progress[b->channel].wait_on, 0);
            }
        }
    }
    cb_sync();
    // Read before the barrier, so thread 0 cannot overwrite it for the
    // next step while another thread still reads it.
    bool ok = *shared_ok != 0;
    cb_sync();
    return ok;
}

CB_KERNEL CB_MAX_REGISTERS void cb_collective(const CB_GRID_CONSTANT CbRank rank) {
    CB_SHARED_VAR(CbIo, io);
    CB_SHARED_VAR(u32, ok);
    CB_SHARED_VAR(u32, lost);
    u32 c = cb_block();
    if (c >= rank.nchannels) {
        return;
    }
    CbBlock b;
    b.r = &rank;
    b.channel = c;
    b.wait_start = 0;
    b.waiting = 0;
    b.polls = 0;
    u32 first = rank.chan_start[c], end = rank.chan_start[c + 1];
    for (u32 i = first; i < end; i++) {
        b.index = i - first;
        b.step = &rank.steps[i];
        b.wait_start = 0;
        b.waiting = 0;
        if (!cb_run_step(&b, b.step, &io, &ok, &lost)) {
            return;
        }
    }
}
