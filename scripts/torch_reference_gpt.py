#!/usr/bin/env python3
"""The PyTorch reference for geotrain's GPT (models/gpt.hpp): the same architecture, the same
parameter names, the same optimizer path (AdamW with decay / no-decay groups, or Muon for the
block matrices with AdamW for the rest; warmup + cosine learning rate, clip_grad_norm_), in fp32
on the CPU.

Two modes:

  Parity: train on geotrain's initial weights and batches, write the losses and final weights.
    torch_reference_gpt.py --init init.safetensors --batches batches.npy --steps 20 \
        --lr 1e-3 --warmup 5 --total-steps 20 --min-lr 0 --weight-decay 0.1 \
        --max-grad-norm 1.0 --out DIR
    init.safetensors: `geotrain export-init` (the GPT config is in its __metadata__);
    batches.npy: `geotrain dump-batches`, int32 (steps, B, T + 1);
    writes DIR/losses.json ({"losses": [...], "lrs": [...], "grad_norms": [...]}) and
    DIR/params.safetensors (geotrain's names, the init file's order).
    --optimizer muon [--muon-lr 0.02 --muon-momentum 0.95 --muon-nesterov 1 --muon-ns-steps 5
    --adamw-tensors wte wpe '*ln_*' '*.b' '*.bias']: Muon (Keller Jordan's, written out below)
    for the 2-D tensors no --adamw-tensors glob names, at --muon-lr scaled as the schedule scales
    --lr; torch.optim.AdamW for the rest.

  Benchmark: tokens per second of forward + backward + AdamW step on random tokens.
    torch_reference_gpt.py --bench --preset gpt-tiny --batch 8 --threads 2 --steps 10 [--json]
    torch_reference_gpt.py --bench --device cuda --precision bf16 --compile --preset gpt2-124m \
        --batch 8 --json          # eager and torch.compile, one JSON line each
    On a GPU: bf16 is torch.autocast (fp32 master weights, bf16 GEMMs), AdamW is fused=True,
    attention is F.scaled_dot_product_attention (flash) unless --attention math: the setup a
    PyTorch user would run; the times are taken between torch.cuda.synchronize() calls.

The model mirrors geotrain's exactly: weights (out, in) as nn.Linear, the head tied to wte,
nn.LayerNorm with eps 1e-5, GELU with approximate='tanh', causal attention written out
(masked_fill with -inf, softmax), scaled by 1/sqrt(d_model / heads). Parameter names map 1:1 to
geotrain's: wte, wpe, h.{l}.ln_1.w, ..., ln_f.b (nn's `.weight` / `.bias` are `.w` / `.b`).

Safetensors files are read and written here directly (no safetensors package): an 8-byte
little-endian header length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__":
{...}}, then the raw little-endian data.
"""

import argparse
import ctypes
import fnmatch
import json
import math
import os
import struct
import sys
import time

import numpy as np

# Debian's torch runs its GEMMs on a pthreads OpenBLAS; libgomp's threads spin-wait after every
# parallel region (OMP_WAIT_POLICY=active, its default) on the cores OpenBLAS's threads need, and
# with 2 threads on 2 cores a step takes 3-4x as long as with 1. Passive waiting avoids that; set
# before torch loads libgomp. An OMP_WAIT_POLICY in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # the parity test reports this; say what to do
    sys.exit("torch_reference_gpt.py: PyTorch is missing (python3-torch); run scripts/bootstrap.sh")

# models/gpt.hpp's presets.
PRESETS = {
    "gpt-tiny": dict(vocab=256, d_model=128, layers=5, heads=4, seq_len=128, mlp_ratio=4),
    "gpt-small": dict(vocab=256, d_model=512, layers=6, heads=8, seq_len=256, mlp_ratio=4),
    "gpt2-124m": dict(vocab=50257, d_model=768, layers=12, heads=12, seq_len=1024, mlp_ratio=4),
}
CONFIG_KEYS = ("vocab", "d_model", "layers", "heads", "seq_len", "mlp_ratio")
DEFAULT_NO_DECAY = ["*.b", "*.bias", "*ln_*", "wte", "wpe"]
DEFAULT_ADAMW_TENSORS = ["wte", "wpe", "*ln_*", "*.b", "*.bias"]


