/* The NCCL subset zerotrain uses, between processes on one machine, for the
 * CUDA emulator: ncclGetUniqueId, ncclCommInitRank, ncclCommDestroy,
 * ncclAllGather, ncclBroadcast, ncclSend/ncclRecv inside
 * ncclGroupStart/ncclGroupEnd, ncclGetErrorString.
 *
 * Transport: a file mapped shared by every rank (its path is the unique id),
 * holding a process-shared barrier and one mailbox per (sender, receiver)
 * pair. Each collective runs on its stream's worker thread, in rounds of at
 * most one mailbox per pair: write, barrier, read, barrier.
 *
 * Ordering: NCCL runs a communicator's operations in the order they were
 * issued, whatever streams they were issued on; the emulator does the same
 * with a ticket per operation, so an operation waits for its predecessors on
 * the communicator even when they sit on another stream. A program that
 * issues a communicator's operations in different orders, or with sizes that
 * do not match, on different ranks gets a device fault here (a hang or
 * corrupted data on GPUs). */
#include <errno.h>
#include <fcntl.h>
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <condition_variable>
#include <memory>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

#include "emu_device.h"

namespace {

const size_t mailbox_bytes = 1u << 20;
const uint64_t ready_magic = 0x7a74656d75636f6dull; /* set once the barrier is initialised */

const int max_ranks = 64;

/* What one rank is about to do, published before the operation's first
 * barrier so that every rank can check that the others are doing the same
 * operation (NCCL hangs or corrupts data when they are not). */
struct op_descriptor {
    uint64_t seq;          /* the communicator's operation count */
    int kind, root;        /* OP_* ; broadcast root */
    uint64_t largest;      /* largest message, for the number of rounds */
    uint64_t send_bytes[max_ranks], recv_bytes[max_ranks]; /* to / from each peer */
};

struct shared_header {
    volatile uint64_t ready;
    pthread_barrier_t barrier;
    op_descriptor ops[max_ranks]; /* per rank: the current operation */
};

enum { OP_ALL_GATHER = 1, OP_BROADCAST, OP_GROUP };
const char *op_name(int k) { return k == OP_ALL_GATHER ? "all-gather" : k == OP_BROADCAST ? "broadcast" : "send/recv group"; }

size_t header_bytes() { return (sizeof(shared_header) + 4095) & ~(size_t)4095; }

struct p2p {
    bool send;
    void *buf; /* const for sends */
    size_t bytes;
    int peer;
};

} // namespace

struct ncclComm {
    int nranks = 0, rank = 0;
    uint64_t executed = 0; /* operations run, on the stream workers */
    shared_header *shm = nullptr;
    size_t shm_bytes = 0;
    /* per-communicator issue order */
    std::mutex mu;
    std::condition_variable cv;
    uint64_t next_ticket = 0, running_ticket = 0;

    unsigned char *mailbox(int from, int to) {
        return (unsigned char *)shm + header_bytes() + ((size_t)from * nranks + (size_t)to) * mailbox_bytes;
    }
    void barrier() { pthread_barrier_wait(&shm->barrier); }
};

