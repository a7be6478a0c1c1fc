/* Runs a kernel's grid on the CPU: blocks one after another, the threads of a
 * block as coroutines (ucontext) of the calling stream worker.
 *
 * A thread runs until it reaches __syncthreads, a warp shuffle, or its end,
 * then the next thread runs. When every thread has stopped, a warp whose
 * lanes all wait at a shuffle exchanges its values and continues; when every
 * live thread of the block waits at __syncthreads, they all continue. Any
 * other state is a barrier that can never complete on a GPU either (threads
 * of one warp at different barriers, a shuffle naming lanes that exited):
 * the emulator reports it as a device fault instead of hanging. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>

#include <string>
#include <vector>

#include "emu_kernel.h"

/* ---- coroutine switching ----------------------------------------------------
 * glibc's swapcontext saves and restores the signal mask with a system call
 * on every switch, and a kernel switches twice per thread and per barrier:
 * on x86-64 a switch that saves only what the ABI makes the callee keep
 * (rbx, rbp, r12-r15, the stack pointer, MXCSR and the x87 control word) is
 * ~50x cheaper. Elsewhere, ucontext. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define ZT_EMU_FAST_SWITCH 1
extern "C" void zt_emu_switch(void **save_sp, void *load_sp);
__asm__(".text\n"
        ".globl zt_emu_switch\n"
        ".type zt_emu_switch,@function\n"
        "zt_emu_switch:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    subq $8, %rsp\n"
        "    stmxcsr (%rsp)\n"
        "    fnstcw 4(%rsp)\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    ldmxcsr (%rsp)\n"
        "    fldcw 4(%rsp)\n"
        "    addq $8, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size zt_emu_switch,.-zt_emu_switch\n");
#endif

namespace {

enum thread_state { RUNNABLE, AT_SYNCTHREADS, AT_SHUFFLE, FINISHED };

struct emu_thread {
#ifdef ZT_EMU_FAST_SWITCH
    void *sp;
#else
    ucontext_t ctx;
#endif
    uint3 idx;
    thread_state state;
    /* the pending shuffle */
    unsigned mask;
    uint64_t value, result;
    int kind, arg, width;
};

/* Per OS thread (stream worker): the block being run and the coroutine
 * stacks, kept between blocks and grids. */
/* Memory with an inaccessible page right after it (or, for stacks, right
 * below it), so that running off the end faults at once instead of
 * corrupting a neighbour. */
