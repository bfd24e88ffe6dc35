"""Several ranks in one log (launcher prefixes) and one log per rank (a folder) (issue 21).

The prefixed lines are real texts from public threads, source beside each.
"""

from __future__ import annotations

from pathlib import Path

from ddp_doctor.logscan import scan_text
from ddp_doctor.logscan.inputs import scan_folder
from ddp_doctor.logscan.lines import read_line
from ddp_doctor.logscan.rankfiles import speakers

# huggingface/accelerate#1317: deepspeed's pdsh runner prefixes each node's lines with its host
PDSH = (
    "104.171.201.171: lambda-scalar02:95756:95756 [6] NCCL INFO cudaDriverVersion 11070\n"
    "104.171.201.172: lambda-scalar03:148966:148966 [0] NCCL INFO Using network Socket\n"
)
# hiyouga/LlamaFactory#2470: the same runner with host names
PDSH_NAMES = "gpu003:     dist.barrier()\n"
# hiyouga/LlamaFactory#7233: torch >= 2.2's [rankN]: prefix
RANK_SHM = (
    "[rank1]: Last error:\n"
    "[rank1]: Error while creating shared memory segment /dev/shm/nccl-LeXlEJ (size 9637888)\n"
)
# vllm-project/vllm#8447 and #7074: Ray's worker prefix, alone and before [rankN]:
RAY = "(RayWorkerWrapper pid=248, ip=10.1.160.68) INFO 09-12 23:40:47 utils.py:977] Found nccl\n"
RAY_RANK = (
    "(RayWorkerWrapper pid=1978, ip=10.41.0.8) [rank9]:[W ProcessGroupGloo.cpp:721] Warning: "
    "Unable to resolve hostname to a (local) address. Using the loopback address as fallback.\n"
)
# kubeflow/mpi-operator's nccl-tests example: mpirun --tag-output's [job,rank]<stream>:
MPIRUN = "[1,0]<stdout>:           8             2     float     sum      -1    115.8    0.00\n"
# fixtures/logs/oom_killed_slurm.log: srun --label
SRUN = "12: E0301 02:14:52.509000 118220 torch/distributed/elastic/multiprocessing/api.py:869]\n"


def line(text: str):
    return read_line(text.encode(), 1)


def test_each_launcher_prefix_names_its_speaker_and_leaves_the_body() -> None:
    pdsh = line(PDSH.splitlines()[0])
    assert pdsh.worker == "104.171.201.171" and pdsh.body.startswith("lambda-scalar02:95756")
    named = line(PDSH_NAMES)
    assert named.worker == "gpu003" and named.body.strip() == "dist.barrier()"
    assert named.indent >= 2  # a traceback frame stays a frame behind its prefix
    assert line(RANK_SHM.splitlines()[1]).rank == 1
    ray = line(RAY)
    assert ray.worker == "pid=248, ip=10.1.160.68" and ray.body.startswith("INFO 09-12")
    ray_rank = line(RAY_RANK)
    assert (ray_rank.rank, ray_rank.worker) == (9, "pid=1978, ip=10.41.0.8")
    assert line(MPIRUN).rank == 0 and line(MPIRUN).body.lstrip().startswith("8 ")
    assert line(SRUN).task == 12 and line(SRUN).who() == "task 12"


def test_words_before_a_colon_are_no_host_prefix() -> None:
    for text in (
        "RuntimeError: NCCL error",
        "torch.distributed.DistBackendError: NCCL error in: x",
        "rank0: done",
        "epoch1: loss 0.3",
    ):
        assert line(text).worker is None and line(text).body == text


def test_a_finding_on_a_prefixed_line_names_its_rank() -> None:
    findings = scan_text(RANK_SHM)
    assert findings[0].code == "DDP008"
    assert findings[0].evidence["rank"] == 1


def test_a_finding_on_a_ray_worker_line_names_the_worker() -> None:
    findings = scan_text("DEBUG distributed_init_method=tcp://10.41.0.7:34773\n" + RAY_RANK)
    assert findings[0].code == "DDP204"


def test_pdsh_prefixed_nccl_lines_give_facts_per_host() -> None:
    from ddp_doctor.logscan import LogScanner

    scanner = LogScanner()
    scanner.feed(PDSH.encode())
    scanner.findings()
    assert scanner.log_facts.driver_cuda == {"lambda-scalar02": ("11.7", 1)}


# --- a folder of per-rank logs -------------------------------------------------------------------
def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_torchrun_log_dir_files_are_read_as_their_local_ranks(tmp_path) -> None:
    attempt = tmp_path / "9f2c_abc" / "attempt_0"
    write(attempt / "0" / "stdout.log", "step 1\n")
    write(attempt / "0" / "stderr.log", "step 1\n")
    shm = RANK_SHM.replace("[rank1]: ", "")  # the rank's own file has no prefix
    write(attempt / "1" / "stderr.log", shm)
    found = speakers([attempt / "0" / "stderr.log", attempt / "1" / "stderr.log"])
    assert found[attempt / "1" / "stderr.log"] == {"local_rank": 1}
    scan = scan_folder(tmp_path)
    shm_finding = next(f for f in scan.findings if f.code == "DDP008")
    assert shm_finding.evidence["local_rank"] == 1
    assert shm_finding.location.path == str(attempt / "1" / "stderr.log")


def test_srun_task_files_and_rank_names_are_read_as_their_ranks(tmp_path) -> None:
    names = ["out.0", "out.1", "rank_3.log", "slurm-81234.out", "train_77_0.log", "train_77_1.log"]
    paths = [write(tmp_path / name, "x\n") for name in names]
    found = speakers(paths)
    assert found[tmp_path / "out.1"] == {"task": 1}
    assert found[tmp_path / "rank_3.log"] == {"rank": 3}
    assert found[tmp_path / "train_77_1.log"] == {"task": 1}
    assert tmp_path / "slurm-81234.out" not in found  # a job id, not a task


def test_versions_in_per_rank_files_are_compared_per_rank(tmp_path) -> None:
    write(tmp_path / "rank0.log", "PyTorch version: 2.3.1+cu121\n")
    write(tmp_path / "rank1.log", "PyTorch version: 2.4.0+cu121\n")
    scan = scan_folder(tmp_path)
    assert [f.code for f in scan.findings] == ["DDP306"]
    assert scan.findings[0].evidence["per_rank"] == {"0": "2.3.1+cu121", "1": "2.4.0+cu121"}


def test_a_prefixed_line_in_a_per_rank_file_keeps_its_own_prefix(tmp_path) -> None:
    write(tmp_path / "out.0", "step\n")
    write(tmp_path / "out.1", RANK_SHM)
    scan = scan_folder(tmp_path)
    finding = next(f for f in scan.findings if f.code == "DDP008")
    assert finding.evidence["rank"] == 1 and "task" not in finding.evidence
