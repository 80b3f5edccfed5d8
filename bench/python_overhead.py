#!/usr/bin/env python3
"""What the Python binding adds to a call: host microseconds per call at a shape (default: the codelab's
(4, 128, 8, 64), bf16, CUDA), back to back, for
  binding     _attnlab.forward on preallocated torch tensors (nanobind calls each tensor's __dlpack__),
  capsules    the same with DLPack capsules made by torch._C._to_dlpack and the raw current stream, as the
              package's torch op passes them (the binding at its cheapest),
  make_capsules  those four capsules and the stream alone, no call: torch's share of `capsules` (capsules −
              make_capsules is the binding's own cost),
  dpa         attnlab.dot_product_attention (allocates O with torch each call),
  torch_op    attnlab.torch.dot_product_attention (the torch.library op, autograd off),
and torch's own SDPA (F.scaled_dot_product_attention, the flash backend) as the peer. Compare `binding` with
`attnlab bench`'s host_ms for the C++ call on the same shape (the goal: within 2 µs). Prints one JSON line.

  python3 bench/python_overhead.py [--shape B,T,N,H] [--path flash] [--calls 2000] [--groups 11]
"""
import argparse
import json
import statistics
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="4,128,8,64")
    ap.add_argument("--path", default="flash")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--groups", type=int, default=11)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    import attnlab
    import attnlab.torch as at
    from attnlab import _attnlab

    b, t, n, h = (int(x) for x in args.shape.split(","))
    q, k, v = (torch.randn(b, t, n, h, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = torch.empty_like(q)
    stream = torch.cuda.current_stream().cuda_stream
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

    dl, raw_stream = torch._C._to_dlpack, torch._C._cuda_getCurrentRawStream
    kinds = {
        "binding": lambda: _attnlab.forward(q, k, v, out, None, None, False, False, -1, -1, None, None, None, None,
                                            args.path, stream),
        "capsules": lambda: _attnlab.forward(dl(q), dl(k), dl(v), dl(out), None, None, False, False, -1, -1, None,
                                             None, None, None, args.path, raw_stream(0)),
        "make_capsules": lambda: (dl(q), dl(k), dl(v), dl(out), raw_stream(0)),
        "dpa": lambda: attnlab.dot_product_attention(q, k, v, implementation=args.path),
        "torch_op": lambda: at.dot_product_attention(q, k, v, implementation=args.path),
        "torch_sdpa": lambda: F.scaled_dot_product_attention(qt, kt, vt),
    }
    result = {"shape": [b, t, n, h], "path": args.path, "calls_per_group": args.calls}
    with torch.no_grad():
        for fn in kinds.values():  # warm up: graphs, allocator, clocks
            for _ in range(200):
                fn()
        torch.cuda.synchronize()
        samples = {name: [] for name in kinds}
        for _ in range(args.groups):  # kinds take turns in each group, so a CPU that changes speed moves them alike
            for name, fn in kinds.items():
                start = time.perf_counter()
                for _ in range(args.calls):
                    fn()
                torch.cuda.synchronize()
                samples[name].append((time.perf_counter() - start) / args.calls * 1e6)
    for name, s in samples.items():
        result[f"{name}_us"] = round(statistics.median(s), 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