struct guarded {
    unsigned char *base = nullptr;
    size_t total = 0;
    void release() {
        if (base) munmap(base, total);
        base = nullptr;
        total = 0;
    }
};
const size_t guard_page = 4096;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* `bytes` usable bytes (16-byte aligned) ending at a guard page. */
unsigned char *map_with_guard_after(guarded &g, size_t bytes) {
    size_t usable = round_up(bytes ? bytes : 1, 16), pages = round_up(usable, guard_page);
    if (!g.base || g.total != pages + guard_page) {
        g.release();
        void *p = mmap(nullptr, pages + guard_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return nullptr;
        g.base = (unsigned char *)p;
        g.total = pages + guard_page;
        mprotect(g.base + pages, guard_page, PROT_NONE);
    }
    return g.base + (g.total - guard_page) - usable;
}

struct block_runner {
#ifdef ZT_EMU_FAST_SWITCH
    void *scheduler_sp;
#else
    ucontext_t scheduler;
#endif
    std::vector<emu_thread> threads;
    std::vector<guarded> stacks; /* guard page below each */
    guarded dynamic_shared_map;
    unsigned char *dynamic_shared = nullptr;
    size_t dynamic_shared_bytes = 0;
    bool reverse_threads = false;
    /* Which block of this worker thread is running (never 0, the initial
     * value of a declaration's marker), and the static shared memory its
     * threads have declared so far. */
    uint64_t block_serial = 0;
    size_t static_shared_bytes = 0;
    size_t smem_optin = 0; /* the kernel's dynamic shared memory opt-in, 0 if none */
    const void *func = nullptr;
    size_t static_shared_max = 0; /* over the launch's blocks, for cudaFuncGetAttributes */
    bool static_shared_fault = false;
    const char *kernel_name = "";
    uint3 block_idx;
    dim3 grid_dim, block_dim;
    const std::function<void()> *body = nullptr;
    int current = 0;
    ~block_runner() {
        for (guarded &g : stacks) g.release();
        dynamic_shared_map.release();
    }
};

#if defined(__SANITIZE_ADDRESS__)
const size_t stack_bytes = 512 * 1024;
#else
const size_t stack_bytes = 128 * 1024;
#endif

thread_local block_runner *tl_runner = nullptr;

emu_thread &current_thread() { return tl_runner->threads[(size_t)tl_runner->current]; }

void thread_entry() {
    block_runner *r = tl_runner;
    (*r->body)();
    r->threads[(size_t)r->current].state = FINISHED;
#ifdef ZT_EMU_FAST_SWITCH
    void *dead;
    zt_emu_switch(&dead, r->scheduler_sp); /* never resumed */
    __builtin_unreachable();
#endif
    /* ucontext: returning resumes uc_link, the scheduler */
}

void yield_to_scheduler() {
    block_runner *r = tl_runner;
#ifdef ZT_EMU_FAST_SWITCH
    zt_emu_switch(&r->threads[(size_t)r->current].sp, r->scheduler_sp);
#else
    swapcontext(&r->threads[(size_t)r->current].ctx, &r->scheduler);
#endif
}

/* Prepares thread t to start in thread_entry on `stack`. */
void start_context(block_runner &r, emu_thread &t, char *stack) {
#ifdef ZT_EMU_FAST_SWITCH
    (void)r;
    /* What zt_emu_switch pops, lowest address first: MXCSR and the x87
     * control word (8 bytes), r15, r14, r13, r12, rbx, rbp, then the
     * return address. The return address sits 16-byte aligned, so that
     * thread_entry starts with the stack alignment of a called function. */
    uintptr_t top = ((uintptr_t)stack + stack_bytes) & ~(uintptr_t)15;
    uint64_t *ret_slot = (uint64_t *)(top - 16);
    ret_slot[0] = (uint64_t)(uintptr_t)thread_entry;
    ret_slot[1] = 0;
    uint64_t *sp = ret_slot - 7;
    for (int i = 1; i < 7; i++) sp[i] = 0;
    uint32_t control[2] = {0x1f80u, 0x037fu}; /* power-on MXCSR and x87 control word */
    memcpy(&sp[0], control, sizeof control);
    t.sp = sp;
#else
    getcontext(&t.ctx);
    t.ctx.uc_stack.ss_sp = stack;
    t.ctx.uc_stack.ss_size = stack_bytes;
    t.ctx.uc_link = &r.scheduler;
    makecontext(&t.ctx, thread_entry, 0);
#endif
}

void resume(block_runner &r, int i) {
    r.current = i;
#ifdef ZT_EMU_FAST_SWITCH
    zt_emu_switch(&r.scheduler_sp, r.threads[(size_t)i].sp);
#else
    swapcontext(&r.scheduler, &r.threads[(size_t)i].ctx);
#endif
}

/* Source lane of a shuffle for `lane`, or -1 when the lane keeps its value. */
int shuffle_source(const emu_thread &t, int lane) {
    int width = t.width, base = lane & ~(width - 1);
    switch (t.kind) {
    case ZT_EMU_SHFL_IDX: return base + (t.arg & (width - 1));
    case ZT_EMU_SHFL_UP: return lane - t.arg >= base ? lane - t.arg : -1;
    case ZT_EMU_SHFL_DOWN: return lane + t.arg < base + width ? lane + t.arg : -1;
    default: {
        int src = lane ^ t.arg;
        return src < base + width ? src : -1;
    }
    }
}

/* Completes warp w's shuffle if all its lanes are there. Returns 1 when it
 * did, 0 when the warp is not (yet) at a shuffle, -1 on a fault. */
int try_complete_shuffle(block_runner &r, int w, int nthreads, std::string &why) {
    int first = w * 32, last = first + 32 < nthreads ? first + 32 : nthreads;
    int at = 0, live = 0;
    for (int i = first; i < last; i++) {
        if (r.threads[(size_t)i].state != FINISHED) live++;
        if (r.threads[(size_t)i].state == AT_SHUFFLE) at++;
    }
    if (at == 0) return 0;
    if (at != live) return 0; /* some lanes are elsewhere: decided by the caller */
    unsigned want = last - first == 32 ? 0xffffffffu : ((1u << (last - first)) - 1u);
    for (int i = first; i < last; i++) {
        const emu_thread &t = r.threads[(size_t)i];
        if (t.state != AT_SHUFFLE) {
            why = "a warp shuffle names lanes that have exited (warp " + std::to_string(w) + ")";
            return -1;
        }
        if (t.mask != 0xffffffffu && t.mask != want) {
            why = "warp shuffle with a partial mask, which the emulator does not model";
            return -1;
        }
        if (t.mask == 0xffffffffu && want != 0xffffffffu) {
            why = "warp shuffle with a full mask in a partial warp (block size not a multiple of 32)";
            return -1;
        }
        if (t.kind != r.threads[(size_t)first].kind || t.width != r.threads[(size_t)first].width) {
            why = "lanes of one warp at different kinds of shuffle";
            return -1;
        }
        if (t.width <= 0 || t.width > 32 || (t.width & (t.width - 1))) {
            why = "shuffle width is not a power of two up to 32";
            return -1;
        }
    }
    for (int i = first; i < last; i++) {
        emu_thread &t = r.threads[(size_t)i];
        int src = shuffle_source(t, i - first);
        t.result = (src < 0 || first + src >= last) ? t.value : r.threads[(size_t)(first + src)].value;
    }
    for (int i = first; i < last; i++) r.threads[(size_t)i].state = RUNNABLE;
    return 1;
}

std::string describe_block(const block_runner &r, const char *name) {
    char buf[160];
    snprintf(buf, sizeof buf, "%s, block (%u,%u,%u) of grid (%u,%u,%u), %u threads", name, r.block_idx.x,
             r.block_idx.y, r.block_idx.z, r.grid_dim.x, r.grid_dim.y, r.grid_dim.z,
             r.block_dim.x * r.block_dim.y * r.block_dim.z);
    return buf;
}

/* Runs one block to completion. Returns false after a fault. */
bool run_block(block_runner &r, const char *name) {
    int n = (int)(r.block_dim.x * r.block_dim.y * r.block_dim.z);
    r.threads.resize((size_t)n);
    while (r.stacks.size() < (size_t)n) {
        guarded g;
        void *p = mmap(nullptr, stack_bytes + guard_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            zt_emu_device_fault("out of host memory for coroutine stacks");
            return false;
        }
        g.base = (unsigned char *)p;
        g.total = stack_bytes + guard_page;
        mprotect(g.base, guard_page, PROT_NONE); /* stacks grow down */
        r.stacks.push_back(g);
    }
    for (int i = 0; i < n; i++) {
        emu_thread &t = r.threads[(size_t)i];
        t.idx.x = (unsigned)i % r.block_dim.x;
        t.idx.y = ((unsigned)i / r.block_dim.x) % r.block_dim.y;
        t.idx.z = (unsigned)i / (r.block_dim.x * r.block_dim.y);
        t.state = RUNNABLE;
        start_context(r, t, (char *)r.stacks[(size_t)i].base + guard_page);
    }
    /* Shared memory starts as garbage on a GPU: NaN bytes here, so a read
     * before the first write shows up in the results (static arrays are
     * filled at their first use: zt_emu_static_shared_first_touch). */
    memset(r.dynamic_shared, 0xff, r.dynamic_shared_bytes);
    r.block_serial++;
    r.static_shared_bytes = 0;
    int warps = (n + 31) / 32;
    bool reverse = r.reverse_threads;
    for (;;) {
        for (int k = 0; k < n; k++) {
            int i = reverse ? n - 1 - k : k;
            if (r.threads[(size_t)i].state != RUNNABLE) continue;
            resume(r, i);
        }
        int finished = 0, at_sync = 0, at_shuffle = 0;
        for (const emu_thread &t : r.threads) {
            finished += t.state == FINISHED;
            at_sync += t.state == AT_SYNCTHREADS;
            at_shuffle += t.state == AT_SHUFFLE;
        }
        if (finished == n) return !r.static_shared_fault;
        bool progressed = false;
        std::string why;
        for (int w = 0; w < warps; w++) {
            int rc = try_complete_shuffle(r, w, n, why);
            if (rc < 0) {
                zt_emu_device_fault((why + " in " + describe_block(r, name)).c_str());
                return false;
            }
            progressed |= rc > 0;
        }
        if (progressed) continue;
        if (at_shuffle == 0 && at_sync > 0) {
            for (emu_thread &t : r.threads)
                if (t.state == AT_SYNCTHREADS) t.state = RUNNABLE;
            continue;
        }
        char buf[160];
        snprintf(buf, sizeof buf, "barrier that cannot complete (%d threads at __syncthreads, %d at a shuffle, %d exited)",
                 at_sync, at_shuffle, finished);
        zt_emu_device_fault((std::string(buf) + " in " + describe_block(r, name)).c_str());
        return false;
    }
}

} // namespace