namespace {

/* The open group of this host thread (NCCL groups are per thread). */
struct group_state {
    int depth = 0;
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    bool mixed = false;
    std::vector<p2p> ops;
};
thread_local group_state tl_group;

size_t type_bytes(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

/* Enqueues op on stream as the communicator's next operation. */
void enqueue_in_order(ncclComm_t comm, cudaStream_t stream, std::function<void()> op) {
    uint64_t ticket;
    {
        std::lock_guard<std::mutex> lk(comm->mu);
        ticket = comm->next_ticket++;
    }
    zt_emu_enqueue(stream, [comm, ticket, op]() {
        {
            std::unique_lock<std::mutex> lk(comm->mu);
            comm->cv.wait(lk, [&] { return comm->running_ticket == ticket; });
        }
        op();
        std::lock_guard<std::mutex> lk(comm->mu);
        comm->running_ticket++;
        comm->cv.notify_all();
    });
}

/* Point-to-point exchange of one operation, in rounds of one mailbox per
 * pair. First every rank publishes what it is about to do and checks the
 * others: same operation count, same kind (and root), and for every pair the
 * bytes one sends equal the bytes the other receives. A mismatch is a device
 * fault (on GPUs: a hang or corrupted data); the rounds still run, so that no
 * rank is left waiting at a barrier. */
void run_group(ncclComm_t comm, int kind, int root, const std::vector<p2p> &ops) {
    op_descriptor &mine = comm->shm->ops[comm->rank];
    memset(&mine, 0, sizeof mine);
    mine.seq = comm->executed++;
    mine.kind = kind;
    mine.root = root;
    for (const p2p &o : ops) {
        mine.largest = o.bytes > mine.largest ? o.bytes : mine.largest;
        (o.send ? mine.send_bytes : mine.recv_bytes)[o.peer] += o.bytes;
    }
    comm->barrier();
    size_t all_largest = 0;
    std::string mismatch;
    for (int r = 0; r < comm->nranks; r++) {
        const op_descriptor &other = comm->shm->ops[r];
        all_largest = other.largest > all_largest ? other.largest : all_largest;
        char buf[256] = "";
        if (other.seq != mine.seq || other.kind != mine.kind || other.root != mine.root)
            snprintf(buf, sizeof buf, "rank %d runs operation %llu (%s) while rank %d runs operation %llu (%s)",
                     comm->rank, (unsigned long long)mine.seq, op_name(mine.kind), r, (unsigned long long)other.seq,
                     op_name(other.kind));
        else if (other.send_bytes[comm->rank] != mine.recv_bytes[r])
            snprintf(buf, sizeof buf, "%s %llu: rank %d sends %llu bytes to rank %d, which receives %llu",
                     op_name(mine.kind), (unsigned long long)mine.seq, r,
                     (unsigned long long)other.send_bytes[comm->rank], comm->rank,
                     (unsigned long long)mine.recv_bytes[r]);
        if (buf[0] && mismatch.empty()) mismatch = buf;
    }
    if (!mismatch.empty()) zt_emu_device_fault(("NCCL: mismatched operations: " + mismatch).c_str());
    comm->barrier(); /* the descriptors may be rewritten by the next operation */
    size_t rounds = (all_largest + mailbox_bytes - 1) / mailbox_bytes;
    for (size_t k = 0; k < rounds; k++) {
        size_t off = k * mailbox_bytes;
        if (mismatch.empty())
            for (const p2p &o : ops)
                if (o.send && o.bytes > off) {
                    size_t n = o.bytes - off < mailbox_bytes ? o.bytes - off : mailbox_bytes;
                    memcpy(comm->mailbox(comm->rank, o.peer), (const unsigned char *)o.buf + off, n);
                }
        comm->barrier();
        if (mismatch.empty())
            for (const p2p &o : ops)
                if (!o.send && o.bytes > off) {
                    size_t n = o.bytes - off < mailbox_bytes ? o.bytes - off : mailbox_bytes;
                    memcpy((unsigned char *)o.buf + off, comm->mailbox(o.peer, comm->rank), n);
                }
        comm->barrier();
    }
}

} // namespace

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (emulated NCCL)";
    case ncclSystemError: return "unhandled system error (emulated NCCL)";
    case ncclInternalError: return "internal error (emulated NCCL)";
    case ncclInvalidArgument: return "invalid argument (emulated NCCL)";
    case ncclInvalidUsage: return "invalid usage (emulated NCCL)";
    default: return "unknown result (emulated NCCL)";
    }
}

/* ZT_EMU_NCCL_FAIL=id or =init makes ncclGetUniqueId or ncclCommInitRank
 * fail with ncclSystemError, as a sandbox that refuses NCCL's bootstrap
 * sockets or shared memory would (init fails on every rank alike). */
