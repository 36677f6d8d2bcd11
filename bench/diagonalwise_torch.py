#!/usr/bin/env python3
"""Diagonalwise refactorization in PyTorch: training-step cost of MobileNetV1's depthwise layers.

For each of MobileNetV1's 13 depthwise 3x3 layers (shapes at a 224x224 input), times forward plus
backward (input and weight gradients) of

  native      nn.functional.conv2d(groups=C) with the depthwise weight [C, 1, 3, 3]
  G = ...     the same layer as a block-diagonal convolution: a dense weight [C, G, 3, 3] masked to
              its diagonal (mask[o, i] = 1 iff i == o mod G), run as one grouped convolution with
              C/G groups (G = C: one dense convolution)

and checks that outputs, input gradients and the depthwise weight gradients of both forms agree.
The refactorized form keeps a depthwise-shaped parameter and scatters it into the masked dense
weight on every step, so autograd returns exactly the depthwise weight gradient (the off-diagonal
entries of the dense gradient are dropped), as in the method's training recipe.

  python bench/diagonalwise_torch.py                       # CUDA, batch 64, table
  python bench/diagonalwise_torch.py --json                # one JSON object
  python bench/diagonalwise_torch.py --device cpu --batch 2 --repeat 2   # smoke check

Timing: CUDA events around `repeat` iterations after `warmup` iterations, median of `trials`
(wall clock with synchronisation on the CPU). Needs torch; not part of tools/requirements.txt.
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

# (input channels, input size at 224x224, stride) of MobileNetV1's depthwise layers.
MOBILENET_V1_DEPTHWISE = [
    (32, 112, 1),
    (64, 112, 2),
    (128, 56, 1),
    (128, 56, 2),
    (256, 28, 1),
    (256, 28, 2),
    (512, 14, 1),
    (512, 14, 1),
    (512, 14, 1),
    (512, 14, 1),
    (512, 14, 1),
    (512, 14, 2),
    (1024, 7, 1),
]

CANDIDATE_GROUPS = (4, 8, 16, 32)


def group_sizes(c, requested):
    """The group sizes to try for C channels: requested ones dividing C and below it, then C."""
    sizes = [g for g in requested if g < c and c % g == 0]
    return sizes + [c]


def diagonal_mask(c, g, device, dtype):
    """[C, G, 1, 1] mask of the block-diagonal weight: output o reads local input o mod G."""
    mask = torch.zeros(c, g, 1, 1, device=device, dtype=dtype)
    mask[torch.arange(c), torch.arange(c) % g] = 1
    return mask


def native_step(x, w, stride):
    """Forward plus backward of the depthwise layer; returns (y, dx, dw)."""
    y = F.conv2d(x, w, stride=stride, padding=1, groups=x.shape[1])
    (dx, dw) = torch.autograd.grad(y, (x, w), grad_outputs=torch.ones_like(y))
    return y, dx, dw


def refactorized_step(x, w, stride, g, mask):
    """The same layer as a block-diagonal (grouped) convolution with G input channels per group.

    The dense weight is the depthwise weight broadcast over the G inputs of each group and masked
    to the diagonal, so the gradient that reaches `w` is the sum over the masked row, i.e. the
    diagonal entry alone."""
    c = x.shape[1]
    dense = w.expand(c, g, 3, 3) * mask
    y = F.conv2d(x, dense, stride=stride, padding=1, groups=c // g)
    (dx, dw) = torch.autograd.grad(y, (x, w), grad_outputs=torch.ones_like(y))
    return y, dx, dw


def timed(fn, device, warmup, repeat, trials):
    """Median milliseconds per call of fn over `trials` batches of `repeat` calls."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(trials):
        if device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(repeat):
                fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end) / repeat)
        else:
            t0 = time.perf_counter()
            for _ in range(repeat):
                fn()
            samples.append((time.perf_counter() - t0) * 1e3 / repeat)
    return statistics.median(samples)


