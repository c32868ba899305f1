#!/usr/bin/env python3
"""Train with a HARP plan on PyTorch's own pipeline runtime.

    harp export --plan plan.json --to pytorch-pipelining --output exported/
    torchrun --nproc-per-node N examples/pytorch/train_pipelined.py --export exported/ \\
        --data tokens.bin --init-from hf/ --steps 20 --out run/

Each rank builds its stage's layers (the plan's cuts, harp_model.py), wraps them in
torch.distributed.pipelining's PipelineStage and runs the exported per-stage action list
(schedule.csv: F, B or I and W, SEND/RECV, REDUCE_GRAD) with _PipelineScheduleRuntime.
What the plan has and a stock PyTorch pipeline has not, this script adds through the
runtime's own extension points:

* Data parallelism per stage, of any degree (a stage of dp 2 beside stages of dp 1):
  replica d of a stage owns samples [first, first + count) of every microbatch; the
  stage's send and receive ops move each neighbour replica the samples they share
  (the manifest lists them per rank). Every replica runs its stage's row of the CSV, as
  its own pipeline (one process group per pipeline: the runtime's pp group).
* REDUCE_GRAD (a custom function): the tied embedding's gradient summed over the first
  and last stages, then each stage's gradients all-reduced over its replicas.
* The optimizer step after schedule.step(): the global gradient norm (each parameter
  once), clipping, AdamW with HARP's warm-up and cosine schedule.

The loss is the sum of token cross-entropies over the global batch divided by its token
count, so microbatches and replicas add up exactly, as in `harp train`. OUT/metrics.jsonl
and OUT/summary.json carry the fields `harp trace runs` reads (the prediction from the
export beside this run's median step).
"""

import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_check  # noqa: E402
import harp_model  # noqa: E402

from torch.distributed.pipelining import PipelineStage  # noqa: E402
from torch.distributed.pipelining.schedules import REDUCE_GRAD, _PipelineScheduleRuntime  # noqa: E402
from torch.distributed.pipelining.stage import _RecvInfo  # noqa: E402


def parse_args():
    p = export_check.Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--export", required=True, help="folder written by harp export --to pytorch-pipelining")
    p.add_argument("--data", default="synthetic", help="token file (harp data prepare) or synthetic")
    p.add_argument("--init-from", default="", help="Hugging Face folder (model.safetensors) with the initial weights")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=1234, help="data order (and weights without --init-from)")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--min-lr", type=float, default=0.0, help="0: lr / 10")
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--decay-steps", type=int, default=0, help="0: max(steps, warmup + 1)")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0, help="max global gradient norm; 0: off")
    p.add_argument("--device", default="cpu", help="cpu (Gloo) or cuda (NCCL, cuda:LOCAL_RANK)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank (CPU)")
    p.add_argument("--emulate", action="store_true",
                   help="apply the plan's emulated slowdowns (as harp train --emulate: a compute of a device f times "
                        "slower waits until f times its CPU time has passed)")
    p.add_argument("--out", default="", help="folder for metrics.jsonl and summary.json (rank 0)")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args()


def fail(message, code=1):
    """Every rank exits `code` (harp's: 1 a bad input, 2 a bad command line); rank 0 says why
    (once, not once per rank)."""
    if os.environ.get("RANK", "0") in ("0", ""):
        print("train_pipelined.py: " + message, file=sys.stderr)
    sys.exit(code)