static bool nccl_fails(const char *where) {
    const char *e = getenv("ZT_EMU_NCCL_FAIL");
    return e && strcmp(e, where) == 0;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return ncclInvalidArgument;
    if (nccl_fails("id")) return ncclSystemError;
    memset(id, 0, sizeof *id);
    const char *dir = getenv("TMPDIR");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(id->internal, sizeof id->internal, "%s/zt-emu-nccl-%d-%ld-%ld", dir && *dir ? dir : "/tmp", (int)getpid(),
             (long)ts.tv_sec, (long)ts.tv_nsec);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
    if (!out || nranks < 1 || nranks > max_ranks || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    *out = nullptr;
    if (nccl_fails("init")) return ncclSystemError;
    char path[NCCL_UNIQUE_ID_BYTES + 1];
    memcpy(path, id.internal, NCCL_UNIQUE_ID_BYTES);
    path[NCCL_UNIQUE_ID_BYTES] = 0;
    if (!path[0]) return ncclInvalidArgument;
    std::unique_ptr<ncclComm> comm(new ncclComm());
    comm->nranks = nranks;
    comm->rank = rank;
    comm->shm_bytes = header_bytes() + (size_t)nranks * nranks * mailbox_bytes;
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    if (fd < 0) return ncclSystemError;
    if (ftruncate(fd, (off_t)comm->shm_bytes) != 0) {
        close(fd);
        return ncclSystemError;
    }
    void *p = mmap(nullptr, comm->shm_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return ncclSystemError;
    comm->shm = (shared_header *)p;
    if (rank == 0) {
        pthread_barrierattr_t attr;
        pthread_barrierattr_init(&attr);
        pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
        pthread_barrier_init(&comm->shm->barrier, &attr, (unsigned)nranks);
        pthread_barrierattr_destroy(&attr);
        __atomic_store_n(&comm->shm->ready, ready_magic, __ATOMIC_RELEASE);
    } else {
        while (__atomic_load_n(&comm->shm->ready, __ATOMIC_ACQUIRE) != ready_magic) usleep(1000);
    }
    comm->barrier(); /* everyone has mapped it: the name can go */
    if (rank == 0) unlink(path);
    *out = comm.release();
    return ncclSuccess;
}

/* Abort: as NCCL's, nothing in flight is waited for. The emulator cannot
 * stop an operation blocked in its barrier (its stream's worker thread
 * stays there), so the communicator is abandoned, not freed: zerotrain
 * aborts one only on its way out of the process (the collective watchdog)
 * or before it ran an operation. */
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
    std::unique_lock<std::mutex> lk(comm->mu);
    if (comm->running_ticket != comm->next_ticket) return ncclSuccess; /* abandoned */
    lk.unlock();
    return ncclCommDestroy(comm);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
    /* NCCL finalizes first: the operations already issued complete */
    {
        std::unique_lock<std::mutex> lk(comm->mu);
        comm->cv.wait(lk, [&] { return comm->running_ticket == comm->next_ticket; });
    }
    munmap(comm->shm, comm->shm_bytes);
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
    size_t tb = type_bytes(type);
    if (!comm || !tb || !send || !recv) return ncclInvalidArgument;
    size_t bytes = count * tb;
    if (!zt_emu_is_device_range(send, bytes) || !zt_emu_is_device_range(recv, bytes * (size_t)comm->nranks))
        return ncclInvalidArgument;
    if (tl_group.depth) return ncclInvalidUsage; /* collectives inside groups are not used by zerotrain */
    enqueue_in_order(comm, stream, [=]() {
        /* every rank sends its block to every rank: the all-gather as a group */
        std::vector<p2p> ops;
        for (int r = 0; r < comm->nranks; r++) {
            ops.push_back({true, (void *)send, bytes, r});
            ops.push_back({false, (unsigned char *)recv + (size_t)r * bytes, bytes, r});
        }
        run_group(comm, OP_ALL_GATHER, -1, ops);
    });
    return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream) {
    size_t tb = type_bytes(type);
    if (!comm || !tb || !recv || root < 0 || root >= comm->nranks) return ncclInvalidArgument;
    size_t bytes = count * tb;
    if (!zt_emu_is_device_range(recv, bytes) || (comm->rank == root && !zt_emu_is_device_range(send, bytes)))
        return ncclInvalidArgument;
    if (tl_group.depth) return ncclInvalidUsage;
    enqueue_in_order(comm, stream, [=]() {
        std::vector<p2p> ops;
        if (comm->rank == root)
            for (int r = 0; r < comm->nranks; r++) ops.push_back({true, (void *)send, bytes, r});
        ops.push_back({false, recv, bytes, root});
        run_group(comm, OP_BROADCAST, root, ops);
    });
    return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
    if (tl_group.depth++ == 0) {
        tl_group.comm = nullptr;
        tl_group.stream = nullptr;
        tl_group.mixed = false;
        tl_group.ops.clear();
    }
    return ncclSuccess;
}

static ncclResult_t add_p2p(bool send, const void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                            cudaStream_t stream) {
    size_t tb = type_bytes(type);
    if (!comm || !tb || peer < 0 || peer >= comm->nranks) return ncclInvalidArgument;
    if (count && !zt_emu_is_device_range(buf, count * tb)) return ncclInvalidArgument;
    if (!tl_group.depth) return ncclInvalidUsage; /* zerotrain always groups its sends and receives */
    if (tl_group.ops.empty()) {
        tl_group.comm = comm;
        tl_group.stream = stream;
    } else if (tl_group.comm != comm || tl_group.stream != stream) {
        tl_group.mixed = true;
    }
    for (const p2p &o : tl_group.ops)
        if (o.send == send && o.peer == peer) return ncclInvalidUsage; /* one message per peer and direction */
    tl_group.ops.push_back({send, (void *)buf, count * tb, peer});
    return ncclSuccess;
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    return add_p2p(true, buf, count, type, peer, comm, stream);
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
    return add_p2p(false, buf, count, type, peer, comm, stream);
}

ncclResult_t ncclGroupEnd() {
    if (tl_group.depth == 0) return ncclInvalidUsage;
    if (--tl_group.depth > 0) return ncclSuccess;
    if (tl_group.ops.empty()) return ncclSuccess;
    /* one communicator and one stream per group: all zerotrain does */
    if (tl_group.mixed) return ncclInvalidUsage;
    ncclComm_t comm = tl_group.comm;
    std::vector<p2p> ops = tl_group.ops;
    tl_group.ops.clear();
    enqueue_in_order(comm, tl_group.stream, [comm, ops]() { run_group(comm, OP_GROUP, -1, ops); });
    return ncclSuccess;
}