const uint3 &zt_emu_thread_idx(void) { return current_thread().idx; }
const uint3 &zt_emu_block_idx(void) { return tl_runner->block_idx; }
const dim3 &zt_emu_block_dim(void) { return tl_runner->block_dim; }
const dim3 &zt_emu_grid_dim(void) { return tl_runner->grid_dim; }
void *zt_emu_dynamic_shared(void) { return tl_runner->dynamic_shared; }

bool zt_emu_static_shared_first_touch(uint64_t *seen, size_t bytes) {
    block_runner &r = *tl_runner;
    if (*seen == r.block_serial) return false;
    *seen = r.block_serial;
    r.static_shared_bytes += bytes;
    if (r.static_shared_bytes > r.static_shared_max) r.static_shared_max = r.static_shared_bytes;
    /* On a GPU the launch (or the opt-in) fails; here the first block over
     * a limit faults (the kernel's remaining blocks do not run). */
    size_t st = r.static_shared_bytes;
    bool over = st > zt_emu_smem_default_max ||
                (r.smem_optin ? st + r.smem_optin > zt_emu_smem_optin_max
                              : st + r.dynamic_shared_bytes > zt_emu_smem_default_max);
    if (!r.static_shared_fault && over) {
        char buf[300];
        snprintf(buf, sizeof buf,
                 "shared memory over the limit: %zu bytes static (48 KiB at most) + %zu dynamic (48 KiB in all "
                 "without cudaFuncSetAttribute; static + the attribute's %zu at most 227 KiB)",
                 st, r.dynamic_shared_bytes, r.smem_optin);
        zt_emu_device_fault((std::string(buf) + " in " + describe_block(r, r.kernel_name)).c_str());
        r.static_shared_fault = true;
    }
    return true;
}