def relative_error(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def run(args):
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device: use --device cpu for a smoke check")
    torch.manual_seed(0)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        # Full float32 unless asked: TF32 would make the two forms differ by ~1e-3.
        torch.backends.cudnn.allow_tf32 = args.tf32
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
    rows = []
    for index, (c, size, stride) in enumerate(MOBILENET_V1_DEPTHWISE):
        x = torch.randn(args.batch, c, size, size, device=device, requires_grad=True)
        w = torch.randn(c, 1, 3, 3, device=device, requires_grad=True)
        y0, dx0, dw0 = native_step(x, w, stride)
        native_ms = timed(lambda: native_step(x, w, stride), device, args.warmup, args.repeat,
                          args.trials)
        row = {"layer": index, "channels": c, "size": size, "stride": stride,
               "native_ms": native_ms, "groups": []}
        for g in group_sizes(c, args.groups):
            mask = diagonal_mask(c, g, device, x.dtype)
            y, dx, dw = refactorized_step(x, w, stride, g, mask)
            errors = {
                "output": relative_error(y, y0),
                "input_grad": relative_error(dx, dx0),
                "weight_grad": relative_error(dw, dw0),
            }
            worst = max(errors.values())
            if worst > args.tolerance:
                sys.exit(f"layer {index} G={g}: refactorized differs from native: {errors}")
            ms = timed(lambda: refactorized_step(x, w, stride, g, mask), device, args.warmup,
                       args.repeat, args.trials)
            row["groups"].append({"g": g, "ms": ms, "ratio": ms / native_ms,
                                  "max_relative_error": worst})
        rows.append(row)
        if not args.json:
            cells = "  ".join(f"G={e['g']}: {e['ratio']:.2f}x" for e in row["groups"])
            print(f"dw{index:<2} {c:>4}x{size:>3}x{size:<3} s{stride}  native {native_ms:8.3f} ms  "
                  f"{cells}", flush=True)
    totals = {"native_ms": sum(r["native_ms"] for r in rows)}
    for g in args.groups:
        times = [e["ms"] for r in rows for e in r["groups"] if e["g"] == g and g < r["channels"]]
        if len(times) == len(rows):
            totals[f"G={g}_ms"] = sum(times)
    totals["G=C_ms"] = sum(e["ms"] for r in rows for e in r["groups"] if e["g"] == r["channels"])
    report = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "batch": args.batch,
        "tf32": bool(args.tf32 and device.type == "cuda"),
        "pass": "forward+backward (input and weight gradients)",
        "layers": rows,
        "totals": totals,
    }
    if args.json:
        print(json.dumps(report))
    else:
        print(f"\n{report['device']}, torch {report['torch']}, batch {args.batch}, "
              "forward+backward, ms per layer:")
        print("| layer | C | HxW | stride | native | " +
              " | ".join(f"G={g}" for g in args.groups) + " | G=C |")
        print("|---:|---:|---|---:|---:|" + "---:|" * (len(args.groups) + 1))
        for r in rows:
            by_g = {e["g"]: e for e in r["groups"]}
            cells = [f"{by_g[g]['ms']:.3f} ({by_g[g]['ratio']:.2f}x)" if g in by_g and
                     g != r["channels"] else "–" for g in args.groups]
            full = by_g[r["channels"]]
            cells.append(f"{full['ms']:.3f} ({full['ratio']:.2f}x)")
            print(f"| {r['layer']} | {r['channels']} | {r['size']}x{r['size']} | {r['stride']} | "
                  f"{r['native_ms']:.3f} | " + " | ".join(cells) + " |")
        print("totals (ms):", ", ".join(f"{k} {v:.2f}" for k, v in totals.items()))
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--groups", type=int, nargs="+", default=list(CANDIDATE_GROUPS),
                        help="group sizes G to try besides C (those dividing C)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=10, help="iterations per timing trial")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="largest relative difference allowed between the two forms")
    parser.add_argument("--tf32", action="store_true",
                        help="allow TF32 convolutions on CUDA (raise --tolerance to ~1e-2)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