def set_threads(n):
    """torch.set_num_threads(n), and the same for the BLAS torch calls for its GEMMs when that is
    OpenBLAS (Debian's python3-torch): set_num_threads does not reach it, and it would otherwise
    run every GEMM on all cores. geotrain's --threads sets both alike (kernels/ops/threads.hpp).
    Returns OpenBLAS's thread count after the call, or None when no OpenBLAS is loaded."""
    torch.set_num_threads(n)
    with open("/proc/self/maps") as f:
        libs = sorted({line.split()[-1] for line in f if "openblas" in line and ".so" in line})
    for path in libs:
        lib = ctypes.CDLL(path)
        if hasattr(lib, "openblas_set_num_threads"):
            lib.openblas_set_num_threads(n)
            return lib.openblas_get_num_threads()
    return None


# ----------------------------------------------------------------------------------------------
# safetensors


def read_safetensors(path):
    """Returns ({name: np.float32 array}, metadata dict), names in file (offset) order."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: truncated: {len(blob)} bytes, no header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError(f"{path}: header of {n} bytes runs past the end ({len(blob)} bytes)")
    header = json.loads(blob[8 : 8 + n].decode("utf-8"))
    data = blob[8 + n :]
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        if entry["dtype"] != "F32":
            raise ValueError(f"{path}: tensor {name} has dtype {entry['dtype']}, only F32 is read")
        a, b = entry["data_offsets"]
        shape = tuple(entry["shape"])
        if not (0 <= a <= b <= len(data)) or b - a != 4 * int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"{path}: tensor {name}: offsets [{a}, {b}) do not fit shape {shape}")
        tensors[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(shape).copy()
    return tensors, metadata


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, np.float32 array), written in this order."""
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    offset = 0
    for name, a in tensors:
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + 4 * a.size]}
        offset += 4 * a.size
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # data 8-byte aligned, as the safetensors package writes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, a in tensors:
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())


# ----------------------------------------------------------------------------------------------
# the model