class HarpStage(PipelineStage):
    """A PipelineStage whose sends and receives move each neighbour replica its samples
    (the manifest's exchanges) instead of one whole tensor to one peer."""

    def __init__(self, module, me, num_stages, device, group, input_meta, output_meta, slowdown=1.0):
        super().__init__(module, me["stage"], num_stages, device, input_args=input_meta, output_args=output_meta,
                         group=group)
        self.me = me
        self.slowdown = slowdown
        self.busy_s = [0.0, 0.0]  # forward, backward (B, or I and W) in this step

    def _timed(self, which, compute, *args, **kwargs):
        """The compute, timed; on an emulated slower device it then waits until `slowdown`
        times the thread's CPU time for it has passed (harp's runtime/exec/emulation.h)."""
        wall, cpu = time.perf_counter(), time.thread_time()
        out = compute(*args, **kwargs)
        if self.slowdown > 1.0:
            left = wall + self.slowdown * (time.thread_time() - cpu) - time.perf_counter()
            if left > 0:
                time.sleep(left)
        self.busy_s[which] += time.perf_counter() - wall
        return out

    def forward_one_chunk(self, *args, **kwargs):
        return self._timed(0, super().forward_one_chunk, *args, **kwargs)

    def backward_one_chunk(self, *args, **kwargs):
        return self._timed(1, super().backward_one_chunk, *args, **kwargs)

    def backward_weight_one_chunk(self, *args, **kwargs):
        return self._timed(1, super().backward_weight_one_chunk, *args, **kwargs)

    def _get_init_p2p_neighbors_ops(self):
        # The runtime's warm-up exchange assumes one peer per neighbouring stage in the
        # pp group; the communicators are warmed up with a world barrier instead.
        return []

    def _get_recv_ops(self, recv_infos):
        ops = []
        for info in recv_infos:
            if not isinstance(info, _RecvInfo):
                continue
            exchanges = self.me["recv_fwd"] if info.source < self.stage_index else self.me["recv_bwd"]
            with torch.no_grad():
                for e in exchanges:
                    ops.append(dist.P2POp(dist.irecv, info.buffer.narrow(0, e["first"], e["count"]), e["peer"]))
        return ops

    def _sliced_sends(self, tensor, exchanges):
        t = tensor.detach()
        return [dist.P2POp(dist.isend, t.narrow(0, e["first"], e["count"]), e["peer"]) for e in exchanges]

    def get_fwd_send_ops(self, fwd_chunk_id):
        output_tuple, _ = self.fwd_cache[fwd_chunk_id]
        return self._sliced_sends(output_tuple[0], self.me["send_fwd"]) if not self.is_last else []

    def get_bwd_send_ops(self, bwd_chunk_id):
        if not self.has_backward or self.is_first:
            return []
        self._check_chunk_id(bwd_chunk_id)
        grads = self.bwd_cache.pop(bwd_chunk_id)
        return self._sliced_sends(grads[0], self.me["send_bwd"])


def new_groups(manifest, rank):
    """Every rank creates every group in one order (c10d's rule). Returns this rank's
    pipeline (pp) group, its stage's dp group (None at dp 1) and the tied group."""
    stages = manifest["stages"]
    S = len(stages)
    width = max(st["dp"] for st in stages)
    pp, dp, tied = None, None, None
    me = manifest["ranks"][rank]
    for p in range(width):
        members = [stages[s]["ranks"][p % stages[s]["dp"]] for s in range(S)]
        g = dist.new_group(members)
        if me["dp_rank"] == p:
            pp = g
    for st in stages:
        if st["dp"] > 1:
            g = dist.new_group(st["ranks"])
            if rank in st["ranks"]:
                dp = g
    if manifest["model_config"]["tied_embeddings"] and S > 1:
        members = sorted(set(stages[0]["ranks"] + stages[-1]["ranks"]))
        g = dist.new_group(members)
        if rank in members:
            tied = g
    return pp, dp, tied


