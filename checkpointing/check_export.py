#!/usr/bin/env python3
"""Checks a zt-export file with a reader that is not ours: the `safetensors`
package (pip install safetensors numpy). Not part of CI (it needs PyPI).

usage: check_export.py MODEL.safetensors CHECKPOINT_DIR

Loads every tensor with safetensors.numpy, checks names and shapes against the
checkpoint's manifest, and checks the values against the fp32 master values
read directly from the rank files (world slices, per the manifest).
"""
import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file

model, ckpt = sys.argv[1], sys.argv[2]
if os.path.exists(os.path.join(ckpt, "latest")):
    ckpt = os.path.join(ckpt, open(os.path.join(ckpt, "latest")).read().strip())
manifest = json.load(open(os.path.join(ckpt, "manifest.json")))
tensors = load_file(model)
dsize = 4 if manifest["dtype"] == "fp32" else 2
offset = 32  # file header
checked = 0
for unit in manifest["units"]:
    S, numel = unit["shard_numel"], unit["numel"]
    full = np.zeros(S * manifest["world_size"], dtype=np.float32)
    for r in range(manifest["world_size"]):
        with open(os.path.join(ckpt, f"rank{r}.bin"), "rb") as f:
            f.seek(offset)
            full[r * S:(r + 1) * S] = np.frombuffer(f.read(S * 4), dtype="<f4")
    offset += S * (12 + dsize)
    for p in unit["params"]:
        name = f"{unit['name']}.{p['name']}"
        t = tensors[name]
        assert list(t.shape) == p["shape"], (name, t.shape, p["shape"])
        want = full[p["offset"]:p["offset"] + p["numel"]].reshape(p["shape"])
        assert t.dtype == np.float32 and np.array_equal(t, want), name
        checked += 1
print(f"ok: safetensors loaded {len(tensors)} tensors; {checked} match the checkpoint's master values exactly")