class Block(nn.Module):
    sdpa = False  # benchmark: F.scaled_dot_product_attention instead of the written-out math

    def __init__(self, d, heads, ratio):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = nn.ModuleDict(dict(qkv=nn.Linear(d, 3 * d), proj=nn.Linear(d, d)))
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = nn.ModuleDict(dict(fc=nn.Linear(d, ratio * d), proj=nn.Linear(ratio * d, d)))

    def attention(self, x, mask):
        B, T, C = x.shape  # (B, T, d)
        hd = C // self.heads
        q, k, v = self.attn["qkv"](x).split(C, dim=2)  # rows [0,d), [d,2d), [2d,3d) of qkv.w
        q = q.view(B, T, self.heads, hd).transpose(1, 2)  # (B, nh, T, hd)
        k = k.view(B, T, self.heads, hd).transpose(1, 2)
        v = v.view(B, T, self.heads, hd).transpose(1, 2)
        if Block.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.attn["proj"](y.transpose(1, 2).contiguous().view(B, T, C))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))  # (B, nh, T, T)
        att = att.masked_fill(mask[:T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.attn["proj"](y)

    def forward(self, x, mask):
        x = x + self.attention(self.ln_1(x), mask)
        x = x + self.mlp["proj"](F.gelu(self.mlp["fc"](self.ln_2(x)), approximate="tanh"))
        return x


class Gpt(nn.Module):
    def __init__(self, vocab, d_model, layers, heads, seq_len, mlp_ratio):
        super().__init__()
        self.wte = nn.Parameter(torch.empty(vocab, d_model))
        self.wpe = nn.Parameter(torch.empty(seq_len, d_model))
        self.h = nn.ModuleList([Block(d_model, heads, mlp_ratio) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d_model, eps=1e-5)
        self.register_buffer("mask", torch.tril(torch.ones(seq_len, seq_len)), persistent=False)
        self.layers = layers

    def forward(self, idx):  # idx (B, T) -> logits (B, T, vocab)
        T = idx.shape[1]
        x = self.wte[idx] + self.wpe[:T]
        for block in self.h:
            x = block(x, self.mask)
        return self.ln_f(x) @ self.wte.t()  # the head is tied to the token embedding

    def init_gpt2(self, generator=None):
        """GPT-2's init, drawn by torch (so not geotrain's values): only the benchmark uses it."""
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif ".ln_" in name or name.startswith("ln_f"):
                    p.fill_(1.0)
                else:
                    residual = name.endswith("proj.weight")
                    std = 0.02 / math.sqrt(2 * self.layers) if residual else 0.02
                    p.normal_(0.0, std, generator=generator)


def geotrain_name(torch_name):
    """h.0.attn.qkv.weight -> h.0.attn.qkv.w; wte -> wte."""
    if torch_name.endswith(".weight"):
        return torch_name[: -len("weight")] + "w"
    if torch_name.endswith(".bias"):
        return torch_name[: -len("bias")] + "b"
    return torch_name


def named_geotrain_parameters(model):
    return [(geotrain_name(n), p) for n, p in model.named_parameters()]


def config_from_metadata(metadata, path):
    missing = [k for k in CONFIG_KEYS if k not in metadata]
    if metadata.get("model", "gpt") != "gpt" or missing:
        raise ValueError(f"{path}: not a GPT init file (model={metadata.get('model')!r}, "
                         f"missing metadata {missing})")
    return {k: int(metadata[k]) for k in CONFIG_KEYS}


def load_into(model, tensors, path):
    params = dict(named_geotrain_parameters(model))
    if set(params) != set(tensors):
        raise ValueError(f"{path}: tensor names differ from the model's: only in the file "
                         f"{sorted(set(tensors) - set(params))}, only in the model "
                         f"{sorted(set(params) - set(tensors))}")
    with torch.no_grad():
        for name, p in params.items():
            a = tensors[name]
            if a.size != p.numel():
                raise ValueError(f"{path}: {name} has {a.size} values, the model {p.numel()}")
            p.copy_(torch.from_numpy(a.reshape(tuple(p.shape))))


# ----------------------------------------------------------------------------------------------
# optimizer path: worker/training/optimizer.hpp, worker/training/local_step.hpp


def lr_at(step, peak, warmup, total, min_lr, cosine):
    if step < warmup:
        return peak * (step + 1) / warmup
    if not cosine:
        return peak
    t = min(1.0, (step - warmup) / (total - warmup))
    return min_lr + (peak - min_lr) * 0.5 * (1.0 + math.cos(math.pi * t))


def make_adamw(model, args, exclude=()):
    """torch.optim.AdamW over the model's parameters (less the tensors in `exclude`), in a decay
    and a no-decay group."""
    decay, no_decay = [], []
    for name, p in named_geotrain_parameters(model):
        if name in exclude:
            continue
        skip = any(fnmatch.fnmatchcase(name, g) for g in args.no_decay)
        (no_decay if skip else decay).append(p)
    groups = [dict(params=decay, weight_decay=args.weight_decay),
              dict(params=no_decay, weight_decay=0.0)]
    fused = getattr(args, "device", "cpu") == "cuda"
    return torch.optim.AdamW(groups, lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps,
                             **(dict(fused=True) if fused else {}))


def zeropower_via_newtonschulz5(G, steps):
    """Keller Jordan's Newton-Schulz iteration (github.com/KellerJordan/Muon, muon.py), in fp32
    where his casts to bf16: the quintic X <- a X + (b A + c A A) X, A = X X^T, on G / (|G|_F +
    1e-7), transposed first when G has more rows than columns."""
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.float()
    if G.size(-2) > G.size(-1):
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(-2) > G.size(-1):
        X = X.mT
    return X


class Muon(torch.optim.Optimizer):
    """Keller Jordan's SingleDeviceMuon step (muon.py, the lerp form) with a nesterov switch and
    ns_steps: momentum.lerp_(grad, 1 - mu); update = grad.lerp(momentum, mu) (nesterov) or
    momentum; Newton-Schulz; * max(1, rows / cols) ** 0.5; p *= 1 - lr wd; p -= lr update."""

    def __init__(self, params, lr=0.02, weight_decay=0.0, momentum=0.95, nesterov=True,
                 ns_steps=5):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                                      nesterov=nesterov, ns_steps=ns_steps))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            mu = group["momentum"]
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - mu)
                update = p.grad.lerp(buf, mu) if group["nesterov"] else buf
                update = zeropower_via_newtonschulz5(update, group["ns_steps"])
                update = update * max(1, p.size(-2) / p.size(-1)) ** 0.5
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(update, alpha=-group["lr"])


class Optimizers:
    """Several torch optimizers stepped as one (what train_step uses: param_groups, zero_grad,
    step). A group's "lr_scale" multiplies the step's lr (Muon's: --muon-lr / --lr)."""

    def __init__(self, *optimizers):
        self.optimizers = optimizers

    @property
    def param_groups(self):
        return [g for o in self.optimizers for g in o.param_groups]

    def zero_grad(self, set_to_none=True):
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def step(self):
        for o in self.optimizers:
            o.step()