void zt_emu_syncthreads(void) {
    current_thread().state = AT_SYNCTHREADS;
    yield_to_scheduler();
}

uint64_t zt_emu_shfl(unsigned mask, uint64_t bits, int kind, int arg, int width) {
    emu_thread &t = current_thread();
    t.mask = mask;
    t.value = bits;
    t.kind = kind;
    t.arg = arg;
    t.width = width;
    t.state = AT_SHUFFLE;
    yield_to_scheduler();
    return current_thread().result;
}

void zt_emu_run_grid(dim3 grid, dim3 block, size_t dynamic_smem, size_t smem_optin, const void *func,
                     const std::function<void()> &body, const char *name) {
    thread_local block_runner runner;
    /* A GPU runs blocks, and a block's threads between two barriers, in any
     * order, so a kernel must not depend on one. Launches alternate between
     * blocks in ascending and descending order, and within a launch odd and
     * even blocks run their threads in opposite directions (which direction
     * alternates too): a missing __syncthreads, or a block reading what a
     * later block writes, gives a wrong result in one order or the other. */
    static std::atomic<uint64_t> launches{0};
    uint64_t launch = launches++;
    block_runner *saved = tl_runner;
    tl_runner = &runner;
    runner.grid_dim = grid;
    runner.block_dim = block;
    runner.body = &body;
    runner.kernel_name = name;
    runner.static_shared_fault = false;
    runner.smem_optin = smem_optin;
    runner.func = func;
    runner.static_shared_max = 0;
    runner.dynamic_shared = map_with_guard_after(runner.dynamic_shared_map, dynamic_smem);
    runner.dynamic_shared_bytes = dynamic_smem;
    if (!runner.dynamic_shared) {
        zt_emu_device_fault("out of host memory for dynamic shared memory");
        tl_runner = saved;
        return;
    }
    uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
    for (uint64_t k = 0; k < nblocks; k++) {
        uint64_t b = (launch & 1) ? nblocks - 1 - k : k;
        runner.block_idx.x = (unsigned)(b % grid.x);
        runner.block_idx.y = (unsigned)(b / grid.x % grid.y);
        runner.block_idx.z = (unsigned)(b / ((uint64_t)grid.x * grid.y));
        runner.reverse_threads = ((b ^ (launch >> 1)) & 1) != 0;
        if (!run_block(runner, name)) break;
    }
    if (runner.static_shared_max) zt_emu_note_static_smem(func, runner.static_shared_max);
    tl_runner = saved;
}
