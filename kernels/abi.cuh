// collbench kernels: what the host and the kernels agree on. Every struct
// here has a #[repr(C)] twin in src/engine/exec/cuda/abi.rs; sizes are
// checked on both sides (static_assert here, tests there).

// Element types: the order of Rust's `Dtype`.
#define CB_I8 0
#define CB_U8 1
#define CB_I32 2
#define CB_U32 3
#define CB_I64 4
#define CB_U64 5
#define CB_F16 6
#define CB_BF16 7
#define CB_F32 8
#define CB_F64 9
#define CB_E4M3 10
#define CB_E5M2 11

// Reduction operators: the order of Rust's `ReduceOp`.
#define CB_SUM 0
#define CB_PROD 1
#define CB_MIN 2
#define CB_MAX 3
#define CB_AVG 4
#define CB_PREMULSUM 5

#define CB_MAX_PEERS 4

// Step flags.
#define CB_REDUCE 1u   // received values are combined with the inputs (else copied)
#define CB_FINISH 2u   // apply the operator's finishing step (avg: divide by nranks)
#define CB_HAS_SRC 4u  // `src` is an input
#define CB_HAS_DST 8u  // the value is written to `dst`
#define CB_DST_IN 16u  // `dst` is also an input, after `src` (local-reduce)
#define CB_PRE 32u     // premulsum: `src` is this rank's input, scaled by the scalar first

// One primitive step of a channel program, its slices resolved to
// (physical buffer 0..2, element offset) and its connections to indices
// into the rank's connection tables. Its value is src (if any), then dst
// (if CB_DST_IN), then every received message, combined left to right.
struct CbStep {
    u64 len;  // elements
    u64 src;  // element offset in buffer src_buf
    u64 dst;  // element offset in buffer dst_buf
    u32 flags;
    u8 src_buf;
    u8 dst_buf;
    u8 nrecv;
    u8 nsend;
    u16 recv[CB_MAX_PEERS];  // indices into CbRank::ins
    u16 send[CB_MAX_PEERS];  // indices into CbRank::outs
};

// One direction of one connection: a ring of `slots` slots of `slot_bytes`
// in device memory. `tail` counts messages posted (written by the sender
// only), `head` messages consumed (written by the receiver only); both
// persist across launches, so sequence numbers never repeat within a world.
// The simple protocol posts a slot by storing tail with release semantics
// after its payload; the low-latency protocol stores 16-byte lines
// {data0, seq, data1, seq} (8 payload bytes per line, seq = the message's
// sequence number, 1-based) in a region of its own, so stale payload of the
// other protocol can never pass for a flag; it updates tail only to keep
// the count. A sender reuses a slot once head says it was consumed. The
// words after tail on its line hold each slot's message length in bytes
// (tail[1 + seq % slots]), written before the tail: what a host proxy
// forwarding the slot to another node sends.
struct CbConn {
    u64 *tail;
    u64 *head;
    u8 *buf;          // simple protocol: slots * slot_bytes
    u8 *ll;           // low-latency protocol: slots * ll_slot_bytes (16-byte lines)
    u64 slot_bytes;   // a multiple of 16
    u64 ll_slot_bytes;  // a multiple of 16: carries ll_slot_bytes / 2 payload bytes
    u32 slots;
    u32 peer;         // the rank at the other end, for diagnosis
    u8 *ll128;        // LL128: slots * ll128_slot_bytes (128-byte lines)
    u64 ll128_slot_bytes;  // a multiple of 128: carries ll128_slot_bytes / 128 * 120 payload bytes
};

// Where a block of a rank stands, in host-mapped memory: the flight
// recorder's view of a running kernel. Written when the block begins a long
// wait (never per step: every store here crosses PCIe).
struct CbProgress {
    u64 step;      // steps completed when the current long wait began
    u64 wait_on;   // 0: not waiting; 1 + peer: waiting to receive; 1 + peer + (1 << 32): to send
    u64 pad[2];
};

// What a rank measured of one incoming connection (`--links`), in device
// memory, one per entry of CbRank::ins: only the block of that connection's
// channel writes it. `pace` (fault injection) stretches every step that
// receives over it to pace / 1000 times its length.
struct CbLink {
    u64 bytes;
    u64 wait_ns;      // waiting for the sender's data (its first line, with LL and LL128)
    u64 transfer_ns;  // moving it once there
    u64 pace;         // 1000: not slowed
};

// Why a kernel stopped early, in host-mapped memory, one record per GPU of
// a world, shared by that GPU's ranks: the first of them to give up writes
// it and every block of those ranks sees `abort` and leaves; the host sees
// it and sets `stop` in every GPU's record.
struct CbStatus {
    u64 abort;     // nonzero: stop
    u64 rank;      // who timed out
    u64 channel;
    u64 step;
    u64 peer;
    u64 kind;      // 1 receive, 2 send
    u64 waited_ns;
    u64 stop;      // nonzero: the host stopped the kernels (only the host writes it)
};

// Protocols.
#define CB_PROTO_SIMPLE 0u
#define CB_PROTO_LL 1u
// LL128: 128-byte lines {120 payload bytes, u64 seq}, each line stored by 8
// consecutive threads of a warp with one 16-byte store each, the seq in
// the last thread's store, in a region of its own.
#define CB_PROTO_LL128 2u
// Flag in CbRank::proto: some peer's flags or slots are outside this GPU's
// memory (host-mapped or another GPU's), so orderings use system scope.
// Without it every connection is in this GPU's memory: GPU scope suffices,
// and a release does not wait for the host-mapped progress stores.
#define CB_PROTO_MASK 0xffu
#define CB_PROTO_SYS 0x100u

// Everything one rank's collective launch needs. Block c runs channel c:
// steps[chan_start[c] .. chan_start[c + 1]].
struct CbRank {
    const CbStep *steps;
    const u32 *chan_start;  // nchannels + 1 entries
    const CbConn *ins;
    const CbConn *outs;
    u8 *bufs[3];            // send (or only) buffer, receive buffer, scratch
    CbProgress *progress;   // one per channel, host-mapped
    CbStatus *status;       // host-mapped, one per GPU of the world
    CbLink *links;          // one per entry of ins, or null: not measured
    u64 timeout_ns;         // how long any one wait may last
    u32 rank;
    u32 nranks;
    u32 proto;              // CB_PROTO_SIMPLE or CB_PROTO_LL, | CB_PROTO_SYS
    u32 nchannels;
    u64 scalar;             // premulsum's scalar (the element type's bits)
};

static_assert(sizeof(CbStep) == 48, "CbStep layout");
static_assert(sizeof(CbConn) == 72, "CbConn layout");
static_assert(sizeof(CbProgress) == 32, "CbProgress layout");
static_assert(sizeof(CbStatus) == 64, "CbStatus layout");
static_assert(sizeof(CbLink) == 32, "CbLink layout");
static_assert(sizeof(CbRank) == 112, "CbRank layout");
