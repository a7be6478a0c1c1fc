#!/usr/bin/env python3
"""The CUDA module's refusals (runtime/cuda_module.c), run by CTest in CUDA
builds: `--device cuda` with ZT_CUDA_MODULE pointing at a module that is
missing, from another build (another ABI), or not a zerotrain module gives
exit 2 and a message naming the file and the problem; a CPU run never opens
the module, so a broken ZT_CUDA_MODULE does not stop it.

usage: zt_cuda_module_test.py ZT_TRAIN STALE_MODULE FOREIGN_MODULE
"""
import os
import subprocess
import sys
import tempfile

SMALL = ["--layers", "1", "--d-model", "16", "--heads", "2", "--seq-len", "16", "--micro-batch", "2", "--vocab", "16",
         "--threads", "1", "--steps", "1", "--quiet"]


def run(zt, module, device, expect_rc):
    env = dict(os.environ, ZT_CUDA_MODULE=module)
    p = subprocess.run([zt, "--device", device] + SMALL, capture_output=True, text=True, timeout=120, env=env)
    if p.returncode != expect_rc:
        sys.exit(f"FAIL: ZT_CUDA_MODULE={module} --device {device}: exit {p.returncode}, expected {expect_rc}\n"
                 f"{p.stdout[-1500:]}\n{p.stderr[-1500:]}")
    return p.stderr


def main():
    zt, stale, foreign = sys.argv[1:4]
    with tempfile.TemporaryDirectory(prefix="zt-cuda-module-") as work:
        missing = os.path.join(work, "libzt_cuda.so")
        for module, needles in ((missing, ["was not found", missing, "ZT_CUDA_MODULE"]),
                                (stale, ["is from another build", stale, "ABI"]),
                                (foreign, ["has no zt_cuda_module_entry", foreign])):
            err = run(zt, module, "cuda", 2)
            for n in needles:
                if n not in err:
                    sys.exit(f"FAIL: ZT_CUDA_MODULE={module}: the message lacks {n!r}:\n{err}")
        run(zt, missing, "cpu", 0)
    print("ok: a missing, stale or foreign CUDA module is refused by name (exit 2); a CPU run never opens it")


if __name__ == "__main__":
    main()
