"""DDP118: torch.load with no map_location where every rank has a GPU of its own."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.model import Remediation
from ddp_doctor.registry import Hit, rule
from ddp_doctor.script import names
from ddp_doctor.script.facts import ScriptFacts, text_of
from ddp_doctor.script.flow import flow_of
from ddp_doctor.script.hits import hit
from ddp_doctor.script.loads import (
    helper_loads_without_map_location,
    maps_location,
    program_uses_cuda,
    restores_state,
)
from ddp_doctor.script.nodevice import without_own_gpu
from ddp_doctor.script.purpose import forwards_keywords, loads_cpu_save
from ddp_doctor.script.rankflow import mentions_rank
from ddp_doctor.script.trainerhooks import runs_in_the_ranks


@rule(
    "DDP118",
    Remediation("Pass map_location: torch.load(path, map_location=f'cuda:{local_rank}') or 'cpu'."),
)
def load_without_map_location(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        torch.load(...) with no map_location (or map_location=None) in a one-process-per-GPU
        CUDA script, outside rank-0-only code. A transformers/accelerate device map that puts
        modules on a GPU index (`device_map={"": int(os.environ.get("LOCAL_RANK") or 0)}`,
        alpaca-lora's finetune.py and its derivatives, with no `.cuda()` anywhere) makes a
        CUDA script; "auto" and "cpu" do not.
    Why it matters:
        A checkpoint saved from cuda:0 is restored onto cuda:0 in every process. Each rank
        then holds a full copy of the weights (and optimizer state) on GPU 0: out of memory
        on GPU 0, or a stray context there that set_device does not prevent.
        A helper that passes its keywords on to torch.load (`def load(path, **kw)`) is
        judged at its calls. A helper module that names no CUDA itself is judged by its
        program's (CUDA, or an accelerate Accelerator, in another of its files), for the loads
        whose result is restored into a model or optimizer (`model.load_state_dict(
        torch.load(path))`, `ckpt = torch.load(path)`, then `load_state_dict(ckpt["model"])`,
        peft's `set_peft_model_state_dict(model, weights)`):
        a dataset's label cache holds no GPU tensors. Files the program saves itself from CPU
        tensors are left alone,
        and so is the arm where the process has no GPU index of its own (`if args.gpu is
        None:`, the imagenet example's one-process-drives-the-GPUs path: the model is on
        cuda:0 there too, which DDP127 reports), and a per-rank file read back as data (the
        rank in its path, f"queue{rank}.pth": each rank saved it from its own GPU). A per-rank
        checkpoint restored into a model or optimizer (f"checkpoint_gpu_{rank}.pt", resumed)
        is reported: a job resumes on whatever GPUs it gets, and each rank's state goes back
        to the GPU index that saved it ("Attempting to deserialize object on CUDA device 7 but
        torch.cuda.device_count() is 4" with fewer GPUs per node).
        A method of a class derived from Lightning's (a CheckpointIO plugin's load_checkpoint)
        or from a transformers TrainerCallback that rank code instantiates, registers or lists
        in a Trainer's `callbacks=` runs in every rank: the Trainer calls it.
    Example:
        state = torch.load("checkpoint.pt")
    Fix:
        state = torch.load("checkpoint.pt", map_location=f"cuda:{local_rank}")
    """
    flow = flow_of(facts)
    if not flow.is_multiprocess or not program_uses_cuda(facts):
        return
    for load in facts.calls_to(names.TORCH_LOAD):
        if maps_location(load) or forwards_keywords(load) or loads_cpu_save(facts, load):
            continue
        if not flow.uses_cuda and not restores_state(facts, load):
            continue  # CUDA only elsewhere in the program: only weights were saved from GPUs
        if flow.runs_on_rank_zero_only(load.ctx) or not runs_in_the_ranks(facts, load.ctx):
            continue
        if without_own_gpu(load.ctx):
            continue  # `if args.gpu is None:` one process drives the GPUs: nothing to miss
        path = load.argument(0, "f")
        if path is not None and mentions_rank(facts, path) and not restores_state(facts, load):
            continue  # a per-rank buffer: the rank saved it from its own GPU
        yield hit(
            facts,
            load.node,
            f"torch.load({text_of(load.argument(0, 'f'))}) has no map_location: every rank "
            "loads it onto the GPU it was saved from (cuda:0)",
        )
    if flow.uses_cuda:
        yield from helper_loads_without_map_location(facts)
