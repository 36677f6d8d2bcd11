#!/usr/bin/env python3
"""Runs models through the official TFLite interpreter (PyPI ai-edge-litert): tandem's oracle.

  litert.py ops MODEL                      print the interpreter's operator names (JSON list)
  litert.py run MODEL OUT_DIR [IN.npy ...] run once (1 thread) and write OUT_DIR/output_<i>.npy
                                           in the model's output order; without inputs, zeros
  litert.py bench MODEL RUNS THREADS       time RUNS invocations after a warm-up (XNNPACK, the
                                           interpreter's default); print JSON {"times_ms": [...]}

Exit status 1 with a message on stderr when the interpreter rejects the model.
"""
import json
import os
import sys
import time

import numpy as np
from ai_edge_litert.interpreter import Interpreter


def load(path):
    return Interpreter(model_path=path, num_threads=1)


def ops(path):
    interp = load(path)
    print(json.dumps([d["op_name"] for d in interp._get_ops_details()]))


def run(path, out_dir, inputs):
    interp = load(path)
    interp.allocate_tensors()
    details = interp.get_input_details()
    if inputs and len(inputs) != len(details):
        sys.exit(f"model has {len(details)} inputs, got {len(inputs)} files")
    for i, d in enumerate(details):
        value = np.load(inputs[i]) if inputs else np.zeros(d["shape"], d["dtype"])
        interp.set_tensor(d["index"], value)
    interp.invoke()
    os.makedirs(out_dir, exist_ok=True)
    shapes = []
    for i, d in enumerate(interp.get_output_details()):
        value = interp.get_tensor(d["index"])
        np.save(os.path.join(out_dir, f"output_{i}.npy"), value)
        shapes.append(list(value.shape))
    print(json.dumps({"outputs": shapes}))


def bench(path, runs, threads):
    interp = Interpreter(model_path=path, num_threads=threads)
    interp.allocate_tensors()
    rng = np.random.default_rng(0)
    for d in interp.get_input_details():
        interp.set_tensor(d["index"], rng.uniform(-1, 1, d["shape"]).astype(d["dtype"]))
    interp.invoke()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        interp.invoke()
        times.append((time.perf_counter() - start) * 1e3)
    print(json.dumps({"times_ms": times}))


def main(argv):
    if len(argv) >= 2 and argv[0] == "ops":
        ops(argv[1])
    elif len(argv) == 4 and argv[0] == "bench":
        bench(argv[1], int(argv[2]), int(argv[3]))
    elif len(argv) >= 3 and argv[0] == "run":
        run(argv[1], argv[2], argv[3:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except (ValueError, RuntimeError) as e:
        sys.exit(f"interpreter error: {e}")