def make_muon(model, args):
    """Muon for the 2-D tensors that no --adamw-tensors glob names (decay by --no-decay), AdamW
    for the rest."""
    matrices = [(n, p) for n, p in named_geotrain_parameters(model)
                if p.ndim == 2 and not any(fnmatch.fnmatchcase(n, g) for g in args.adamw_tensors)]
    if not matrices:
        raise ValueError("--optimizer muon: no 2-D tensor outside --adamw-tensors")
    decay, no_decay = [], []
    for name, p in matrices:
        skip = any(fnmatch.fnmatchcase(name, g) for g in args.no_decay)
        (no_decay if skip else decay).append(p)
    scale = args.muon_lr / args.lr
    groups = [dict(params=g, weight_decay=wd, lr_scale=scale)
              for g, wd in ((decay, args.weight_decay), (no_decay, 0.0)) if g]
    muon = Muon(groups, lr=args.muon_lr, momentum=args.muon_momentum,
                nesterov=bool(args.muon_nesterov), ns_steps=args.muon_ns_steps)
    return Optimizers(muon, make_adamw(model, args, exclude={n for n, _ in matrices}))


def train_step(model, opt, tokens, lr, max_grad_norm):
    """One optimizer step on tokens (B, T + 1). Returns (loss, grad_norm)."""
    for g in opt.param_groups:
        g["lr"] = lr * g.get("lr_scale", 1.0)
    opt.zero_grad(set_to_none=True)
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    loss.backward()
    if max_grad_norm > 0:
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm))
    else:
        norm = math.sqrt(sum(float(p.grad.double().pow(2).sum()) for p in model.parameters()))
    opt.step()
    return float(loss), norm


def run_parity(args):
    tensors, metadata = read_safetensors(args.init)
    config = config_from_metadata(metadata, args.init)
    model = Gpt(**config)
    load_into(model, tensors, args.init)
    batches = np.load(args.batches)
    if batches.dtype != np.int32 or batches.ndim != 3 or batches.shape[2] != config["seq_len"] + 1:
        raise ValueError(f"{args.batches}: want int32 (steps, B, {config['seq_len'] + 1}), "
                         f"got {batches.dtype} {batches.shape}")
    if batches.shape[0] < args.steps:
        raise ValueError(f"{args.batches}: {batches.shape[0]} batches, --steps {args.steps}")
    opt = make_muon(model, args) if args.optimizer == "muon" else make_adamw(model, args)
    losses, lrs, norms = [], [], []
    for step in range(args.steps):
        lr = lr_at(step, args.lr, args.warmup, args.total_steps, args.min_lr,
                   args.total_steps > 0)
        tokens = torch.from_numpy(batches[step].astype(np.int64))
        loss, norm = train_step(model, opt, tokens, lr, args.max_grad_norm)
        losses.append(loss)
        lrs.append(lr)
        norms.append(norm)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "losses.json"), "w") as f:
        json.dump(dict(losses=losses, lrs=lrs, grad_norms=norms, torch=torch.__version__), f)
    params = dict(named_geotrain_parameters(model))
    write_safetensors(os.path.join(args.out, "params.safetensors"),
                      [(n, params[n].detach().numpy()) for n in tensors], metadata)
    print(f"torch {torch.__version__}: {args.steps} steps, loss {losses[0]:.6f} -> "
          f"{losses[-1]:.6f}; wrote {args.out}/losses.json and {args.out}/params.safetensors")


def bench_one(args, config, compiled):
    """Times forward + backward + AdamW on random tokens; returns the result dict."""
    cuda = args.device == "cuda"
    gen = torch.Generator().manual_seed(1)
    model = Gpt(**config)
    model.init_gpt2(gen)
    model.to(args.device)
    opt = make_adamw(model, args)
    T = config["seq_len"]
    tokens = torch.randint(0, config["vocab"], (args.batch, T + 1), generator=gen).to(args.device)
    forward = torch.compile(model) if compiled else model
    bf16 = args.precision == "bf16"

    def sync():
        if cuda:
            torch.cuda.synchronize()

    fb = optim = 0.0
    for step in range(args.warmup_steps + args.steps):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16,
                            enabled=bf16):
            logits = forward(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                   tokens[:, 1:].reshape(-1))
        loss.backward()
        sync()
        t1 = time.perf_counter()
        opt.step()
        sync()
        t2 = time.perf_counter()
        if step >= args.warmup_steps:  # warm-up steps (allocations, compilation) are not timed
            fb += t1 - t0
            optim += t2 - t1
    n_params = sum(p.numel() for p in model.parameters())
    tokens_per_s = args.batch * T * args.steps / (fb + optim)
    return dict(impl="pytorch", mode="compile" if compiled else "eager", torch=torch.__version__,
                device=torch.cuda.get_device_name(0) if cuda else "cpu",
                precision=args.precision, attention="math" if not Block.sdpa else "sdpa",
                preset=args.preset, batch=args.batch, seq_len=T, threads=args.threads,
                omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"), steps=args.steps,
                parameters=n_params, tokens_per_s=tokens_per_s,
                step_ms=1e3 * (fb + optim) / args.steps,
                forward_backward_ms=1e3 * fb / args.steps,
                optimizer_ms=1e3 * optim / args.steps, loss=float(loss))