def main():
    args = parse_args()
    # Every input checked before any work (export_check.py): one line and harp's exit code.
    export_check.check_args(args)
    manifest = export_check.load_manifest(args.export)
    export_check.check_schedule(args.export, manifest)
    if args.init_from:
        export_check.check_init_from(args.init_from)
    tokens = None if args.data == "synthetic" else \
        export_check.check_tokens(args.data, manifest["model_config"]["vocab"])
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if var not in os.environ:
            raise export_check.InputError(
                "%s is not set: run it under torchrun (torchrun --standalone --nproc-per-node %d %s --export %s ...)"
                % (var, manifest["world_size"], sys.argv[0], args.export), export_check.EXIT_USAGE)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world != manifest["world_size"]:
        fail("the plan needs %d ranks but WORLD_SIZE is %d; launch with torchrun --nproc-per-node %d"
             % (manifest["world_size"], world, manifest["world_size"]))
    me = manifest["ranks"][rank]
    S, B, b = manifest["num_stages"], manifest["microbatches"], manifest["microbatch_size"]
    st = manifest["stages"][me["stage"]]
    tp_stages = [s["stage"] for s in manifest["stages"] if s["tp"] > 1]
    if tp_stages:
        fail("stage %d has tp %d: tensor parallelism inside a stage is not part of this example (PyTorch "
             "expresses it with DTensor's parallelize_module); export a plan with tp 1, or run it with harp launch"
             % (tp_stages[0], manifest["stages"][tp_stages[0]]["tp"]))
    cfg = manifest["model_config"]
    torch.set_num_threads(args.threads)
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    pp_group, dp_group, tied_group = new_groups(manifest, rank)

    first, last = st["layers"]
    layers = manifest["layers"][first:last]
    module = harp_model.StageModule(cfg, layers)
    if args.init_from:
        harp_model.load_hf_weights(module, cfg, args.init_from)
    else:  # GPT-2-style, from torch's generator (not harp train's own initialisation)
        torch.manual_seed(args.seed + me["stage"])
        with torch.no_grad():
            for name, prm in module.named_harp_parameters():
                prm.fill_(1.0) if prm.dim() == 1 and ("ln" in name or "norm" in name) and name.endswith("weight") \
                    else (prm.normal_(0, 0.02) if prm.dim() >= 2 else prm.zero_())
    module.to(device)

    share = me["samples"][1]
    s_len = cfg["seq_len"]
    in_meta = (torch.empty(share, s_len, dtype=torch.int64, device="meta") if me["stage"] == 0 else
               torch.empty(share, s_len, manifest["layers"][first - 1]["output_shape"][-1], device="meta"))
    out_meta = torch.empty(share, s_len, cfg["vocab"] if me["stage"] == S - 1 else layers[-1]["output_shape"][-1],
                           device="meta")
    stage = HarpStage(module, me, S, device, pp_group, in_meta, out_meta,
                      me["emulated_slowdown"] if args.emulate else 1.0)
    global_tokens = B * b * s_len

    def loss_fn(logits, targets):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum") / \
            global_tokens

    # Every rank passes the loss function: the runtime runs backwards only when it has one
    # (it calls it on the last stage only).
    schedule = _PipelineScheduleRuntime([stage], n_microbatches=B, loss_fn=loss_fn, scale_grads=False)
    schedule._load_csv(os.path.join(args.export, manifest["schedule_csv"]), format="compute_comms")

    # Which gradients are shared and which count once in the global norm.
    named = module.named_harp_parameters()
    tied_names = {"embed.token.weight", "head.lm.weight"} if cfg["tied_embeddings"] else set()
    counted = [me["dp_rank"] == 0 and not (n == "head.lm.weight" and n in tied_names) for n, _ in named]

    def reduce_grad(action, ctx):
        tied = [p for n, p in named if n in tied_names]
        if tied:  # one gradient for the token embedding and the LM head, over both stages' replicas
            total = sum(p.grad for p in tied)
            if tied_group is not None:
                dist.all_reduce(total, group=tied_group)
            for p in tied:
                p.grad.copy_(total)
        if dp_group is not None:
            for n, p in named:
                if n not in tied_names:
                    dist.all_reduce(p.grad, group=dp_group)

    schedule.register_custom_function(REDUCE_GRAD, reduce_grad)

    decay = [p for _, p in named if p.dim() >= 2]
    no_decay = [p for _, p in named if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    min_lr = args.min_lr if args.min_lr > 0 else args.lr / 10
    decay_steps = args.decay_steps if args.decay_steps > 0 else max(args.steps, args.warmup_steps + 1)

    if tokens is None:
        tokens = harp_model.synthetic_tokens(args.seed, 1 << 20, cfg["vocab"])
    dist.barrier()  # every communicator up before the first step

    writer = rank == 0 and args.out
    if writer:
        os.makedirs(args.out, exist_ok=True)
        metrics = open(os.path.join(args.out, "metrics.jsonl"), "w")
    step_seconds = []
    losses_out = []
    busy = torch.zeros(2 * S, dtype=torch.float64)  # per stage: forward, backward seconds (replica 0)
    for step in range(args.steps):
        begin = time.perf_counter()
        stage.busy_s = [0.0, 0.0]
        optimizer.zero_grad(set_to_none=False)
        batch = None
        if me["stage"] in (0, S - 1):  # this replica's samples of every microbatch, microbatch-major
            batch = torch.cat([harp_model.sample_tokens(tokens, args.seed, step, m * b + me["samples"][0], share, s_len)
                               for m in range(B)]).to(device)
        losses = []
        inputs = (batch[:, :-1].contiguous(),) if me["stage"] == 0 else ()
        target = batch[:, 1:].contiguous() if me["stage"] == S - 1 else None
        schedule.step(*inputs, target=target, losses=losses, return_outputs=False)

        sq = sum(p.grad.double().pow(2).sum().item() for (n, p), c in zip(named, counted) if c)
        shared = torch.tensor([sq, float(sum(l.item() for l in losses))], dtype=torch.float64)
        dist.all_reduce(shared)
        norm = math.sqrt(shared[0].item())
        scale = args.grad_clip / (norm + 1e-6) if args.grad_clip > 0 else 1.0
        if scale < 1.0:
            for _, p in named:
                p.grad.mul_(scale)
        lr = harp_model.lr_at(step, args.lr, min_lr, args.warmup_steps, decay_steps)
        for g in optimizer.param_groups:
            g["lr"] = lr
        optimizer.step()
        seconds = time.perf_counter() - begin
        loss = shared[1].item()
        losses_out.append(loss)
        if step > 0:
            step_seconds.append(seconds)
            if me["dp_rank"] == 0:
                busy[me["stage"]] += stage.busy_s[0]
                busy[S + me["stage"]] += stage.busy_s[1]
        if rank == 0:
            tokens_per_step = B * b * s_len
            if not args.quiet:
                print("step %d/%d: loss %.6f, grad norm %.4f, lr %.3g, %.1f ms" % (
                    step + 1, args.steps, loss, norm, lr, 1000 * seconds), flush=True)
            if writer:
                metrics.write(json.dumps({"step": step, "total_steps": args.steps, "loss": loss, "grad_norm": norm,
                                          "lr": lr, "iteration_s": seconds, "tokens": tokens_per_step,
                                          "runtime": "torch.distributed.pipelining"}) + "\n")
                metrics.flush()
    dist.all_reduce(busy)  # every stage's compute, for rank 0's summary
    if writer:
        metrics.close()
        timed = sorted(step_seconds)
        n = len(timed)
        median = (timed[n // 2] if n % 2 else (timed[n // 2 - 1] + timed[n // 2]) / 2) if n else 0.0
        predicted = manifest["predicted_s"]
        summary = {"plan": manifest["plan"], "strategy": manifest["strategy"], "schedule": manifest["schedule"],
                   "planned_schedule": manifest["schedule"], "stages": S, "ranks": world, "steps": args.steps,
                   "runtime": "torch.distributed.pipelining %s" % torch.__version__,
                   "predicted_s": predicted, "closed_form_s": manifest["closed_form_s"],
                   "measured_median_s": median, "measured_mean_s": sum(timed) / n if n else 0.0,
                   "error": (predicted - median) / median if median > 0 else 0.0, "final_loss": losses_out[-1],
                   # Per stage and microbatch, measured (replica 0; emulated waits included).
                   "measured_fwd_s": [busy[i].item() / max(n, 1) / B for i in range(S)],
                   "measured_bwd_s": [busy[S + i].item() / max(n, 1) / B for i in range(S)]}
        tmp = os.path.join(args.out, "summary.json.tmp")
        with open(tmp, "w") as fh:
            json.dump(summary, fh, indent=1)
        os.replace(tmp, os.path.join(args.out, "summary.json"))
        if not args.quiet and n:
            print("predicted %.1f ms/step by the plan, measured %.1f ms (median of %d): error %+.1f%%" % (
                1000 * predicted, 1000 * median, n, 100 * summary["error"]))
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except export_check.InputError as e:
        fail(str(e), e.code)