def run_bench(args):
    config = dict(PRESETS[args.preset])
    if args.seq_len:
        config["seq_len"] = args.seq_len
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_reference_gpt.py: --device cuda but torch sees no CUDA device")
    if args.precision == "bf16" and args.device != "cuda":
        sys.exit("torch_reference_gpt.py: --precision bf16 is for --device cuda")
    Block.sdpa = args.device == "cuda" and args.attention == "sdpa"
    modes = [False, True] if args.compile else [False]
    for compiled in modes:
        result = bench_one(args, config, compiled)
        if args.json:
            print(json.dumps(result), flush=True)
        else:
            print(f"pytorch {torch.__version__} {result['mode']} {args.preset} (T {result['seq_len']}, "
                  f"{result['parameters']} parameters) batch {args.batch}, {result['device']} "
                  f"{args.precision}: {result['tokens_per_s']:.0f} tokens/s, step "
                  f"{result['step_ms']:.1f} ms (forward+backward "
                  f"{result['forward_backward_ms']:.1f} ms, AdamW {result['optimizer_ms']:.1f} "
                  f"ms), mean of {args.steps} steps", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--init", help="initial weights (geotrain export-init)")
    p.add_argument("--batches", help="int32 .npy (steps, B, T+1) (geotrain dump-batches)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--out", help="output folder (parity mode)")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    p.add_argument("--warmup", type=int, default=0, help="linear warmup steps")
    p.add_argument("--total-steps", type=int, default=0,
                   help="cosine decay to --min-lr at this step (0: constant after warmup)")
    p.add_argument("--min-lr", type=float, default=0.0)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--max-grad-norm", type=float, default=0.0, help="0: no clipping")
    p.add_argument("--no-decay", nargs="*", default=DEFAULT_NO_DECAY,
                   help="globs of tensors without weight decay (geotrain names)")
    p.add_argument("--optimizer", choices=["adamw", "muon"], default="adamw",
                   help="parity: AdamW everywhere, or Muon for the matrices and AdamW elsewhere")
    p.add_argument("--muon-lr", type=float, default=0.02,
                   help="Muon's peak lr (scaled by the schedule as --lr is)")
    p.add_argument("--muon-momentum", type=float, default=0.95)
    p.add_argument("--muon-nesterov", type=int, choices=[0, 1], default=1)
    p.add_argument("--muon-ns-steps", type=int, default=5)
    p.add_argument("--adamw-tensors", nargs="*", default=DEFAULT_ADAMW_TENSORS,
                   help="globs of 2-D tensors that Muon leaves to AdamW (geotrain names)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch.set_num_threads, and OpenBLAS's threads when torch uses OpenBLAS")
    p.add_argument("--bench", action="store_true", help="benchmark mode")
    p.add_argument("--preset", choices=sorted(PRESETS), default="gpt-tiny")
    p.add_argument("--seq-len", type=int, default=0, help="bench: override the preset's T")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--warmup-steps", type=int, default=2, help="bench: untimed first steps")
    p.add_argument("--json", action="store_true", help="bench: one JSON line")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="bench: where")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bench: bf16 is torch.autocast on cuda")
    p.add_argument("--compile", action="store_true",
                   help="bench: also time torch.compile(model) (one line per mode)")
    p.add_argument("--attention", choices=["sdpa", "math"], default="sdpa",
                   help="bench on cuda: F.scaled_dot_product_attention, or the written-out math")
    args = p.parse_args()
    set_threads(args.threads)
    if args.bench:
        run_bench(args)
    else:
        if not (args.init and args.batches and args.out):
            p.error("parity mode needs --init, --batches and --out (or --bench)")
        if args.total_steps and args.total_steps <= args.warmup:
            p.error("--total-steps must exceed --warmup")
        run_parity(args)


if __name__ == "__main__":
    main()
